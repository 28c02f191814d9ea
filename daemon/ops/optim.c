/* Optimizer update rules of torch.optim.SGD, Adam and AdamW as single-output
 * elementwise ops: sgd_buf, sgd_param, adam_m, adam_v, adam_param. A training
 * step runs them in one graph and stores each result back under the name of
 * the parameter or state it replaces (graph results are stored only after
 * the whole graph ran, so every node reads the old values). Shader:
 * optim.comp; a training step records all its updates as one dispatch
 * (optim_multi.c). */
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
	{ NULL, 0, false },
};

static const struct op_attr_spec sgd_param_attrs[] = {
	{ "lr", ATTR_FLOAT, true },
	{ "momentum", ATTR_FLOAT, false },
	{ "dampening", ATTR_FLOAT, false },
	{ "weight_decay", ATTR_FLOAT, false },
	{ "nesterov", ATTR_BOOL, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec adam_m_attrs[] = {
	{ "beta1", ATTR_FLOAT, false },
	{ "weight_decay", ATTR_FLOAT, false },
	{ "decoupled", ATTR_BOOL, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec adam_v_attrs[] = {
	{ "beta2", ATTR_FLOAT, false },
	{ "weight_decay", ATTR_FLOAT, false },
	{ "decoupled", ATTR_BOOL, false },
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

	return names[ctx->def->code][k];
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

	if (!op_dtype_is_float(x->dtype))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "input 0 (%s) must be f32, f16 or bf16, not %s",
			       input_name(ctx, 0), tdp_dtype_name(x->dtype));
	for (unsigned k = 1; k < ctx->ninputs; k++) {
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
	if ((code == OPT_ADAM_M || code == OPT_ADAM_V) && ctx->ninputs < 3 &&
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
		if (ctx->ninputs == 3)
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
	struct gpu_binding bind[4];
	struct optim_push pc;

	if (ctx->out.count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "more than 2^32 elements");
	optim_fill_push(ctx, &pc);
	if (op_pipeline(ctx, "optim", tdp_dtype_name(ctx->out.dtype), &p) < 0)
		return -1;
	for (unsigned k = 0; k < 3; k++)
		if (op_bind(ctx, &ctx->in[k < ctx->ninputs ? k : 0], false, &bind[k]) < 0)
			return -1;
	if (op_bind(ctx, &ctx->out, true, &bind[3]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 4, &pc, sizeof(pc), pc.n, OPT_WG);
}

#define OPTIM(n, lo, hi, at, cd) \
	{ .name = n, .min_inputs = lo, .max_inputs = hi, .attrs = at, .code = cd, \
	  .infer = optim_infer, .record = optim_record }

const struct op_def op_defs_optim[] = {
	OPTIM("sgd_buf", 2, 3, sgd_buf_attrs, OPT_SGD_BUF),
	OPTIM("sgd_param", 2, 3, sgd_param_attrs, OPT_SGD_PARAM),
	OPTIM("adam_m", 2, 3, adam_m_attrs, OPT_ADAM_M),
	OPTIM("adam_v", 2, 3, adam_v_attrs, OPT_ADAM_V),
	OPTIM("adam_param", 3, 3, adam_param_attrs, OPT_ADAM_PARAM),
	{ .name = NULL },
};
