/* gpu/coopmat.h without a device: what device creation enables for each
 * cooperative-matrix choice (feature structures chained in front of the
 * existing chain, extension names), and which kernel a 16-bit product takes
 * (gpu_coopmat_gemm). gpu_coopmat_choose itself needs a GPU that lists the
 * extensions: tests/ops/test_ops_coopmat.py checks its choice there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gpu/device.h"
#include "shaders.h"

static unsigned enable(enum gpu_coopmat_kind kind, bool bf16, void **chain, const char **ext)
{
	static struct gpu_coopmat_features f;
	struct gpu_device g;

	memset(&g, 0, sizeof(g));
	g.coopmat_kind = kind;
	g.coopmat_f16 = kind != GPU_COOPMAT_NONE;
	g.coopmat_bf16 = bf16;
	return gpu_coopmat_enable(&g, &f, chain, ext);
}

static void test_enable(void **state)
{
	VkPhysicalDeviceVulkan12Features tail = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES };
	const struct td_coopmat_features_khr *khr;
	const struct td_bfloat16_features_khr *bf;
	const VkPhysicalDeviceCooperativeMatrixFeaturesNV *nv;
	const char *ext[2] = { NULL, NULL };
	void *chain = &tail;

	(void)state;
	assert_int_equal(enable(GPU_COOPMAT_NONE, false, &chain, ext), 0);
	assert_ptr_equal(chain, &tail);

	assert_int_equal(enable(GPU_COOPMAT_NV, false, &chain, ext), 1);
	assert_string_equal(ext[0], "VK_NV_cooperative_matrix");
	nv = chain;
	assert_int_equal(nv->sType, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV);
	assert_true(nv->cooperativeMatrix);
	assert_ptr_equal(nv->pNext, &tail);

	chain = &tail;
	assert_int_equal(enable(GPU_COOPMAT_KHR, false, &chain, ext), 1);
	assert_string_equal(ext[0], "VK_KHR_cooperative_matrix");
	khr = chain;
	assert_int_equal(khr->sType, 1000506000);   /* the registry's value */
	assert_true(khr->cooperativeMatrix);
	assert_false(khr->cooperativeMatrixRobustBufferAccess);
	assert_ptr_equal(khr->pNext, &tail);

	chain = &tail;
	assert_int_equal(enable(GPU_COOPMAT_KHR, true, &chain, ext), 2);
	assert_string_equal(ext[0], "VK_KHR_cooperative_matrix");
	assert_string_equal(ext[1], "VK_KHR_shader_bfloat16");
	bf = chain;
	assert_int_equal(bf->sType, 1000141000);
	assert_true(bf->shaderBFloat16Type && bf->shaderBFloat16CooperativeMatrix);
	assert_false(bf->shaderBFloat16DotProduct);
	khr = bf->pNext;
	assert_int_equal(khr->sType, 1000506000);
	assert_ptr_equal(khr->pNext, &tail);
}

static void test_gemm_kernel(void **state)
{
	struct gpu_coopmat_gemm k;

	(void)state;
	assert_false(gpu_coopmat_gemm(GPU_COOPMAT_NONE, false, false, &k));
	assert_false(gpu_coopmat_gemm(GPU_COOPMAT_NONE, false, true, &k));

	assert_true(gpu_coopmat_gemm(GPU_COOPMAT_NV, false, false, &k));
	assert_string_equal(k.family, "matmul_cm");
	assert_string_equal(k.variant, "f16");
	assert_int_equal(k.wg, 256);
	assert_false(gpu_coopmat_gemm(GPU_COOPMAT_NV, false, true, &k));

	assert_true(gpu_coopmat_gemm(GPU_COOPMAT_KHR, false, false, &k));
	assert_string_equal(k.family, "matmul_cm_khr");
	assert_string_equal(k.variant, "f16");
	assert_int_equal(k.wg, 128);
	assert_false(gpu_coopmat_gemm(GPU_COOPMAT_KHR, false, true, &k));
	assert_true(gpu_coopmat_gemm(GPU_COOPMAT_KHR, true, true, &k));
	assert_string_equal(k.variant, "bf16");
	assert_int_equal(k.wg, 128);
}

/* Every kernel gpu_coopmat_gemm names is embedded. */
static void test_kernels_embedded(void **state)
{
	static const char *const names[] = {
		"matmul_cm.f16", "matmul_cm_khr.f16", "matmul_cm_khr.bf16",
		"matmul_cm_nt.f16", "matmul_cm_khr_nt.f16", "matmul_cm_khr_nt.bf16",
		"matmul_cm_tn.f16", "matmul_cm_khr_tn.f16", "matmul_cm_khr_tn.bf16",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		assert_true(shader_index(names[i]) >= 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_enable),
		cmocka_unit_test(test_gemm_kernel),
		cmocka_unit_test(test_kernels_embedded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
