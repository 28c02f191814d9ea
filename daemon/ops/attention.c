/* Fused attention: attention (softmax(scale · q kᵀ, causal mask) · v
 * without a [T, S] matrix in memory) and the two helpers of its backward
 * rule, attention_lse (the rows' logsumexp) and attention_grad (dq, dk or
 * dv, recomputing the probabilities from q, k and the logsumexp). f32
 * only; one shader, attention.comp, in a variant per head-dim bound
 * (docs/ops.md, "Attention"). */
#include "ops/attention.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "ops/grad_rules.h"
#include "ops/op.h"
#include "status.h"

/* Modes of attention.comp. */
#define AT_FWD 0u
#define AT_LSE 1u
#define AT_DQ 2u
#define AT_DK 3u
#define AT_DV 4u
/* Own rows per workgroup (the shader's WG). */
#define AT_WG 64u

/* Mirrors the push block of shaders/attention.comp. */
struct attention_push {
	uint32_t n, t, s, hd, mode, causal, nblk;
	float scale, scale2;
};
_Static_assert(sizeof(struct attention_push) == 36, "attention_push must mirror attention.comp");

/* The compiled head-dim bound for hd (0: none). */
static unsigned attention_variant(uint64_t hd)
{
	static const unsigned bounds[] = { 16, 32, 64, 128 };

	for (unsigned b = 0; b < sizeof(bounds) / sizeof(bounds[0]); b++)
		if (hd >= 1 && hd <= bounds[b])
			return bounds[b];
	return 0;
}

/* Rows of a tile of the other side (the shader's BC). */
static uint64_t attention_tile(unsigned bound)
{
	return bound <= 64 ? 64 : 32;
}

/* Tile rows per block of the inner loop (the shader's KB_N). */
static uint64_t attention_block(unsigned bound)
{
	return bound <= 32 ? 8 : bound <= 64 ? 4 : 2;
}

uint64_t attention_loop_iters(uint64_t hd, uint64_t other)
{
	unsigned bound = attention_variant(hd);
	uint64_t bc = attention_tile(bound), tiles = (other + bc - 1) / bc;

	if (!bound)
		return UINT64_MAX;
	/* Per tile: the tile loop, its loads (bc · bound/4 vec4 over the
	 * workgroup) and up to bc / KB blocks of rows. */
	return tiles * (1 + bc / attention_block(bound) + bc * (bound / 4) / AT_WG);
}

bool attention_supported(uint64_t hd, uint64_t t, uint64_t s)
{
	return attention_variant(hd) && attention_loop_iters(hd, t) <= OP_LOOP_BUDGET &&
	       attention_loop_iters(hd, s) <= OP_LOOP_BUDGET;
}

/* The scale attribute, or 1/√hd. */
static double attention_scale(const struct op_ctx *ctx, uint64_t hd)
{
	const struct op_attr_value *a = op_attr(ctx, "scale");

	return a->set ? a->f : 1.0 / sqrt((double)hd);
}

/* Input k is f32 [N, rows, hd] with N and hd those of q. */
static int check_operand(struct op_ctx *ctx, unsigned k, const char *what, uint64_t rows)
{
	const struct op_tensor *q = &ctx->in[0], *x = &ctx->in[k];

	if (x->dtype != TDP_DTYPE_F32)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "%s must be f32, not %s", what, tdp_dtype_name(x->dtype));
	if (x->rank != 3 || x->shape[0] != q->shape[0] || x->shape[2] != q->shape[2] ||
	    (rows != UINT64_MAX && x->shape[1] != rows)) {
		char a[64], b[64];

		op_shape_text(q, a, sizeof(a));
		op_shape_text(x, b, sizeof(b));
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "%s %s does not go with q %s (q [N, T, hd], k and v [N, S, hd])",
			       what, b, a);
	}
	if (x->count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "%s takes fewer than 2^32 elements", what);
	return 0;
}

/* What all three ops check of q and k: f32 [N, T, hd] and [N, S, hd],
 * S >= 1, hd supported, the loops of the passes over `other` rows
 * within OP_LOOP_BUDGET. */
static int check_qk(struct op_ctx *ctx, bool both_ways)
{
	const struct op_tensor *q = &ctx->in[0], *k = &ctx->in[1];
	uint64_t hd, t, s;
	const struct op_attr_value *sc = op_attr(ctx, "scale");

	if (q->dtype != TDP_DTYPE_F32)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "q must be f32, not %s (attention computes in f32)",
			       tdp_dtype_name(q->dtype));
	if (q->rank != 3)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "q must be [N, T, hd], not rank %u", q->rank);
	if (check_operand(ctx, 0, "q", UINT64_MAX) < 0 || check_operand(ctx, 1, "k", UINT64_MAX) < 0)
		return -1;
	hd = q->shape[2];
	t = q->shape[1];
	s = k->shape[1];
	if (!attention_variant(hd))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "head dim %llu is not supported (1 to 128)",
			       (unsigned long long)hd);
	if (s == 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "needs at least one key (k is [N, 0, hd])");
	if (sc->set && !isfinite(sc->f))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "scale must be finite, not %g", sc->f);
	if (attention_loop_iters(hd, s) > OP_LOOP_BUDGET ||
	    (both_ways && attention_loop_iters(hd, t) > OP_LOOP_BUDGET))
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "%llu %s are more than one pass takes with head dim %llu",
			       (unsigned long long)(attention_loop_iters(hd, s) > OP_LOOP_BUDGET ? s : t),
			       attention_loop_iters(hd, s) > OP_LOOP_BUDGET ? "keys" : "queries",
			       (unsigned long long)hd);
	return 0;
}

static int attention_infer(struct op_ctx *ctx)
{
	if (check_qk(ctx, false) < 0 || check_operand(ctx, 2, "v", ctx->in[1].shape[1]) < 0)
		return -1;
	ctx->out = (struct op_tensor){ .dtype = TDP_DTYPE_F32, .rank = 3 };
	memcpy(ctx->out.shape, ctx->in[0].shape, 3 * sizeof(uint64_t));
	return 0;
}

static int lse_infer(struct op_ctx *ctx)
{
	if (check_qk(ctx, false) < 0)
		return -1;
	ctx->out = (struct op_tensor){ .dtype = TDP_DTYPE_F32, .rank = 2,
				       .shape = { ctx->in[0].shape[0], ctx->in[0].shape[1] } };
	return 0;
}

/* The mode of attention_grad's `wrt`, or -1. */
static int grad_mode(const struct op_ctx *ctx)
{
	const char *w = op_attr(ctx, "wrt")->s;

	return !strcmp(w, "q") ? (int)AT_DQ : !strcmp(w, "k") ? (int)AT_DK : !strcmp(w, "v") ? (int)AT_DV : -1;
}

static int grad_infer(struct op_ctx *ctx)
{
	const struct op_tensor *q = &ctx->in[0];
	int mode = grad_mode(ctx);

	if (mode < 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "wrt must be \"q\", \"k\" or \"v\", not \"%s\"",
			       op_attr(ctx, "wrt")->s);
	if (check_qk(ctx, true) < 0 || check_operand(ctx, 2, "v", ctx->in[1].shape[1]) < 0 ||
	    check_operand(ctx, 3, "g", q->shape[1]) < 0)
		return -1;
	for (unsigned k = 4; k < 6; k++) {
		const struct op_tensor *x = &ctx->in[k];

		if (x->dtype != TDP_DTYPE_F32 || x->rank != 2 || x->shape[0] != q->shape[0] ||
		    x->shape[1] != q->shape[1])
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "input %u (%s) must be f32 [N, T] = [%llu, %llu]", k,
				       k == 4 ? "lse" : "D", (unsigned long long)q->shape[0],
				       (unsigned long long)q->shape[1]);
	}
	ctx->out = (struct op_tensor){ .dtype = TDP_DTYPE_F32, .rank = 3 };
	memcpy(ctx->out.shape, ctx->in[mode == (int)AT_DQ ? 0 : 1].shape, 3 * sizeof(uint64_t));
	return 0;
}

static int attention_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	static const struct gpu_alloc none;
	const struct op_tensor *q = &ctx->in[0];
	uint64_t hd = q->shape[2], own;
	struct attention_push pc = {
		.n = (uint32_t)q->shape[0], .t = (uint32_t)q->shape[1], .s = (uint32_t)ctx->in[1].shape[1],
		.hd = (uint32_t)hd, .mode = ctx->def->code, .causal = op_attr(ctx, "causal")->i != 0,
	};
	struct gpu_binding bind[7];
	const struct gpu_pipeline *p;
	char variant[8];

	if (pc.mode == AT_DQ)
		pc.mode = (uint32_t)grad_mode(ctx);
	pc.scale = (float)attention_scale(ctx, hd);
	pc.scale2 = (float)(attention_scale(ctx, hd) * 1.4426950408889634);
	own = pc.mode <= AT_DQ ? pc.t : pc.s;
	pc.nblk = (uint32_t)((own + AT_WG - 1) / AT_WG);
	if (ctx->out.count == 0)
		return 0;
	snprintf(variant, sizeof(variant), "d%u", attention_variant(hd));
	for (unsigned b = 0; b < 7; b++) {
		if (b < ctx->ninputs) {
			if (op_bind(ctx, &ctx->in[b], false, &bind[b]) < 0)
				return -1;
		} else {
			bind[b] = gpu_rec_bind(ctx->g, &none, 0, 0, false);
		}
	}
	if (op_bind(ctx, &ctx->out, true, &bind[6]) < 0 || op_pipeline(ctx, "attention", variant, &p) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 7, &pc, sizeof(pc), (uint64_t)pc.n * pc.nblk * AT_WG, AT_WG);
}

static const struct op_attr_spec attention_attrs[] = {
	{ "causal", ATTR_BOOL, false },
	{ "scale", ATTR_FLOAT, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec grad_attrs[] = {
	{ "causal", ATTR_BOOL, false },
	{ "scale", ATTR_FLOAT, false },
	{ "wrt", ATTR_STR, true },
	{ NULL, 0, false },
};

const struct op_def op_defs_attention[] = {
	{ .name = "attention", .min_inputs = 3, .max_inputs = 3, .attrs = attention_attrs, .code = AT_FWD,
	  .infer = attention_infer, .record = attention_record, .backward = grad_attention },
	/* The backward rule's helpers: not differentiable. */
	{ .name = "attention_lse", .min_inputs = 2, .max_inputs = 2, .attrs = attention_attrs, .code = AT_LSE,
	  .infer = lse_infer, .record = attention_record },
	{ .name = "attention_grad", .min_inputs = 6, .max_inputs = 6, .attrs = grad_attrs, .code = AT_DQ,
	  .infer = grad_infer, .record = attention_record },
	{ .name = NULL },
};
