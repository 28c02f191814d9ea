/* Creation ops (no inputs): zeros, ones, full (shaders/create_fill.comp),
 * arange (create_arange.comp), rand and randn (create_random.comp: Philox
 * keyed by the seed, so the same seed gives the same bits), and cast
 * (cast.comp, one variant per pair of dtypes). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "ops/layout_kernels.h"
#include "ops/grad_rules.h"
#include "ops/op.h"
#include "status.h"

/* Mirrors the push block of shaders/create_random.comp. */
struct create_random_push {
	uint32_t n, key0, key1, normal;
};

static struct create_notes *notes(struct op_ctx *ctx)
{
	return &ctx->priv.create;
}

/* ---- zeros, ones, full ---- */

static int fill_infer(struct op_ctx *ctx)
{
	const struct op_attr_value *value = op_attr(ctx, "value");
	int dtype;

	if (layout_dtype_attr(ctx, "dtype", TDP_DTYPE_F32, &dtype) < 0 || layout_shape_attr(ctx, "shape") < 0)
		return -1;
	ctx->out.dtype = dtype;
	/* code: the value of zeros (0) and ones (1); full reads attr 'value' */
	notes(ctx)->bits = layout_value_bits(dtype, value ? value->f : (double)ctx->def->code);
	return 0;
}

static int fill_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	return layout_fill_record(ctx, rec, &ctx->out, notes(ctx)->bits);
}

/* ---- arange ---- */

static bool integral(double v)
{
	return isfinite(v) && v == trunc(v);
}

static int arange_infer(struct op_ctx *ctx)
{
	const struct op_attr_value *a_start = op_attr(ctx, "start"), *a_step = op_attr(ctx, "step");
	double start = a_start->set ? a_start->f : 0, stop = op_attr(ctx, "stop")->f;
	double step = a_step->set ? a_step->f : 1, count, last, lo, hi;
	struct create_arange_push *pc = &notes(ctx)->arange;
	bool ints = integral(start) && integral(stop) && integral(step);
	int dtype;

	if (!isfinite(start) || !isfinite(stop) || !isfinite(step))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "start, stop and step must be finite");
	if (step == 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "step must not be 0");
	if (layout_dtype_attr(ctx, "dtype", ints ? TDP_DTYPE_I32 : TDP_DTYPE_F32, &dtype) < 0)
		return -1;
	count = ceil((stop - start) / step);
	if (!(count > 0))
		count = 0;
	if (count > 4294967295.0)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "arange of %.0f elements is more than 2^32 - 1", count);
	memset(pc, 0, sizeof(*pc));
	pc->n = (uint32_t)count;
	if (!op_dtype_is_float(dtype) && pc->n) {
		if (!integral(start) || !integral(step))
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "an %s arange needs an integral start and step",
				       tdp_dtype_name(dtype));
		lo = dtype == TDP_DTYPE_U8 ? 0 : -2147483648.0;
		hi = dtype == TDP_DTYPE_U8 ? 255 : 2147483647.0;
		last = start + (count - 1) * step;
		if (start < lo || start > hi || last < lo || last > hi)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "arange values from %.0f to %.0f leave the range of %s",
				       start, last, tdp_dtype_name(dtype));
		/* The shader computes start + i * step modulo 2^32; every value
		 * is in range, so a step beyond int32 still lands exactly. */
		pc->istart = (int32_t)start;
		pc->istep = (int32_t)(uint32_t)(uint64_t)(int64_t)(pc->n > 1 ? step : 0);
	}
	pc->fstart = (float)start;
	pc->fstep = (float)step;
	ctx->out = (struct op_tensor){ .dtype = dtype, .rank = 1, .shape = { pc->n } };
	return 0;
}

static int arange_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct create_arange_push *pc = &notes(ctx)->arange;
	const struct gpu_pipeline *p;
	struct gpu_binding bind;

	if (op_pipeline(ctx, "create_arange", tdp_dtype_name(ctx->out.dtype), &p) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, &bind, 1, pc, sizeof(*pc), pc->n, 256);
}

/* ---- rand, randn ---- */

static int random_infer(struct op_ctx *ctx)
{
	int dtype;

	if (layout_dtype_attr(ctx, "dtype", TDP_DTYPE_F32, &dtype) < 0 || layout_shape_attr(ctx, "shape") < 0)
		return -1;
	if (!op_dtype_is_float(dtype))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "needs dtype f32, f16 or bf16, not %s", tdp_dtype_name(dtype));
	ctx->out.dtype = dtype;
	return 0;
}

static int random_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	uint64_t seed = (uint64_t)op_attr(ctx, "seed")->i;
	struct create_random_push pc;
	const struct gpu_pipeline *p;
	struct gpu_binding bind;

	if (layout_check_u32(ctx, ctx->out.count, "a result of") < 0)
		return -1;
	pc = (struct create_random_push){ (uint32_t)ctx->out.count, (uint32_t)seed, (uint32_t)(seed >> 32),
					  ctx->def->code };
	if (op_pipeline(ctx, "create_random", tdp_dtype_name(ctx->out.dtype), &p) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind) < 0)
		return -1;
	/* one invocation per Philox block of four elements */
	return op_dispatch(ctx, rec, p, &bind, 1, &pc, sizeof(pc), ((uint64_t)pc.n + 3) / 4, 256);
}

/* ---- cast ---- */

static int cast_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];
	int dtype;

	if (layout_dtype_attr(ctx, "dtype", x->dtype, &dtype) < 0)
		return -1;
	ctx->out = (struct op_tensor){ .dtype = dtype, .rank = x->rank };
	memcpy(ctx->out.shape, x->shape, sizeof(x->shape));
	return 0;
}

static int cast_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	uint32_t n = (uint32_t)ctx->out.count;
	const struct gpu_pipeline *p;
	struct gpu_binding bind[2];
	char variant[16];

	if (layout_check_u32(ctx, ctx->out.count, "a result of") < 0)
		return -1;
	snprintf(variant, sizeof(variant), "%s_%s", tdp_dtype_name(ctx->in[0].dtype),
		 tdp_dtype_name(ctx->out.dtype));
	if (op_pipeline(ctx, "cast", variant, &p) < 0 || op_bind(ctx, &ctx->in[0], false, &bind[0]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[1]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 2, &n, sizeof(n), n, 256);
}

static const struct op_attr_spec fill_attrs[] = {
	{ "shape", ATTR_INTS, true },
	{ "dtype", ATTR_STR, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec full_attrs[] = {
	{ "shape", ATTR_INTS, true },
	{ "value", ATTR_FLOAT, true },
	{ "dtype", ATTR_STR, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec arange_attrs[] = {
	{ "start", ATTR_FLOAT, false },
	{ "stop", ATTR_FLOAT, true },
	{ "step", ATTR_FLOAT, false },
	{ "dtype", ATTR_STR, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec random_attrs[] = {
	{ "shape", ATTR_INTS, true },
	{ "seed", ATTR_INT, true },
	{ "dtype", ATTR_STR, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec cast_attrs[] = {
	{ "dtype", ATTR_STR, true },
	{ NULL, 0, false },
};

const struct op_def op_defs_create[] = {
	{ .name = "zeros", .min_inputs = 0, .max_inputs = 0, .attrs = fill_attrs, .infer = fill_infer,
	  .record = fill_record },
	{ .name = "ones", .min_inputs = 0, .max_inputs = 0, .attrs = fill_attrs, .code = 1,
	  .infer = fill_infer, .record = fill_record },
	{ .name = "full", .min_inputs = 0, .max_inputs = 0, .attrs = full_attrs, .infer = fill_infer,
	  .record = fill_record },
	{ .name = "arange", .min_inputs = 0, .max_inputs = 0, .attrs = arange_attrs, .infer = arange_infer,
	  .record = arange_record },
	{ .name = "rand", .min_inputs = 0, .max_inputs = 0, .attrs = random_attrs, .infer = random_infer,
	  .record = random_record },
	{ .name = "randn", .min_inputs = 0, .max_inputs = 0, .attrs = random_attrs, .code = 1,
	  .infer = random_infer, .record = random_record },
	{ .name = "cast", .min_inputs = 1, .max_inputs = 1, .attrs = cast_attrs, .infer = cast_infer,
	  .record = cast_record, .backward = grad_cast },
	{ .name = NULL },
};
