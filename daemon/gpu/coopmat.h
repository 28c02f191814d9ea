/* Cooperative matrices (tensor cores): which of the cooperative-matrix
 * kernels a device runs, chosen when it is opened from what it lists, per
 * device: the KHR modules (matmul_cm_khr.f16 and .bf16, which
 * shaders/spv_coopmat_khr.py rewrites at build time from glslang's NV
 * SPIR-V) where VK_KHR_cooperative_matrix lists the shape, else the NV
 * module (matmul_cm.f16) where VK_NV_cooperative_matrix does, else none:
 * the scalar kernels (lavapipe). The families named here are the NN ones;
 * ops/matmul.c takes their _nt and _tn siblings (same tile and workgroup)
 * for transposed operands. docs/architecture.md, "Tensor cores". */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

struct gpu_device;

enum gpu_coopmat_kind {
	GPU_COOPMAT_NONE = 0,   /* scalar kernels only */
	GPU_COOPMAT_NV = 1,     /* VK_NV_cooperative_matrix: matmul_cm.f16 */
	GPU_COOPMAT_KHR = 2,    /* VK_KHR_cooperative_matrix: matmul_cm_khr.f16 (and .bf16) */
	GPU_COOPMAT_COUNT
};

/* VK_KHR_cooperative_matrix's and VK_KHR_shader_bfloat16's structures as the
 * Vulkan registry defines them: Debian 12's headers (1.3.239) predate both,
 * and these names do not clash with newer headers that have them. */
#define TD_STYPE_COOPMAT_FEATURES_KHR ((VkStructureType)1000506000)
#define TD_STYPE_COOPMAT_PROPERTIES_KHR ((VkStructureType)1000506001)
#define TD_STYPE_COOPMAT_DEVICE_PROPERTIES_KHR ((VkStructureType)1000506002)
#define TD_STYPE_BFLOAT16_FEATURES_KHR ((VkStructureType)1000141000)

struct td_coopmat_features_khr {
	VkStructureType sType;
	void *pNext;
	VkBool32 cooperativeMatrix;
	VkBool32 cooperativeMatrixRobustBufferAccess;
};

struct td_bfloat16_features_khr {
	VkStructureType sType;
	void *pNext;
	VkBool32 shaderBFloat16Type;
	VkBool32 shaderBFloat16DotProduct;
	VkBool32 shaderBFloat16CooperativeMatrix;
};

/* What device creation chains to enable a device's choice; it must outlive
 * vkCreateDevice. */
struct gpu_coopmat_features {
	VkPhysicalDeviceCooperativeMatrixFeaturesNV nv;
	struct td_coopmat_features_khr khr;
	struct td_bfloat16_features_khr bf16;
};

/* matmul_cm.glsl's workgroup sizes: matmul_cm.comp's 2x4 subgroups of 32,
 * matmul_cm_khr.comp's 2x2. Both compute 128x128 tiles of C, K by 32. */
#define GPU_COOPMAT_NV_WG 256u
#define GPU_COOPMAT_KHR_WG 128u

/* The cooperative-matrix GEMM of a device for one dtype. */
struct gpu_coopmat_gemm {
	const char *family;     /* embedded shader family ("matmul_cm_khr") */
	const char *variant;    /* "f16" or "bf16" */
	uint32_t wg;            /* invocations per workgroup */
};

/* Choose g's cooperative matrices (g->coopmat_kind, coopmat_f16,
 * coopmat_bf16) from what physical device g->phys lists, given whether it
 * offers vulkanMemoryModel (the modules need it), and log the choice at info
 * level (nothing where there is none). KHR needs 16x16x16 f16 x f16 + f32
 * subgroup matrices listed, the compute stage, 32-wide subgroups and the
 * kernel's shared memory; its bf16 module also VK_KHR_shader_bfloat16 and
 * bf16 x bf16 + f32 listed. TENSORD_NO_COOPMAT=1 chooses none;
 * TENSORD_COOPMAT=nv takes NV where both are usable, =khr never NV, =off
 * none (auto, the default: KHR, else NV). */
void gpu_coopmat_choose(struct gpu_device *g, bool memory_model);

/* Enable g's choice at device creation: chain the feature structures in `f`
 * in front of *pnext and append the extensions' names to `ext`. Returns how
 * many names were appended (at most 2; 0 where g has none). */
unsigned gpu_coopmat_enable(const struct gpu_device *g, struct gpu_coopmat_features *f, void **pnext,
			    const char **ext);

/* Whether a device of cooperative matrices `kind` (with bf16 ones where
 * `has_bf16`) multiplies 16-bit matrices (bf16: bfloat16, else f16) on them;
 * if so *ret says with which kernel. Inline: the stand-in device of the
 * tests (tests/fuzz/gpu_stub.c) links no gpu/ object. */
static inline bool gpu_coopmat_gemm(enum gpu_coopmat_kind kind, bool has_bf16, bool bf16,
				    struct gpu_coopmat_gemm *ret)
{
	if (kind == GPU_COOPMAT_KHR && (!bf16 || has_bf16)) {
		*ret = (struct gpu_coopmat_gemm){ "matmul_cm_khr", bf16 ? "bf16" : "f16", GPU_COOPMAT_KHR_WG };
		return true;
	}
	if (kind == GPU_COOPMAT_NV && !bf16) {
		*ret = (struct gpu_coopmat_gemm){ "matmul_cm", "f16", GPU_COOPMAT_NV_WG };
		return true;
	}
	return false;
}
