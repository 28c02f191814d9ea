/* Loss functions: mse, binary_cross_entropy_with_logits, cross_entropy, nll,
 * each with reduction none | mean | sum. Shader: loss.comp, which computes
 * every loss in f32 and reduces as a tree (see there), so results are
 * deterministic. */
#include <string.h>

#include "dtype.h"
#include "gpu/device.h"
#include "loss_codes.h"
#include "ops/grad_rules.h"
#include "ops/op.h"
#include "status.h"

/* Mirrors LossPush in shaders/loss.comp. */
struct loss_push {
	uint32_t op, flags, n, c;
	int32_t ignore_index;
	float smoothing;
	float denom;
	uint32_t groups;
	uint32_t seg_log2;
};
_Static_assert(sizeof(struct loss_push) == 36, "loss_push must mirror LossPush");

static const struct op_attr_spec elementwise_attrs[] = {
	{ "reduction", ATTR_STR, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec ce_attrs[] = {
	{ "reduction", ATTR_STR, false },
	{ "label_smoothing", ATTR_FLOAT, false },
	{ "ignore_index", ATTR_INT, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec nll_attrs[] = {
	{ "reduction", ATTR_STR, false },
	{ "ignore_index", ATTR_INT, false },
	{ NULL, 0, false },
};

static struct loss_plan *plan(struct op_ctx *ctx)
{
	return &ctx->priv.loss;
}

/* Parse attrs.reduction and shape the output: the scalar of a reduction, or
 * `rank` dims of `shape` for none. */
static int set_reduction(struct op_ctx *ctx, unsigned rank, const uint64_t *shape)
{
	const struct op_attr_value *red = op_attr(ctx, "reduction");
	struct loss_plan *pl = plan(ctx);

	if (!red->set || !strcmp(red->s, "mean"))
		pl->reduction = LOSS_REDUCE_MEAN;
	else if (!strcmp(red->s, "sum"))
		pl->reduction = LOSS_REDUCE_SUM;
	else if (!strcmp(red->s, "none"))
		pl->reduction = LOSS_REDUCE_NONE;
	else
		return op_fail(ctx, TDP_INVALID_ARGUMENT,
			       "reduction must be \"none\", \"mean\" or \"sum\", not \"%s\"", red->s);
	ctx->out.dtype = ctx->in[0].dtype;
	ctx->out.rank = pl->reduction == LOSS_REDUCE_NONE ? rank : 0;
	if (pl->reduction == LOSS_REDUCE_NONE)
		memcpy(ctx->out.shape, shape, rank * sizeof(*shape));
	return 0;
}

static int need_float(struct op_ctx *ctx, unsigned k, const char *what)
{
	if (!op_dtype_is_float(ctx->in[k].dtype))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "input %u (%s) must be f32, f16 or bf16, not %s",
			       k, what, tdp_dtype_name(ctx->in[k].dtype));
	return 0;
}

/* mse and bce: prediction and target of one float dtype and one shape. */
static int pointwise_infer(struct op_ctx *ctx)
{
	const struct op_tensor *a = &ctx->in[0], *b = &ctx->in[1];

	if (need_float(ctx, 0, ctx->def->code == LOSS_MSE ? "the prediction" : "the logits") < 0)
		return -1;
	if (a->dtype != b->dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "the target is %s, the %s %s",
			       tdp_dtype_name(b->dtype),
			       ctx->def->code == LOSS_MSE ? "prediction" : "logits", tdp_dtype_name(a->dtype));
	if (a->rank != b->rank || memcmp(a->shape, b->shape, a->rank * sizeof(a->shape[0]))) {
		char sa[160], sb[160];

		op_shape_text(a, sa, sizeof(sa));
		op_shape_text(b, sb, sizeof(sb));
		/* torch's mse_loss broadcasts (with a warning); tensord wants them equal */
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "the target is %s but the %s %s: they must be the same "
			       "shape (no broadcasting)", sb, ctx->def->code == LOSS_MSE ? "prediction" : "logits", sa);
	}
	plan(ctx)->items = a->count;
	plan(ctx)->classes = 0;
	return set_reduction(ctx, a->rank, a->shape);
}

/* cross_entropy and nll: x [N, C] floats, targets [N] i32. */
static int class_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0], *t = &ctx->in[1];
	const struct op_attr_value *ls = op_attr(ctx, "label_smoothing");
	const struct op_attr_value *ig = op_attr(ctx, "ignore_index");
	const char *what = ctx->def->code == LOSS_NLL ? "log-probabilities" : "logits";

	if (need_float(ctx, 0, what) < 0)
		return -1;
	if (t->dtype != TDP_DTYPE_I32)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "input 1 (the class indices) must be i32, not %s",
			       tdp_dtype_name(t->dtype));
	if (x->rank != 2)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "input 0 (the %s) must be [N, C], not rank %u",
			       what, x->rank);
	if (t->rank != 1 || t->shape[0] != x->shape[0])
		return op_fail(ctx, TDP_SHAPE_MISMATCH,
			       "input 1 (the class indices) must be [N] = [%llu], one per row of input 0",
			       (unsigned long long)x->shape[0]);
	if (ls && ls->set && !(ls->f >= 0.0 && ls->f <= 1.0))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "label_smoothing must be in [0, 1]");
	if (ig && ig->set && (ig->i < INT32_MIN || ig->i > INT32_MAX))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "ignore_index must fit in i32");
	if (ctx->def->code == LOSS_CROSS_ENTROPY && x->shape[1] > LOSS_MAX_CLASSES)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "rows of %llu classes: at most %u are supported",
			       (unsigned long long)x->shape[1], LOSS_MAX_CLASSES);
	if (x->count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "more than 2^32 logits");
	plan(ctx)->items = x->shape[0];
	plan(ctx)->classes = x->shape[1];
	return set_reduction(ctx, 1, x->shape);
}

/* A binding of the device's dummy buffer, for a slot this op leaves unused. */
static struct gpu_binding unused(struct op_ctx *ctx)
{
	static const struct gpu_alloc none;

	return gpu_rec_bind(ctx->g, &none, 0, 0, false);
}

/* cross_entropy's row pass: each row's (logsumexp, sum of logits) into
 * scratch memory, bound as the partials-in buffer of the loss pass. */
static int row_stats_record(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_pipeline *p,
			    struct gpu_binding *b, struct loss_push pc, uint64_t rows)
{
	uint64_t need = (pc.c + 7) / 8, per, groups;
	struct gpu_alloc *stats;

	pc.seg_log2 = 0;
	while ((1ull << pc.seg_log2) < need && (1u << pc.seg_log2) < LOSS_WG)
		pc.seg_log2++;
	per = LOSS_WG >> pc.seg_log2;
	groups = (rows + per - 1) / per;
	pc.flags = LOSS_F_ROWS;
	pc.n = (uint32_t)rows;
	if (op_scratch_alloc(ctx, rows * 8, &stats) < 0)
		return -1;
	b[4] = gpu_rec_bind(ctx->g, stats, 0, rows * 8, true);
	if (op_dispatch(ctx, rec, p, b, 6, &pc, sizeof(pc), groups * LOSS_WG, LOSS_WG) < 0)
		return -1;
	b[3] = gpu_rec_bind(ctx->g, stats, 0, rows * 8, false);
	b[4] = unused(ctx);
	return 0;
}

static int loss_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct loss_plan *pl = plan(ctx);
	const struct op_attr_value *ls = op_attr(ctx, "label_smoothing");
	const struct op_attr_value *ig = op_attr(ctx, "ignore_index");
	bool class_op = ctx->def->code == LOSS_CROSS_ENTROPY || ctx->def->code == LOSS_NLL;
	struct gpu_alloc *part[2] = { NULL, NULL };
	const struct gpu_pipeline *p;
	struct gpu_binding b[6];
	struct loss_push pc = {
		.op = ctx->def->code,
		.c = (uint32_t)pl->classes,
		.smoothing = ls && ls->set ? (float)ls->f : 0.0f,
		.denom = (float)pl->items,
	};
	uint64_t n = pl->items, groups, cur;
	int in = -1; /* the partials buffer read at this level, -1: the inputs */

	if (n > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "more than 2^32 %s",
			       class_op ? "samples" : "elements");
	if (ig && ig->set) {
		pc.flags |= LOSS_F_IGNORE;
		pc.ignore_index = (int32_t)ig->i;
	}
	if (op_pipeline(ctx, "loss", tdp_dtype_name(ctx->in[0].dtype), &p) < 0 ||
	    op_bind(ctx, &ctx->in[0], false, &b[0]) < 0 || op_bind(ctx, &ctx->in[1], false, &b[1]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &b[5]) < 0)
		return -1;
	if (class_op) {
		b[2] = b[1];
		b[1] = unused(ctx);
	} else {
		b[2] = unused(ctx);
	}
	b[3] = b[4] = unused(ctx);
	if (ctx->def->code == LOSS_CROSS_ENTROPY && n > 0 && row_stats_record(ctx, rec, p, b, pc, n) < 0)
		return -1;
	if (pl->reduction == LOSS_REDUCE_NONE) {
		pc.flags |= LOSS_F_NONE;
		pc.n = (uint32_t)n;
		return op_dispatch(ctx, rec, p, b, 6, &pc, sizeof(pc), n, LOSS_WG);
	}
	if (pl->reduction == LOSS_REDUCE_MEAN)
		pc.flags |= LOSS_F_MEAN | ((pc.flags & LOSS_F_IGNORE) ? LOSS_F_WEIGHTED : 0u);
	/* Partials of level 0 go to part[0], of level 1 to part[1], then back
	 * to part[0], which is large enough for every later level. */
	groups = n ? (n + LOSS_CHUNK - 1) / LOSS_CHUNK : 1;
	if (groups > 1) {
		uint64_t second = (groups + LOSS_CHUNK - 1) / LOSS_CHUNK;

		if (op_scratch_alloc(ctx, groups * 8, &part[0]) < 0 ||
		    (second > 1 && op_scratch_alloc(ctx, second * 8, &part[1]) < 0))
			return -1;
	}
	for (cur = n;; cur = groups, groups = (cur + LOSS_CHUNK - 1) / LOSS_CHUNK) {
		int outp = in < 0 ? 0 : 1 - in;

		pc.n = (uint32_t)cur;
		pc.groups = (uint32_t)groups;
		if (groups == 1) {
			pc.flags |= LOSS_F_FINAL;
			b[4] = unused(ctx);
		} else {
			b[4] = gpu_rec_bind(ctx->g, part[outp], 0, groups * 8, true);
		}
		if (op_dispatch(ctx, rec, p, b, 6, &pc, sizeof(pc), groups * LOSS_WG, LOSS_WG) < 0)
			return -1;
		if (groups == 1)
			return 0;
		b[3] = gpu_rec_bind(ctx->g, part[outp], 0, groups * 8, false);
		in = outp;
		pc.flags |= LOSS_F_PARTIALS;
	}
}

#define POINTWISE(n, c, bw) \
	{ .name = n, .min_inputs = 2, .max_inputs = 2, .attrs = elementwise_attrs, .code = c, \
	  .infer = pointwise_infer, .record = loss_record, .backward = bw }

const struct op_def op_defs_loss[] = {
	POINTWISE("mse", LOSS_MSE, grad_mse),
	POINTWISE("binary_cross_entropy_with_logits", LOSS_BCE_LOGITS, grad_bce_logits),
	{ .name = "cross_entropy", .min_inputs = 2, .max_inputs = 2, .attrs = ce_attrs,
	  .code = LOSS_CROSS_ENTROPY, .infer = class_infer, .record = loss_record,
	  .backward = grad_cross_entropy },
	{ .name = "nll", .min_inputs = 2, .max_inputs = 2, .attrs = nll_attrs, .code = LOSS_NLL,
	  .infer = class_infer, .record = loss_record, .backward = grad_nll },
	{ .name = NULL },
};
