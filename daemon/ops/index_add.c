/* index_add: x with slices of src added at indices along an axis, the
 * adjoint of gather / index_select (embedding gradients). Shader:
 * index_add.comp. Deterministic: no atomics, the additions of a result
 * element happen in index order, so results are bit-identical every run. */
#include <string.h>

#include "dtype.h"
#include "gpu/device.h"
#include "ops/grad_rules.h"
#include "ops/op.h"
#include "status.h"

/* Indices one dispatch scans: each invocation then loops at most
 * 32768 + 128·9 times, inside the 65535 iterations after which Mesa 22.3's
 * lavapipe ends an invocation's loops. Longer index lists take more passes. */
#define IA_PASS 32768u
#define IA_FIRST 1u
#define IA_LAST 2u

/* Mirrors the push block of shaders/index_add.comp. */
struct ia_push {
	uint32_t pre, n, post, nidx, kbeg, kend, qblocks, flags;
};
_Static_assert(sizeof(struct ia_push) == 32, "ia_push must mirror index_add.comp");

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

static int ia_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	static const struct gpu_alloc none;
	const struct op_tensor *x = &ctx->in[0], *idx = &ctx->in[1], *src = &ctx->in[2];
	struct ia_push pc = { .pre = 1, .post = 1 };
	const struct gpu_pipeline *p;
	struct gpu_binding bind[5];
	uint64_t pre = 1, post = 1, groups;
	int axis = ctx->priv.index_add.axis;

	if (ctx->out.count == 0)
		return 0;
	for (int d = 0; d < axis; d++)
		pre *= x->shape[d];
	for (unsigned d = (unsigned)axis + 1; d < x->rank; d++)
		post *= x->shape[d];
	if (x->count > UINT32_MAX || src->count > UINT32_MAX || idx->count > INT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "index_add takes fewer than 2^32 elements and 2^31 indices");
	pc.pre = (uint32_t)pre;
	pc.n = (uint32_t)x->shape[axis];
	pc.post = (uint32_t)post;
	pc.nidx = (uint32_t)idx->count;
	pc.qblocks = (uint32_t)((post + 255) / 256);
	groups = pre * x->shape[axis] * pc.qblocks;
	bind[3] = gpu_rec_bind(ctx->g, &none, 0, 0, false);
	if (op_pipeline(ctx, "index_add", tdp_dtype_name(x->dtype), &p) < 0 ||
	    op_bind(ctx, x, false, &bind[0]) < 0 || op_bind(ctx, idx, false, &bind[1]) < 0 ||
	    op_bind(ctx, src, false, &bind[2]) < 0 || op_bind(ctx, &ctx->out, true, &bind[4]) < 0)
		return -1;
	if (pc.nidx > IA_PASS) {
		/* Running sums between passes, 4 bytes (f32 or i32) per element. */
		uint64_t bytes = x->count * 4;
		struct gpu_alloc *s;

		if (bytes > ctx->g->props.limits.maxStorageBufferRange)
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
		if (op_dispatch(ctx, rec, p, bind, 5, &pc, sizeof(pc), groups * 256, 256) < 0)
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
	{ "index_add", 3, 3, ia_attrs, 0, ia_infer, ia_record, grad_index_add, OP_NO_FUSION },
	{ NULL, 0, 0, NULL, 0, NULL, NULL, NULL, OP_NO_FUSION },
};
