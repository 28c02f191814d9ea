/* A client module's build cost (spirv_cost.h): its call graph with
 * multiplicity, summed without recursion (an explicit stack: call chains
 * may be as long as the module allows), in saturating arithmetic. */
#include "kernels/spirv_cost.h"

#include "errorf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

enum {
	OP_FUNCTION = 54, OP_FUNCTION_END = 56, OP_FUNCTION_CALL = 57, OP_LOOP_MERGE = 246,
};
/* Loop control bits (SPIR-V 3.23). */
#define LOOP_UNROLL 0x1u
#define LOOP_PEEL_COUNT 0x80u
#define LOOP_PARTIAL_COUNT 0x100u

struct fn {
	uint32_t id;
	uint64_t own;        /* its own instructions */
	uint32_t first_call; /* index of its first call in calls[] */
	uint32_t ncalls;
	uint64_t inlined;    /* own + the inlined size of each call */
	uint8_t state;       /* 0 not summed, 1 on the stack, 2 summed */
	uint32_t next_call;  /* the walk's position in its calls */
};

struct graph {
	struct fn *fns;
	uint32_t nfns;
	uint32_t *calls;     /* callee ids, by caller in order */
	uint32_t ncalls;
};

/* Functions and calls of the module into `g` (arrays sized by counting
 * first); clears Unroll on loops. */
static int collect(uint32_t *w, size_t n, struct graph *g, char *why, size_t cap)
{
	size_t nf = 0, nc = 0;
	struct fn *cur = NULL;

	for (size_t at = 5; at < n && (w[at] >> 16); at += w[at] >> 16) {
		nf += (w[at] & 0xffff) == OP_FUNCTION;
		nc += (w[at] & 0xffff) == OP_FUNCTION_CALL;
	}
	g->fns = calloc(nf ? nf : 1, sizeof(*g->fns));
	g->calls = calloc(nc ? nc : 1, sizeof(*g->calls));
	if (!g->fns || !g->calls)
		return -ENOMEM;
	for (size_t at = 5; at < n && (w[at] >> 16); at += w[at] >> 16) {
		uint32_t op = w[at] & 0xffff, len = w[at] >> 16;

		if (op == OP_FUNCTION && len >= 3 && g->nfns < nf) {
			cur = &g->fns[g->nfns++];
			cur->id = w[at + 2];
			cur->first_call = g->ncalls;
		} else if (op == OP_FUNCTION_END) {
			cur = NULL;
		} else if (op == OP_FUNCTION_CALL && cur && len >= 4 && g->ncalls < nc) {
			g->calls[g->ncalls++] = w[at + 3];
			cur->ncalls++;
		} else if (op == OP_LOOP_MERGE && len >= 4) {
			if (w[at + 3] & (LOOP_PEEL_COUNT | LOOP_PARTIAL_COUNT))
				return tdp_errorf(why, cap, -EINVAL, "a loop asks for a peel or partial unroll count; "
					      "kernels leave unrolling to the driver");
			w[at + 3] &= ~LOOP_UNROLL;
		}
		if (cur)
			cur->own++;
	}
	return 0;
}

static int by_id(const void *a, const void *b)
{
	uint32_t x = ((const struct fn *)a)->id, y = ((const struct fn *)b)->id;

	return x < y ? -1 : x > y;
}

/* The function of `id` (fns sorted by id). */
static struct fn *find(struct graph *g, uint32_t id)
{
	struct fn key = { .id = id };

	return bsearch(&key, g->fns, g->nfns, sizeof(*g->fns), by_id);
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a + b < a || a + b > SPV_MAX_INLINED + 1ull ? SPV_MAX_INLINED + 1ull : a + b;
}

/* Sum fns[root] and everything below it (depth first, an explicit stack of
 * at most nfns entries). Returns 0 or -EINVAL on a recursive call. */
static int sum_from(struct graph *g, uint32_t root, uint32_t *stack, char *why, size_t cap)
{
	uint32_t depth = 0;

	stack[depth++] = root;
	g->fns[root].state = 1;
	g->fns[root].inlined = g->fns[root].own;
	while (depth) {
		struct fn *f = &g->fns[stack[depth - 1]];
		struct fn *callee;

		if (f->next_call == f->ncalls) {
			f->state = 2;
			if (--depth)
				g->fns[stack[depth - 1]].inlined = add_sat(g->fns[stack[depth - 1]].inlined, f->inlined);
			continue;
		}
		callee = find(g, g->calls[f->first_call + f->next_call++]);
		if (!callee)
			continue; /* the validator saw to it; nothing to add */
		if (callee->state == 1)
			return tdp_errorf(why, cap, -EINVAL, "function %u calls itself (recursion)", callee->id);
		if (callee->state == 2) {
			f->inlined = add_sat(f->inlined, callee->inlined);
			continue;
		}
		callee->state = 1;
		callee->inlined = callee->own;
		stack[depth++] = (uint32_t)(callee - g->fns);
	}
	return 0;
}

int spirv_cost_check(uint32_t *words, size_t nwords, uint64_t *ret_inlined, char *why, size_t cap)
{
	struct graph g = { 0 };
	uint32_t *stack = NULL;
	uint64_t most = 0;
	int r = collect(words, nwords, &g, why, cap);

	if (r == 0 && !(stack = calloc(g.nfns ? g.nfns : 1, sizeof(*stack))))
		r = -ENOMEM;
	if (r == 0)
		qsort(g.fns, g.nfns, sizeof(*g.fns), by_id);
	for (uint32_t i = 0; r == 0 && i < g.nfns; i++) {
		if (g.fns[i].state == 0)
			r = sum_from(&g, i, stack, why, cap);
		if (r == 0 && g.fns[i].inlined > most)
			most = g.fns[i].inlined;
	}
	if (r == 0 && most > SPV_MAX_INLINED)
		r = tdp_errorf(why, cap, -EINVAL, "the kernel is over %u instructions with its calls inlined, as the "
			   "driver builds it (a call tree that calls functions many times over)",
			   SPV_MAX_INLINED);
	if (r == 0 && ret_inlined)
		*ret_inlined = most;
	free(stack);
	free(g.fns);
	free(g.calls);
	return r;
}
