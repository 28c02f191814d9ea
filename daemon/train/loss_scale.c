/* Dynamic loss scaling of precision "f16" (docs/training.md, "Mixed
 * precision"), as torch.cuda.amp.GradScaler, built from ordinary nodes of
 * the step's graph so that it runs inside the step's submission: the scale
 * comes from the stored state <first param>.loss_scaler ([scale, good
 * steps in a row], f32), the loss is multiplied by it before autograd, the
 * gradients by its reciprocal after, every update of the optimizer is kept
 * only where every gradient is finite, and the state's successor is stored
 * over it. */
#include "train/loss_scale.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "engine/graph_core.h"
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
	struct loss_scale_nodes ls = { .ok = -1, .found = -1, .new_scale = -1 };
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

int loss_scale_unscale(struct step_ctx *sc, const struct loss_scale_nodes *ls, int *grads, unsigned n)
{
	/* GradScaler multiplies by the f32 reciprocal of the scale. */
	struct graph_attr rev[2] = { { .name = "scalar", .f = 1.0 }, { .name = "reverse", .b = true } };
	int inv = train_emit(sc, "div", &ls->scale, NULL, 1, rev, 2);

	if (inv < 0)
		return -1;
	for (unsigned k = 0; k < n; k++) {
		int in[2] = { grads[k], inv };

		if ((grads[k] = train_emit(sc, "mul", in, NULL, 2, NULL, 0)) < 0)
			return -1;
	}
	return 0;
}

int loss_scale_check(struct step_ctx *sc, struct loss_scale_nodes *ls, const int *grads, unsigned n)
{
	int total = -1;

	/* max |g| over every gradient: NaN and inf propagate through abs, max
	 * and maximum, and `<= FLT_MAX` is false for both. */
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
	return ls->ok < 0 ? -1 : 0;
}

/* The value node `i` replaces when the step is skipped: the stored tensor
 * or node an optimizer update reads as its old value (the parameter, the
 * state), or -2 with *ret_t NULL where there is none (SGD's first momentum
 * buffer: zeros then). */
static int old_value(const struct graph *gr, unsigned i, struct tensor **ret_t)
{
	const struct node *nd = &gr->nodes[i];
	const char *op = nd->ctx.def->name;
	unsigned in = 0;

	if (!strcmp(op, "adam_m") || !strcmp(op, "adam_v"))
		in = 1;
	else if (!strcmp(op, "sgd_buf"))
		in = 2;
	else if (strcmp(op, "sgd_param") && strcmp(op, "adam_param"))
		return -3;
	if (in >= nd->ctx.ninputs) {
		*ret_t = NULL;
		return -2;
	}
	*ret_t = nd->src[in] < 0 ? nd->stored[in] : NULL;
	return nd->src[in];
}

int loss_scale_gate(struct step_ctx *sc, const struct loss_scale_nodes *ls, unsigned from)
{
	struct graph *gr = sc->gr;
	unsigned end = gr->n;

	for (unsigned i = from; i < end; i++) {
		struct tensor *old_t = NULL;
		int old, w;

		if (!gr->nodes[i].has_out || !gr->nodes[i].ctx.def)
			continue;
		old = old_value(gr, i, &old_t);
		if (old == -3)
			continue;
		if (old == -2) {
			int64_t dims[TDP_MAX_RANK];
			const struct op_tensor *o = &gr->nodes[i].ctx.out;
			struct graph_attr z[2] = { { .name = "shape", .ints = dims, .nints = o->rank },
						   { .name = "dtype", .s = tdp_dtype_name(o->dtype) } };

			for (unsigned d = 0; d < o->rank; d++)
				dims[d] = (int64_t)o->shape[d];
			if ((old = train_emit(sc, "zeros", NULL, NULL, 0, z, 2)) < 0)
				return -1;
		}
		{
			int refs[3] = { ls->ok, (int)i, old };
			struct tensor *ts[3] = { NULL, NULL, old_t };

			w = train_emit(sc, "where", refs, ts, 3, NULL, 0);
		}
		if (w < 0)
			return -1;
		/* The where stores the result instead, under the same terms. */
		{
			struct node *u = &gr->nodes[i], *wn = &gr->nodes[w];

			memcpy(wn->out_name, u->out_name, sizeof(wn->out_name));
			wn->has_out = true;
			wn->out_like = u->out_like;
			wn->like_owner = u->like_owner;
			wn->like_group = u->like_group;
			wn->like_mode = u->like_mode;
			u->has_out = false;
			u->out_like = false;
		}
	}
	return 0;
}

int loss_scale_update(struct step_ctx *sc, const struct model_loss_scale *cfg, struct loss_scale_nodes *ls,
		      const struct tensor *p0)
{
	int g1, grow, zero, one, sg, sgf, up, kept, good_ok, back, ns, ng, st;

	/* GradScaler's update: found_inf -> scale * backoff, 0 good steps; else
	 * one more, and at the interval scale * growth (where that is finite)
	 * and 0. */
	g1 = emit_scalar(sc, "add", ls->good, 1);
	grow = g1 < 0 ? -1 : emit_scalar(sc, "ge", g1, (double)cfg->interval);
	zero = grow < 0 ? -1 : emit_scalar(sc, "mul", g1, 0);
	one = zero < 0 ? -1 : emit_scalar(sc, "add", zero, 1);
	sg = one < 0 ? -1 : emit_scalar(sc, "mul", ls->scale, cfg->growth);
	sgf = sg < 0 ? -1 : emit_scalar(sc, "le", sg, FLT_MAX);
	up = sgf < 0 ? -1 : emit_where(sc, sgf, sg, ls->scale);
	kept = up < 0 ? -1 : emit_where(sc, grow, up, ls->scale);
	good_ok = kept < 0 ? -1 : emit_where(sc, grow, zero, g1);
	back = good_ok < 0 ? -1 : emit_scalar(sc, "mul", ls->scale, cfg->backoff);
	ns = back < 0 ? -1 : emit_where(sc, ls->ok, kept, back);
	ng = ns < 0 ? -1 : emit_where(sc, ls->ok, good_ok, zero);
	ls->found = ng < 0 ? -1 : emit_where(sc, ls->ok, zero, one);
	if (ls->found < 0)
		return -1;
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
