/* spirv_reflect.c: what it finds in modules glslang makes, and that garbage
 * (random words, truncations, bit flips, hostile headers) is refused or
 * parsed without reading outside the buffer (run under ASan in CI). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/glsl_compile.h"
#include "kernels/spirv_reflect.h"
#include "kernels/spirv_validate.h"

static const char scale_src[] =
	"#version 450\n"
	"layout(local_size_x = 64, local_size_y = 2) in;\n"
	"layout(std430, binding = 0) readonly buffer In { float x[]; };\n"
	"layout(std430, binding = 1) buffer Out { vec4 head; float y[]; };\n"
	"layout(push_constant) uniform P { float alpha; uint n; int bias; vec2 pair; };\n"
	"void main() {\n"
	"    uint i = gl_GlobalInvocationID.x;\n"
	"    if (i < n) y[i] = alpha * x[i] + float(bias) + pair.x + head.y;\n"
	"}\n";

static uint32_t *compile(const char *src, const char *pre, size_t *ret_n)
{
	char log[4096];
	uint32_t *w = NULL;
	int r = glsl_compile(src, pre, &w, ret_n, log, sizeof(log));

	if (r < 0)
		fail_msg("compile failed: %s", log);
	return w;
}

static void test_reflect_scale(void **state)
{
	struct spv_info info;
	char why[256];
	size_t n;
	uint32_t *w = compile(scale_src, NULL, &n);

	assert_int_equal(spirv_validate(w, n, NULL, why, sizeof(why)), 0);
	assert_int_equal(spv_reflect(w, n, NULL, NULL, &info, why, sizeof(why)), 0);
	assert_string_equal(info.entry, "main");
	assert_int_equal(info.local_size[0], 64);
	assert_int_equal(info.local_size[1], 2);
	assert_int_equal(info.local_size[2], 1);
	assert_int_equal(info.nbindings, 2);
	assert_true(info.bindings[0].readonly);
	assert_int_equal(info.bindings[0].min_bytes, 0);
	assert_int_equal(info.bindings[0].stride, 4);
	assert_false(info.bindings[1].readonly);
	assert_int_equal(info.bindings[1].min_bytes, 16);
	assert_int_equal(info.bindings[1].stride, 4);
	assert_int_equal(info.push_bytes, 24);
	assert_int_equal(info.npush, 4);
	assert_string_equal(info.push[0].name, "alpha");
	assert_int_equal(info.push[0].type, SPV_SCALAR_F32);
	assert_string_equal(info.push[1].name, "n");
	assert_int_equal(info.push[1].offset, 4);
	assert_int_equal(info.push[1].type, SPV_SCALAR_U32);
	assert_int_equal(info.push[2].type, SPV_SCALAR_I32);
	assert_int_equal(info.push[3].offset, 16);
	assert_int_equal(info.push[3].type, SPV_SCALAR_OTHER);
	assert_int_equal(spv_reflect(w, n, "other", NULL, &info, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "other"));
	free(w);
}

static void test_workgroup_preamble(void **state)
{
	static const char src[] =
		"#version 450\n"
		"layout(std430, binding = 0) buffer B { float v[]; };\n"
		"void main() { v[0] = 1.0; }\n";
	static const char bad[] =
		"#version 450\n"
		"layout(std430, binding = 0) buffer B { float v[]; };\n"
		"void main() { v[0] = nope; }\n";
	struct spv_info info;
	char why[1024];
	uint32_t *w;
	size_t n;

	w = compile(src, "layout(local_size_x = 8, local_size_y = 1, local_size_z = 1) in;\n", &n);
	assert_int_equal(spv_reflect(w, n, NULL, NULL, &info, why, sizeof(why)), 0);
	assert_int_equal(info.local_size[0], 8);
	free(w);
	/* Messages keep the client's line numbers. */
	assert_int_equal(glsl_compile(bad, "layout(local_size_x = 8) in;\n", &w, &n, why,
				      sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "0:3:"));
	/* No local size at all is refused by reflection (glslang takes it). */
	if (glsl_compile(src, NULL, &w, &n, why, sizeof(why)) == 0) {
		assert_int_equal(spv_reflect(w, n, NULL, NULL, &info, why, sizeof(why)), 0);
		free(w);
	}
}

static void test_refused(void **state)
{
	static const char *const srcs[] = {
		/* a uniform buffer */
		"#version 450\nlayout(local_size_x = 1) in;\n"
		"layout(binding = 0) uniform U { float u; };\n"
		"layout(std430, binding = 1) buffer B { float v[]; };\nvoid main() { v[0] = u; }\n",
		/* a gap in the bindings */
		"#version 450\nlayout(local_size_x = 1) in;\n"
		"layout(std430, binding = 1) buffer B { float v[]; };\nvoid main() { v[0] = 1.0; }\n",
		/* another set */
		"#version 450\nlayout(local_size_x = 1) in;\n"
		"layout(std430, set = 1, binding = 0) buffer B { float v[]; };\n"
		"void main() { v[0] = 1.0; }\n",
		/* a binding past 7 */
		"#version 450\nlayout(local_size_x = 1) in;\n"
		"layout(std430, binding = 9) buffer B { float v[]; };\nvoid main() { v[0] = 1.0; }\n",
		/* a push block over 128 bytes */
		"#version 450\nlayout(local_size_x = 1) in;\n"
		"layout(push_constant) uniform P { vec4 big[9]; };\n"
		"layout(std430, binding = 0) buffer B { float v[]; };\nvoid main() { v[0] = big[8].x; }\n",
	};
	struct spv_info info;
	char why[256];

	for (size_t i = 0; i < sizeof(srcs) / sizeof(srcs[0]); i++) {
		size_t n;
		uint32_t *w = compile(srcs[i], NULL, &n);

		why[0] = '\0';
		assert_int_equal(spv_reflect(w, n, NULL, NULL, &info, why, sizeof(why)), -EINVAL);
		assert_true(strlen(why) > 0);
		free(w);
	}
}

/* Id of the first OpVariable of storage class `sc`, or 0. */
static uint32_t find_var(const uint32_t *w, size_t n, uint32_t sc)
{
	for (size_t i = 5; i < n; i += w[i] >> 16)
		if ((w[i] & 0xffff) == 59 && (w[i] >> 16) >= 4 && w[i + 3] == sc)
			return w[i + 2];
	return 0;
}

/* `w` with instruction `ins` (len words) inserted at word 5. */
static uint32_t *with_insn(const uint32_t *w, size_t n, const uint32_t *ins, size_t len)
{
	uint32_t *m = malloc((n + len) * sizeof(*m));

	assert_non_null(m);
	memcpy(m, w, 5 * sizeof(*m));
	memcpy(m + 5, ins, len * sizeof(*m));
	memcpy(m + 5 + len, w + 5, (n - 5) * sizeof(*m));
	return m;
}

/* A buffer decorated NonWritable (variable or member) that is stored to,
 * atomically changed or handed to a function is writable: the access it
 * needs comes from what the module does. */
static void test_liar_is_writable(void **state)
{
	static const char *const srcs[] = {
		"#version 450\nlayout(local_size_x = 1) in;\n"
		"layout(std430, binding = 0) buffer B { float v[]; };\nvoid main() { v[0] = 1.0; }\n",
		"#version 450\nlayout(local_size_x = 1) in;\n"
		"layout(std430, binding = 0) buffer B { uint v[]; };\n"
		"void main() { atomicAdd(v[0], 1u); }\n",
	};
	struct spv_info info;
	char why[256];

	for (size_t k = 0; k < 2; k++) {
		size_t n;
		uint32_t *w = compile(srcs[k], NULL, &n), var = find_var(w, n, 12), *m;
		uint32_t dec[3] = { (3u << 16) | 71, var, 24 };              /* OpDecorate NonWritable */

		assert_true(var != 0);
		m = with_insn(w, n, dec, 3);
		assert_int_equal(spv_reflect(m, n + 3, NULL, NULL, &info, why, sizeof(why)), 0);
		assert_int_equal(info.nbindings, 1);
		assert_false(info.bindings[0].readonly);
		free(m);
		free(w);
	}
}

/* Patch the first instruction with opcode `op` at operand `at` to `v`. */
static void patch(uint32_t *w, size_t n, uint32_t op, unsigned at, uint32_t v)
{
	for (size_t i = 5; i < n; i += w[i] >> 16)
		if ((w[i] & 0xffff) == op) {
			w[i + at] = v;
			return;
		}
	fail_msg("opcode %u not found", op);
}

static void test_allow_list(void **state)
{
	static const struct { uint32_t op, at, v; const char *name; } bad[] = {
		{ 17, 1, 5347, "PhysicalStorageBufferAddresses" },
		{ 17, 1, 5, "Linkage" },
		{ 17, 1, 6, "Kernel" },
		{ 17, 1, 4, "Addresses" },
		{ 17, 1, 4442, "VariablePointers" },
		{ 17, 1, 10, "Float64" },
		{ 17, 1, 11, "Int64" },            /* no device: Int64 off */
		{ 14, 1, 5348, "memory model" },
		{ 15, 1, 4, "execution model" },
		{ 59, 3, 5349, "storage class 5349" },
		{ 59, 3, 0, "storage class 0" },
	};
	size_t n;
	uint32_t *w = compile(scale_src, NULL, &n), *m = malloc(n * sizeof(*m));
	struct spv_limits lim = { .int64 = true };
	char why[256];

	assert_non_null(m);
	assert_int_equal(spirv_allow(w, n, NULL, why, sizeof(why)), 0);
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		memcpy(m, w, n * sizeof(*m));
		patch(m, n, bad[k].op, bad[k].at, bad[k].v);
		why[0] = '\0';
		assert_int_equal(spirv_allow(m, n, NULL, why, sizeof(why)), -EINVAL);
		if (!strstr(why, bad[k].name))
			fail_msg("case %zu: '%s' does not name %s", k, why, bad[k].name);
		assert_int_equal(spirv_validate(m, n, NULL, why, sizeof(why)), -EINVAL);
	}
	/* Int64 where the device has it. */
	memcpy(m, w, n * sizeof(*m));
	patch(m, n, 17, 1, 11);
	assert_int_equal(spirv_allow(m, n, &lim, why, sizeof(why)), 0);
	/* An opcode off the list: OpImageRead (98) in place of the first OpLoad. */
	memcpy(m, w, n * sizeof(*m));
	for (size_t i = 5; i < n; i += m[i] >> 16)
		if ((m[i] & 0xffff) == 61) {
			m[i] = (m[i] & 0xffff0000u) | 98;
			break;
		}
	assert_int_equal(spirv_allow(m, n, NULL, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "opcode 98"));
	free(m);
	free(w);
}

/* Every limit a module can state is checked before a pipeline exists. */
static void test_limits(void **state)
{
	static const struct { const char *src, *says; } cases[] = {
		{ "#version 450\nlayout(local_size_x = 1024, local_size_y = 2) in;\n"
		  "layout(std430, binding = 0) buffer B { float v[]; };\nvoid main() { v[0] = 1.0; }\n",
		  "maxComputeWorkGroupInvocations" },
		{ "#version 450\nlayout(local_size_x = 1024, local_size_z = 1) in;\n"
		  "layout(std430, binding = 0) buffer B { float v[]; };\nvoid main() { v[0] = 1.0; }\n",
		  "maxComputeWorkGroupSize" },
		{ "#version 450\nlayout(local_size_x = 1) in;\nshared float s[16384];\n"
		  "layout(std430, binding = 0) buffer B { float v[]; };\n"
		  "void main() { s[0] = 1.0; barrier(); v[0] = s[uint(v[1])]; }\n",
		  "maxComputeSharedMemorySize" },
		{ "#version 450\nlayout(local_size_x = 1) in;\n"
		  "layout(std430, binding = 0) buffer B { float v[]; };\n"
		  "void main() { float a[268435456]; a[uint(v[1])] = 1.0; v[0] = a[uint(v[2])]; }\n",
		  "per invocation" },
		{ "#version 450\nlayout(local_size_x = 1) in;\n"
		  "float a[1 << 20];\nlayout(std430, binding = 0) buffer B { float v[]; };\n"
		  "void main() { a[uint(v[1])] = 1.0; v[0] = a[uint(v[2])]; }\n",
		  "per invocation" },
	};
	/* lavapipe's limits, and a device larger than any */
	struct spv_limits mid = { { 1024, 1024, 64 }, 1024, 32768, false };
	struct spv_limits big = { { 4096, 4096, 4096 }, 4096, 1 << 20, false };
	struct spv_info info;
	char why[256];

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		size_t n;
		uint32_t *w = compile(cases[k].src, NULL, &n);

		why[0] = '\0';
		assert_int_equal(spv_reflect(w, n, NULL, k == 1 ? NULL : &mid, &info, why, sizeof(why)),
				 -EINVAL);
		if (!strstr(why, cases[k].says))
			fail_msg("case %zu: '%s' does not name %s", k, why, cases[k].says);
		/* A larger device takes the first three. */
		if (k < 3)
			assert_int_equal(spv_reflect(w, n, NULL, &big, &info, why, sizeof(why)), 0);
		free(w);
	}
}

static void test_no_include(void **state)
{
	static const char src[] =
		"#version 450\n#extension GL_GOOGLE_inc\\\nlude_directive : require\n"
		"#include \"/etc/passwd\"\nlayout(local_size_x = 1) in;\nvoid main() {}\n";
	uint32_t *w = NULL;
	size_t n;
	char why[1024];

	assert_int_equal(glsl_compile(src, NULL, &w, &n, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "#include is not available"));
	assert_null(strstr(why, "root"));
}

static uint64_t rng = 88172645463325252ull;

static uint32_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

static void test_garbage(void **state)
{
	struct spv_info info;
	char why[256];
	size_t n;
	uint32_t *w = compile(scale_src, NULL, &n), *m = malloc(n * sizeof(*m));
	uint32_t junk[64];

	assert_non_null(m);
	/* Nothing, NULL, too short, bad magic. */
	assert_int_equal(spv_reflect(NULL, 0, NULL, NULL, &info, why, sizeof(why)), -EINVAL);
	assert_int_equal(spv_reflect(w, 4, NULL, NULL, &info, why, sizeof(why)), -EINVAL);
	memcpy(m, w, n * sizeof(*m));
	m[0] ^= 1;
	assert_int_equal(spv_reflect(m, n, NULL, NULL, &info, why, sizeof(why)), -EINVAL);
	/* Hostile bounds. */
	memcpy(m, w, n * sizeof(*m));
	m[3] = 0xffffffffu;
	assert_int_equal(spv_reflect(m, n, NULL, NULL, &info, why, sizeof(why)), -EINVAL);
	m[3] = 0;
	assert_int_equal(spv_reflect(m, n, NULL, NULL, &info, why, sizeof(why)), -EINVAL);
	/* Every truncation. */
	for (size_t k = 0; k < n; k++)
		(void)spv_reflect(w, k, NULL, NULL, &info, why, sizeof(why));
	/* Random words behind a valid header. */
	for (unsigned round = 0; round < 2000; round++) {
		junk[0] = 0x07230203u;
		junk[1] = 0x00010300u;
		junk[2] = 0;
		junk[3] = 1 + next() % 64;
		junk[4] = 0;
		for (unsigned k = 5; k < 64; k++) {
			uint32_t x = next();
			/* Mostly small opcodes and lengths, so the parser goes deep. */
			junk[k] = round & 1 ? x : ((x % 6 + 1) << 16) | (x >> 8) % 80;
			if (k % 3 == 0)
				junk[k] = x % 64;
		}
		(void)spv_reflect(junk, 5 + next() % 59, NULL, NULL, &info, why, sizeof(why));
	}
	/* Bit flips and word replacements in a real module. */
	for (unsigned round = 0; round < 3000; round++) {
		memcpy(m, w, n * sizeof(*m));
		for (unsigned f = 0; f < 1 + round % 4; f++) {
			size_t at = 5 + next() % (n - 5);

			if (round & 1)
				m[at] ^= 1u << (next() % 32);
			else
				m[at] = next() % 128;
		}
		(void)spv_reflect(m, n, NULL, NULL, &info, why, sizeof(why));
	}
	free(m);
	free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reflect_scale),
		cmocka_unit_test(test_workgroup_preamble),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_liar_is_writable),
		cmocka_unit_test(test_allow_list),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_no_include),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
