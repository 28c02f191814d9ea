/* The conv family, NCHW: conv2d (stride, padding, dilation, groups, optional
 * bias), max_pool2d and avg_pool2d. Shaders: conv2d.comp (direct),
 * conv_igemm.glsl (implicit GEMM, conv_igemm.c), conv_gemm.comp (im2col for
 * matmul, conv_gemm.c), pool2d.comp. */
#include <string.h>

#include "conv_codes.h"
#include "dtype.h"
#include "ops/conv_gemm.h"
#include "ops/conv_igemm.h"
#include "ops/conv_shape.h"
#include "ops/grad_rules.h"
#include "ops/op.h"
#include "status.h"

/* auto: the implicit GEMM before im2col from this many output channels per
 * group (one 128-row tile; conv_record). */
#define CONV_IMPLICIT_FIRST_OC 128u

/* Mirrors ConvPush in shaders/conv2d.comp. */
struct conv_push {
	uint32_t total;
	uint32_t c, h, w;
	uint32_t oc, oh, ow;
	uint32_t kh, kw;
	uint32_t sh, sw;
	uint32_t ph, pw;
	uint32_t dh, dw;
	uint32_t cpg, opg;
	uint32_t flags;
};
_Static_assert(sizeof(struct conv_push) == 72, "conv_push must mirror ConvPush");

/* A float NCHW input `k` whose spatial dims fit the shaders' arithmetic. */
static int check_nchw(struct op_ctx *ctx, unsigned k, const char *what)
{
	const struct op_tensor *t = &ctx->in[k];

	if (!op_dtype_is_float(t->dtype))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "%s needs f32, f16 or bf16, not %s", what,
			       tdp_dtype_name(t->dtype));
	if (t->rank != 4)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "%s must have rank 4 (N, C, H, W), not %u", what,
			       t->rank);
	if (t->shape[2] >= CONV_MAX_DIM || t->shape[3] >= CONV_MAX_DIM)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "%s is %llux%llu; height and width must be below %u",
			       what, (unsigned long long)t->shape[2], (unsigned long long)t->shape[3],
			       CONV_MAX_DIM);
	if (t->count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "%s has more than 2^32 elements", what);
	return 0;
}

static const struct op_attr_spec conv_attrs[] = {
	{ "stride", ATTR_INTS, false },
	{ "padding", ATTR_INTS, false },
	{ "dilation", ATTR_INTS, false },
	{ "groups", ATTR_INT, false },
	{ "algo", ATTR_STR, false },
	{ NULL, 0, false },
};

static int conv_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0], *w = &ctx->in[1];
	struct conv_plan *pl = &ctx->priv.conv;
	const struct op_attr_value *g = op_attr(ctx, "groups");
	uint64_t c, oc, oh = 0, ow = 0;
	enum conv_algo algo;

	if (check_nchw(ctx, 0, "x (input 0)") < 0)
		return -1;
	if (w->dtype != x->dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "x is %s but weight is %s", tdp_dtype_name(x->dtype),
			       tdp_dtype_name(w->dtype));
	if (ctx->ninputs == 3 && ctx->in[2].dtype != x->dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "x is %s but bias is %s", tdp_dtype_name(x->dtype),
			       tdp_dtype_name(ctx->in[2].dtype));
	if (conv_attr_pair(ctx, "stride", 1, 1, pl->stride) < 0 || conv_attr_pair(ctx, "padding", 0, 0, pl->pad) < 0 ||
	    conv_attr_pair(ctx, "dilation", 1, 1, pl->dil) < 0 || conv_attr_algo(ctx, true, &algo) < 0)
		return -1;
	pl->algo = algo;
	if (g->set && (g->i < 1 || g->i >= (int64_t)CONV_MAX_DIM))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr 'groups' must be at least 1 (got %lld)",
			       (long long)g->i);
	pl->groups = g->set ? (uint32_t)g->i : 1;
	if (w->rank != 4)
		return op_fail(ctx, TDP_SHAPE_MISMATCH,
			       "weight (input 1) must have rank 4 (out channels, in channels / groups, kh, kw), not %u",
			       w->rank);
	c = x->shape[1];
	oc = w->shape[0];
	if (c % pl->groups || oc % pl->groups)
		return op_fail(ctx, TDP_SHAPE_MISMATCH,
			       "groups %u must divide the input channels (%llu) and the output channels (%llu)",
			       pl->groups, (unsigned long long)c, (unsigned long long)oc);
	if (w->shape[1] != c / pl->groups)
		return op_fail(ctx, TDP_SHAPE_MISMATCH,
			       "weight has %llu input channels per group; x has %llu channels in %u groups, so %llu",
			       (unsigned long long)w->shape[1], (unsigned long long)c, pl->groups,
			       (unsigned long long)(c / pl->groups));
	if (w->shape[2] == 0 || w->shape[3] == 0 || w->shape[2] >= CONV_MAX_DIM || w->shape[3] >= CONV_MAX_DIM)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "the kernel is %llux%llu; it must be at least 1x1",
			       (unsigned long long)w->shape[2], (unsigned long long)w->shape[3]);
	if (w->count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "weight has more than 2^32 elements");
	if (ctx->ninputs == 3 && (ctx->in[2].rank != 1 || ctx->in[2].shape[0] != oc))
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "bias (input 2) must have shape [%llu] (the output channels)",
			       (unsigned long long)oc);
	if (conv_out_dim(ctx, "height", x->shape[2], (uint32_t)w->shape[2], pl->stride[0], pl->pad[0], pl->dil[0], &oh) < 0 ||
	    conv_out_dim(ctx, "width", x->shape[3], (uint32_t)w->shape[3], pl->stride[1], pl->pad[1], pl->dil[1], &ow) < 0)
		return -1;
	ctx->out.dtype = x->dtype;
	ctx->out.rank = 4;
	ctx->out.shape[0] = x->shape[0];
	ctx->out.shape[1] = oc;
	ctx->out.shape[2] = oh;
	ctx->out.shape[3] = ow;
	return 0;
}

static int conv_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct op_tensor *x = &ctx->in[0], *w = &ctx->in[1];
	const struct conv_plan *pl = &ctx->priv.conv;
	const struct gpu_pipeline *p;
	struct gpu_binding bind[4];
	struct conv_push pc = {
		.c = (uint32_t)x->shape[1], .h = (uint32_t)x->shape[2], .w = (uint32_t)x->shape[3],
		.oc = (uint32_t)ctx->out.shape[1], .oh = (uint32_t)ctx->out.shape[2],
		.ow = (uint32_t)ctx->out.shape[3],
		.kh = (uint32_t)w->shape[2], .kw = (uint32_t)w->shape[3],
		.sh = pl->stride[0], .sw = pl->stride[1], .ph = pl->pad[0], .pw = pl->pad[1],
		.dh = pl->dil[0], .dw = pl->dil[1],
		.cpg = (uint32_t)(x->shape[1] / pl->groups), .opg = (uint32_t)(ctx->out.shape[1] / pl->groups),
		.flags = ctx->ninputs == 3 ? CONV_HAS_BIAS : 0,
	};

	/* The direct kernel's loops: channels, rows of the window, taps. */
	uint64_t iters = (uint64_t)pc.cpg * (1 + (uint64_t)pc.kh * (1 + pc.kw));
	bool wide = iters > OP_LOOP_BUDGET;
	struct convg_push geo = {
		.n = (uint32_t)x->shape[0], .c = pc.c, .h = pc.h, .w = pc.w, .oc = pc.oc, .oh = pc.oh, .ow = pc.ow,
		.kh = pc.kh, .kw = pc.kw, .sh = pc.sh, .sw = pc.sw, .ph = pc.ph, .pw = pc.pw, .dh = pc.dh,
		.dw = pc.dw, .cpg = pc.cpg, .opg = pc.opg,
	};
	const struct op_tensor *bias = ctx->ninputs == 3 ? &ctx->in[2] : NULL;

	if (ctx->out.count == 0)
		return 0;
	switch (pl->algo) {
	case CONV_ALGO_IMPLICIT:
		return conv_igemm_record(ctx, rec, CONVI_FWD, &geo, w, x, bias, NULL);
	case CONV_ALGO_IM2COL:
		if (!conv_gemm_usable(ctx, pl->groups, true))
			return op_fail(ctx, TDP_INVALID_ARGUMENT,
				       "algo \"im2col\" takes f32 with one group within the device's bindings");
		return conv_gemm_record(ctx, rec, pl->stride, pl->pad, pl->dil);
	case CONV_ALGO_AUTO:
		/* The implicit GEMM first for a full tile of output channels: on
		 * an H100 it ran 3x3 32x256x56x56 -> 256 at 27.3 TFLOP/s, im2col +
		 * matmul_v4 at 24.3 (docs/performance.md); fewer channels (a
		 * first layer's 16) keep im2col and its small-product kernels.
		 * The same bits either way. */
		if (pc.opg >= CONV_IMPLICIT_FIRST_OC && conv_igemm_wanted(ctx, CONVI_FWD, &geo, wide))
			return conv_igemm_record(ctx, rec, CONVI_FWD, &geo, w, x, bias, NULL);
		if ((wide || conv_igemm_wanted(ctx, CONVI_FWD, &geo, wide)) &&
		    conv_gemm_usable(ctx, pl->groups, true))
			return conv_gemm_record(ctx, rec, pl->stride, pl->pad, pl->dil);
		if (conv_igemm_wanted(ctx, CONVI_FWD, &geo, wide))
			return conv_igemm_record(ctx, rec, CONVI_FWD, &geo, w, x, bias, NULL);
		break;
	case CONV_ALGO_OLD:
		if (conv_gemm_usable(ctx, pl->groups, wide))
			return conv_gemm_record(ctx, rec, pl->stride, pl->pad, pl->dil);
		break;
	default:
		break;
	}
	if (wide)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "%u channels per group x %ux%u taps is too many terms per output for the direct "
			       "kernel (at most about %u; the implicit GEMM takes up to %u)",
			       pc.cpg, pc.kh, pc.kw, OP_LOOP_BUDGET, OP_LOOP_BUDGET * 16);
	if (ctx->out.count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "a result of more than 2^32 elements");
	pc.total = (uint32_t)ctx->out.count;
	if (op_pipeline(ctx, "conv2d", tdp_dtype_name(x->dtype), &p) < 0 ||
	    op_bind(ctx, x, false, &bind[0]) < 0 || op_bind(ctx, w, false, &bind[1]) < 0 ||
	    op_bind(ctx, ctx->ninputs == 3 ? &ctx->in[2] : w, false, &bind[2]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[3]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 4, &pc, sizeof(pc), pc.total, 256);
}

static const struct op_attr_spec pool_attrs[] = {
	{ "kernel_size", ATTR_INTS, true },
	{ "stride", ATTR_INTS, false },
	{ "padding", ATTR_INTS, false },
	{ NULL, 0, false },
};

static int pool_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];
	struct pool_push *pc = &ctx->priv.pool;
	uint32_t k[2], s[2], p[2];
	uint64_t oh = 0, ow = 0;

	if (check_nchw(ctx, 0, "x (input 0)") < 0)
		return -1;
	if (conv_pool_window(ctx, k, s, p) < 0)
		return -1;
	if (x->shape[2] == 0 || x->shape[3] == 0)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "x is %llux%llu; pooling needs a non-empty image",
			       (unsigned long long)x->shape[2], (unsigned long long)x->shape[3]);
	if (conv_out_dim(ctx, "height", x->shape[2], k[0], s[0], p[0], 1, &oh) < 0 ||
	    conv_out_dim(ctx, "width", x->shape[3], k[1], s[1], p[1], 1, &ow) < 0)
		return -1;
	/* One invocation loops over its window clipped to the input. */
	if ((uint64_t)(k[0] < x->shape[2] ? k[0] : x->shape[2]) *
	    (1 + (k[1] < x->shape[3] ? k[1] : x->shape[3])) > OP_LOOP_BUDGET)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "a %ux%u window over a %llux%llu image: at most about %u elements are pooled together",
			       k[0], k[1], (unsigned long long)x->shape[2], (unsigned long long)x->shape[3],
			       OP_LOOP_BUDGET);
	*pc = (struct pool_push){
		.h = (uint32_t)x->shape[2], .w = (uint32_t)x->shape[3], .oh = (uint32_t)oh, .ow = (uint32_t)ow,
		.kh = k[0], .kw = k[1], .sh = s[0], .sw = s[1], .ph = p[0], .pw = p[1], .op = ctx->def->code,
	};
	ctx->out.dtype = x->dtype;
	ctx->out.rank = 4;
	ctx->out.shape[0] = x->shape[0];
	ctx->out.shape[1] = x->shape[1];
	ctx->out.shape[2] = oh;
	ctx->out.shape[3] = ow;
	return 0;
}

static int pool_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	struct pool_push pc;
	const struct gpu_pipeline *p;
	struct gpu_binding bind[2];

	pc = ctx->priv.pool;
	if (ctx->out.count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "a result of more than 2^32 elements");
	pc.total = (uint32_t)ctx->out.count;
	if (op_pipeline(ctx, "pool2d", tdp_dtype_name(ctx->in[0].dtype), &p) < 0 ||
	    op_bind(ctx, &ctx->in[0], false, &bind[0]) < 0 || op_bind(ctx, &ctx->out, true, &bind[1]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 2, &pc, sizeof(pc), pc.total, 256);
}

const struct op_def op_defs_conv[] = {
	{ .name = "conv2d", .min_inputs = 2, .max_inputs = 3, .attrs = conv_attrs, .infer = conv_infer,
	  .record = conv_record, .backward = grad_conv2d },
	{ .name = "max_pool2d", .min_inputs = 1, .max_inputs = 1, .attrs = pool_attrs, .code = POOL_MAX,
	  .infer = pool_infer, .record = pool_record, .backward = grad_max_pool2d },
	{ .name = "avg_pool2d", .min_inputs = 1, .max_inputs = 1, .attrs = pool_attrs, .code = POOL_AVG,
	  .infer = pool_infer, .record = pool_record, .backward = grad_avg_pool2d },
	{ .name = NULL },
};
