/* Reductions over a set of axes: sum, mean, max, min, prod, var, std, and
 * argmax/argmin over one axis or all elements. The GPU work is the row
 * engine of reduce_engine.c (shader reduce.comp). */
#include <string.h>

#include "dtype.h"
#include "ops/grad_rules.h"
#include "ops/op.h"
#include "ops/reduce_engine.h"
#include "reduce_codes.h"
#include "status.h"

static const struct op_attr_spec red_attrs[] = {
	{ "axis", ATTR_INTS, false },
	{ "keepdims", ATTR_BOOL, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec var_attrs[] = {
	{ "axis", ATTR_INTS, false },
	{ "keepdims", ATTR_BOOL, false },
	{ "correction", ATTR_FLOAT, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec arg_attrs[] = {
	{ "axis", ATTR_INT, false },
	{ "keepdims", ATTR_BOOL, false },
	{ NULL, 0, false },
};

/* The op_def code: the shader's RED_* combine in the low byte, and for
 * mean, var and std (all RED_SUM underneath) what follows the sum. */
#define RED_MEAN_OF (1u << 8)
#define RED_VAR_OF (2u << 8)
#define RED_STD_OF (3u << 8)

static uint32_t red_combine(const struct op_ctx *ctx)
{
	return ctx->def->code & 0xffu;
}

static uint32_t red_then(const struct op_ctx *ctx)
{
	return ctx->def->code & ~0xffu;
}

static bool red_is_arg(const struct op_ctx *ctx)
{
	return red_combine(ctx) == RED_ARGMAX || red_combine(ctx) == RED_ARGMIN;
}

static bool red_float_only(const struct op_ctx *ctx)
{
	return red_then(ctx) != 0;
}

/* op_axis, plus axis 0 or -1 of a rank-0 tensor (which names no dim: the
 * caller must not index with it). */
static int red_axis(struct op_ctx *ctx, int64_t axis, unsigned rank)
{
	if (rank == 0 && (axis == 0 || axis == -1))
		return 0;
	return op_axis(ctx, axis, rank, "axis");
}

/* Mark the reduced axes from attrs.axis (absent: all of them). */
static int red_axes(struct op_ctx *ctx, bool *reduced)
{
	const struct op_attr_value *axis = op_attr(ctx, "axis");
	const struct op_tensor *x = &ctx->in[0];

	memset(reduced, 0, TDP_MAX_RANK * sizeof(*reduced));
	if (!axis->set) {
		for (unsigned d = 0; d < x->rank; d++)
			reduced[d] = true;
		return 0;
	}
	if (red_is_arg(ctx)) {
		int a = red_axis(ctx, axis->i, x->rank);

		if (a < 0)
			return -1;
		if (x->rank)
			reduced[a] = true;
		return 0;
	}
	for (unsigned k = 0; k < axis->nints; k++) {
		int a = red_axis(ctx, axis->ints[k], x->rank);

		if (a < 0)
			return -1;
		if (x->rank == 0)
			continue;   /* axis 0 or -1 of a scalar: nothing to reduce */
		if (reduced[a])
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "axis %d is listed twice", a);
		reduced[a] = true;
	}
	return 0;
}

static int red_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];
	const struct op_attr_value *corr = op_attr(ctx, "correction");
	struct red_note note;
	uint64_t M = 1, L = 1;
	bool keep = op_attr(ctx, "keepdims")->i != 0;

	if (red_float_only(ctx) ? !op_dtype_is_float(x->dtype)
				: !op_dtype_is_float(x->dtype) && x->dtype != TDP_DTYPE_I32)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "needs %s, not %s",
			       red_float_only(ctx) ? "f32, f16 or bf16" : "f32, f16, bf16 or i32",
			       tdp_dtype_name(x->dtype));
	if (corr && corr->set && !(corr->f >= 0))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "correction must be a number >= 0");
	if (red_axes(ctx, note.reduced) < 0)
		return -1;
	ctx->out.rank = 0;
	for (unsigned d = 0; d < x->rank; d++) {
		if (note.reduced[d])
			L *= x->shape[d];
		else
			M *= x->shape[d];
		if (!note.reduced[d] || keep)
			ctx->out.shape[ctx->out.rank++] = note.reduced[d] ? 1 : x->shape[d];
	}
	if ((red_combine(ctx) == RED_MAX || red_combine(ctx) == RED_MIN || red_is_arg(ctx)) && L == 0 && M > 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "cannot take %s over an empty axis (size 0)",
			       ctx->def->name);
	ctx->out.dtype = red_is_arg(ctx) ? TDP_DTYPE_I32 : x->dtype;
	ctx->priv.reduce = note;
	return 0;
}

static int red_record_op(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct op_tensor *x = &ctx->in[0];
	struct red_job job = { .op = red_combine(ctx) };
	struct red_note note;
	struct red_plan plan;

	note = ctx->priv.reduce;
	if (red_plan_make(ctx, x, note.reduced, &plan) < 0 || op_bind(ctx, &ctx->out, true, &job.out) < 0)
		return -1;
	if (red_is_arg(ctx))
		job.out_flag = RED_OUT_IDX;
	if (red_then(ctx) == RED_MEAN_OF) {
		job.post = RED_POST_DIV;
		job.div = (float)plan.L;
	}
	if (red_then(ctx) == RED_VAR_OF || red_then(ctx) == RED_STD_OF) {
		const struct op_attr_value *corr = op_attr(ctx, "correction");
		struct red_job mj = { .op = RED_SUM, .post = RED_POST_DIV, .div = (float)plan.L,
				      .out_flag = RED_OUT_F32 };
		struct gpu_alloc *mean;
		double div = (double)plan.L - (corr->set ? corr->f : 1.0);

		/* Two passes: the mean of each row, then its squared deviations. */
		if (op_scratch_alloc(ctx, red_align(ctx, plan.M * 4), &mean) < 0)
			return -1;
		mj.out = red_bind(ctx, mean, 0, plan.M * 4, true);
		if (red_record(ctx, rec, &plan, x, &mj) < 0)
			return -1;
		job.sqdev = true;
		job.mean = red_bind(ctx, mean, 0, plan.M * 4, false);
		job.post = red_then(ctx) == RED_STD_OF ? RED_POST_SQRT_DIV : RED_POST_DIV;
		job.div = div > 0 ? (float)div : 0.0f;
	}
	return red_record(ctx, rec, &plan, x, &job);
}

#define RED(n, c, at, bw) \
	{ .name = n, .min_inputs = 1, .max_inputs = 1, .attrs = at, .code = c, .infer = red_infer, \
	  .record = red_record_op, .backward = bw }

const struct op_def op_defs_reduce[] = {
	RED("sum", RED_SUM, red_attrs, grad_sum),
	RED("mean", RED_SUM | RED_MEAN_OF, red_attrs, grad_mean),
	RED("prod", RED_PROD, red_attrs, grad_prod),
	RED("max", RED_MAX, red_attrs, grad_max_min),
	RED("min", RED_MIN, red_attrs, grad_max_min),
	RED("var", RED_SUM | RED_VAR_OF, var_attrs, grad_var),
	RED("std", RED_SUM | RED_STD_OF, var_attrs, grad_std),
	RED("argmax", RED_ARGMAX, arg_attrs, NULL),
	RED("argmin", RED_ARGMIN, arg_attrs, NULL),
	{ .name = NULL },
};
