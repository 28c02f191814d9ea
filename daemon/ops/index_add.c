/* index_add: x with slices of src added at indices along an axis, the
 * adjoint of gather / index_select (embedding gradients). Shaders:
 * index_sort.comp sorts the indices by the row they add to (a bitonic sort
 * of (row, position) keys), then index_add.comp sums each row's segment.
 * Work: O(indices · log² indices) for the sort plus O(output + indices ·
 * slice) for the sums, where it was O(rows · indices) scanning every index
 * for every row. Deterministic: no atomics, the additions of a result
 * element happen in index order (from 0, then x is added), so results are
 * bit-identical every run and to the row-scanning kernel this replaced up to
 * IA_PASS indices. */
#include <string.h>

#include "dtype.h"
#include "gpu/device.h"
#include "ops/grad_rules.h"
#include "ops/op.h"
#include "status.h"

/* Segment positions one dispatch of index_add.comp sums: each invocation
 * then loops at most 32768 + 2·33 times, inside the 65535 iterations after
 * which Mesa 22.3's lavapipe ends an invocation's loops. Index lists longer
 * than this (a row may get all of them) take more passes. */
#define IA_PASS 32768u
#define IA_FIRST 1u
#define IA_LAST 2u
/* index_sort.comp: keys per workgroup in shared memory, and its modes. */
#define IS_BLOCK 512u
#define IS_INIT 0u
#define IS_GLOBAL 1u
#define IS_LOCAL 2u

/* Mirrors the push block of shaders/index_add.comp. */
struct ia_push {
	uint32_t pre, n, post, nidx, kbeg, kend, nkeys, flags;
};
_Static_assert(sizeof(struct ia_push) == 32, "ia_push must mirror index_add.comp");

/* Mirrors the push block of shaders/index_sort.comp. */
struct is_push {
	uint32_t n, nidx, npow2, k, j, mode;
};

/* x, indices (i32, any shape), src of shape
 * x.shape[:axis] + indices.shape + x.shape[axis+1:]; the result is x's. */
static int ia_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0], *idx = &ctx->in[1], *src = &ctx->in[2];
	uint64_t want[TDP_MAX_RANK];
	unsigned r = 0;
	bool same;
	int axis;

	if (!op_dtype_is_float(x->dtype) && x->dtype != TDP_DTYPE_I32)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "input 0 must be f32, f16, bf16 or i32, not %s",
			       tdp_dtype_name(x->dtype));
	if (idx->dtype != TDP_DTYPE_I32)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "input 1 (the indices) must be i32, not %s",
			       tdp_dtype_name(idx->dtype));
	if (src->dtype != x->dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "input 2 (the source) is %s, input 0 %s",
			       tdp_dtype_name(src->dtype), tdp_dtype_name(x->dtype));
	if (x->rank == 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "cannot index a rank-0 tensor");
	axis = op_axis(ctx, op_attr(ctx, "axis")->i, x->rank, "axis");
	if (axis < 0)
		return -1;
	if (x->rank - 1 + idx->rank > TDP_MAX_RANK)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "the source would have rank %u; the limit is %d",
			       x->rank - 1 + idx->rank, TDP_MAX_RANK);
	for (int d = 0; d < axis; d++)
		want[r++] = x->shape[d];
	for (unsigned d = 0; d < idx->rank; d++)
		want[r++] = idx->shape[d];
	for (unsigned d = (unsigned)axis + 1; d < x->rank; d++)
		want[r++] = x->shape[d];
	same = src->rank == r;
	for (unsigned d = 0; same && d < r; d++)
		same = src->shape[d] == want[d];
	if (!same)
		return op_fail(ctx, TDP_SHAPE_MISMATCH,
			       "input 2 (the source) must be x.shape[:axis] + indices.shape + x.shape[axis+1:] "
			       "(rank %u), as gather would return", r);
	ctx->out = (struct op_tensor){ .dtype = x->dtype, .rank = x->rank };
	memcpy(ctx->out.shape, x->shape, sizeof(x->shape));
	ctx->priv.index_add.axis = axis;
	return 0;
}

/* Sort the indices into `keys` (npow2 (row, position) pairs): one dispatch
 * sorts blocks of IS_BLOCK in shared memory, then each longer stage k takes
 * a dispatch per compare distance j >= IS_BLOCK and one for the rest. */
static int ia_sort(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding *idx,
		   const struct gpu_binding *keys, uint32_t n, uint32_t nidx, uint32_t npow2)
{
	const struct gpu_pipeline *p;
	struct gpu_binding b[2] = { *idx, *keys };
	struct is_push pc = { .n = n, .nidx = nidx, .npow2 = npow2, .mode = IS_INIT };
	uint64_t blocks = npow2 / IS_BLOCK;

	if (op_pipeline(ctx, "index_sort", "i32", &p) < 0 ||
	    op_dispatch(ctx, rec, p, b, 2, &pc, sizeof(pc), blocks * 256, 256) < 0)
		return -1;
	for (uint32_t k = 2 * IS_BLOCK; k != 0 && k <= npow2; k <<= 1) {
		pc.k = k;
		pc.mode = IS_GLOBAL;
		for (uint32_t j = k / 2; j >= IS_BLOCK; j >>= 1) {
			pc.j = j;
			if (op_dispatch(ctx, rec, p, b, 2, &pc, sizeof(pc), npow2 / 2, 256) < 0)
				return -1;
		}
		pc.mode = IS_LOCAL;
		if (op_dispatch(ctx, rec, p, b, 2, &pc, sizeof(pc), blocks * 256, 256) < 0)
			return -1;
	}
	return 0;
}

static int ia_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	static const struct gpu_alloc none;
	const struct op_tensor *x = &ctx->in[0], *idx = &ctx->in[1], *src = &ctx->in[2];
	struct ia_push pc = { .pre = 1, .post = 1 };
	const struct gpu_pipeline *p;
	struct gpu_binding bind[5], ib;
	uint64_t pre = 1, post = 1, npow2 = IS_BLOCK, kbytes;
	uint64_t range = ctx->g->props.limits.maxStorageBufferRange;
	struct gpu_alloc *keys;
	int axis;

	axis = ctx->priv.index_add.axis;
	if (ctx->out.count == 0)
		return 0;
	for (int d = 0; d < axis; d++)
		pre *= x->shape[d];
	for (unsigned d = (unsigned)axis + 1; d < x->rank; d++)
		post *= x->shape[d];
	if (x->count > UINT32_MAX || src->count > UINT32_MAX || idx->count > INT32_MAX ||
	    x->shape[axis] >= UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "index_add takes fewer than 2^32 elements and 2^31 indices");
	pc.pre = (uint32_t)pre;
	pc.n = (uint32_t)x->shape[axis];
	pc.post = (uint32_t)post;
	pc.nidx = (uint32_t)idx->count;
	while (npow2 < pc.nidx)
		npow2 <<= 1;
	kbytes = npow2 * 8;
	bind[1] = gpu_rec_bind(ctx->g, &none, 0, 0, false);
	bind[3] = gpu_rec_bind(ctx->g, &none, 0, 0, false);
	if (pc.nidx > 0) {
		if (kbytes > range)
			return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
				       "%u indices need %llu bytes of sort keys, more than this device binds", pc.nidx,
				       (unsigned long long)kbytes);
		if (op_scratch_alloc(ctx, kbytes, &keys) < 0 || op_bind(ctx, idx, false, &ib) < 0)
			return -1;
		bind[1] = gpu_rec_bind(ctx->g, keys, 0, kbytes, true);
		if (ia_sort(ctx, rec, &ib, &bind[1], pc.n, pc.nidx, (uint32_t)npow2) < 0)
			return -1;
		bind[1].write = false;
		pc.nkeys = (uint32_t)npow2;
	}
	if (op_pipeline(ctx, "index_add", tdp_dtype_name(x->dtype), &p) < 0 ||
	    op_bind(ctx, x, false, &bind[0]) < 0 || op_bind(ctx, src, false, &bind[2]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[4]) < 0)
		return -1;
	if (pc.nidx > IA_PASS) {
		/* Running sums between passes, 4 bytes (f32 or i32) per element. */
		uint64_t bytes = x->count * 4;
		struct gpu_alloc *s;

		if (bytes > range)
			return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
				       "more than %u indices need %llu bytes of running sums, more than this device binds",
				       IA_PASS, (unsigned long long)bytes);
		if (op_scratch_alloc(ctx, bytes, &s) < 0)
			return -1;
		bind[3] = gpu_rec_bind(ctx->g, s, 0, bytes, true);
	}
	for (uint32_t k = 0;; k += IA_PASS) {
		pc.kbeg = k;
		pc.kend = pc.nidx - k > IA_PASS ? k + IA_PASS : pc.nidx;
		pc.flags = (k == 0 ? IA_FIRST : 0) | (pc.kend == pc.nidx ? IA_LAST : 0);
		if (op_dispatch(ctx, rec, p, bind, 5, &pc, sizeof(pc), x->count, 256) < 0)
			return -1;
		if (pc.kend == pc.nidx)
			return 0;
	}
}

static const struct op_attr_spec ia_attrs[] = {
	{ "axis", ATTR_INT, false },
	{ NULL, 0, false },
};

const struct op_def op_defs_index[] = {
	{ .name = "index_add", .min_inputs = 3, .max_inputs = 3, .attrs = ia_attrs, .infer = ia_infer,
	  .record = ia_record, .backward = grad_index_add },
	{ .name = NULL },
};
