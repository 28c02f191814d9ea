#include "gpu/coopmat.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "gpu/device.h"

#define EXT_KHR "VK_KHR_cooperative_matrix"
#define EXT_BF16 "VK_KHR_shader_bfloat16"
/* VkComponentTypeKHR and VkScopeKHR values (registry). */
#define COMPONENT_FLOAT16 0u
#define COMPONENT_FLOAT32 1u
#define COMPONENT_BFLOAT16 1000141000u
#define SCOPE_SUBGROUP 3u
/* matmul_cm.glsl's shared memory at 128x128x32 tiles (As: 128 rows of
 * 32 + 8 halves, Bs: 32 rows of 128 + 8), both kernels, NN. Its NT modules
 * take 20 KiB (ops/matmul.c checks that per product), TN ones 17. */
#define KHR_SHARED_BYTES (128u * 40u * 2u + 32u * 136u * 2u)

struct td_coopmat_props_khr {
	VkStructureType sType;
	void *pNext;
	uint32_t MSize, NSize, KSize;
	uint32_t AType, BType, CType, ResultType;   /* VkComponentTypeKHR */
	VkBool32 saturatingAccumulation;
	uint32_t scope;                             /* VkScopeKHR */
};

struct td_coopmat_device_props_khr {
	VkStructureType sType;
	void *pNext;
	VkShaderStageFlags cooperativeMatrixSupportedStages;
};

typedef VkResult (VKAPI_PTR *td_coopmat_props_fn)(VkPhysicalDevice phys, uint32_t *n,
						   struct td_coopmat_props_khr *props);

struct ext_set {
	bool nv, khr, bf16;
};

static void list_extensions(VkPhysicalDevice phys, struct ext_set *ret)
{
	VkExtensionProperties *ext;
	uint32_t n = 0;

	memset(ret, 0, sizeof(*ret));
	if (vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL) != VK_SUCCESS || !n)
		return;
	ext = calloc(n, sizeof(*ext));
	if (!ext)
		return;
	if (vkEnumerateDeviceExtensionProperties(phys, NULL, &n, ext) == VK_SUCCESS)
		for (uint32_t i = 0; i < n; i++) {
			ret->nv |= strcmp(ext[i].extensionName, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) == 0;
			ret->khr |= strcmp(ext[i].extensionName, EXT_KHR) == 0;
			ret->bf16 |= strcmp(ext[i].extensionName, EXT_BF16) == 0;
		}
	free(ext);
}

static uint32_t subgroup_size(struct gpu_device *g)
{
	VkPhysicalDeviceSubgroupProperties sub = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
	};
	VkPhysicalDeviceProperties2 p2 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
		.pNext = &sub,
	};

	vkGetPhysicalDeviceProperties2(g->phys, &p2);
	return sub.subgroupSize;
}

/* Whether the device multiplies 16x16 f16 fragments into f32 on a subgroup
 * of 32 through VK_NV_cooperative_matrix (what matmul_cm.comp is written
 * for): the test tensord made before the KHR path, unchanged. */
static bool nv_usable(struct gpu_device *g)
{
	PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV props_fn;
	VkCooperativeMatrixPropertiesNV cm[64];
	uint32_t n = 64;

	if (subgroup_size(g) != 32 || g->props.limits.maxComputeSharedMemorySize < 16384)
		return false;
	props_fn = (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)vkGetInstanceProcAddr(
		g->instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
	for (uint32_t i = 0; i < n; i++)
		cm[i] = (VkCooperativeMatrixPropertiesNV){
			.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV,
		};
	if (!props_fn || props_fn(g->phys, &n, cm) < 0)
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (cm[i].MSize == 16 && cm[i].NSize == 16 && cm[i].KSize == 16 &&
		    cm[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
		    cm[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
		    cm[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
		    cm[i].DType == VK_COMPONENT_TYPE_FLOAT32_NV && cm[i].scope == VK_SCOPE_SUBGROUP_NV)
			return true;
	return false;
}

/* Which 16x16x16 subgroup products with f32 accumulators
 * VK_KHR_cooperative_matrix lists: *ret_f16 for f16 operands, *ret_bf16
 * for bf16 ones. */
static void khr_shapes(struct gpu_device *g, bool *ret_f16, bool *ret_bf16)
{
	td_coopmat_props_fn props_fn;
	struct td_coopmat_props_khr *cm;
	uint32_t n = 0;

	*ret_f16 = *ret_bf16 = false;
	props_fn = (td_coopmat_props_fn)vkGetInstanceProcAddr(g->instance,
							       "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
	if (!props_fn || props_fn(g->phys, &n, NULL) != VK_SUCCESS || n == 0 || n > 4096)
		return;
	cm = calloc(n, sizeof(*cm));
	if (!cm)
		return;
	for (uint32_t i = 0; i < n; i++)
		cm[i].sType = TD_STYPE_COOPMAT_PROPERTIES_KHR;
	if (props_fn(g->phys, &n, cm) >= 0)
		for (uint32_t i = 0; i < n; i++) {
			if (cm[i].MSize != 16 || cm[i].NSize != 16 || cm[i].KSize != 16 ||
			    cm[i].AType != cm[i].BType || cm[i].CType != COMPONENT_FLOAT32 ||
			    cm[i].ResultType != COMPONENT_FLOAT32 || cm[i].saturatingAccumulation ||
			    cm[i].scope != SCOPE_SUBGROUP)
				continue;
			*ret_f16 |= cm[i].AType == COMPONENT_FLOAT16;
			*ret_bf16 |= cm[i].AType == COMPONENT_BFLOAT16;
		}
	free(cm);
}

/* The KHR features (and bfloat16's where `bf16_ext`): whether cooperative
 * matrices run in compute shaders, and into *ret_bf16 whether bfloat16
 * matrices do. */
static bool khr_features(struct gpu_device *g, bool bf16_ext, bool *ret_bf16)
{
	struct td_bfloat16_features_khr bf = { .sType = TD_STYPE_BFLOAT16_FEATURES_KHR };
	struct td_coopmat_features_khr cm = {
		.sType = TD_STYPE_COOPMAT_FEATURES_KHR,
		.pNext = bf16_ext ? &bf : NULL,
	};
	VkPhysicalDeviceFeatures2 f2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &cm };
	struct td_coopmat_device_props_khr dp = { .sType = TD_STYPE_COOPMAT_DEVICE_PROPERTIES_KHR };
	VkPhysicalDeviceProperties2 p2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &dp };

	vkGetPhysicalDeviceFeatures2(g->phys, &f2);
	vkGetPhysicalDeviceProperties2(g->phys, &p2);
	*ret_bf16 = bf16_ext && bf.shaderBFloat16Type && bf.shaderBFloat16CooperativeMatrix;
	return cm.cooperativeMatrix && (dp.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
}

/* Whether the KHR modules run on g; into *ret_bf16 whether the bf16 one
 * does too, into *ret_why (when not) the reason, for the debug log. */
static bool khr_usable(struct gpu_device *g, const struct ext_set *ext, bool *ret_bf16, const char **ret_why)
{
	bool f16_shape, bf16_shape, bf16_feat;

	*ret_bf16 = false;
	if (subgroup_size(g) != 32 || g->props.limits.maxComputeSharedMemorySize < KHR_SHARED_BYTES) {
		*ret_why = "its subgroups are not 32 wide or its shared memory is short of the kernel's";
		return false;
	}
	if (!khr_features(g, ext->bf16, &bf16_feat)) {
		*ret_why = "cooperativeMatrix is off or not offered in compute shaders";
		return false;
	}
	khr_shapes(g, &f16_shape, &bf16_shape);
	if (!f16_shape) {
		*ret_why = "it lists no 16x16x16 f16 x f16 + f32 subgroup product";
		return false;
	}
	*ret_bf16 = bf16_feat && bf16_shape;
	if (!*ret_bf16)
		*ret_why = ext->bf16 ? (bf16_feat ? "it lists no 16x16x16 bf16 x bf16 + f32 subgroup product"
					: "shaderBFloat16CooperativeMatrix is off")
				     : "no " EXT_BF16;
	return true;
}

static bool env_set(const char *name)
{
	const char *v = getenv(name);

	return v && *v && strcmp(v, "0") != 0;
}

void gpu_coopmat_choose(struct gpu_device *g, bool memory_model)
{
	const char *pref = getenv("TENSORD_COOPMAT"), *why = NULL;
	bool prefer_nv = pref && strcmp(pref, "nv") == 0, only_khr = pref && strcmp(pref, "khr") == 0;
	bool khr = false, bf16 = false;
	struct ext_set ext;

	g->coopmat_kind = GPU_COOPMAT_NONE;
	g->coopmat_f16 = g->coopmat_bf16 = false;
	if (pref && *pref && !prefer_nv && !only_khr && strcmp(pref, "auto") && strcmp(pref, "off"))
		log_warning("TENSORD_COOPMAT=%s is none of auto, khr, nv, off; auto it is", pref);
	if (env_set("TENSORD_NO_COOPMAT") || (pref && strcmp(pref, "off") == 0) || !memory_model)
		return;
	list_extensions(g->phys, &ext);
	if (ext.khr) {
		khr = khr_usable(g, &ext, &bf16, &why);
		if (!khr)
			log_debug("%s: %s not used: %s", g->desc.name, EXT_KHR, why);
	}
	if (khr && !(prefer_nv && ext.nv && nv_usable(g))) {
		g->coopmat_kind = GPU_COOPMAT_KHR;
		g->coopmat_bf16 = bf16;
	} else if (ext.nv && !only_khr && nv_usable(g)) {
		g->coopmat_kind = GPU_COOPMAT_NV;
	}
	g->coopmat_f16 = g->coopmat_kind != GPU_COOPMAT_NONE;
	if (g->coopmat_kind == GPU_COOPMAT_NV)
		log_info("f16 matmul runs on cooperative matrices (VK_NV_cooperative_matrix)");
	else if (g->coopmat_kind == GPU_COOPMAT_KHR)
		log_info("f16 matmul runs on cooperative matrices (VK_KHR_cooperative_matrix, SPIR-V "
			 "rewritten from NV at build time); bf16 matrices %s%s",
			 bf16 ? "ready (VK_KHR_shader_bfloat16)" : "unavailable: ", bf16 || !why ? "" : why);
}

unsigned gpu_coopmat_enable(const struct gpu_device *g, struct gpu_coopmat_features *f, void **pnext,
			    const char **ext)
{
	unsigned n = 0;

	memset(f, 0, sizeof(*f));
	if (g->coopmat_kind == GPU_COOPMAT_NV) {
		f->nv.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
		f->nv.cooperativeMatrix = VK_TRUE;
		f->nv.pNext = *pnext;
		*pnext = &f->nv;
		ext[n++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
	} else if (g->coopmat_kind == GPU_COOPMAT_KHR) {
		f->khr.sType = TD_STYPE_COOPMAT_FEATURES_KHR;
		f->khr.cooperativeMatrix = VK_TRUE;
		f->khr.pNext = *pnext;
		*pnext = &f->khr;
		ext[n++] = EXT_KHR;
		if (g->coopmat_bf16) {
			f->bf16.sType = TD_STYPE_BFLOAT16_FEATURES_KHR;
			f->bf16.shaderBFloat16Type = VK_TRUE;
			f->bf16.shaderBFloat16CooperativeMatrix = VK_TRUE;
			f->bf16.pNext = *pnext;
			*pnext = &f->bf16;
			ext[n++] = EXT_BF16;
		}
	}
	return n;
}
