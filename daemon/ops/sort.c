/* Sorting and scanning along one axis: sort, argsort, topk, topk_indices,
 * sort_grad (the gradient of sort's and topk's values) and cumsum. Shader:
 * sort.comp (docs/ops.md, "Sorting and scans").
 *
 * Rows of up to SO_RANK_MAX elements are sorted by ranking each element
 * (counting the elements of its row that precede it; stable: ties keep
 * index order), one invocation per element; longer rows by a bitonic
 * network over (key, index) pairs in scratch, one dispatch per step
 * (log2(n)·(log2(n)+1)/2 of them), which gives the same order. cumsum runs
 * one invocation per row up to SO_CHUNK, and a chunked scan (three
 * dispatches) beyond. No invocation loops more than SO_CHUNK or
 * n / SO_CHUNK times (OP_LOOP_BUDGET: lavapipe ends longer loops). */
#include <string.h>

#include "dtype.h"
#include "gpu/device.h"
#include "ops/grad_rules.h"
#include "ops/op.h"
#include "status.h"

#define SO_WRITE 0u
#define SO_GRAD 1u
#define SO_CUMSUM 2u
#define SO_CS_SUM 3u
#define SO_CS_SCAN 4u
#define SO_CS_APPLY 5u
#define SO_BT_INIT 6u
#define SO_BT_STEP 7u
#define SO_BT_WRITE 8u
#define SO_BT_GRAD 9u
#define SO_ZERO 10u
#define SO_DESCENDING 1u
#define SO_VALUES 2u
#define SO_REVERSE 4u

/* Rows up to this long are ranked (one loop of n per invocation); longer
 * ones go through the bitonic network, whose dispatches do not loop. */
#define SO_RANK_MAX 1024u
/* cumsum: rows up to this long are summed by one invocation; longer ones in
 * chunks of this many (three dispatches; the scan of a row's chunk sums
 * loops n / SO_CHUNK times, within OP_LOOP_BUDGET). */
#define SO_CHUNK 1024u

/* The row codes (op_def.code). */
enum { SORT_VALUES, SORT_INDICES, TOPK_VALUES, TOPK_INDICES, SORT_GRAD, CUMSUM };

/* Mirrors the push block of shaders/sort.comp. */
struct sort_push {
	uint32_t outer, n, inner, k, mode, flags;
	uint32_t chunk, nch, npow2, bk, bj;
};
_Static_assert(sizeof(struct sort_push) == 44, "sort_push must mirror sort.comp");

static struct sort_notes *notes(struct op_ctx *ctx)
{
	return &ctx->priv.sort;
}

/* The axis (attr "axis", default -1) and its length, checked against the
 * loop budget. */
static int sort_axis(struct op_ctx *ctx, const struct op_tensor *x)
{
	const struct op_attr_value *a = op_attr(ctx, "axis");
	int axis;

	if (x->rank == 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "needs a tensor of rank 1 or more");
	axis = op_axis(ctx, a->set ? a->i : -1, x->rank, "axis");
	if (axis < 0)
		return -1;
	if (x->count > UINT32_MAX || x->shape[axis] > (uint64_t)SO_CHUNK * OP_LOOP_BUDGET)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "takes fewer than 2^32 elements and at most %llu along the axis",
			       (unsigned long long)SO_CHUNK * OP_LOOP_BUDGET);
	notes(ctx)->axis = axis;
	notes(ctx)->k = (uint32_t)x->shape[axis];
	return axis;
}

static bool attr_flag(struct op_ctx *ctx, const char *name, bool dflt)
{
	const struct op_attr_value *v = op_attr(ctx, name);

	return v->set ? v->i != 0 : dflt;
}

/* sort, argsort, topk, topk_indices: x of any dtype; values keep it,
 * indices are i32. */
static int sort_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];
	uint32_t code = ctx->def->code;
	int axis = sort_axis(ctx, x);

	if (axis < 0)
		return -1;
	ctx->out = (struct op_tensor){ .rank = x->rank };
	memcpy(ctx->out.shape, x->shape, sizeof(x->shape));
	ctx->out.dtype = code == SORT_INDICES || code == TOPK_INDICES ? TDP_DTYPE_I32 : x->dtype;
	if (code == TOPK_VALUES || code == TOPK_INDICES) {
		int64_t k = op_attr(ctx, "k")->i;

		if (k < 0 || (uint64_t)k > x->shape[axis])
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "k must be in [0, %llu] (the axis' length), not %lld",
				       (unsigned long long)x->shape[axis], (long long)k);
		notes(ctx)->k = (uint32_t)k;
		ctx->out.shape[axis] = (uint64_t)k;
		notes(ctx)->descending = attr_flag(ctx, "largest", true);
	} else {
		notes(ctx)->descending = attr_flag(ctx, "descending", false);
	}
	return 0;
}

/* sort_grad(x, g): the gradient of sort's or topk's values g (shaped as the
 * op's result, k along the axis) back at x's positions. */
static int sort_grad_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0], *g = &ctx->in[1];
	int axis = sort_axis(ctx, x);
	bool same;

	if (axis < 0)
		return -1;
	if (!op_dtype_is_float(x->dtype) || g->dtype != x->dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "x and g must be one float dtype, not %s and %s",
			       tdp_dtype_name(x->dtype), tdp_dtype_name(g->dtype));
	same = g->rank == x->rank;
	for (unsigned d = 0; same && d < x->rank; d++)
		same = (int)d == axis ? g->shape[d] <= x->shape[d] : g->shape[d] == x->shape[d];
	if (!same)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "g must be shaped like x, with at most x's length along axis");
	notes(ctx)->k = (uint32_t)g->shape[axis];
	notes(ctx)->descending = attr_flag(ctx, "descending", false);
	ctx->out = (struct op_tensor){ .dtype = x->dtype, .rank = x->rank };
	memcpy(ctx->out.shape, x->shape, sizeof(x->shape));
	return 0;
}

static int cumsum_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];
	const struct op_attr_value *a = op_attr(ctx, "axis");

	if (!op_dtype_is_float(x->dtype) && x->dtype != TDP_DTYPE_I32)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "needs f32, f16, bf16 or i32, not %s (cast it first)",
			       tdp_dtype_name(x->dtype));
	if (!a->set)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "needs attr 'axis' (torch.cumsum's dim)");
	if (sort_axis(ctx, x) < 0)
		return -1;
	notes(ctx)->descending = attr_flag(ctx, "reverse", false);
	ctx->out = (struct op_tensor){ .dtype = x->dtype, .rank = x->rank };
	memcpy(ctx->out.shape, x->shape, sizeof(x->shape));
	return 0;
}

/* cumsum of rows longer than SO_CHUNK: chunk sums into scratch, their
 * exclusive scan per row, then every chunk from its offset. */
static int cumsum_chunked(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_pipeline *p,
			  struct gpu_binding bind[6], struct sort_push *pc)
{
	uint64_t rows = (uint64_t)pc->outer * pc->inner;
	uint64_t bytes;
	struct gpu_alloc *sc;

	pc->chunk = SO_CHUNK;
	pc->nch = (pc->n + SO_CHUNK - 1) / SO_CHUNK;
	bytes = rows * pc->nch * 4;
	if (bytes > ctx->g->props.limits.maxStorageBufferRange)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "%llu bytes of chunk sums, more than this device binds",
			       (unsigned long long)bytes);
	if (op_scratch_alloc(ctx, bytes, &sc) < 0)
		return -1;
	bind[4] = gpu_rec_bind(ctx->g, sc, 0, bytes, true);
	pc->mode = SO_CS_SUM;
	if (op_dispatch(ctx, rec, p, bind, 6, pc, sizeof(*pc), rows * pc->nch, 256) < 0)
		return -1;
	pc->mode = SO_CS_SCAN;
	if (op_dispatch(ctx, rec, p, bind, 6, pc, sizeof(*pc), rows, 256) < 0)
		return -1;
	pc->mode = SO_CS_APPLY;
	return op_dispatch(ctx, rec, p, bind, 6, pc, sizeof(*pc), rows * pc->nch, 256);
}

/* Sorts of rows longer than SO_RANK_MAX: (key, index) pairs in scratch,
 * padded to a power of two, through a bitonic network, then the first k. */
static int sort_bitonic(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_pipeline *p,
			struct gpu_binding bind[6], struct sort_push *pc, bool grad)
{
	uint64_t rows = (uint64_t)pc->outer * pc->inner;
	uint64_t npow2 = 1, bytes;
	struct gpu_alloc *keys;

	while (npow2 < pc->n)
		npow2 <<= 1;
	bytes = rows * npow2 * 8;
	if (rows * npow2 > UINT32_MAX || bytes > ctx->g->props.limits.maxStorageBufferRange)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "sorting takes %llu bytes of keys, more than this device binds",
			       (unsigned long long)bytes);
	if (op_scratch_alloc(ctx, bytes, &keys) < 0)
		return -1;
	bind[5] = gpu_rec_bind(ctx->g, keys, 0, bytes, true);
	pc->npow2 = (uint32_t)npow2;
	pc->mode = SO_BT_INIT;
	if (op_dispatch(ctx, rec, p, bind, 6, pc, sizeof(*pc), rows * npow2, 256) < 0)
		return -1;
	pc->mode = SO_BT_STEP;
	for (uint64_t k = 2; k <= npow2; k <<= 1)
		for (uint64_t j = k / 2; j > 0; j >>= 1) {
			pc->bk = (uint32_t)k;
			pc->bj = (uint32_t)j;
			if (op_dispatch(ctx, rec, p, bind, 6, pc, sizeof(*pc), rows * npow2 / 2, 256) < 0)
				return -1;
		}
	if (grad) {
		pc->mode = SO_ZERO;
		if (op_dispatch(ctx, rec, p, bind, 6, pc, sizeof(*pc), rows * pc->n, 256) < 0)
			return -1;
	}
	pc->mode = grad ? SO_BT_GRAD : SO_BT_WRITE;
	return op_dispatch(ctx, rec, p, bind, 6, pc, sizeof(*pc), rows * pc->k, 256);
}

static int sort_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	static const struct gpu_alloc none;
	const struct op_tensor *x = &ctx->in[0];
	uint32_t code = ctx->def->code;
	struct sort_push pc = { .outer = 1, .inner = 1, .k = notes(ctx)->k };
	struct gpu_binding bind[6];
	const struct gpu_pipeline *p;
	unsigned axis = (unsigned)notes(ctx)->axis;

	if (x->count == 0 || ctx->out.count == 0)
		return 0;
	for (unsigned d = 0; d < axis; d++)
		pc.outer *= (uint32_t)x->shape[d];
	for (unsigned d = axis + 1; d < x->rank; d++)
		pc.inner *= (uint32_t)x->shape[d];
	pc.n = (uint32_t)x->shape[axis];
	if (code == CUMSUM)
		pc.flags = notes(ctx)->descending ? SO_REVERSE : 0;
	else
		pc.flags = (notes(ctx)->descending ? SO_DESCENDING : 0) |
			   (code == SORT_VALUES || code == TOPK_VALUES ? SO_VALUES : 0);
	for (unsigned b = 1; b < 6; b++)
		bind[b] = gpu_rec_bind(ctx->g, &none, 0, 0, false);
	if (op_pipeline(ctx, "sort", tdp_dtype_name(x->dtype), &p) < 0 || op_bind(ctx, x, false, &bind[0]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[code == SORT_INDICES || code == TOPK_INDICES ? 3 : 2]) < 0)
		return -1;
	if (code == SORT_GRAD && op_bind(ctx, &ctx->in[1], false, &bind[1]) < 0)
		return -1;
	if (code == CUMSUM) {
		if (pc.n > SO_CHUNK)
			return cumsum_chunked(ctx, rec, p, bind, &pc);
		pc.mode = SO_CUMSUM;
		return op_dispatch(ctx, rec, p, bind, 6, &pc, sizeof(pc), (uint64_t)pc.outer * pc.inner, 256);
	}
	if (pc.n > SO_RANK_MAX)
		return sort_bitonic(ctx, rec, p, bind, &pc, code == SORT_GRAD);
	pc.mode = code == SORT_GRAD ? SO_GRAD : SO_WRITE;
	return op_dispatch(ctx, rec, p, bind, 6, &pc, sizeof(pc), x->count, 256);
}

static const struct op_attr_spec sort_attrs[] = {
	{ "axis", ATTR_INT, false },
	{ "descending", ATTR_BOOL, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec topk_attrs[] = {
	{ "k", ATTR_INT, true },
	{ "axis", ATTR_INT, false },
	{ "largest", ATTR_BOOL, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec cumsum_attrs[] = {
	{ "axis", ATTR_INT, false },
	{ "reverse", ATTR_BOOL, false },
	{ NULL, 0, false },
};

const struct op_def op_defs_sort[] = {
	{ .name = "sort", .min_inputs = 1, .max_inputs = 1, .attrs = sort_attrs, .code = SORT_VALUES,
	  .infer = sort_infer, .record = sort_record, .backward = grad_sort },
	{ .name = "argsort", .min_inputs = 1, .max_inputs = 1, .attrs = sort_attrs, .code = SORT_INDICES,
	  .infer = sort_infer, .record = sort_record, .backward = grad_none },
	{ .name = "topk", .min_inputs = 1, .max_inputs = 1, .attrs = topk_attrs, .code = TOPK_VALUES,
	  .infer = sort_infer, .record = sort_record, .backward = grad_topk },
	{ .name = "topk_indices", .min_inputs = 1, .max_inputs = 1, .attrs = topk_attrs,
	  .code = TOPK_INDICES, .infer = sort_infer, .record = sort_record, .backward = grad_none },
	{ .name = "sort_grad", .min_inputs = 2, .max_inputs = 2, .attrs = sort_attrs, .code = SORT_GRAD,
	  .infer = sort_grad_infer, .record = sort_record },
	{ .name = "cumsum", .min_inputs = 1, .max_inputs = 1, .attrs = cumsum_attrs, .code = CUMSUM,
	  .infer = cumsum_infer, .record = sort_record, .backward = grad_cumsum },
	{ .name = NULL },
};
