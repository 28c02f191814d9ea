/* Layout ops: transpose, permute, reshape, slice, concat, stack, pad (all
 * through the strided copy of layout_kernels.c), gather / index_select
 * (shaders/layout_gather.comp) and one_hot (shaders/layout_onehot.comp).
 * They move bits, so every dtype is supported. */
#include <stddef.h>
#include <string.h>

#include "dtype.h"
#include "ops/layout_kernels.h"
#include "ops/grad_rules.h"
#include "ops/op.h"
#include "status.h"

static struct layout_notes *notes(struct op_ctx *ctx)
{
	return &ctx->priv.layout;
}

/* Mirrors the push block of shaders/layout_gather.comp. */
struct layout_gather_push {
	uint32_t n, inner, nidx, axis_n;
};

/* Mirrors the push block of shaders/layout_onehot.comp. */
struct layout_onehot_push {
	uint32_t n, classes, one;
};

/* ---- transpose, permute ---- */

static int permute_finish(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];

	ctx->out.dtype = x->dtype;
	ctx->out.rank = x->rank;
	for (unsigned d = 0; d < x->rank; d++)
		ctx->out.shape[d] = x->shape[notes(ctx)->perm[d]];
	return 0;
}

static int transpose_infer(struct op_ctx *ctx)
{
	const struct op_attr_value *a0 = op_attr(ctx, "dim0"), *a1 = op_attr(ctx, "dim1");
	unsigned rank = ctx->in[0].rank;
	int d0, d1;

	if (rank < 2 && !(a0->set && a1->set))
		return op_fail(ctx, TDP_INVALID_ARGUMENT,
			       "the input has rank %u; the default swaps the last two dims, so give dim0 and dim1",
			       rank);
	d0 = op_axis(ctx, a0->set ? a0->i : -2, rank, "dim0");
	if (d0 < 0)
		return -1;
	d1 = op_axis(ctx, a1->set ? a1->i : -1, rank, "dim1");
	if (d1 < 0)
		return -1;
	for (unsigned d = 0; d < rank; d++)
		notes(ctx)->perm[d] = d;
	notes(ctx)->perm[d0] = (unsigned)d1;
	notes(ctx)->perm[d1] = (unsigned)d0;
	return permute_finish(ctx);
}

static int permute_infer(struct op_ctx *ctx)
{
	const struct op_attr_value *dims = op_attr(ctx, "dims");
	unsigned rank = ctx->in[0].rank;
	bool seen[TDP_MAX_RANK] = { false };

	if (dims->nints != rank)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr 'dims' has %u entries for an input of rank %u",
			       dims->nints, rank);
	for (unsigned d = 0; d < rank; d++) {
		int a = op_axis(ctx, dims->ints[d], rank, "dims entry");

		if (a < 0)
			return -1;
		if (seen[a])
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr 'dims' names dim %d twice", a);
		seen[a] = true;
		notes(ctx)->perm[d] = (unsigned)a;
	}
	return permute_finish(ctx);
}

static int permute_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct op_tensor *x = &ctx->in[0];
	struct layout_copy c = { .rank = x->rank };
	uint64_t st[TDP_MAX_RANK];

	layout_strides(x, st);
	layout_strides(&ctx->out, c.dstride);
	for (unsigned d = 0; d < x->rank; d++) {
		c.shape[d] = ctx->out.shape[d];
		c.sstride[d] = st[notes(ctx)->perm[d]];
	}
	return layout_copy_record(ctx, rec, x, &ctx->out, &c);
}

/* ---- reshape ---- */

static int reshape_infer(struct op_ctx *ctx)
{
	const struct op_attr_value *s = op_attr(ctx, "shape");
	uint64_t known = 1;
	int infer_at = -1;

	for (unsigned d = 0; d < s->nints; d++) {
		if (s->ints[d] == -1 && infer_at < 0) {
			infer_at = (int)d;
			continue;
		}
		if (s->ints[d] < 0)
			return op_fail(ctx, TDP_INVALID_ARGUMENT,
				       "attr 'shape'[%u] is %lld; dims are >= 0, with at most one -1",
				       d, (long long)s->ints[d]);
		if (__builtin_mul_overflow(known, (uint64_t)s->ints[d], &known))
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "attr 'shape' has more than 2^64 elements");
		ctx->out.shape[d] = (uint64_t)s->ints[d];
	}
	if (infer_at >= 0) {
		if (known == 0 || ctx->in[0].count % known)
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "cannot infer the -1 of attr 'shape' for %llu elements",
				       (unsigned long long)ctx->in[0].count);
		ctx->out.shape[infer_at] = ctx->in[0].count / known;
		known = ctx->in[0].count;
	}
	if (known != ctx->in[0].count)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "attr 'shape' has %llu elements, the input %llu",
			       (unsigned long long)known, (unsigned long long)ctx->in[0].count);
	ctx->out.rank = s->nints;
	ctx->out.dtype = ctx->in[0].dtype;
	/* Tensors are always contiguous, so the result is the input's bytes. */
	ctx->view = true;
	return 0;
}

static int reshape_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	struct layout_copy c = { .rank = 1, .shape = { ctx->out.count }, .sstride = { 1 }, .dstride = { 1 } };

	return layout_copy_record(ctx, rec, &ctx->in[0], &ctx->out, &c);
}

/* ---- slice ---- */

/* Python's clamping of index `v` into [0, n]. */
static int64_t clamp_index(int64_t v, int64_t n)
{
	if (v < 0)
		v = v < -n ? 0 : v + n;
	return v > n ? n : v;
}

static int slice_infer(struct op_ctx *ctx)
{
	const struct op_attr_value *starts = op_attr(ctx, "starts"), *ends = op_attr(ctx, "ends");
	const struct op_attr_value *steps = op_attr(ctx, "steps"), *axes = op_attr(ctx, "axes");
	const struct op_tensor *x = &ctx->in[0];
	struct layout_notes *nt = notes(ctx);
	bool seen[TDP_MAX_RANK] = { false };
	unsigned k = starts->nints;

	if (ends->nints != k || (steps->set && steps->nints != k) || (axes->set && axes->nints != k))
		return op_fail(ctx, TDP_INVALID_ARGUMENT,
			       "attrs 'starts', 'ends' (and 'steps', 'axes' when given) must have the same length");
	if (!axes->set && k > x->rank)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "%u starts for an input of rank %u", k, x->rank);
	ctx->out.dtype = x->dtype;
	ctx->out.rank = x->rank;
	for (unsigned d = 0; d < x->rank; d++) {
		ctx->out.shape[d] = x->shape[d];
		nt->start[d] = 0;
		nt->step[d] = 1;
	}
	for (unsigned j = 0; j < k; j++) {
		int a = axes->set ? op_axis(ctx, axes->ints[j], x->rank, "axes entry") : (int)j;
		int64_t n, step = steps->set ? steps->ints[j] : 1, b, e;

		if (a < 0)
			return -1;
		if (x->rank == 0)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "cannot slice a rank-0 tensor");
		n = (int64_t)x->shape[a];
		if (seen[a])
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr 'axes' names dim %d twice", a);
		seen[a] = true;
		if (step <= 0)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "steps must be > 0, not %lld (dim %d)",
				       (long long)step, a);
		b = clamp_index(starts->ints[j], n);
		e = clamp_index(ends->ints[j], n);
		nt->start[a] = (uint64_t)b;
		nt->step[a] = (uint64_t)step;
		ctx->out.shape[a] = e > b ? (uint64_t)((e - b - 1) / step + 1) : 0;
	}
	return 0;
}

static int slice_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct op_tensor *x = &ctx->in[0];
	struct layout_copy c = { .rank = x->rank };
	uint64_t st[TDP_MAX_RANK];

	layout_strides(x, st);
	layout_strides(&ctx->out, c.dstride);
	for (unsigned d = 0; d < x->rank; d++) {
		c.shape[d] = ctx->out.shape[d];
		c.sstride[d] = st[d] * notes(ctx)->step[d];
		c.sbase += st[d] * notes(ctx)->start[d];
	}
	return layout_copy_record(ctx, rec, x, &ctx->out, &c);
}

/* ---- concat, stack ---- */

static int same_dtypes(struct op_ctx *ctx)
{
	for (unsigned k = 1; k < ctx->ninputs; k++)
		if (ctx->in[k].dtype != ctx->in[0].dtype)
			return op_fail(ctx, TDP_DTYPE_MISMATCH, "input %u is %s, input 0 %s", k,
				       tdp_dtype_name(ctx->in[k].dtype), tdp_dtype_name(ctx->in[0].dtype));
	return 0;
}

static int concat_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];
	int axis;

	if (same_dtypes(ctx) < 0)
		return -1;
	if (x->rank == 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "cannot concatenate rank-0 tensors (use stack)");
	axis = op_axis(ctx, op_attr(ctx, "axis")->i, x->rank, "axis");
	if (axis < 0)
		return -1;
	ctx->out = (struct op_tensor){ .dtype = x->dtype, .rank = x->rank };
	memcpy(ctx->out.shape, x->shape, sizeof(x->shape));
	ctx->out.shape[axis] = 0;
	for (unsigned k = 0; k < ctx->ninputs; k++) {
		const struct op_tensor *t = &ctx->in[k];

		if (t->rank != x->rank)
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "input %u has rank %u, input 0 rank %u", k,
				       t->rank, x->rank);
		for (unsigned d = 0; d < x->rank; d++)
			if ((int)d != axis && t->shape[d] != x->shape[d])
				return op_fail(ctx, TDP_SHAPE_MISMATCH,
					       "input %u has %llu in dim %u where input 0 has %llu", k,
					       (unsigned long long)t->shape[d], d, (unsigned long long)x->shape[d]);
		if (__builtin_add_overflow(ctx->out.shape[axis], t->shape[axis], &ctx->out.shape[axis]))
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "the result's dim %d overflows", axis);
	}
	notes(ctx)->axis = (unsigned)axis;
	return 0;
}

/* One copy per input into its region of the result. */
static int concat_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	unsigned axis = notes(ctx)->axis;
	uint64_t ost[TDP_MAX_RANK], offset = 0;

	layout_strides(&ctx->out, ost);
	for (unsigned k = 0; k < ctx->ninputs; k++) {
		const struct op_tensor *t = &ctx->in[k];
		struct layout_copy c = { .rank = t->rank, .dbase = offset * ost[axis] };

		memcpy(c.shape, t->shape, sizeof(c.shape));
		memcpy(c.dstride, ost, sizeof(ost));
		layout_strides(t, c.sstride);
		if (layout_copy_record(ctx, rec, t, &ctx->out, &c) < 0)
			return -1;
		offset += t->shape[axis];
	}
	return 0;
}

static int stack_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];
	int axis;

	if (same_dtypes(ctx) < 0)
		return -1;
	if (x->rank >= TDP_MAX_RANK)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "the result would have rank %u; the limit is %d",
			       x->rank + 1, TDP_MAX_RANK);
	axis = op_axis(ctx, op_attr(ctx, "axis")->i, x->rank + 1, "axis");
	if (axis < 0)
		return -1;
	for (unsigned k = 1; k < ctx->ninputs; k++)
		if (ctx->in[k].rank != x->rank || memcmp(ctx->in[k].shape, x->shape, x->rank * sizeof(x->shape[0])))
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "input %u's shape differs from input 0's", k);
	ctx->out = (struct op_tensor){ .dtype = x->dtype, .rank = x->rank + 1 };
	for (unsigned d = 0, s = 0; d < ctx->out.rank; d++)
		ctx->out.shape[d] = (int)d == axis ? ctx->ninputs : x->shape[s++];
	notes(ctx)->axis = (unsigned)axis;
	return 0;
}

static int stack_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	unsigned axis = notes(ctx)->axis;
	uint64_t ost[TDP_MAX_RANK];

	layout_strides(&ctx->out, ost);
	for (unsigned k = 0; k < ctx->ninputs; k++) {
		const struct op_tensor *t = &ctx->in[k];
		struct layout_copy c = { .rank = t->rank, .dbase = k * ost[axis] };

		memcpy(c.shape, t->shape, sizeof(c.shape));
		layout_strides(t, c.sstride);
		for (unsigned d = 0; d < t->rank; d++)
			c.dstride[d] = ost[d < axis ? d : d + 1];
		if (layout_copy_record(ctx, rec, t, &ctx->out, &c) < 0)
			return -1;
	}
	return 0;
}

/* ---- pad ---- */

static int pad_infer(struct op_ctx *ctx)
{
	const struct op_attr_value *pads = op_attr(ctx, "pads"), *axes = op_attr(ctx, "axes");
	const struct op_attr_value *mode = op_attr(ctx, "mode");
	const struct op_tensor *x = &ctx->in[0];
	struct layout_notes *nt = notes(ctx);
	bool seen[TDP_MAX_RANK] = { false };
	unsigned k = pads->nints / 2;

	if (mode->set && strcmp(mode->s, "constant"))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "mode '%s' is not supported (only \"constant\")", mode->s);
	if (pads->nints % 2)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr 'pads' needs (before, after) pairs, got %u numbers",
			       pads->nints);
	if (axes->set && axes->nints != k)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr 'axes' has %u entries for %u pairs of pads",
			       axes->nints, k);
	if (!axes->set && k > x->rank)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "%u pairs of pads for an input of rank %u", k, x->rank);
	ctx->out = (struct op_tensor){ .dtype = x->dtype, .rank = x->rank };
	memcpy(ctx->out.shape, x->shape, sizeof(x->shape));
	memset(nt->start, 0, sizeof(nt->start));
	for (unsigned j = 0; j < k; j++) {
		int a = axes->set ? op_axis(ctx, axes->ints[j], x->rank, "axes entry") : (int)(x->rank - k + j);
		int64_t before = pads->ints[2 * j], after = pads->ints[2 * j + 1];

		if (a < 0)
			return -1;
		if (x->rank == 0)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "cannot pad a rank-0 tensor");
		if (seen[a])
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr 'axes' names dim %d twice", a);
		seen[a] = true;
		if (before < 0 || after < 0)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "pads must be >= 0 (dim %d has %lld, %lld)", a,
				       (long long)before, (long long)after);
		if (__builtin_add_overflow(ctx->out.shape[a], (uint64_t)before, &ctx->out.shape[a]) ||
		    __builtin_add_overflow(ctx->out.shape[a], (uint64_t)after, &ctx->out.shape[a]))
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "the padded dim %d overflows", a);
		nt->start[a] = (uint64_t)before;
	}
	nt->bits = layout_value_bits(x->dtype, op_attr(ctx, "value")->f);
	return 0;
}

/* Fill the whole result with the value, then copy the input into its interior. */
static int pad_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct op_tensor *x = &ctx->in[0];
	struct layout_copy c = { .rank = x->rank };
	uint64_t ost[TDP_MAX_RANK];

	if (layout_fill_record(ctx, rec, &ctx->out, notes(ctx)->bits) < 0)
		return -1;
	layout_strides(&ctx->out, ost);
	memcpy(c.shape, x->shape, sizeof(c.shape));
	memcpy(c.dstride, ost, sizeof(ost));
	layout_strides(x, c.sstride);
	for (unsigned d = 0; d < x->rank; d++)
		c.dbase += notes(ctx)->start[d] * ost[d];
	return layout_copy_record(ctx, rec, x, &ctx->out, &c);
}

/* ---- gather / index_select, one_hot ---- */

static int gather_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0], *idx = &ctx->in[1];
	unsigned r = 0;
	int axis;

	if (idx->dtype != TDP_DTYPE_I32)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "input 1 (the indices) must be i32, not %s",
			       tdp_dtype_name(idx->dtype));
	if (x->rank == 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "cannot index a rank-0 tensor");
	axis = op_axis(ctx, op_attr(ctx, "axis")->i, x->rank, "axis");
	if (axis < 0)
		return -1;
	if (x->rank - 1 + idx->rank > TDP_MAX_RANK)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "the result would have rank %u; the limit is %d",
			       x->rank - 1 + idx->rank, TDP_MAX_RANK);
	ctx->out = (struct op_tensor){ .dtype = x->dtype };
	for (int d = 0; d < axis; d++)
		ctx->out.shape[r++] = x->shape[d];
	for (unsigned d = 0; d < idx->rank; d++)
		ctx->out.shape[r++] = idx->shape[d];
	for (unsigned d = (unsigned)axis + 1; d < x->rank; d++)
		ctx->out.shape[r++] = x->shape[d];
	ctx->out.rank = r;
	notes(ctx)->axis = (unsigned)axis;
	return 0;
}

static int gather_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct op_tensor *x = &ctx->in[0], *idx = &ctx->in[1];
	unsigned axis = notes(ctx)->axis;
	struct layout_gather_push pc = { .inner = 1 };
	const struct gpu_pipeline *p;
	struct gpu_binding bind[3];
	uint64_t inner = 1;

	for (unsigned d = axis + 1; d < x->rank; d++)
		inner *= x->shape[d];
	if (layout_check_u32(ctx, ctx->out.count, "a result of") < 0 ||
	    layout_check_u32(ctx, idx->count, "an index count of") < 0)
		return -1;
	if (x->shape[axis] > INT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "the indexed dim is longer than i32 indices reach");
	pc.n = (uint32_t)ctx->out.count;
	pc.inner = (uint32_t)inner;
	pc.nidx = (uint32_t)idx->count;
	pc.axis_n = (uint32_t)x->shape[axis];
	/* 32-bit elements in whole vec4s per inner block move as vec4s (on the
	 * H100 a batch of [16384, 784] rows took 83 us element by element). */
	if (tdp_dtype_size(x->dtype) == 4 && inner % 4 == 0) {
		pc.inner /= 4;
		pc.n /= 4;
		if (op_pipeline(ctx, "layout_gather4", "f32", &p) < 0)
			return -1;
	} else if (op_pipeline(ctx, "layout_gather", tdp_dtype_name(x->dtype), &p) < 0) {
		return -1;
	}
	if (op_bind(ctx, x, false, &bind[0]) < 0 || op_bind(ctx, idx, false, &bind[1]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[2]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 3, &pc, sizeof(pc), pc.n, 256);
}

/* embedding(weight [V, D], indices): weight's rows at the indices, shape
 * indices.shape + [D]: gather on axis 0 (its kernel; the gradient is
 * index_add's sorted one). */
static int embedding_infer(struct op_ctx *ctx)
{
	const struct op_tensor *w = &ctx->in[0], *idx = &ctx->in[1];

	if (w->rank != 2)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "the table (input 0) must be [num_embeddings, dim], not rank %u",
			       w->rank);
	if (idx->dtype != TDP_DTYPE_I32)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "input 1 (the indices) must be i32, not %s",
			       tdp_dtype_name(idx->dtype));
	if (idx->rank + 1 > TDP_MAX_RANK)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "the result would have rank %u; the limit is %d",
			       idx->rank + 1, TDP_MAX_RANK);
	ctx->out = (struct op_tensor){ .dtype = w->dtype, .rank = idx->rank + 1 };
	memcpy(ctx->out.shape, idx->shape, sizeof(idx->shape[0]) * idx->rank);
	ctx->out.shape[idx->rank] = w->shape[1];
	notes(ctx)->axis = 0;
	return 0;
}

static int one_hot_infer(struct op_ctx *ctx)
{
	const struct op_tensor *idx = &ctx->in[0];
	int64_t classes = op_attr(ctx, "num_classes")->i;
	int dtype;

	if (idx->dtype != TDP_DTYPE_I32)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "the indices must be i32, not %s", tdp_dtype_name(idx->dtype));
	if (classes < 0 || classes > INT32_MAX)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "num_classes must be in [0, 2^31), not %lld",
			       (long long)classes);
	if (idx->rank >= TDP_MAX_RANK)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "the result would have rank %u; the limit is %d",
			       idx->rank + 1, TDP_MAX_RANK);
	if (layout_dtype_attr(ctx, "dtype", TDP_DTYPE_F32, &dtype) < 0)
		return -1;
	ctx->out = (struct op_tensor){ .dtype = dtype, .rank = idx->rank + 1 };
	memcpy(ctx->out.shape, idx->shape, sizeof(idx->shape));
	ctx->out.shape[idx->rank] = (uint64_t)classes;
	notes(ctx)->bits = layout_value_bits(dtype, 1.0);
	return 0;
}

static int one_hot_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	struct layout_onehot_push pc;
	const struct gpu_pipeline *p;
	struct gpu_binding bind[2];

	if (layout_check_u32(ctx, ctx->out.count, "a result of") < 0)
		return -1;
	pc = (struct layout_onehot_push){ (uint32_t)ctx->out.count,
					  (uint32_t)ctx->out.shape[ctx->out.rank - 1], notes(ctx)->bits };
	if (op_pipeline(ctx, "layout_onehot", tdp_dtype_name(ctx->out.dtype), &p) < 0 ||
	    op_bind(ctx, &ctx->in[0], false, &bind[0]) < 0 || op_bind(ctx, &ctx->out, true, &bind[1]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 2, &pc, sizeof(pc), pc.n, 256);
}

static const struct op_attr_spec transpose_attrs[] = {
	{ "dim0", ATTR_INT, false },
	{ "dim1", ATTR_INT, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec permute_attrs[] = {
	{ "dims", ATTR_INTS, true },
	{ NULL, 0, false },
};

static const struct op_attr_spec reshape_attrs[] = {
	{ "shape", ATTR_INTS, true },
	{ NULL, 0, false },
};

static const struct op_attr_spec slice_attrs[] = {
	{ "starts", ATTR_INTS, true },
	{ "ends", ATTR_INTS, true },
	{ "steps", ATTR_INTS, false },
	{ "axes", ATTR_INTS, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec axis_attrs[] = {
	{ "axis", ATTR_INT, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec pad_attrs[] = {
	{ "pads", ATTR_INTS, true },
	{ "axes", ATTR_INTS, false },
	{ "value", ATTR_FLOAT, false },
	{ "mode", ATTR_STR, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec one_hot_attrs[] = {
	{ "num_classes", ATTR_INT, true },
	{ "dtype", ATTR_STR, false },
	{ NULL, 0, false },
};

const struct op_def op_defs_layout[] = {
	{ .name = "transpose", .min_inputs = 1, .max_inputs = 1, .attrs = transpose_attrs,
	  .infer = transpose_infer, .record = permute_record, .backward = grad_transpose },
	{ .name = "permute", .min_inputs = 1, .max_inputs = 1, .attrs = permute_attrs,
	  .infer = permute_infer, .record = permute_record, .backward = grad_permute },
	{ .name = "reshape", .min_inputs = 1, .max_inputs = 1, .attrs = reshape_attrs,
	  .infer = reshape_infer, .record = reshape_record, .backward = grad_reshape },
	{ .name = "slice", .min_inputs = 1, .max_inputs = 1, .attrs = slice_attrs, .infer = slice_infer,
	  .record = slice_record, .backward = grad_slice },
	{ .name = "concat", .min_inputs = 1, .max_inputs = OP_MAX_INPUTS, .attrs = axis_attrs,
	  .infer = concat_infer, .record = concat_record, .backward = grad_concat },
	{ .name = "stack", .min_inputs = 1, .max_inputs = OP_MAX_INPUTS, .attrs = axis_attrs,
	  .infer = stack_infer, .record = stack_record, .backward = grad_stack },
	{ .name = "pad", .min_inputs = 1, .max_inputs = 1, .attrs = pad_attrs, .infer = pad_infer,
	  .record = pad_record, .backward = grad_pad },
	{ .name = "gather", .min_inputs = 2, .max_inputs = 2, .attrs = axis_attrs, .infer = gather_infer,
	  .record = gather_record, .backward = grad_gather },
	{ .name = "index_select", .min_inputs = 2, .max_inputs = 2, .attrs = axis_attrs,
	  .infer = gather_infer, .record = gather_record, .backward = grad_gather },
	{ .name = "embedding", .min_inputs = 2, .max_inputs = 2, .infer = embedding_infer,
	  .record = gather_record, .backward = grad_embedding },
	{ .name = "one_hot", .min_inputs = 1, .max_inputs = 1, .attrs = one_hot_attrs,
	  .infer = one_hot_infer, .record = one_hot_record },
	{ .name = NULL },
};
