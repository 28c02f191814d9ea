/* The row-reduction engine (see reduce_engine.h). Shader: reduce.comp. */
#include "ops/reduce_engine.h"

#include <stdlib.h>
#include <string.h>

#include "base/env_once.h"
#include "dtype.h"
#include "gpu/device.h"
#include "reduce_codes.h"
#include "status.h"

/* Elements one invocation folds serially per pass before the tree: small,
 * so the error of a sum grows like E + log2(n), not like n. */
#define RED_PER_INVOCATION 16u
#define RED_LOCAL 256u
/* Elements one invocation of a RED_COLUMNS pass folds, at least and at most
 * (see red_columns). */
#define RED_COL_MIN_ROWS 16u
/* Devices with at least RED_COL_GPU_CU compute units take the column path
 * only for RED_COL_GPU_MIN elements or more (red_columns). */
#define RED_COL_GPU_CU 16
#define RED_COL_GPU_MIN ((uint64_t)1 << 21)
#define RED_COL_MAX_ROWS 64u
/* Invocations a RED_COLUMNS pass aims at per compute unit: a quarter of an
 * SM's most, so that large inputs take longer chunks (on an H100 a
 * [16384, 512] column sum took 30.7 us in chunks of 16 rows, 25.8 in 32;
 * [16384, 784] 51 against 43 in 32 or 64; [4096, 512] stays at 16 rows:
 * 18.9 us, 20 in 32, 24 in 64). */
#define RED_COL_PER_CU 512u

/* Mirrors RedPush in shaders/reduce.comp. */
struct red_push {
	uint32_t M, L, chunk, nchunks, seg_log2, op, flags, post, nk, nr;
	float div;
	uint32_t pad;
	uint32_t shape[8];
	uint32_t stride[8];
};
_Static_assert(sizeof(struct red_push) == 112, "red_push must mirror RedPush");

int red_plan_make(struct op_ctx *ctx, const struct op_tensor *x, const bool *reduced,
		  struct red_plan *ret)
{
	struct red_plan p = { .M = 1, .L = 1 };
	uint64_t size[TDP_MAX_RANK], stride[TDP_MAX_RANK], st = 1;
	bool red[TDP_MAX_RANK];
	unsigned n = 0;

	if (x->count >= (1ull << 31))
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "reductions take fewer than 2^31 elements");
	for (unsigned d = 0; d < x->rank; d++) {
		if (reduced[d])
			p.L *= x->shape[d];
		else
			p.M *= x->shape[d];
	}
	/* Empty rows or no rows: the shader reads nothing and needs no dims. */
	if (p.L == 0 || p.M == 0) {
		*ret = p;
		return 0;
	}
	/* Walk from the innermost dim, dropping size-1 dims and merging
	 * neighbours of the same kind that are contiguous with each other. */
	for (int d = (int)x->rank - 1; d >= 0; d--) {
		uint64_t s = st;

		st *= x->shape[d];
		if (x->shape[d] == 1)
			continue;
		if (n > 0 && red[n - 1] == reduced[d] && stride[n - 1] * size[n - 1] == s) {
			size[n - 1] *= x->shape[d];
			continue;
		}
		size[n] = x->shape[d];
		stride[n] = s;
		red[n] = reduced[d];
		n++;
	}
	/* The entries run innermost first: lay out kept dims, then reduced
	 * ones, each outermost first. */
	for (int pass = 0; pass < 2; pass++)
		for (unsigned k = n; k-- > 0;) {
			if (red[k] != (pass == 1))
				continue;
			p.shape[p.nk + p.nr] = size[k];
			p.stride[p.nk + p.nr] = stride[k];
			if (pass == 0)
				p.nk++;
			else
				p.nr++;
		}
	*ret = p;
	return 0;
}

struct gpu_binding red_bind(struct op_ctx *ctx, const struct gpu_alloc *a, uint64_t offset,
			    uint64_t size, bool write)
{
	return gpu_rec_bind(ctx->g, a, offset, size, write);
}

uint64_t red_align(const struct op_ctx *ctx, uint64_t bytes)
{
	uint64_t al = ctx->g->props.limits.minStorageBufferOffsetAlignment;

	if (al < 16)
		al = 16;
	return (bytes + al - 1) / al * al;
}

/* Segment size (a power of two up to the workgroup) and chunking of a row of
 * length `len`. */
static void red_shape_pass(uint64_t len, uint32_t *ret_log2, uint64_t *ret_chunk, uint64_t *ret_nchunks)
{
	uint64_t need = (len + RED_PER_INVOCATION - 1) / RED_PER_INVOCATION;
	uint32_t lg = 0;

	while ((1ull << lg) < need && (1u << lg) < RED_LOCAL)
		lg++;
	*ret_log2 = lg;
	*ret_chunk = (uint64_t)RED_PER_INVOCATION << lg;
	*ret_nchunks = len == 0 ? 1 : (len + *ret_chunk - 1) / *ret_chunk;
}

/* The RED_COLUMNS* flag of the first pass, or 0: columns when the kept dims
 * merged into one innermost, contiguous block, so that invocations of
 * consecutive rows read consecutive addresses; in vectors of four rows where
 * the shader has them (not bf16; not argmax/argmin) and M % 4 == 0. Then
 * `ret_nchunks` chunks of each row, interleaved: about RED_COL_PER_CU
 * invocations per compute unit, each folding RED_COL_MIN_ROWS to RED_COL_MAX_ROWS elements
 * (the serial part of a sum's error stays that short; the partials are 1/16
 * to 1/64 of x). */
static uint32_t red_columns(const struct op_ctx *ctx, const struct red_plan *plan,
			    const struct op_tensor *x, const struct red_job *job, uint64_t *ret_nchunks)
{
	uint64_t cu = ctx->g->compute_units ? ctx->g->compute_units : 1;
	bool arg = job->op == RED_ARGMAX || job->op == RED_ARGMIN;
	uint32_t flag = RED_COLUMNS;
	uint64_t per, lanes = plan->M;

	static atomic_int off = -1, off4 = -1;

	if (plan->nk != 1 || plan->stride[0] != 1 || plan->nr == 0 || plan->L < 2 ||
	    ENV_ONCE(off, getenv("TENSORD_NO_COLUMN_REDUCE") != NULL))
		return 0;
	/* On a GPU, small ones stay on the one-pass rows: on the H100 the two
	 * column passes took longer below about 2M elements ([4096, 256]: 16.2
	 * against 13.4 us; [256, 512]: 17.6 against 7.6) and won above
	 * ([4096, 512]: 19.6 against 25; [16384, 512]: 35 against 72). */
	if (cu >= RED_COL_GPU_CU && plan->M * plan->L < RED_COL_GPU_MIN)
		return 0;
	if (!arg && plan->M % 4 == 0 && x->dtype != TDP_DTYPE_BF16 && !ENV_ONCE(off4, getenv("TENSORD_NO_COLUMN_VEC4") != NULL)) {
		flag = RED_COLUMNS4;
		lanes = plan->M / 4;
	}
	per = (lanes * plan->L + cu * RED_COL_PER_CU - 1) / (cu * RED_COL_PER_CU);
	if (per < RED_COL_MIN_ROWS)
		per = RED_COL_MIN_ROWS;
	if (per > RED_COL_MAX_ROWS)
		per = RED_COL_MAX_ROWS;
	*ret_nchunks = (plan->L + per - 1) / per;
	return flag;
}

/* Whether the first pass reads the rows as vectors of four (RED_ROWS4):
 * contiguous rows whose length and starts are multiples of 4, in a dtype the
 * shader reads as vectors, not argmax/argmin. */
static bool red_rows4(const struct red_plan *plan, const struct op_tensor *x, const struct red_job *job)
{
	static atomic_int off = -1;

	if (job->op == RED_ARGMAX || job->op == RED_ARGMIN || x->dtype == TDP_DTYPE_BF16 || plan->nr != 1 ||
	    plan->stride[plan->nk] != 1 || plan->L % 4 != 0 || ENV_ONCE(off, getenv("TENSORD_NO_ROWS_VEC4") != NULL))
		return false;
	for (unsigned d = 0; d < plan->nk; d++)
		if (plan->stride[d] % 4 != 0)
			return false;
	return true;
}

int red_record(struct op_ctx *ctx, struct gpu_recorder *rec, const struct red_plan *plan,
	       const struct op_tensor *x, const struct red_job *job)
{
	static const struct gpu_alloc none;
	bool arg = job->op == RED_ARGMAX || job->op == RED_ARGMIN;
	struct gpu_binding dummy = red_bind(ctx, &none, 0, 0, false);
	struct gpu_binding bind[7], part_v[2], part_i[2];
	uint64_t len = plan->L, n1, chunk, off = 0, sz[2] = { 0, 0 };
	struct gpu_alloc *arena = NULL;
	const struct gpu_pipeline *p;
	struct red_push pc;
	uint32_t lg;
	int cur = 0;
	uint32_t cols;
	bool rows4;

	if (op_pipeline(ctx, "reduce", tdp_dtype_name(x->dtype), &p) < 0)
		return -1;
	/* Partials: pass 1 writes M * n1 of them to buffer 0, pass 2 M * n2 to
	 * buffer 1, pass 3 back to buffer 0, and so on. */
	cols = red_columns(ctx, plan, x, job, &n1);
	rows4 = !cols && red_rows4(plan, x, job);
	if (!cols)
		red_shape_pass(rows4 ? len / 4 : len, &lg, &chunk, &n1);
	if (n1 > 1) {
		uint64_t n2;

		red_shape_pass(n1, &lg, &chunk, &n2);

		sz[0] = red_align(ctx, plan->M * n1 * 4);
		sz[1] = red_align(ctx, plan->M * (n2 > 1 ? n2 : 1) * 4);
		if (op_scratch_alloc(ctx, (sz[0] + sz[1]) * (arg ? 2 : 1), &arena) < 0)
			return -1;
		for (int b = 0; b < 2; b++) {
			part_v[b] = red_bind(ctx, arena, off, sz[b], true);
			off += sz[b];
			part_i[b] = arg ? red_bind(ctx, arena, off, sz[b], true) : dummy;
			off += arg ? sz[b] : 0;
		}
	}
	for (bool first = true;; first = false) {
		uint64_t nchunks, groups;
		bool last;

		red_shape_pass(first && rows4 ? len / 4 : len, &lg, &chunk, &nchunks);
		if (first && cols) {
			lg = 0;
			chunk = len;
			nchunks = n1;
		}
		if (first && rows4)
			chunk *= 4; /* chunks of vectors; pc.chunk counts elements */
		last = nchunks == 1;
		memset(&pc, 0, sizeof(pc));
		pc.flags = first && rows4 ? RED_ROWS4 : 0;
		pc.M = (uint32_t)plan->M;
		pc.L = (uint32_t)len;
		pc.chunk = (uint32_t)chunk;
		pc.nchunks = (uint32_t)nchunks;
		pc.seg_log2 = lg;
		pc.op = job->op;
		pc.post = job->post;
		pc.div = job->div;
		for (int b = 0; b < 7; b++)
			bind[b] = dummy;
		if (first) {
			pc.nk = plan->nk;
			pc.nr = plan->nr;
			for (unsigned d = 0; d < plan->nk + plan->nr; d++) {
				pc.shape[d] = (uint32_t)plan->shape[d];
				pc.stride[d] = (uint32_t)plan->stride[d];
			}
			if (op_bind(ctx, x, false, &bind[0]) < 0)
				return -1;
			if (job->sqdev) {
				pc.flags |= RED_SQDEV;
				bind[6] = job->mean;
			}
		} else {
			pc.flags |= RED_IN_PARTIAL;
			bind[1] = part_v[cur];
			bind[1].write = false;
			bind[2] = part_i[cur];
			bind[2].write = false;
			cur ^= 1;
		}
		if (!last) {
			pc.flags |= RED_OUT_PARTIAL;
			bind[3] = part_v[first ? 0 : cur];
			bind[4] = part_i[first ? 0 : cur];
			if (first)
				cur = 0;
		} else if (job->out_flag == RED_OUT_F32) {
			pc.flags |= RED_OUT_F32;
			bind[3] = job->out;
		} else if (job->out_flag == RED_OUT_IDX) {
			pc.flags |= RED_OUT_IDX;
			bind[4] = job->out;
		} else {
			bind[5] = job->out;
		}
		groups = (plan->M + (RED_LOCAL >> lg) - 1) / (RED_LOCAL >> lg) * nchunks;
		if (first && cols) {
			pc.flags |= cols;
			groups = ((cols == RED_COLUMNS4 ? plan->M / 4 : plan->M) * nchunks + RED_LOCAL - 1) /
				 RED_LOCAL;
		}
		if (op_dispatch(ctx, rec, p, bind, 7, &pc, sizeof(pc), groups * RED_LOCAL, RED_LOCAL) < 0)
			return -1;
		if (last)
			return 0;
		len = nchunks;
	}
}
