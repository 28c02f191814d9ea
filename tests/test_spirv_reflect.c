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

#include "glsl_compile.h"
#include "spirv_reflect.h"
#include "spirv_validate.h"

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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
