/* Optimizer update rules of torch.optim.SGD, Adam and AdamW as single-output
 * elementwise ops: sgd_buf, sgd_param, adam_m, adam_v, adam_param. A training
 * step runs them in one graph and stores each result back under the name of
 * the parameter or state it replaces (graph results are stored only after
 * the whole graph ran, so every node reads the old values). Shader:
 * optim.comp; a training step records all its updates as one dispatch
 * (optim_multi.c). With `gated` an update takes a skip flag last and then
 * stores the old value (precision f16's overflow skip), with `unscale` it
 * multiplies the gradient by 1 / scale as it reads it; found_inf is that
 * flag's op (recorded by optim_multi.c's kernel). */
#include <math.h>
#include <string.h>

#include "dtype.h"
#include "ops/op.h"
#include "ops/optim.h"
#include "optim_codes.h"
#include "status.h"


static const struct op_attr_spec sgd_buf_attrs[] = {
	{ "momentum", ATTR_FLOAT, true },
	{ "dampening", ATTR_FLOAT, false },
	{ "weight_decay", ATTR_FLOAT, false },
	{ "gated", ATTR_BOOL, false },
	{ "unscale", ATTR_BOOL, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec sgd_param_attrs[] = {
	{ "lr", ATTR_FLOAT, true },
	{ "momentum", ATTR_FLOAT, false },
	{ "dampening", ATTR_FLOAT, false },
	{ "weight_decay", ATTR_FLOAT, false },
	{ "nesterov", ATTR_BOOL, false },
	{ "gated", ATTR_BOOL, false },
	{ "unscale", ATTR_BOOL, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec adam_m_attrs[] = {
	{ "beta1", ATTR_FLOAT, false },
	{ "weight_decay", ATTR_FLOAT, false },
	{ "decoupled", ATTR_BOOL, false },
	{ "gated", ATTR_BOOL, false },
	{ "unscale", ATTR_BOOL, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec adam_v_attrs[] = {
	{ "beta2", ATTR_FLOAT, false },
	{ "weight_decay", ATTR_FLOAT, false },
	{ "decoupled", ATTR_BOOL, false },
	{ "gated", ATTR_BOOL, false },
	{ "unscale", ATTR_BOOL, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec found_inf_attrs[] = {
	{ "chain", ATTR_BOOL, false },
	{ "unscale", ATTR_BOOL, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec adam_param_attrs[] = {
	{ "lr", ATTR_FLOAT, true },
	{ "beta1", ATTR_FLOAT, false },
	{ "beta2", ATTR_FLOAT, false },
	{ "eps", ATTR_FLOAT, false },
	{ "weight_decay", ATTR_FLOAT, false },
	{ "decoupled", ATTR_BOOL, false },
	{ "step", ATTR_INT, true },
	{ "gated", ATTR_BOOL, false },
	{ "unscale", ATTR_BOOL, false },
	{ NULL, 0, false },
};

/* The names of each op's inputs, for error messages. */
static const char *input_name(const struct op_ctx *ctx, unsigned k)
{
	static const char *const names[][3] = {
		[OPT_SGD_BUF] = { "the gradient", "the weights", "the momentum buffer" },
		[OPT_SGD_PARAM] = { "the weights", "the gradient", "the momentum buffer" },
		[OPT_ADAM_M] = { "the gradient", "the first moment", "the weights" },
		[OPT_ADAM_V] = { "the gradient", "the second moment", "the weights" },
		[OPT_ADAM_PARAM] = { "the weights", "the new first moment", "the new second moment" },
	};

	if (ctx->def->code == OPT_FOUND_INF)
		return "a gradient";
	return k < optim_update_inputs(ctx) ? names[ctx->def->code][k] : "the skip flag";
}

/* Attribute `name` as a double, or `dflt` when absent. */
static double attr_f(const struct op_ctx *ctx, const char *name, double dflt)
{
	const struct op_attr_value *v = op_attr(ctx, name);

	return v->set ? v->f : dflt;
}

static bool attr_b(const struct op_ctx *ctx, const char *name)
{
	const struct op_attr_value *v = op_attr(ctx, name);

	return v->set && v->i;
}

unsigned optim_update_inputs(const struct op_ctx *ctx)
{
	return ctx->ninputs - (attr_b(ctx, "gated") ? 1u : 0u);
}

/* Check that attribute `name` (when the op has it) is finite and within
 * [lo, hi] (hi excluded when `open_hi`), as torch.optim checks its
 * hyperparameters. */
static int check_range(struct op_ctx *ctx, const char *name, double lo, double hi, bool open_hi)
{
	const struct op_attr_value *v = op_attr(ctx, name);

	if (!v || !v->set)
		return 0;
	if (!isfinite(v->f) || v->f < lo || v->f > hi || (open_hi && v->f == hi)) {
		if (isinf(hi))
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s' must be a finite number >= %g, not %g",
				       name, lo, v->f);
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s' must be in [%g, %g%s, not %g", name, lo,
			       hi, open_hi ? ")" : "]", v->f);
	}
	return 0;
}

static int check_attrs(struct op_ctx *ctx)
{
	const struct op_attr_value *step = op_attr(ctx, "step");
	const struct op_attr_value *damp = op_attr(ctx, "dampening");

	if (check_range(ctx, "lr", 0, INFINITY, false) < 0 ||
	    check_range(ctx, "momentum", 0, INFINITY, false) < 0 ||
	    check_range(ctx, "weight_decay", 0, INFINITY, false) < 0 ||
	    check_range(ctx, "beta1", 0, 1, true) < 0 || check_range(ctx, "beta2", 0, 1, true) < 0 ||
	    check_range(ctx, "eps", 0, INFINITY, false) < 0)
		return -1;
	if (damp && damp->set && !isfinite(damp->f))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr 'dampening' must be a finite number");
	if (step && step->i < 1)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr 'step' must be >= 1 (the first step is 1), not %lld",
			       (long long)step->i);
	if (op_attr(ctx, "nesterov") && attr_b(ctx, "nesterov") &&
	    (attr_f(ctx, "momentum", 0) <= 0 || attr_f(ctx, "dampening", 0) != 0))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "nesterov needs a momentum > 0 and dampening 0");
	return 0;
}

/* Every input has input 0's float dtype and shape; the result too. */
static int optim_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];
	uint32_t code = ctx->def->code;
	unsigned nin = optim_update_inputs(ctx);

	if (!op_dtype_is_float(x->dtype))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "input 0 (%s) must be f32, f16 or bf16, not %s",
			       input_name(ctx, 0), tdp_dtype_name(x->dtype));
	if (nin < ctx->def->min_inputs || nin > 3)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "takes %u to 3 inputs%s, not %u", ctx->def->min_inputs,
			       nin < ctx->ninputs ? " before the skip flag" : "", nin);
	if (attr_b(ctx, "unscale") && nin == ctx->ninputs)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "'unscale' needs 'gated' (its flag holds 1 / scale)");
	if (nin < ctx->ninputs && (ctx->in[nin].dtype != TDP_DTYPE_F32 ||
				   ctx->in[nin].count != (attr_b(ctx, "unscale") ? 2u : 1u)))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "the skip flag (the last input when 'gated') must be one "
			       "f32 element, two with 'unscale' (the flag, 1 / scale)");
	for (unsigned k = 1; k < nin; k++) {
		const struct op_tensor *t = &ctx->in[k];

		if (t->dtype != x->dtype)
			return op_fail(ctx, TDP_DTYPE_MISMATCH, "input %u (%s) is %s, input 0 (%s) %s", k,
				       input_name(ctx, k), tdp_dtype_name(t->dtype), input_name(ctx, 0),
				       tdp_dtype_name(x->dtype));
		if (t->rank != x->rank || memcmp(t->shape, x->shape, x->rank * sizeof(x->shape[0])))
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "input %u (%s) must have the shape of input 0 (%s)",
				       k, input_name(ctx, k), input_name(ctx, 0));
	}
	if (check_attrs(ctx) < 0)
		return -1;
	if ((code == OPT_ADAM_M || code == OPT_ADAM_V) && nin < 3 &&
	    attr_f(ctx, "weight_decay", 0) != 0 && !attr_b(ctx, "decoupled"))
		return op_fail(ctx, TDP_INVALID_ARGUMENT,
			       "weight_decay without 'decoupled' (Adam's L2 penalty) needs the weights as input 2");
	ctx->out.dtype = x->dtype;
	ctx->out.rank = x->rank;
	memcpy(ctx->out.shape, x->shape, sizeof(ctx->out.shape));
	return 0;
}

void optim_fill_push(const struct op_ctx *ctx, struct optim_push *pc)
{
	double wd = attr_f(ctx, "weight_decay", 0);
	bool decoupled = op_attr(ctx, "decoupled") && attr_b(ctx, "decoupled");

	memset(pc, 0, sizeof(*pc));
	pc->n = (uint32_t)ctx->out.count;
	pc->op = ctx->def->code;
	pc->wd = (float)wd;
	if (attr_b(ctx, "gated"))
		pc->flags |= OPT_F_GATE;
	if (attr_b(ctx, "unscale"))
		pc->flags |= OPT_F_UNSCALE;
	if (wd != 0 && !decoupled)
		pc->flags |= OPT_F_L2;
	switch (ctx->def->code) {
	case OPT_SGD_PARAM:
		pc->lr = (float)attr_f(ctx, "lr", 0);
		if (attr_f(ctx, "momentum", 0) != 0)
			pc->flags |= OPT_F_MOMENTUM;
		if (attr_b(ctx, "nesterov"))
			pc->flags |= OPT_F_NESTEROV;
		/* fall through */
	case OPT_SGD_BUF:
		pc->beta = (float)attr_f(ctx, "momentum", 0);
		pc->mix = (float)(1.0 - attr_f(ctx, "dampening", 0));
		if (optim_update_inputs(ctx) == 3)
			pc->flags |= OPT_F_BUF;
		break;
	case OPT_ADAM_M:
		pc->beta = (float)attr_f(ctx, "beta1", 0.9);
		pc->mix = (float)(1.0 - attr_f(ctx, "beta1", 0.9));
		break;
	case OPT_ADAM_V:
		pc->beta = (float)attr_f(ctx, "beta2", 0.999);
		pc->mix = (float)(1.0 - attr_f(ctx, "beta2", 0.999));
		break;
	case OPT_ADAM_PARAM: {
		double lr = attr_f(ctx, "lr", 0), t = (double)op_attr(ctx, "step")->i;
		double bc1 = 1.0 - pow(attr_f(ctx, "beta1", 0.9), t);
		double bc2 = 1.0 - pow(attr_f(ctx, "beta2", 0.999), t);

		/* Adam's L2 term was added to the gradient by adam_m and adam_v. */
		pc->flags &= ~OPT_F_L2;
		if (decoupled && wd != 0) {
			pc->flags |= OPT_F_DECAY;
			pc->decay = (float)(1.0 - lr * wd);
		}
		pc->lr = (float)(lr / bc1);
		pc->bc2_sqrt = (float)sqrt(bc2);
		pc->eps = (float)attr_f(ctx, "eps", 1e-8);
		break;
	}
	default:
		break;
	}
}

static int optim_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct gpu_pipeline *p;
	struct gpu_binding bind[5];
	struct optim_push pc;
	unsigned nin = optim_update_inputs(ctx);

	if (ctx->out.count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "more than 2^32 elements");
	optim_fill_push(ctx, &pc);
	if (op_pipeline(ctx, "optim", tdp_dtype_name(ctx->out.dtype), &p) < 0)
		return -1;
	for (unsigned k = 0; k < 3; k++)
		if (op_bind(ctx, &ctx->in[k < nin ? k : 0], false, &bind[k]) < 0)
			return -1;
	/* The skip flag; without one input 0 again, never read. */
	if (op_bind(ctx, &ctx->out, true, &bind[3]) < 0 ||
	    op_bind(ctx, &ctx->in[nin < ctx->ninputs ? nin : 0], false, &bind[4]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 5, &pc, sizeof(pc), pc.n, OPT_WG);
}

/* found_inf: f32 inputs of any shape (input 0 an earlier flag, one
 * element, with `chain`; the last a multiplier of one element, 1 / scale,
 * with `unscale`: the others are checked as multiplied by it); the result
 * is an f32 scalar, 1 where any element is inf or NaN (or the earlier flag
 * is non-zero), else 0. */
static int found_inf_infer(struct op_ctx *ctx)
{
	if (ctx->ninputs < 1u + attr_b(ctx, "chain") + attr_b(ctx, "unscale"))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "no tensor to check");
	if (attr_b(ctx, "unscale") && ctx->in[ctx->ninputs - 1].count != 1)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "with 'unscale', the last input is one element");
	for (unsigned k = 0; k < ctx->ninputs; k++)
		if (ctx->in[k].dtype != TDP_DTYPE_F32)
			return op_fail(ctx, TDP_DTYPE_MISMATCH, "input %u is %s; found_inf checks f32 tensors", k,
				       tdp_dtype_name(ctx->in[k].dtype));
	if (attr_b(ctx, "chain") && ctx->in[0].count != 1)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "with 'chain', input 0 is an earlier flag of one element");
	ctx->out.dtype = TDP_DTYPE_F32;
	ctx->out.rank = 0;
	return 0;
}

static int found_inf_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	struct op_ctx *m = ctx;

	return optim_check_record(ctx, &m, 1, rec);
}

#define OPTIM(n, lo, hi, at, cd) \
	{ .name = n, .min_inputs = lo, .max_inputs = hi, .attrs = at, .code = cd, \
	  .infer = optim_infer, .record = optim_record }

const struct op_def op_defs_optim[] = {
	OPTIM("sgd_buf", 2, 4, sgd_buf_attrs, OPT_SGD_BUF),
	OPTIM("sgd_param", 2, 4, sgd_param_attrs, OPT_SGD_PARAM),
	OPTIM("adam_m", 2, 4, adam_m_attrs, OPT_ADAM_M),
	OPTIM("adam_v", 2, 4, adam_v_attrs, OPT_ADAM_V),
	OPTIM("adam_param", 3, 4, adam_param_attrs, OPT_ADAM_PARAM),
	{ .name = "found_inf", .min_inputs = 1, .max_inputs = OP_MAX_INPUTS, .attrs = found_inf_attrs,
	  .code = OPT_FOUND_INF, .infer = found_inf_infer, .record = found_inf_record },
	{ .name = NULL },
};
