/* kernels/spirv_cost.c on hand-made instruction streams: the inlined size
 * of a call tree (each function calling the one below twice, as the
 * 883-byte module of issue 31 did), recursion refused, the Unroll hint
 * cleared, peel and partial counts refused. Only the words the check
 * reads are meaningful; the modules are not otherwise valid SPIR-V. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/spirv_cost.h"

#define OP(len, op) (((uint32_t)(len) << 16) | (op))

struct mod {
	uint32_t w[4096];
	size_t n;
};

static void begin(struct mod *m)
{
	m->n = 5; /* the header's words are not read */
	memset(m->w, 0, 5 * sizeof(uint32_t));
}

static void emit(struct mod *m, uint32_t len, uint32_t op, uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t words[4] = { OP(len, op), a, b, c };

	for (uint32_t i = 0; i < len; i++)
		m->w[m->n++] = i < 4 ? words[i] : 0;
}

/* Function `id` with `pad` plain instructions and a call to each callee. */
static void function(struct mod *m, uint32_t id, unsigned pad, const uint32_t *callees, unsigned ncallees)
{
	emit(m, 5, 54, 1, id, 0);                     /* OpFunction */
	emit(m, 2, 248, 100 + id, 0, 0);              /* OpLabel */
	for (unsigned i = 0; i < pad; i++)
		emit(m, 5, 129, 1, 1000 + i, 0);      /* OpFAdd */
	for (unsigned i = 0; i < ncallees; i++)
		emit(m, 4, 57, 1, 2000 + i, callees[i]); /* OpFunctionCall */
	emit(m, 1, 253, 0, 0, 0);                     /* OpReturn */
	emit(m, 1, 56, 0, 0, 0);                      /* OpFunctionEnd */
}

/* A tree of depth k: f_i calls f_{i-1} twice; f_0 has `pad` additions. */
static void tree(struct mod *m, unsigned k, unsigned pad)
{
	begin(m);
	/* Callers first: calls name functions defined later, as SPIR-V allows. */
	for (unsigned i = k; i > 0; i--) {
		uint32_t below[2] = { 10 + i - 1, 10 + i - 1 };

		function(m, 10 + i, 0, below, 2);
	}
	function(m, 10, pad, NULL, 0);
}

static void test_tree(void **state)
{
	struct mod m;
	uint64_t inlined = 0;
	char why[256];

	(void)state;
	/* f_0: 3 + pad instructions (OpFunctionEnd not counted); f_i: 5 of its
	 * own + 2 f_{i-1}. */
	tree(&m, 3, 6);
	assert_int_equal(spirv_cost_check(m.w, m.n, &inlined, why, sizeof(why)), 0);
	assert_int_equal(inlined, 8 * 9 + 4 * 5 + 2 * 5 + 5);
	/* Depth 14 with 12-instruction leaves: 16384 leaves, past the bound. */
	tree(&m, 14, 8);
	assert_int_equal(spirv_cost_check(m.w, m.n, &inlined, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "inlined"));
	/* Depth 60: 2^60 copies, no overflow, refused as fast. */
	tree(&m, 60, 1);
	assert_int_equal(spirv_cost_check(m.w, m.n, NULL, why, sizeof(why)), -EINVAL);
}

static void test_recursion(void **state)
{
	struct mod m;
	uint32_t to_b = 21, to_a = 20;
	char why[256];

	(void)state;
	begin(&m);
	function(&m, 20, 1, &to_b, 1);
	function(&m, 21, 1, &to_a, 1);
	assert_int_equal(spirv_cost_check(m.w, m.n, NULL, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "recursion"));
}

static void test_loops(void **state)
{
	struct mod m;
	char why[256];
	size_t merge;

	(void)state;
	begin(&m);
	emit(&m, 5, 54, 1, 30, 0);
	merge = m.n;
	emit(&m, 4, 246, 40, 41, 0x1 | 0x2 << 4);    /* OpLoopMerge, Unroll | MinIterations bits */
	emit(&m, 1, 56, 0, 0, 0);
	assert_int_equal(spirv_cost_check(m.w, m.n, NULL, why, sizeof(why)), 0);
	assert_int_equal(m.w[merge + 3], 0x2u << 4);  /* Unroll cleared, the rest kept */
	m.w[merge + 3] = 0x1 | 0x100;                 /* PartialCount */
	assert_int_equal(spirv_cost_check(m.w, m.n, NULL, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "unroll"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tree),
		cmocka_unit_test(test_recursion),
		cmocka_unit_test(test_loops),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
