/* The optimizers: their specs (optimizer.* parameters), the learning-rate
 * schedule and the update nodes appended to a training step's graph. */
#include "train/optimizer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd/autograd.h"
#include "base/clock.h"
#include "base/loop.h"
#include "daemon.h"
#include "devices.h"
#include "dtype.h"
#include "engine/forward.h"
#include "engine/graph_parse.h"
#include "engine/graph_core.h"
#include "engine/graph_fuse.h"
#include "gpu/transfer.h"
#include "ops/optim.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/lookup.h"
#include "store/model.h"
#include "store/names.h"
#include "store/store.h"
#include "train/step.h"

/* Read a number from `map[key]` into *v when present. */
static int num(struct caller *call, const msgpack_object *map, const char *key, double *v)
{
	const msgpack_object *o = tdp_map_find(map, key);
	int64_t i;

	if (!o)
		return 0;
	if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
		*v = o->via.f64;
	else if (tdp_obj_int(o, &i) == 0)
		*v = (double)i;
	else
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "optimizer.%s must be a number", key);
	/* NaN would pass every range check below (comparisons with it are false). */
	if (!isfinite(*v))
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "optimizer.%s must be finite", key);
	return 0;
}

/* Read the fields of map `o` over *opt (its defaults, or a group's parent's
 * settings); a group (`group`) may not set type, clip_norm or groups and
 * must name its params. */
static int parse_fields(struct caller *call, const msgpack_object *o, struct optimizer *opt, bool group)
{
	static const char *const keys[] = {
		"type", "lr", "momentum", "dampening", "nesterov", "weight_decay", "beta1", "beta2",
		"eps", "clip_norm", "schedule", "gamma", "step_size", "warmup", "total", "min_lr", "groups",
	};
	const msgpack_object *nest = tdp_map_find(o, "nesterov"), *sched = tdp_map_find(o, "schedule");
	const char *what = group ? "optimizer.groups[]" : "optimizer";
	double step_size = (double)opt->step_size, warmup = (double)opt->warmup, total = (double)opt->total;

	for (uint32_t k = 0; k < o->via.map.size; k++) {
		const msgpack_object *key = &o->via.map.ptr[k].key;
		bool known = false;

		for (size_t j = 0; j < sizeof(keys) / sizeof(keys[0]); j++)
			known = known || tdp_obj_str_eq(key, keys[j]);
		if (group && (tdp_obj_str_eq(key, "type") || tdp_obj_str_eq(key, "clip_norm") ||
			      tdp_obj_str_eq(key, "groups")))
			return td_fail(&call->err, TDP_INVALID_ARGUMENT,
				       "optimizer.groups[]: type, clip_norm and groups are the whole step's");
		if (!known && !(group && tdp_obj_str_eq(key, "params")))
			return td_fail(&call->err, TDP_INVALID_ARGUMENT, "%s: unknown key", what);
	}
	if (num(call, o, "lr", &opt->lr) < 0 || num(call, o, "momentum", &opt->momentum) < 0 ||
	    num(call, o, "dampening", &opt->dampening) < 0 ||
	    num(call, o, "weight_decay", &opt->weight_decay) < 0 || num(call, o, "beta1", &opt->beta1) < 0 ||
	    num(call, o, "beta2", &opt->beta2) < 0 || num(call, o, "eps", &opt->eps) < 0 ||
	    num(call, o, "clip_norm", &opt->clip_norm) < 0 || num(call, o, "gamma", &opt->gamma) < 0 ||
	    num(call, o, "step_size", &step_size) < 0 || num(call, o, "warmup", &warmup) < 0 ||
	    num(call, o, "total", &total) < 0 || num(call, o, "min_lr", &opt->min_lr) < 0)
		return -1;
	if (nest && nest->type != MSGPACK_OBJECT_BOOLEAN)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "%s.nesterov must be a boolean", what);
	if (nest)
		opt->nesterov = nest->via.boolean;
	if (sched && tdp_obj_strcpy(sched, opt->schedule, sizeof(opt->schedule)) < 0)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "%s.schedule must be a short string", what);
	if (strcmp(opt->schedule, "constant") && strcmp(opt->schedule, "step") &&
	    strcmp(opt->schedule, "cosine"))
		return td_fail(&call->err, TDP_INVALID_ARGUMENT,
				    "%s.schedule must be \"constant\", \"step\" or \"cosine\"", what);
	if (!(opt->lr > 0) || opt->momentum < 0 || opt->weight_decay < 0 || opt->eps <= 0 ||
	    opt->beta1 < 0 || opt->beta1 >= 1 || opt->beta2 < 0 || opt->beta2 >= 1 || opt->clip_norm < 0 ||
	    step_size < 1 || warmup < 0 || total < 0 ||
	    step_size > INT32_MAX || warmup > INT32_MAX || total > INT32_MAX)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "%s: a hyperparameter is out of range", what);
	if (opt->nesterov && opt->momentum <= 0)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "%s: nesterov needs momentum > 0", what);
	opt->step_size = (int64_t)step_size;
	opt->warmup = (int64_t)warmup;
	opt->total = (int64_t)total;
	if (!strcmp(opt->schedule, "cosine") && opt->total <= opt->warmup)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "%s: cosine needs total > warmup", what);
	return 0;
}

int optimizer_parse(struct caller *call, const msgpack_object *o, struct optimizer *opt)
{
	const msgpack_object *type = tdp_map_find(o, "type"), *groups = tdp_map_find(o, "groups");

	*opt = (struct optimizer){ .kind = OPT_SGD, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999,
				   .eps = 1e-8, .gamma = 0.1, .step_size = 1 };
	strcpy(opt->schedule, "constant");
	if (type) {
		if (tdp_obj_str_eq(type, "sgd"))
			opt->kind = OPT_SGD;
		else if (tdp_obj_str_eq(type, "adam"))
			opt->kind = OPT_ADAM;
		else if (tdp_obj_str_eq(type, "adamw"))
			opt->kind = OPT_ADAMW;
		else
			return td_fail(&call->err, TDP_INVALID_ARGUMENT,
					    "optimizer.type must be \"sgd\", \"adam\" or \"adamw\"");
	}
	if (opt->kind == OPT_ADAMW)
		opt->weight_decay = 0.01;
	if (opt->kind != OPT_SGD)
		opt->lr = 0.001;
	if (groups && (groups->type != MSGPACK_OBJECT_ARRAY || groups->via.array.size > OPT_MAX_GROUPS))
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "optimizer.groups must be an array of up to %d "
			       "maps", OPT_MAX_GROUPS);
	return parse_fields(call, o, opt, false);
}

int optimizer_parse_group(struct caller *call, const msgpack_object *o, const struct optimizer *parent,
			  struct optimizer *ret)
{
	struct optimizer g = *parent;

	if (o->type != MSGPACK_OBJECT_MAP)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "optimizer.groups[] must be maps");
	if (parse_fields(call, o, &g, true) < 0)
		return -1;
	*ret = g;
	return 0;
}

/* The learning rate at `step` (1-based): linear warmup, then the schedule. */
double optimizer_lr_at(const struct optimizer *opt, int64_t step)
{
	if (opt->warmup > 0 && step <= opt->warmup)
		return opt->lr * (double)step / (double)opt->warmup;
	if (!strcmp(opt->schedule, "step"))
		return opt->lr * pow(opt->gamma, (double)((step - 1) / opt->step_size));
	if (!strcmp(opt->schedule, "cosine")) {
		double t = (double)(step - opt->warmup) / (double)(opt->total - opt->warmup);

		if (t > 1)
			t = 1;
		return opt->min_lr + (opt->lr - opt->min_lr) * 0.5 * (1 + cos(M_PI * t));
	}
	return opt->lr;
}

/* Append a node by op name; refs >= 0 are nodes, `t` is a stored tensor
 * input where a ref is -1. Returns the node or -1 (td_fail done). */
int train_emit(struct step_ctx *sc, const char *op, const int *refs, struct tensor *const *t,
	       unsigned n, const struct graph_attr *attrs, unsigned nattrs)
{
	int r = graph_emit(sc->gr, op, refs, t, n, attrs, nattrs, sc->why, sizeof(sc->why));

	if (r < 0)
		td_fail(&sc->call->err, TDP_INVALID_ARGUMENT, "building the update (%s): %s", op, sc->why);
	return r;
}

static int emit_stored_out(struct step_ctx *sc, int node, const char *name)
{
	struct node *nd = &sc->gr->nodes[node];

	if (strlen(name) > TDP_MAX_NAME_LEN)
		return td_fail(&sc->call->err, TDP_INVALID_ARGUMENT, "the state name %s is too long", name);
	snprintf(nd->out_name, sizeof(nd->out_name), "%s", name);
	nd->has_out = true;
	return 0;
}

/* emit_stored_out for a tensor derived from parameter `p` (its state or
 * gradient; its name is in p's namespace): it belongs to p's owner. */
int train_emit_derived_out(struct step_ctx *sc, int node, const char *name, const struct tensor *p)
{
	struct node *nd = &sc->gr->nodes[node];

	if (emit_stored_out(sc, node, name) < 0)
		return -1;
	nd->out_like = true;
	nd->like_owner = p->owner;
	nd->like_group = p->group;
	nd->like_mode = p->mode;
	return 0;
}

int train_state_input(struct step_ctx *sc, struct tensor *p, const char *suffix, char *name,
		       int *ref, struct tensor **stored)
{
	char why[TDP_MAX_ERROR_MESSAGE], shown[NAMES_SHOWN_MAX], pshown[NAMES_SHOWN_MAX];
	struct tensor *s;
	int code;

	snprintf(name, TDP_MAX_NAME_LEN + 32, "%s%s", p->name, suffix);
	*stored = NULL;
	if (strlen(name) > TDP_MAX_NAME_LEN)
		return td_fail(&sc->call->err, TDP_INVALID_ARGUMENT, "the state name %s is too long", name);
	/* The step reads the state and stores its successor over it. */
	code = lookup_derived_why(sc->call, "optimizer state", name, p, ACCESS_READ | ACCESS_WRITE, &s, why,
				  sizeof(why));
	if (code == TDP_NOT_FOUND)
		return 0;
	if (code)
		return td_fail(&sc->call->err, code, "%s", why);
	if (s->dtype != p->dtype || s->rank != p->rank ||
	    memcmp(s->shape, p->shape, p->rank * sizeof(p->shape[0])) != 0)
		return td_fail(&sc->call->err, TDP_FAILED_PRECONDITION,
				    "optimizer state '%s' does not match the shape and dtype of '%s'; "
				    "delete it to start the state afresh", lookup_show(sc->call, name, shown),
				    lookup_show(sc->call, p->name, pshown));
	*ref = -1;
	*stored = s;
	return 1;
}

/* Append the update of parameter `p` whose gradient is node `g`. */
int optimizer_emit_update(struct step_ctx *sc, const struct optimizer *opt, struct tensor *p, int g,
			  int64_t step, double lr)
{
	char n1[TDP_MAX_NAME_LEN + 32], n2[TDP_MAX_NAME_LEN + 32];
	struct tensor *st[3] = { p, NULL, NULL };
	int refs[3] = { -1, g, -1 }, r;

	if (opt->kind == OPT_SGD) {
		struct graph_attr a[5] = {
			{ .name = "lr", .f = lr }, { .name = "momentum", .f = opt->momentum },
			{ .name = "dampening", .f = opt->dampening },
			{ .name = "weight_decay", .f = opt->weight_decay },
			{ .name = "nesterov", .b = opt->nesterov },
		};
		unsigned n = 2;
		int have = opt->momentum > 0 ? train_state_input(sc, p, ".momentum_buffer", n1, &refs[2], &st[2]) : 0;

		if (have < 0)
			return -1;
		if (have)
			n = 3;
		r = train_emit(sc, "sgd_param", refs, st, n, a, 5);
		if (r < 0 || emit_stored_out(sc, r, p->name) < 0)
			return -1;
		if (opt->momentum > 0) {
			int br[3] = { g, -1, refs[2] };
			struct tensor *bs[3] = { NULL, p, st[2] };

			snprintf(n1, sizeof(n1), "%s.momentum_buffer", p->name);
			r = train_emit(sc, "sgd_buf", br, bs, n, a + 1, 3);
			if (r < 0 || train_emit_derived_out(sc, r, n1, p) < 0)
				return -1;
		}
		return 0;
	}
	{
		bool decoupled = opt->kind == OPT_ADAMW;
		struct graph_attr am[3] = {
			{ .name = "beta1", .f = opt->beta1 }, { .name = "weight_decay", .f = opt->weight_decay },
			{ .name = "decoupled", .b = decoupled },
		};
		struct graph_attr av[3] = {
			{ .name = "beta2", .f = opt->beta2 }, { .name = "weight_decay", .f = opt->weight_decay },
			{ .name = "decoupled", .b = decoupled },
		};
		struct graph_attr ap[7] = {
			{ .name = "lr", .f = lr }, { .name = "beta1", .f = opt->beta1 },
			{ .name = "beta2", .f = opt->beta2 }, { .name = "eps", .f = opt->eps },
			{ .name = "weight_decay", .f = opt->weight_decay }, { .name = "decoupled", .b = decoupled },
			{ .name = "step", .f = (double)step },
		};
		int mref[3] = { g, -1, -1 }, vref[3] = { g, -1, -1 }, m, v;
		struct tensor *ms[3] = { NULL, NULL, p }, *vs[3] = { NULL, NULL, p };

		int have_m = train_state_input(sc, p, ".exp_avg", n1, &mref[1], &ms[1]);
		int have_v = train_state_input(sc, p, ".exp_avg_sq", n2, &vref[1], &vs[1]);

		if (have_m < 0 || have_v < 0)
			return -1;
		if (!have_m || !have_v) {
			/* First step: both moments start at zero. */
			int64_t dims[TDP_MAX_RANK];
			struct graph_attr z[2] = {
				{ .name = "shape", .ints = dims, .nints = p->rank },
				{ .name = "dtype", .s = tdp_dtype_name(p->dtype) },
			};
			int zero;

			for (unsigned d = 0; d < p->rank; d++)
				dims[d] = (int64_t)p->shape[d];
			zero = train_emit(sc, "zeros", NULL, NULL, 0, z, 2);
			if (zero < 0)
				return -1;
			mref[1] = vref[1] = zero;
			ms[1] = vs[1] = NULL;
		}
		m = train_emit(sc, "adam_m", mref, ms, 3, am, 3);
		v = m < 0 ? -1 : train_emit(sc, "adam_v", vref, vs, 3, av, 3);
		if (v < 0 || train_emit_derived_out(sc, m, n1, p) < 0 || train_emit_derived_out(sc, v, n2, p) < 0)
			return -1;
		refs[1] = m;
		refs[2] = v;
		r = train_emit(sc, "adam_param", refs, st, 3, ap, 7);
		if (r < 0 || emit_stored_out(sc, r, p->name) < 0)
			return -1;
	}
	return 0;
}

bool optimizer_multi_enabled(void)
{
	/* Read per step (not per node: cheap), so tests can switch it. */
	const char *v = getenv("TENSORD_OPTIM_MULTI");

	return !v || strcmp(v, "0") != 0;
}

int optimizer_group_updates(struct step_ctx *sc, unsigned from)
{
	struct graph *gr = sc->gr;
	unsigned *idx, n = 0;
	int r;

	if (!optimizer_multi_enabled() || from >= gr->n)
		return 0;
	idx = malloc((gr->n - from) * sizeof(*idx));
	if (!idx)
		return td_fail(&sc->call->err, TDP_INTERNAL, "out of memory");
	/* f32 parameters only: on an H100 the f16/bf16 updates of the two
	 * paths differed in their last bits (the driver rounds the half
	 * types' arithmetic its own way per kernel); those keep one dispatch
	 * per node. */
	for (unsigned i = from; i < gr->n; i++)
		if (gr->nodes[i].ctx.def && gr->nodes[i].ctx.out.dtype == TDP_DTYPE_F32 &&
		    optim_multi_member(&gr->nodes[i].ctx))
			idx[n++] = i;
	/* -EINVAL: the nodes cannot share a dispatch; each records itself. */
	r = graph_group_add(gr, idx, n, optim_multi_record);
	free(idx);
	return r == -ENOMEM ? td_fail(&sc->call->err, TDP_INTERNAL, "out of memory") : 0;
}

/* Scale every gradient by min(1, clip / (global norm + 1e-6)). */
int optimizer_emit_clip(struct step_ctx *sc, double clip, int *grads, unsigned n)
{
	int total = -1, coef;

	for (unsigned p = 0; p < n; p++) {
		int in2[2] = { grads[p], grads[p] }, sq;

		sq = train_emit(sc, "mul", in2, NULL, 2, NULL, 0);
		sq = sq < 0 ? -1 : train_emit(sc, "sum", &sq, NULL, 1, NULL, 0);
		if (sq < 0)
			return -1;
		if (total < 0) {
			total = sq;
		} else {
			int in[2] = { total, sq };

			total = train_emit(sc, "add", in, NULL, 2, NULL, 0);
			if (total < 0)
				return -1;
		}
	}
	{
		struct graph_attr eps = { .name = "scalar", .f = 1e-6 };
		struct graph_attr rev[2] = { { .name = "scalar", .f = clip }, { .name = "reverse", .b = true } };
		struct graph_attr one = { .name = "scalar", .f = 1.0 };

		coef = train_emit(sc, "sqrt", &total, NULL, 1, NULL, 0);
		coef = coef < 0 ? -1 : train_emit(sc, "add", &coef, NULL, 1, &eps, 1);
		coef = coef < 0 ? -1 : train_emit(sc, "div", &coef, NULL, 1, rev, 2);
		coef = coef < 0 ? -1 : train_emit(sc, "minimum", &coef, NULL, 1, &one, 1);
		if (coef < 0)
			return -1;
	}
	for (unsigned p = 0; p < n; p++) {
		int in[2] = { grads[p], coef };

		grads[p] = train_emit(sc, "mul", in, NULL, 2, NULL, 0);
		if (grads[p] < 0)
			return -1;
	}
	return 0;
}
