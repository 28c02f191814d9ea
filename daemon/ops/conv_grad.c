/* The conv_grad family: the gradients of the conv family, as ops that the
 * backward rules of grad_conv.c emit (and clients may run directly).
 * conv2d_grad_input and conv2d_grad_weight (shader conv2d_grad.comp),
 * max_pool2d_grad and avg_pool2d_grad (pool2d_grad.comp). Each takes the
 * forward's attributes plus the shape the forward's input (or weight) had,
 * since a strided forward maps several input sizes to one output size. All
 * sums are f32 in a fixed order: results are deterministic. */
#include <string.h>

#include "conv_codes.h"
#include "dtype.h"
#include "gpu/device.h"
#include "ops/conv_igemm.h"
#include "ops/conv_shape.h"
#include "ops/op.h"
#include "status.h"

/* (n, oy, ox) positions one conv2d_grad_weight invocation sums: Mesa 22.3's
 * lavapipe ends an invocation's loops after 65535 iterations in all. */
#define WGRAD_CHUNK 4096u
/* A small weight's sum is cut into chunks down to this many positions
 * until there are this many invocations (convg_weight_record). */
#define WGRAD_MIN_CHUNK 256u
#define WGRAD_WANT_INVOCATIONS 32768u
/* Loop iterations a shader invocation may run on lavapipe (see above). */
#define LOOP_BUDGET 60000u

/* A 4-int shape attr (`input_shape`, `weight_shape`) into ret[4]; each dim
 * below CONV_MAX_DIM and the product below 2^32. */
static int attr_shape4(struct op_ctx *ctx, const char *name, uint64_t ret[4])
{
	const struct op_attr_value *v = op_attr(ctx, name);
	uint64_t count = 1;

	if (v->nints != 4)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s' must be 4 integers, not %u", name,
			       v->nints);
	for (int d = 0; d < 4; d++) {
		if (v->ints[d] < 0 || v->ints[d] >= (int64_t)CONV_MAX_DIM)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s'[%d] must be from 0 to %u, not %lld",
				       name, d, CONV_MAX_DIM - 1, (long long)v->ints[d]);
		ret[d] = (uint64_t)v->ints[d];
		count *= ret[d];
	}
	if (count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "attr '%s' describes more than 2^32 elements", name);
	return 0;
}

/* A float rank-4 input `k` of at most 2^32 elements with dims below CONV_MAX_DIM. */
static int check_nchw(struct op_ctx *ctx, unsigned k, const char *what)
{
	const struct op_tensor *t = &ctx->in[k];

	if (!op_dtype_is_float(t->dtype))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "%s needs f32, f16 or bf16, not %s", what,
			       tdp_dtype_name(t->dtype));
	if (k > 0 && t->dtype != ctx->in[0].dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "%s is %s but input 0 is %s", what,
			       tdp_dtype_name(t->dtype), tdp_dtype_name(ctx->in[0].dtype));
	if (t->rank != 4)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "%s must have rank 4, not %u", what, t->rank);
	for (int d = 0; d < 4; d++)
		if (t->shape[d] >= CONV_MAX_DIM)
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "%s has a dimension of %llu; the limit is %u",
				       what, (unsigned long long)t->shape[d], CONV_MAX_DIM - 1);
	if (t->count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "%s has more than 2^32 elements", what);
	return 0;
}

/* grad_out (input `k`) must be [n, c, oh, ow]: the forward's result. */
static int check_grad_out(struct op_ctx *ctx, unsigned k, uint64_t n, uint64_t c, uint64_t oh, uint64_t ow)
{
	const uint64_t *s = ctx->in[k].shape;

	if (s[0] != n || s[1] != c || s[2] != oh || s[3] != ow)
		return op_fail(ctx, TDP_SHAPE_MISMATCH,
			       "grad_out (input %u) is [%llu, %llu, %llu, %llu]; the forward's result is "
			       "[%llu, %llu, %llu, %llu]", k, (unsigned long long)s[0],
			       (unsigned long long)s[1], (unsigned long long)s[2], (unsigned long long)s[3],
			       (unsigned long long)n, (unsigned long long)c, (unsigned long long)oh,
			       (unsigned long long)ow);
	return 0;
}

static const struct op_attr_spec convg_input_attrs[] = {
	{ "stride", ATTR_INTS, false },
	{ "padding", ATTR_INTS, false },
	{ "dilation", ATTR_INTS, false },
	{ "groups", ATTR_INT, false },
	{ "input_shape", ATTR_INTS, true },
	{ "algo", ATTR_STR, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec convg_weight_attrs[] = {
	{ "stride", ATTR_INTS, false },
	{ "padding", ATTR_INTS, false },
	{ "dilation", ATTR_INTS, false },
	{ "groups", ATTR_INT, false },
	{ "weight_shape", ATTR_INTS, true },
	{ "algo", ATTR_STR, false },
	{ NULL, 0, false },
};

/* The forward's geometry from x's shape xs and w's shape ws, checked as
 * conv2d checks it; grad_out (input gk) must match the result. */
static int convg_plan(struct op_ctx *ctx, const uint64_t xs[4], const uint64_t ws[4], unsigned gk,
		      struct convg_push *pc)
{
	const struct op_attr_value *gv = op_attr(ctx, "groups");
	uint32_t s[2], p[2], d[2], groups;
	uint64_t oh = 0, ow = 0;

	if (conv_attr_pair(ctx, "stride", 1, 1, s) < 0 || conv_attr_pair(ctx, "padding", 0, 0, p) < 0 ||
	    conv_attr_pair(ctx, "dilation", 1, 1, d) < 0)
		return -1;
	if (gv->set && (gv->i < 1 || gv->i >= (int64_t)CONV_MAX_DIM))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr 'groups' must be at least 1 (got %lld)",
			       (long long)gv->i);
	groups = gv->set ? (uint32_t)gv->i : 1;
	if (xs[1] % groups || ws[0] % groups || ws[1] * groups != xs[1])
		return op_fail(ctx, TDP_SHAPE_MISMATCH,
			       "weight [%llu, %llu, ...] does not fit %llu input channels in %u groups",
			       (unsigned long long)ws[0], (unsigned long long)ws[1], (unsigned long long)xs[1],
			       groups);
	if (conv_out_dim(ctx, "height", xs[2], ws[2], s[0], p[0], d[0], &oh) < 0 ||
	    conv_out_dim(ctx, "width", xs[3], ws[3], s[1], p[1], d[1], &ow) < 0 ||
	    check_grad_out(ctx, gk, xs[0], ws[0], oh, ow) < 0)
		return -1;
	*pc = (struct convg_push){
		.n = (uint32_t)xs[0], .c = (uint32_t)xs[1], .h = (uint32_t)xs[2], .w = (uint32_t)xs[3],
		.oc = (uint32_t)ws[0], .oh = (uint32_t)oh, .ow = (uint32_t)ow,
		.kh = (uint32_t)ws[2], .kw = (uint32_t)ws[3],
		.sh = s[0], .sw = s[1], .ph = p[0], .pw = p[1], .dh = d[0], .dw = d[1],
		.cpg = (uint32_t)ws[1], .opg = (uint32_t)(ws[0] / groups),
	};
	return 0;
}

static void set_out(struct op_ctx *ctx, const uint64_t shape[4])
{
	ctx->out.dtype = ctx->in[0].dtype;
	ctx->out.rank = 4;
	memcpy(ctx->out.shape, shape, 4 * sizeof(*shape));
}

/* Whether the direct input-gradient kernel would loop too long. */
static bool input_wide(const struct convg_push *pc)
{
	return (uint64_t)pc->opg * pc->kh * (pc->kw + 1u) > LOOP_BUDGET;
}

/* Whether `mode` (CONVI_DGRAD, CONVI_WGRAD) takes the implicit GEMM: attr
 * algo, or "auto"'s choice (conv_igemm_wanted). */
static bool use_implicit(struct op_ctx *ctx, int mode, const struct convg_push *pc, bool wide)
{
	enum conv_algo algo = CONV_ALGO_AUTO;

	(void)conv_attr_algo(ctx, false, &algo); /* checked by infer */
	if (algo == CONV_ALGO_DIRECT)
		return false;
	return algo == CONV_ALGO_IMPLICIT || conv_igemm_wanted(ctx, mode, pc, wide);
}

/* conv2d_grad_input(grad_out, weight) -> dX of input_shape. */
static int convg_input_infer(struct op_ctx *ctx)
{
	struct convg_push *pc = &ctx->priv.conv_grad;
	uint64_t xs[4];
	enum conv_algo algo;

	if (check_nchw(ctx, 0, "grad_out (input 0)") < 0 || check_nchw(ctx, 1, "weight (input 1)") < 0 ||
	    attr_shape4(ctx, "input_shape", xs) < 0 || convg_plan(ctx, xs, ctx->in[1].shape, 0, pc) < 0 ||
	    conv_attr_algo(ctx, false, &algo) < 0)
		return -1;
	/* Each invocation of the direct kernel loops over the taps of every
	 * output channel of its group; the implicit GEMM takes longer sums. */
	if (input_wide(pc) && (algo == CONV_ALGO_DIRECT || !conv_igemm_usable(ctx, CONVI_DGRAD, pc)))
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "%u output channels per group with a %ux%u kernel: the input gradient "
			       "supports at most %u channel-taps directly and %llu by the implicit GEMM", pc->opg,
			       pc->kh, pc->kw, LOOP_BUDGET, OP_LOOP_BUDGET * 16ull);
	pc->mode = CONVG_INPUT;
	set_out(ctx, xs);
	return 0;
}

static int convg_input_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	struct convg_push pc;
	const struct gpu_pipeline *p;
	struct gpu_binding bind[4];

	pc = ctx->priv.conv_grad;
	pc.total = (uint32_t)ctx->out.count;
	if (pc.total == 0)
		return 0;
	if (use_implicit(ctx, CONVI_DGRAD, &pc, input_wide(&pc)))
		return conv_igemm_record(ctx, rec, CONVI_DGRAD, &pc, &ctx->in[1], &ctx->in[0], NULL, NULL);
	/* Binding 2 (the partials) is unused in this mode: bind the result. */
	if (op_pipeline(ctx, "conv2d_grad", tdp_dtype_name(ctx->out.dtype), &p) < 0 ||
	    op_bind(ctx, &ctx->in[0], false, &bind[0]) < 0 || op_bind(ctx, &ctx->in[1], false, &bind[1]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[2]) < 0 || op_bind(ctx, &ctx->out, true, &bind[3]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 4, &pc, sizeof(pc), pc.total, 256);
}

/* conv2d_grad_weight(x, grad_out) -> dW of weight_shape. */
static int convg_weight_infer(struct op_ctx *ctx)
{
	struct convg_push *pc = &ctx->priv.conv_grad;
	uint64_t ws[4];
	enum conv_algo algo;

	if (check_nchw(ctx, 0, "x (input 0)") < 0 || check_nchw(ctx, 1, "grad_out (input 1)") < 0 ||
	    attr_shape4(ctx, "weight_shape", ws) < 0 || convg_plan(ctx, ctx->in[0].shape, ws, 1, pc) < 0 ||
	    conv_attr_algo(ctx, false, &algo) < 0)
		return -1;
	pc->mode = CONVG_WPART;
	set_out(ctx, ws);
	return 0;
}

static int convg_weight_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	struct convg_push pc;
	const struct gpu_pipeline *p;
	struct gpu_binding bind[4];
	struct op_tensor part = { .dtype = TDP_DTYPE_F32, .rank = 1 };
	uint64_t npos, wcount = ctx->out.count, nchunks, chunk = WGRAD_CHUNK;
	uint64_t range = ctx->g->props.limits.maxStorageBufferRange;
	bool implicit;

	pc = ctx->priv.conv_grad;
	npos = (uint64_t)pc.n * pc.oh * pc.ow;
	if (wcount == 0)
		return 0;
	nchunks = npos ? (npos + chunk - 1) / chunk : 1;
	/* Shorter chunks for a small weight, so that enough invocations share
	 * the sum: the digits CNN's 16x1x3x3 over 65,536 positions ran as 144
	 * x 16 invocations of 4096 terms, 0.65 ms on an H100. A function of the
	 * shapes only: every device sums in the same order. */
	while (chunk > WGRAD_MIN_CHUNK && npos > chunk && nchunks * wcount < WGRAD_WANT_INVOCATIONS) {
		chunk /= 2;
		nchunks = (npos + chunk - 1) / chunk;
	}
	/* Fewer, longer chunks where the partials would not fit one binding. */
	while (nchunks > 1 && nchunks * wcount * 4 > range / 2) {
		chunk *= 2;
		nchunks = (npos + chunk - 1) / chunk;
	}
	if (chunk > WGRAD_CHUNK * 8 || nchunks * wcount > UINT32_MAX || nchunks > LOOP_BUDGET)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "a weight gradient of %llu elements over %llu positions is too large",
			       (unsigned long long)wcount, (unsigned long long)npos);
	pc.chunk = (uint32_t)chunk;
	pc.nchunks = (uint32_t)nchunks;
	pc.total = (uint32_t)(nchunks * wcount);
	implicit = npos && use_implicit(ctx, CONVI_WGRAD, &pc, false);
	if (op_pipeline(ctx, "conv2d_grad", tdp_dtype_name(ctx->out.dtype), &p) < 0 ||
	    op_bind(ctx, &ctx->in[0], false, &bind[0]) < 0 || op_bind(ctx, &ctx->in[1], false, &bind[1]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[3]) < 0)
		return -1;
	if (nchunks == 1) {
		/* The one partial goes straight into dW; binding 2 is unused. */
		bind[2] = bind[3];
		if (implicit)
			return conv_igemm_record(ctx, rec, CONVI_WGRAD, &pc, &ctx->in[1], &ctx->in[0], NULL, NULL);
		return op_dispatch(ctx, rec, p, bind, 4, &pc, sizeof(pc), pc.total, 256);
	}
	part.shape[0] = nchunks * wcount;
	part.count = part.shape[0];
	part.bytes = part.count * 4;
	if (op_scratch_alloc(ctx, part.bytes, &part.alloc) < 0 || op_bind(ctx, &part, true, &bind[2]) < 0)
		return -1;
	if (implicit ? conv_igemm_record(ctx, rec, CONVI_WGRAD, &pc, &ctx->in[1], &ctx->in[0], NULL, &bind[2]) < 0
		     : op_dispatch(ctx, rec, p, bind, 4, &pc, sizeof(pc), pc.total, 256) < 0)
		return -1;
	pc.mode = CONVG_WSUM;
	pc.total = (uint32_t)wcount;
	return op_dispatch(ctx, rec, p, bind, 4, &pc, sizeof(pc), pc.total, 256);
}

static const struct op_attr_spec poolg_max_attrs[] = {
	{ "kernel_size", ATTR_INTS, true },
	{ "stride", ATTR_INTS, false },
	{ "padding", ATTR_INTS, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec poolg_avg_attrs[] = {
	{ "kernel_size", ATTR_INTS, true },
	{ "stride", ATTR_INTS, false },
	{ "padding", ATTR_INTS, false },
	{ "input_shape", ATTR_INTS, true },
	{ NULL, 0, false },
};

/* The pool geometry for an input of shape xs, checked as the forward checks
 * it; grad_out (input gk) must match the forward's result. */
static int poolg_plan(struct op_ctx *ctx, const uint64_t xs[4], unsigned gk)
{
	struct poolg_push *pc = &ctx->priv.pool_grad;
	uint32_t k[2], s[2], p[2];
	uint64_t oh = 0, ow = 0;

	if (conv_pool_window(ctx, k, s, p) < 0)
		return -1;
	if (xs[2] == 0 || xs[3] == 0)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "the input is %llux%llu; pooling needs a non-empty image",
			       (unsigned long long)xs[2], (unsigned long long)xs[3]);
	if (conv_out_dim(ctx, "height", xs[2], k[0], s[0], p[0], 1, &oh) < 0 ||
	    conv_out_dim(ctx, "width", xs[3], k[1], s[1], p[1], 1, &ow) < 0 ||
	    check_grad_out(ctx, gk, xs[0], xs[1], oh, ow) < 0)
		return -1;
	/* Each invocation visits about (k/s)^2 windows, scanning each for max. */
	if ((uint64_t)((k[0] + s[0] - 1) / s[0]) * ((k[1] + s[1] - 1) / s[1]) * k[0] * (k[1] + 1u) > LOOP_BUDGET)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "a %ux%u window with stride %ux%u overlaps too much",
			       k[0], k[1], s[0], s[1]);
	*pc = (struct poolg_push){
		.h = (uint32_t)xs[2], .w = (uint32_t)xs[3], .oh = (uint32_t)oh, .ow = (uint32_t)ow,
		.kh = k[0], .kw = k[1], .sh = s[0], .sw = s[1], .ph = p[0], .pw = p[1], .op = ctx->def->code,
	};
	set_out(ctx, xs);
	return 0;
}

/* max_pool2d_grad(x, grad_out) -> dX. */
static int poolg_max_infer(struct op_ctx *ctx)
{
	if (check_nchw(ctx, 0, "x (input 0)") < 0 || check_nchw(ctx, 1, "grad_out (input 1)") < 0)
		return -1;
	return poolg_plan(ctx, ctx->in[0].shape, 1);
}

/* avg_pool2d_grad(grad_out) -> dX of input_shape. */
static int poolg_avg_infer(struct op_ctx *ctx)
{
	uint64_t xs[4];

	if (check_nchw(ctx, 0, "grad_out (input 0)") < 0 || attr_shape4(ctx, "input_shape", xs) < 0)
		return -1;
	return poolg_plan(ctx, xs, 0);
}

static int poolg_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	struct poolg_push pc;
	const struct gpu_pipeline *p;
	struct gpu_binding bind[3];
	unsigned g = ctx->def->code == POOL_MAX ? 1 : 0;

	pc = ctx->priv.pool_grad;
	pc.total = (uint32_t)ctx->out.count;
	/* avg reads no x: binding 0 gets grad_out. */
	if (op_pipeline(ctx, "pool2d_grad", tdp_dtype_name(ctx->out.dtype), &p) < 0 ||
	    op_bind(ctx, &ctx->in[0], false, &bind[0]) < 0 || op_bind(ctx, &ctx->in[g], false, &bind[1]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[2]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 3, &pc, sizeof(pc), pc.total, 256);
}

const struct op_def op_defs_conv_grad[] = {
	{ .name = "conv2d_grad_input", .min_inputs = 2, .max_inputs = 2, .attrs = convg_input_attrs,
	  .infer = convg_input_infer, .record = convg_input_record },
	{ .name = "conv2d_grad_weight", .min_inputs = 2, .max_inputs = 2, .attrs = convg_weight_attrs,
	  .infer = convg_weight_infer, .record = convg_weight_record },
	{ .name = "max_pool2d_grad", .min_inputs = 2, .max_inputs = 2, .attrs = poolg_max_attrs,
	  .code = POOL_MAX, .infer = poolg_max_infer, .record = poolg_record },
	{ .name = "avg_pool2d_grad", .min_inputs = 1, .max_inputs = 1, .attrs = poolg_avg_attrs,
	  .code = POOL_AVG, .infer = poolg_avg_infer, .record = poolg_record },
	{ .name = NULL },
};
