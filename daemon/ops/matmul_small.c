/* matmul's kernels for small products (matmul.c picks them): matmul_skinny.comp
 * (NN, at most 16 columns), matmul_smallk.comp (f32, K <= 16) and
 * matmul_smalln.comp (f32, A transposed, at most 16 columns). Off with
 * TENSORD_NO_SKINNY, to compare against the square tiles. */
#include "ops/matmul_small.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "base/env_once.h"
#include "dtype.h"
#include "gpu/device.h"
#include "ops/matmul.h"
#include "ops/op.h"
#include "status.h"

/* matmul_skinny.comp: rows per workgroup (MM_SKINNY_WG / 8 invocations per
 * row), the most columns it takes, and the fewest rows for which it is
 * chosen. */
#define MM_SKINNY_ROWS 32u
#define MM_SKINNY_WG 256u
#define MM_SKINNY_N 16u
#define MM_SKINNY_MIN_ROWS 1024u
/* matmul_smallk.comp takes f32 products of 1 to MM_SMALLK_K terms: its
 * workgroup size, the most quads (4 columns) of a block and the rows of
 * each invocation (mirrored there). */
#define MM_SMALLK_K 16u
#define MM_SMALLK_WG 256u
#define MM_SMALLK_QB 64u
#define MM_SMALLK_PASSES 8u
/* matmul_smalln.comp takes f32 products with A transposed and at most
 * MM_SMALLN_N columns: MM_SMALLN_ROWS rows of C per workgroup; K cut into a
 * power of two of chunks (at most MM_MAX_SPLITS, each of at least
 * MM_SMALLN_MIN_K terms) for about MM_SMALLN_WG_PER_CU workgroups per
 * compute unit, and into chunks of at most MM_SMALLN_MAX_K terms for the
 * loop budget: MM_MAX_K's 960,000, as for the tiles (an invocation loops
 * once per 128 terms of its chunk, its inner loops unrolled: on lavapipe
 * one chunk of 2^20 + 3 terms came out right). */
#define MM_SMALLN_N 16u
#define MM_SMALLN_ROWS 32u
#define MM_SMALLN_WG 256u
#define MM_SMALLN_MIN_K 256u
#define MM_SMALLN_WG_PER_CU 4u
#define MM_SMALLN_MAX_K MM_MAX_K

/* TENSORD_NO_SKINNY: the small products on the square tiles, to compare. */
static bool mm_no_small_kernels(void)
{
	static atomic_int off = -1;

	return ENV_ONCE(off, getenv("TENSORD_NO_SKINNY") != NULL);
}

/* Whether the product `pc` takes matmul_skinny.comp: NN, unsplit, at most
 * MM_SKINNY_N columns, rows enough to fill a GPU with its row blocks. */
bool matmul_skinny_fits(const struct mm_push *pc)
{
	return (pc->flags & MM_LAYOUT) == 0 && pc->splits == 1 && pc->n <= MM_SKINNY_N &&
	       (uint64_t)pc->m * pc->batches >= MM_SKINNY_MIN_ROWS && !mm_no_small_kernels();
}

/* Record matmul_skinny.comp for `pc` (bindings as mm_dispatch's b). */
int matmul_record_skinny(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding b[5],
			 int dtype, struct mm_push *pc)
{
	const struct gpu_pipeline *p;
	uint64_t groups = ((uint64_t)pc->m + MM_SKINNY_ROWS - 1) / MM_SKINNY_ROWS;

	if (groups * pc->batches > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "more than 2^32 row blocks");
	pc->tiles_n = 1;
	pc->tiles_mn = (uint32_t)groups;
	groups *= pc->batches;
	if (op_pipeline(ctx, "matmul_skinny", tdp_dtype_name(dtype), &p) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, b, 5, pc, sizeof(*pc), groups * MM_SKINNY_WG, MM_SKINNY_WG);
}

/* The kernels for small products (f32; off with TENSORD_NO_SKINNY, to
 * compare): K of 1 to MM_SMALLK_K takes matmul_smallk.comp in any layout
 * (output-bound: dh = g · Wᵀ of a classifier layer, K = its classes); A
 * transposed, at most MM_SMALLN_N columns and the split left to the
 * heuristic takes matmul_smalln.comp (dW = hᵀ · g of that layer). Neither
 * takes an empty product. */
enum matmul_small matmul_small_pick(const struct mm_push *pc, int dtype, int64_t split_attr)
{
	if (dtype != TDP_DTYPE_F32 || pc->m == 0 || pc->n == 0 || pc->k == 0 || pc->batches == 0 ||
	    mm_no_small_kernels())
		return MATMUL_SMALL_NONE;
	if (pc->k <= MM_SMALLK_K)
		return MATMUL_SMALL_K;
	if ((pc->flags & MM_TA) && pc->n <= MM_SMALLN_N && split_attr == 0)
		return MATMUL_SMALL_N;
	return MATMUL_SMALL_NONE;
}

/* Record matmul_smallk.comp for `pc` (bindings as mm_dispatch's b): its
 * blocks of QB quads (4 columns each; QB the smallest power of two holding
 * a row's quads, at most MM_SMALLK_QB, as the shader computes it) by
 * MM_SMALLK_WG / QB * splits rows (splits set here, at most
 * MM_SMALLK_PASSES). */
int matmul_record_smallk(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding b[5],
			 struct mm_push *pc)
{
	const struct gpu_pipeline *p;
	uint64_t quads = (pc->n + 3ull) / 4, qb = 1, rows, cblocks, groups;

	while (qb < quads && qb < MM_SMALLK_QB)
		qb *= 2;
	cblocks = (quads + qb - 1) / qb;
	/* Rows per invocation (the shader reads `splits`): MM_SMALLK_PASSES,
	 * halved while the blocks would be fewer than two per compute unit (on
	 * the H100 [256, 10] · [10, 512] made 16 workgroups: 26 us). */
	pc->splits = MM_SMALLK_PASSES;
	while (pc->splits > 1 &&
	       (pc->m + MM_SMALLK_WG / qb * pc->splits - 1) / (MM_SMALLK_WG / qb * pc->splits) * cblocks *
	       pc->batches < 2ull * (ctx->g->compute_units ? ctx->g->compute_units : 1))
		pc->splits /= 2;
	rows = MM_SMALLK_WG / qb * pc->splits;
	/* m, n < 2^32: no product below overflows 64 bits. */
	groups = (pc->m + rows - 1) / rows * cblocks;
	if (groups * pc->batches > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "more than 2^32 result blocks");
	pc->kchunk = pc->k;
	pc->tiles_n = (uint32_t)cblocks;
	pc->tiles_mn = (uint32_t)groups;
	if (op_pipeline(ctx, "matmul_smallk", "f32", &p) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, b, 5, pc, sizeof(*pc), groups * pc->batches * MM_SMALLK_WG, MM_SMALLK_WG);
}

/* matmul_smalln.comp's K chunks for `pc` (splits, kchunk): about
 * MM_SMALLN_WG_PER_CU workgroups per compute unit, as mm_split does for
 * the tiles -- on an H100 (132 SMs) 512x10 from K = 16384 is 16 row blocks
 * in 32 chunks of 512 terms -- and as many as the loop budget needs. */
static void mm_smalln_split(const struct op_ctx *ctx, struct mm_push *pc)
{
	uint64_t blocks = (pc->m + MM_SMALLN_ROWS - 1) / MM_SMALLN_ROWS * pc->batches;
	uint64_t cu = ctx->g->compute_units ? ctx->g->compute_units : 1, k = pc->k, want = 1, chunk;
	uint64_t target = (MM_SMALLN_WG_PER_CU * cu + blocks - 1) / blocks;
	uint64_t need = (k + MM_SMALLN_MAX_K - 1) / MM_SMALLN_MAX_K;

	while (want < target && want < MM_MAX_SPLITS && want * 2 <= k / MM_SMALLN_MIN_K)
		want *= 2;
	if (want < need)
		want = need;
	chunk = (k + want - 1) / want;
	chunk = (chunk + MM_SPLIT_ALIGN - 1) / MM_SPLIT_ALIGN * MM_SPLIT_ALIGN;
	pc->splits = (uint32_t)((k + chunk - 1) / chunk);
	pc->kchunk = pc->splits > 1 ? (uint32_t)chunk : pc->k;
}

/* Record matmul_smalln.comp for `pc` and, split, the reduction of its
 * partial results (bindings as mm_dispatch's b; b[3] is set here). */
int matmul_record_smalln(struct op_ctx *ctx, struct gpu_recorder *rec, struct gpu_binding b[5],
			 struct mm_push *pc)
{
	const struct gpu_pipeline *p;
	uint64_t blocks = (pc->m + MM_SMALLN_ROWS - 1) / MM_SMALLN_ROWS, groups;

	mm_smalln_split(ctx, pc);
	groups = blocks * pc->batches * pc->splits;
	if (groups > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "more than 2^32 row blocks");
	pc->tiles_n = 1;
	pc->tiles_mn = (uint32_t)blocks;
	if (matmul_partials(ctx, pc, false, &b[3]) < 0 || op_pipeline(ctx, "matmul_smalln", "f32", &p) < 0 ||
	    op_dispatch(ctx, rec, p, b, 5, pc, sizeof(*pc), groups * MM_SMALLN_WG, MM_SMALLN_WG) < 0)
		return -1;
	return pc->splits > 1 ? matmul_reduce(ctx, rec, &b[3], &b[2], &b[4], TDP_DTYPE_F32, pc) : 0;
}

