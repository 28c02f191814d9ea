/* Normalisations: softmax and log_softmax along an axis, layer_norm and
 * rms_norm over trailing dims, batch_norm over the channel dim (running or
 * batch statistics), and the fused backward of layer_norm / rms_norm.
 * Shaders: softmax.comp, norm.comp, norm_grad.comp, norm_batch.comp;
 * batch statistics come from the reduce engine (reduce_engine.c);
 * batch_norm_grad (training mode's dx) is norm_batch_grad.comp. */
#include <string.h>

#include "dtype.h"
#include "ops/grad_rules.h"
#include "ops/op.h"
#include "ops/reduce_engine.h"
#include "reduce_codes.h"
#include "status.h"

#define NORM_LOCAL 256u
/* Longest row one workgroup normalises: lavapipe (Mesa 22.3) ends an
 * invocation's loops after 65535 iterations in all, and the shaders loop
 * over a row three times in steps of 256. */
#define NORM_MAX_ROW (1ull << 22)

/* Mirrors SmPush in shaders/softmax.comp. */
struct sm_push {
	uint32_t M, L, inner, seg_log2, op;
};
_Static_assert(sizeof(struct sm_push) == 20, "sm_push must mirror SmPush");

/* Mirrors NormPush in shaders/norm.comp. */
struct norm_push {
	uint32_t M, L, seg_log2, flags;
	float eps;
};
_Static_assert(sizeof(struct norm_push) == 20, "norm_push must mirror NormPush");

/* Mirrors BnPush in shaders/norm_batch.comp. */
struct bn_push {
	uint32_t n, C, inner, flags;
	float eps;
};
_Static_assert(sizeof(struct bn_push) == 20, "bn_push must mirror BnPush");

/* Mirrors BngPush in shaders/norm_batch_grad.comp. */
struct bng_push {
	uint32_t C, inner, M, K, P, phase, flags;
	float eps;
	uint32_t magic, s1, s2;
};
_Static_assert(sizeof(struct bng_push) == 44, "bng_push must mirror BngPush");

/* batch_norm_grad's chunks: a workgroup's registers hold 256 · 8 elements;
 * a channel of more than 1024 such chunks takes longer ones (each loop of
 * the shader then stays under 2^31 / 1024 / 256 = 8192 iterations). */
#define BNG_CHUNK (NORM_LOCAL * 8u)
#define BNG_MAX_CHUNKS 1024u

/* log2 of the invocations that share a row of `len` elements: about 8
 * elements each, at most the whole workgroup. */
static uint32_t norm_seg_log2(uint64_t len)
{
	uint64_t need = (len + 7) / 8;
	uint32_t lg = 0;

	while ((1ull << lg) < need && (1u << lg) < NORM_LOCAL)
		lg++;
	return lg;
}

static uint64_t norm_groups(uint64_t rows, uint32_t lg)
{
	uint64_t per = NORM_LOCAL >> lg;

	return (rows + per - 1) / per;
}

static int norm_float_input(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];

	if (!op_dtype_is_float(x->dtype))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "needs f32, f16 or bf16, not %s",
			       tdp_dtype_name(x->dtype));
	if (x->count >= (1ull << 31))
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "normalisations take fewer than 2^31 elements");
	ctx->out.dtype = x->dtype;
	ctx->out.rank = x->rank;
	memcpy(ctx->out.shape, x->shape, sizeof(ctx->out.shape));
	return 0;
}

static int norm_row_len(struct op_ctx *ctx, uint64_t len)
{
	if (len > NORM_MAX_ROW)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "rows of %llu elements: at most %llu are normalised together",
			       (unsigned long long)len, NORM_MAX_ROW);
	return 0;
}

/* attrs.eps, or `dflt`; negative (or NaN) is an error. */
static int norm_eps(struct op_ctx *ctx, double dflt, float *ret)
{
	const struct op_attr_value *eps = op_attr(ctx, "eps");
	double e = eps->set ? eps->f : dflt;

	if (!(e >= 0))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "eps must be a number >= 0");
	*ret = (float)e;
	return 0;
}

/* Inputs 1.. must have x's dtype and shape `shape` (rank `rank`). */
static int norm_params(struct op_ctx *ctx, const uint64_t *shape, unsigned rank, const char *what)
{
	for (unsigned k = 1; k < ctx->ninputs; k++) {
		const struct op_tensor *t = &ctx->in[k];
		bool same = t->rank == rank;

		if (t->dtype != ctx->in[0].dtype)
			return op_fail(ctx, TDP_DTYPE_MISMATCH, "input %u is %s, x is %s", k,
				       tdp_dtype_name(t->dtype), tdp_dtype_name(ctx->in[0].dtype));
		for (unsigned d = 0; same && d < rank; d++)
			same = t->shape[d] == shape[d];
		if (!same)
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "input %u must be shaped like %s", k, what);
	}
	return 0;
}

static const struct op_attr_spec sm_attrs[] = {
	{ "axis", ATTR_INT, false },
	{ NULL, 0, false },
};

static int sm_infer(struct op_ctx *ctx)
{
	const struct op_attr_value *axis = op_attr(ctx, "axis");
	int64_t want = axis->set ? axis->i : -1;
	unsigned rank = ctx->in[0].rank;
	/* A scalar is a row of one along axis 0 or -1. */
	int a = rank == 0 && (want == 0 || want == -1) ? 0 : op_axis(ctx, want, rank, "axis");

	if (a < 0 || norm_float_input(ctx) < 0 || norm_row_len(ctx, rank ? ctx->in[0].shape[a] : 1) < 0)
		return -1;
	ctx->priv.softmax.axis = a;
	return 0;
}

static const struct op_attr_spec lse_attrs[] = {
	{ "axis", ATTR_INT, false },
	{ "keepdims", ATTR_BOOL, false },
	{ NULL, 0, false },
};

/* logsumexp: log Σ exp(x) along one axis (default -1), stable (softmax.comp
 * subtracts the row's max); the axis is removed unless keepdims. */
static int lse_infer(struct op_ctx *ctx)
{
	const struct op_attr_value *axis = op_attr(ctx, "axis");
	unsigned rank = ctx->in[0].rank;
	int a;

	if (rank == 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "needs a tensor of rank 1 or more");
	a = op_axis(ctx, axis->set ? axis->i : -1, rank, "axis");
	if (a < 0 || norm_float_input(ctx) < 0 || norm_row_len(ctx, ctx->in[0].shape[a]) < 0)
		return -1;
	if (ctx->in[0].shape[a] == 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "the axis is empty");
	ctx->priv.softmax.axis = a;
	if (op_attr(ctx, "keepdims")->i) {
		ctx->out.shape[a] = 1;
		return 0;
	}
	memmove(&ctx->out.shape[a], &ctx->out.shape[a + 1], (rank - 1 - (unsigned)a) * sizeof(uint64_t));
	ctx->out.shape[--ctx->out.rank] = 0;
	return 0;
}

static int sm_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct op_tensor *x = &ctx->in[0];
	const struct gpu_pipeline *p;
	struct gpu_binding bind[2];
	struct sm_push pc = { .L = 1, .inner = 1, .op = ctx->def->code };
	int a = ctx->priv.softmax.axis;

	if (x->rank) {
		pc.L = (uint32_t)x->shape[a];
		for (unsigned d = (unsigned)a + 1; d < x->rank; d++)
			pc.inner *= (uint32_t)x->shape[d];
	}
	pc.M = (uint32_t)(x->count / pc.L);
	pc.seg_log2 = norm_seg_log2(pc.L);
	if (op_pipeline(ctx, "softmax", tdp_dtype_name(x->dtype), &p) < 0 ||
	    op_bind(ctx, x, false, &bind[0]) < 0 || op_bind(ctx, &ctx->out, true, &bind[1]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 2, &pc, sizeof(pc),
			   norm_groups(pc.M, pc.seg_log2) * NORM_LOCAL, NORM_LOCAL);
}

static const struct op_attr_spec ln_attrs[] = {
	{ "ndim", ATTR_INT, false },
	{ "eps", ATTR_FLOAT, false },
	{ NULL, 0, false },
};

/* What layer_norm, rms_norm and their gradients check first: a float
 * input, eps, and attrs.ndim (default 1) naming trailing dims of x. */
static int ln_check(struct op_ctx *ctx, const struct op_tensor *x, int64_t *ret_nd)
{
	const struct op_attr_value *ndim = op_attr(ctx, "ndim");
	int64_t nd = ndim->set ? ndim->i : 1;
	float eps;

	if (norm_float_input(ctx) < 0 ||
	    norm_eps(ctx, ctx->def->code == NORM_RMS ? 1e-6 : 1e-5, &eps) < 0)
		return -1;
	if (nd < 1 || nd > (int64_t)x->rank)
		return op_fail(ctx, TDP_INVALID_ARGUMENT,
			       "ndim %lld must be 1 to the rank of x (%u): the trailing dims to normalise over",
			       (long long)nd, x->rank);
	*ret_nd = nd;
	return 0;
}

/* layer_norm (x, weight?, bias?) and rms_norm (x, weight?) over the last
 * attrs.ndim dims. */
static int ln_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];
	int64_t nd;
	uint64_t len = 1;

	if (ln_check(ctx, x, &nd) < 0)
		return -1;
	if (norm_params(ctx, x->shape + x->rank - nd, (unsigned)nd, "the last ndim dims of x") < 0)
		return -1;
	for (unsigned d = x->rank - (unsigned)nd; d < x->rank; d++)
		len *= x->shape[d];
	return norm_row_len(ctx, len);
}

/* The push constants of norm.comp / norm_grad.comp for rows over the last
 * attrs.ndim dims of `x` (ln_infer / lng_infer checked them). */
static int ln_push(struct op_ctx *ctx, const struct op_tensor *x, struct norm_push *pc)
{
	const struct op_attr_value *ndim = op_attr(ctx, "ndim");
	int64_t nd = ndim->set ? ndim->i : 1;

	*pc = (struct norm_push){ .L = 1, .flags = ctx->def->code };
	if (norm_eps(ctx, ctx->def->code == NORM_RMS ? 1e-6 : 1e-5, &pc->eps) < 0)
		return -1;
	for (unsigned d = x->rank - (unsigned)nd; d < x->rank; d++)
		pc->L *= (uint32_t)x->shape[d];
	pc->M = (uint32_t)(x->count / pc->L);
	pc->seg_log2 = norm_seg_log2(pc->L);
	return 0;
}

static int ln_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct op_tensor *x = &ctx->in[0];
	struct norm_push pc;
	const struct gpu_pipeline *p;
	struct gpu_binding bind[4];

	if (ln_push(ctx, x, &pc) < 0)
		return -1;
	if (ctx->ninputs > 1)
		pc.flags |= NORM_HAS_W;
	if (ctx->ninputs > 2)
		pc.flags |= NORM_HAS_B;
	if (op_pipeline(ctx, "norm", tdp_dtype_name(x->dtype), &p) < 0 ||
	    op_bind(ctx, x, false, &bind[0]) < 0 ||
	    op_bind(ctx, &ctx->in[ctx->ninputs > 1 ? 1 : 0], false, &bind[1]) < 0 ||
	    op_bind(ctx, &ctx->in[ctx->ninputs > 2 ? 2 : 0], false, &bind[2]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[3]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 4, &pc, sizeof(pc),
			   norm_groups(pc.M, pc.seg_log2) * NORM_LOCAL, NORM_LOCAL);
}

/* layer_norm_grad and rms_norm_grad (g, x, weight?): dx of layer_norm /
 * rms_norm (x, weight?, ...) over the last attrs.ndim dims, in one dispatch
 * of norm_grad.comp; g shaped like x, weight like the last ndim dims. */
static int lng_infer(struct op_ctx *ctx)
{
	const struct op_tensor *g = &ctx->in[0], *x = &ctx->in[1];
	int64_t nd;
	uint64_t len = 1;

	if (ln_check(ctx, x, &nd) < 0)
		return -1;
	if (x->dtype != g->dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "x is %s, g is %s", tdp_dtype_name(x->dtype),
			       tdp_dtype_name(g->dtype));
	if (x->rank != g->rank || memcmp(x->shape, g->shape, x->rank * sizeof(x->shape[0])) != 0)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "g and x must have the same shape");
	if (ctx->ninputs > 2) {
		const struct op_tensor *w = &ctx->in[2];
		bool same = w->rank == (unsigned)nd;

		for (unsigned d = 0; same && d < (unsigned)nd; d++)
			same = w->shape[d] == x->shape[x->rank - (unsigned)nd + d];
		if (w->dtype != x->dtype)
			return op_fail(ctx, TDP_DTYPE_MISMATCH, "weight is %s, x is %s",
				       tdp_dtype_name(w->dtype), tdp_dtype_name(x->dtype));
		if (!same)
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "weight must be shaped like the last ndim dims of x");
	}
	for (unsigned d = x->rank - (unsigned)nd; d < x->rank; d++)
		len *= x->shape[d];
	return norm_row_len(ctx, len);
}

static int lng_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct op_tensor *x = &ctx->in[1];
	struct norm_push pc;
	const struct gpu_pipeline *p;
	struct gpu_binding bind[4];

	if (ln_push(ctx, x, &pc) < 0)
		return -1;
	if (ctx->ninputs > 2)
		pc.flags |= NORM_HAS_W;
	if (op_pipeline(ctx, "norm_grad", tdp_dtype_name(x->dtype), &p) < 0 ||
	    op_bind(ctx, &ctx->in[0], false, &bind[0]) < 0 || op_bind(ctx, x, false, &bind[1]) < 0 ||
	    op_bind(ctx, &ctx->in[ctx->ninputs > 2 ? 2 : 1], false, &bind[2]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[3]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 4, &pc, sizeof(pc),
			   norm_groups(pc.M, pc.seg_log2) * NORM_LOCAL, NORM_LOCAL);
}

static const struct op_attr_spec bn_attrs[] = {
	{ "training", ATTR_BOOL, false },
	{ "eps", ATTR_FLOAT, false },
	{ NULL, 0, false },
};

/* batch_norm (x, running_mean, running_var, weight?, bias?); in training
 * mode the running statistics may be left out. */
static int bn_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];
	bool training = op_attr(ctx, "training")->i != 0;
	float eps;

	if (norm_float_input(ctx) < 0 || norm_eps(ctx, 1e-5, &eps) < 0)
		return -1;
	if (x->rank < 2)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "x must be (N, C, ...), of rank 2 or more, not %u",
			       x->rank);
	if (ctx->ninputs == 2 || (!training && ctx->ninputs < 3))
		return op_fail(ctx, TDP_INVALID_ARGUMENT,
			       "needs x, running_mean, running_var [, weight [, bias]]%s",
			       training ? " (or x alone in training mode)" : "");
	if (norm_params(ctx, &x->shape[1], 1, "(C,), C = dim 1 of x") < 0)
		return -1;
	if (training && x->count > 0 && x->count / x->shape[1] == 1)
		return op_fail(ctx, TDP_INVALID_ARGUMENT,
			       "training mode needs more than 1 value per channel");
	return 0;
}

/* The batch's per-channel mean and biased variance into f32 `mean`/`var`. */
static int bn_batch_stats(struct op_ctx *ctx, struct gpu_recorder *rec, struct gpu_binding *mean,
			  struct gpu_binding *var)
{
	const struct op_tensor *x = &ctx->in[0];
	bool reduced[TDP_MAX_RANK];
	struct red_plan plan;
	struct gpu_alloc *s;
	struct red_job job = { .op = RED_SUM, .post = RED_POST_DIV, .out_flag = RED_OUT_F32 };
	uint64_t sz = red_align(ctx, x->shape[1] * 4);

	for (unsigned d = 0; d < x->rank; d++)
		reduced[d] = d != 1;
	if (red_plan_make(ctx, x, reduced, &plan) < 0 || op_scratch_alloc(ctx, 2 * sz, &s) < 0)
		return -1;
	*mean = red_bind(ctx, s, 0, plan.M * 4, true);
	*var = red_bind(ctx, s, sz, plan.M * 4, true);
	job.div = (float)plan.L;
	job.out = *mean;
	if (red_record(ctx, rec, &plan, x, &job) < 0)
		return -1;
	job.sqdev = true;
	job.mean = *mean;
	job.mean.write = false;
	job.out = *var;
	if (red_record(ctx, rec, &plan, x, &job) < 0)
		return -1;
	mean->write = var->write = false;
	return 0;
}

static int bn_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	static const struct gpu_alloc none;
	const struct op_tensor *x = &ctx->in[0];
	bool training = op_attr(ctx, "training")->i != 0;
	struct bn_push pc = { .n = (uint32_t)x->count, .C = (uint32_t)x->shape[1], .inner = 1 };
	const struct gpu_pipeline *p;
	struct gpu_binding bind[8];

	if (norm_eps(ctx, 1e-5, &pc.eps) < 0)
		return -1;
	for (unsigned d = 2; d < x->rank; d++)
		pc.inner *= (uint32_t)x->shape[d];
	for (int b = 0; b < 8; b++)
		bind[b] = red_bind(ctx, &none, 0, 0, false);
	if (op_pipeline(ctx, "norm_batch", tdp_dtype_name(x->dtype), &p) < 0 ||
	    op_bind(ctx, x, false, &bind[0]) < 0 || op_bind(ctx, &ctx->out, true, &bind[5]) < 0)
		return -1;
	if (training) {
		pc.flags |= NORM_STATS_F32;
		if (bn_batch_stats(ctx, rec, &bind[6], &bind[7]) < 0)
			return -1;
	} else if (op_bind(ctx, &ctx->in[1], false, &bind[1]) < 0 ||
		   op_bind(ctx, &ctx->in[2], false, &bind[2]) < 0) {
		return -1;
	}
	if (ctx->ninputs > 3) {
		pc.flags |= NORM_HAS_W;
		if (op_bind(ctx, &ctx->in[3], false, &bind[3]) < 0)
			return -1;
	}
	if (ctx->ninputs > 4) {
		pc.flags |= NORM_HAS_B;
		if (op_bind(ctx, &ctx->in[4], false, &bind[4]) < 0)
			return -1;
	}
	return op_dispatch(ctx, rec, p, bind, 8, &pc, sizeof(pc), pc.n, NORM_LOCAL);
}

static const struct op_attr_spec bng_attrs[] = {
	{ "eps", ATTR_FLOAT, false },
	{ NULL, 0, false },
};

/* batch_norm_grad (g, x, weight?): dx of batch_norm (x, ..., weight?) in
 * training mode (statistics of channel dim 1 over every other dim, biased
 * variance), g shaped like x, weight (C,). */
static int bng_infer(struct op_ctx *ctx)
{
	const struct op_tensor *g = &ctx->in[0], *x = &ctx->in[1];
	float eps;

	if (norm_float_input(ctx) < 0 || norm_eps(ctx, 1e-5, &eps) < 0)
		return -1;
	if (x->rank < 2)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "x must be (N, C, ...), of rank 2 or more, not %u",
			       x->rank);
	if (x->dtype != g->dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "x is %s, g is %s", tdp_dtype_name(x->dtype),
			       tdp_dtype_name(g->dtype));
	if (x->rank != g->rank || memcmp(x->shape, g->shape, x->rank * sizeof(x->shape[0])) != 0)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "g and x must have the same shape");
	if (ctx->ninputs > 2) {
		const struct op_tensor *w = &ctx->in[2];

		if (w->dtype != x->dtype)
			return op_fail(ctx, TDP_DTYPE_MISMATCH, "weight is %s, x is %s",
				       tdp_dtype_name(w->dtype), tdp_dtype_name(x->dtype));
		if (w->rank != 1 || w->shape[0] != x->shape[1])
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "weight must be (C,), C = dim 1 of x");
	}
	return 0;
}

/* pc->inner's magic number: j / inner = (t + ((j − t) >> s1)) >> s2 with
 * t = (j · magic) >> 32 for every 32-bit j (Granlund and Montgomery's
 * division by invariant integers, the round-up variant). */
static void bng_divisor(struct bng_push *pc)
{
	uint32_t l = 0;

	while ((1ull << l) < pc->inner)
		l++;
	pc->magic = (uint32_t)(((1ull << 32) * ((1ull << l) - pc->inner)) / pc->inner + 1);
	pc->s1 = l < 1 ? l : 1;
	pc->s2 = l - pc->s1;
}

/* batch_norm_grad_weight (g, x): Σ g · xhat per channel, (C,), the weight's
 * gradient of batch_norm in training mode. */
static int bngw_infer(struct op_ctx *ctx)
{
	if (bng_infer(ctx) < 0)
		return -1;
	ctx->out.rank = 1;
	ctx->out.shape[0] = ctx->in[1].shape[1];
	memset(&ctx->out.shape[1], 0, sizeof(ctx->out.shape) - sizeof(ctx->out.shape[0]));
	return 0;
}

/* batch_norm_grad: two dispatches (each chunk's partial statistics; then
 * every chunk folds its channel's and writes dx), or one where a channel is
 * a single chunk. batch_norm_grad_weight: the same partials, then one
 * workgroup a channel. */
static int bng_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	static const struct gpu_alloc none;
	const struct op_tensor *x = &ctx->in[1];
	bool weight = ctx->def->code == BNG_WEIGHT;
	struct bng_push pc = { .C = (uint32_t)x->shape[1], .inner = 1, .K = BNG_CHUNK };
	const struct gpu_pipeline *p;
	struct gpu_binding bind[5];
	struct gpu_alloc *s;
	uint64_t groups;

	if (ctx->out.count == 0)
		return 0; /* (an empty x with C > 0: the weight's gradient, zeros) */
	if (norm_eps(ctx, 1e-5, &pc.eps) < 0)
		return -1;
	for (unsigned d = 2; d < x->rank; d++)
		pc.inner *= (uint32_t)x->shape[d];
	pc.M = (uint32_t)(x->count / pc.C);
	bng_divisor(&pc);
	if ((pc.M + BNG_CHUNK - 1) / BNG_CHUNK > BNG_MAX_CHUNKS) {
		uint32_t k = (pc.M + BNG_MAX_CHUNKS - 1) / BNG_MAX_CHUNKS;

		pc.K = (k + NORM_LOCAL - 1) / NORM_LOCAL * NORM_LOCAL;
	}
	pc.P = (pc.M + pc.K - 1) / pc.K;
	groups = (uint64_t)pc.C * pc.P;
	pc.flags = ctx->ninputs > 2 ? NORM_HAS_W : 0;
	pc.phase = weight ? BNG_WEIGHT : BNG_DX;
	if (op_pipeline(ctx, "norm_batch_grad", tdp_dtype_name(x->dtype), &p) < 0 ||
	    op_bind(ctx, &ctx->in[0], false, &bind[0]) < 0 || op_bind(ctx, x, false, &bind[1]) < 0 ||
	    op_bind(ctx, &ctx->in[ctx->ninputs > 2 ? 2 : 1], false, &bind[2]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[3]) < 0)
		return -1;
	if (pc.P > 1) {
		/* M > BNG_CHUNK, so C · P < 2 · count / BNG_CHUNK < 2^21. */
		if (op_scratch_alloc(ctx, groups * 16, &s) < 0)
			return -1;
		pc.phase = BNG_PARTIAL;
		bind[3].write = false;
		bind[4] = red_bind(ctx, s, 0, groups * 16, true);
		if (op_dispatch(ctx, rec, p, bind, 5, &pc, sizeof(pc), groups * NORM_LOCAL, NORM_LOCAL) < 0)
			return -1;
		pc.phase = (weight ? BNG_WEIGHT : BNG_DX) | BNG_FOLD;
		bind[3].write = true;
		bind[4].write = false;
	} else {
		bind[4] = red_bind(ctx, &none, 0, 0, false);
	}
	return op_dispatch(ctx, rec, p, bind, 5, &pc, sizeof(pc), (weight ? pc.C : groups) * NORM_LOCAL,
			   NORM_LOCAL);
}

const struct op_def op_defs_norm[] = {
	{ .name = "softmax", .min_inputs = 1, .max_inputs = 1, .attrs = sm_attrs, .code = SM_SOFTMAX,
	  .infer = sm_infer, .record = sm_record, .backward = grad_softmax },
	{ .name = "log_softmax", .min_inputs = 1, .max_inputs = 1, .attrs = sm_attrs, .code = SM_LOG_SOFTMAX,
	  .infer = sm_infer, .record = sm_record, .backward = grad_log_softmax },
	{ .name = "logsumexp", .min_inputs = 1, .max_inputs = 1, .attrs = lse_attrs, .code = SM_LOGSUMEXP,
	  .infer = lse_infer, .record = sm_record, .backward = grad_logsumexp },
	{ .name = "layer_norm", .min_inputs = 1, .max_inputs = 3, .attrs = ln_attrs, .infer = ln_infer,
	  .record = ln_record, .backward = grad_layer_norm },
	{ .name = "rms_norm", .min_inputs = 1, .max_inputs = 2, .attrs = ln_attrs, .code = NORM_RMS,
	  .infer = ln_infer, .record = ln_record, .backward = grad_rms_norm },
	{ .name = "layer_norm_grad", .min_inputs = 2, .max_inputs = 3, .attrs = ln_attrs, .infer = lng_infer,
	  .record = lng_record },
	{ .name = "rms_norm_grad", .min_inputs = 2, .max_inputs = 3, .attrs = ln_attrs, .code = NORM_RMS,
	  .infer = lng_infer, .record = lng_record },
	{ .name = "batch_norm", .min_inputs = 1, .max_inputs = 5, .attrs = bn_attrs, .infer = bn_infer,
	  .record = bn_record, .backward = grad_batch_norm },
	{ .name = "batch_norm_grad", .min_inputs = 2, .max_inputs = 3, .attrs = bng_attrs, .code = BNG_DX,
	  .infer = bng_infer, .record = bng_record },
	{ .name = "batch_norm_grad_weight", .min_inputs = 2, .max_inputs = 2, .attrs = bng_attrs,
	  .code = BNG_WEIGHT, .infer = bngw_infer, .record = bng_record },
	{ .name = NULL },
};
