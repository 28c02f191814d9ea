/* Dynamic loss scaling of precision "f16" (docs/training.md, "Mixed
 * precision"), as torch.cuda.amp.GradScaler, built from ordinary nodes of
 * the step's graph so that it runs inside the step's submission: the scale
 * comes from the stored state <first param>.loss_scaler ([scale, good
 * steps in a row], f32), the loss is multiplied by it before autograd, the
 * gradients by its reciprocal after, every update of the optimizer is kept
 * only where every gradient is finite, and the state's successor is stored
 * over it. */
#include "train/loss_scale.h"

#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "engine/graph_core.h"
#include "ops/optim.h"
#include "status.h"
#include "store/lookup.h"
#include "store/names.h"
#include "store/store.h"
#include "train/step.h"

/* A scalar f32 constant node. */
static int emit_const(struct step_ctx *sc, double v)
{
	struct graph_attr a[3] = { { .name = "shape", .ints = NULL, .nints = 0 }, { .name = "value", .f = v },
				   { .name = "dtype", .s = "f32" } };

	return train_emit(sc, "full", NULL, NULL, 0, a, 3);
}

/* Element `k` of the stored state `st` as a scalar node. */
static int emit_elem(struct step_ctx *sc, struct tensor *st, int64_t k)
{
	int64_t end = k + 1;
	struct graph_attr sl[2] = { { .name = "starts", .ints = &k, .nints = 1 },
				    { .name = "ends", .ints = &end, .nints = 1 } };
	struct graph_attr sh = { .name = "shape", .ints = NULL, .nints = 0 };
	int ref = -1, r = train_emit(sc, "slice", &ref, &st, 1, sl, 2);

	return r < 0 ? -1 : train_emit(sc, "reshape", &r, NULL, 1, &sh, 1);
}

/* The binary op `op` of node `a` and the scalar `v`. */
static int emit_scalar(struct step_ctx *sc, const char *op, int a, double v)
{
	struct graph_attr s = { .name = "scalar", .f = v };

	return train_emit(sc, op, &a, NULL, 1, &s, 1);
}

/* where(cond, a, b) of three nodes. */
static int emit_where(struct step_ctx *sc, int cond, int a, int b)
{
	int refs[3] = { cond, a, b };

	return train_emit(sc, "where", refs, NULL, 3, NULL, 0);
}

int loss_scale_begin(struct step_ctx *sc, const struct model_loss_scale *cfg, struct tensor *p0, unsigned loss,
		     struct loss_scale_nodes *ret)
{
	char why[TDP_MAX_ERROR_MESSAGE], shown[NAMES_SHOWN_MAX];
	struct loss_scale_nodes ls = { .inv = -1, .ok = -1, .skip = -1, .gate = -1, .found = -1, .new_scale = -1 };
	struct tensor *st = NULL;
	int code, refs[2];

	snprintf(ls.name, sizeof(ls.name), "%s.loss_scaler", p0->name);
	if (strlen(ls.name) > TDP_MAX_NAME_LEN)
		return td_fail(&sc->call->err, TDP_INVALID_ARGUMENT, "the state name %s is too long", ls.name);
	/* The step reads the state and stores its successor over it. */
	code = lookup_derived_why(sc->call, "loss scaler state", ls.name, p0, ACCESS_READ | ACCESS_WRITE, &st, why,
				  sizeof(why));
	if (code && code != TDP_NOT_FOUND)
		return td_fail(&sc->call->err, code, "%s", why);
	if (code == 0 && (st->dtype != TDP_DTYPE_F32 || st->rank != 1 || st->shape[0] != 2))
		return td_fail(&sc->call->err, TDP_FAILED_PRECONDITION,
			       "loss scaler state '%s' is no f32 tensor of shape [2] (scale, good steps); "
			       "delete it to start afresh", lookup_show(sc->call, ls.name, shown));
	ls.stored = code == 0 ? st : NULL;
	ls.scale = ls.stored ? emit_elem(sc, st, 0) : emit_const(sc, cfg->init);
	ls.good = ls.scale < 0 ? -1 : ls.stored ? emit_elem(sc, st, 1) : emit_const(sc, 0);
	if (ls.good < 0)
		return -1;
	/* The backward starts from d(loss * scale)/d(loss) = scale. */
	refs[0] = (int)loss;
	refs[1] = ls.scale;
	ls.root = train_emit(sc, "mul", refs, NULL, 2, NULL, 0);
	if (ls.root < 0)
		return -1;
	*ret = ls;
	return 0;
}

int loss_scale_unscale(struct step_ctx *sc, struct loss_scale_nodes *ls, int *grads, unsigned n, bool fold)
{
	/* GradScaler multiplies by the f32 reciprocal of the scale. */
	struct graph_attr rev[2] = { { .name = "scalar", .f = 1.0 }, { .name = "reverse", .b = true } };
	int inv = train_emit(sc, "div", &ls->scale, NULL, 1, rev, 2);

	if (inv < 0)
		return -1;
	ls->inv = inv;
	for (unsigned k = 0; fold && k < n; k++)
		fold = sc->gr->nodes[grads[k]].ctx.out.dtype == TDP_DTYPE_F32;
	ls->folded = fold;
	for (unsigned k = 0; !fold && k < n; k++) {
		int in[2] = { grads[k], inv };

		if ((grads[k] = train_emit(sc, "mul", in, NULL, 2, NULL, 0)) < 0)
			return -1;
	}
	return 0;
}

/* max |g| over every gradient (NaN and inf propagate through abs, max and
 * maximum, and `<= FLT_MAX` is false for both) into ls->ok, and the skip
 * flag from it: two nodes a gradient, for gradients that are not f32. */
static int check_by_nodes(struct step_ctx *sc, struct loss_scale_nodes *ls, const int *grads, unsigned n)
{
	int total = -1, zero, one;

	for (unsigned k = 0; k < n; k++) {
		int m = train_emit(sc, "abs", &grads[k], NULL, 1, NULL, 0);

		m = m < 0 ? -1 : train_emit(sc, "max", &m, NULL, 1, NULL, 0);
		if (m < 0)
			return -1;
		if (total < 0) {
			total = m;
		} else {
			int in[2] = { total, m };

			if ((total = train_emit(sc, "maximum", in, NULL, 2, NULL, 0)) < 0)
				return -1;
		}
	}
	ls->ok = emit_scalar(sc, "le", total, FLT_MAX);
	zero = ls->ok < 0 ? -1 : emit_const(sc, 0);
	one = zero < 0 ? -1 : emit_const(sc, 1);
	ls->skip = one < 0 ? -1 : emit_where(sc, ls->ok, zero, one);
	ls->gate = ls->skip;
	return ls->skip < 0 ? -1 : 0;
}

int loss_scale_check(struct step_ctx *sc, struct loss_scale_nodes *ls, const int *grads, unsigned n)
{
	struct graph *gr = sc->gr;
	unsigned idx[MAX_PARAMS], nn = 0;
	int flag = -1, r;

	for (unsigned k = 0; k < n; k++)
		if (gr->nodes[grads[k]].ctx.out.dtype != TDP_DTYPE_F32)
			return check_by_nodes(sc, ls, grads, n);
	/* found_inf nodes of up to OP_MAX_INPUTS gradients, each after the
	 * first taking the one before's flag, recorded as one dispatch. */
	for (unsigned k = 0; k < n;) {
		int refs[OP_MAX_INPUTS];
		unsigned m = 0;
		struct graph_attr a[2] = { { .name = "chain", .b = flag >= 0 }, { .name = "unscale", .b = ls->folded } };

		if (flag >= 0)
			refs[m++] = flag;
		while (m < OP_MAX_INPUTS - (unsigned)ls->folded && k < n)
			refs[m++] = grads[k++];
		/* Folded: the gradients checked as the optimizer reads them. */
		if (ls->folded)
			refs[m++] = ls->inv;
		if ((flag = train_emit(sc, "found_inf", refs, NULL, m, a, 2)) < 0)
			return -1;
		idx[nn++] = (unsigned)flag;
	}
	/* -EINVAL: the nodes record one by one, with the same result. */
	r = graph_group_add(gr, idx, nn, optim_check_record);
	if (r == -ENOMEM)
		return td_fail(&sc->call->err, TDP_INTERNAL, "out of memory");
	ls->skip = ls->gate = flag;
	/* Folded: [skip, 1 / scale] in one tensor, one binding. */
	if (ls->folded) {
		int refs[2] = { ls->skip, ls->inv };

		if ((ls->gate = train_emit(sc, "stack", refs, NULL, 2, NULL, 0)) < 0)
			return -1;
	}
	ls->ok = emit_scalar(sc, "le", flag, 0);
	return ls->ok < 0 ? -1 : 0;
}

/* The index of bool attr `name` of node nd's op, or -1. */
static int bool_attr(const struct node *nd, const char *name)
{
	for (int k = 0; nd->ctx.def->attrs && nd->ctx.def->attrs[k].name; k++)
		if (!strcmp(nd->ctx.def->attrs[k].name, name))
			return k;
	return -1;
}

int loss_scale_gate(struct step_ctx *sc, const struct loss_scale_nodes *ls, unsigned from)
{
	struct graph *gr = sc->gr;
	int flag = ls->gate;

	for (unsigned i = from; i < gr->n; i++) {
		struct node *nd = &gr->nodes[i];
		unsigned n = nd->ctx.ninputs;
		int k, u;

		if (!nd->ctx.def || !optim_multi_member(&nd->ctx))
			continue;
		k = bool_attr(nd, "gated");
		u = bool_attr(nd, "unscale");
		if (k < 0 || u < 0 || n >= OP_MAX_INPUTS)
			return graph_node_fail(gr, i, TDP_INTERNAL, "cannot take a skip flag");
		/* The flag as the last input: the kernel stores the old values
		 * when it is set (ops/optim.c, "gated"). */
		nd->src[n] = flag;
		nd->stored[n] = NULL;
		nd->ctx.in[n] = gr->nodes[flag].ctx.out;
		nd->ctx.ninputs = n + 1;
		nd->ctx.attr[k].i = 1;
		nd->ctx.attr[k].set = true;
		nd->ctx.attr[u].i = ls->folded;
		nd->ctx.attr[u].set = ls->folded;
		if (graph_infer_node(gr, i) < 0)
			return graph_node_fail(gr, i, nd->ctx.err.code, nd->ctx.err.message);
	}
	return 0;
}

int loss_scale_update(struct step_ctx *sc, const struct model_loss_scale *cfg, struct loss_scale_nodes *ls,
		      const struct tensor *p0)
{
	int g1, grow, zero, sg, sgf, up, kept, good_ok, back, ns, ng, st;

	/* GradScaler's update: found_inf -> scale * backoff, 0 good steps; else
	 * one more, and at the interval scale * growth (where that is finite)
	 * and 0. */
	g1 = emit_scalar(sc, "add", ls->good, 1);
	grow = g1 < 0 ? -1 : emit_scalar(sc, "ge", g1, (double)cfg->interval);
	zero = grow < 0 ? -1 : emit_scalar(sc, "mul", g1, 0);
	sg = zero < 0 ? -1 : emit_scalar(sc, "mul", ls->scale, cfg->growth);
	sgf = sg < 0 ? -1 : emit_scalar(sc, "le", sg, FLT_MAX);
	up = sgf < 0 ? -1 : emit_where(sc, sgf, sg, ls->scale);
	kept = up < 0 ? -1 : emit_where(sc, grow, up, ls->scale);
	good_ok = kept < 0 ? -1 : emit_where(sc, grow, zero, g1);
	back = good_ok < 0 ? -1 : emit_scalar(sc, "mul", ls->scale, cfg->backoff);
	ns = back < 0 ? -1 : emit_where(sc, ls->ok, kept, back);
	ng = ns < 0 ? -1 : emit_where(sc, ls->ok, good_ok, zero);
	if (ng < 0)
		return -1;
	ls->found = ls->skip;
	{
		int refs[2] = { ns, ng };

		st = train_emit(sc, "stack", refs, NULL, 2, NULL, 0);
	}
	if (st < 0 || train_emit_derived_out(sc, st, ls->name, p0) < 0)
		return -1;
	ls->new_scale = ns;
	sc->gr->nodes[ns].keep = true;
	sc->gr->nodes[ls->found].keep = true;
	return 0;
}
