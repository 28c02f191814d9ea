#include "train/train.h"

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
#include "engine/graph.h"
#include "engine/graph_core.h"
#include "engine/graph_fuse.h"
#include "gpu/transfer.h"
#include "methods/methods_model.h"
#include "methods/tensor_meta.h"
#include "pack.h"
#include "rpc.h"
#include "serve/conn.h"
#include "serve/params.h"
#include "status.h"
#include "store/lookup.h"
#include "store/model.h"
#include "store/names.h"
#include "store/store.h"
#include "train/train_parallel.h"

#define MAX_PARAMS 256

enum opt_kind { OPT_NONE, OPT_SGD, OPT_ADAM, OPT_ADAMW };

struct optimizer {
	enum opt_kind kind;
	double lr, momentum, dampening, weight_decay, beta1, beta2, eps, clip_norm;
	bool nesterov;
	/* learning-rate schedule */
	char schedule[16];
	double gamma, min_lr;
	int64_t step_size, warmup, total;
};

/* Read a number from `map[key]` into *v when present. */
static int num(struct request *req, const msgpack_object *map, const char *key, double *v)
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
		return request_fail(req, TDP_INVALID_ARGUMENT, "optimizer.%s must be a number", key);
	/* NaN would pass every range check below (comparisons with it are false). */
	if (!isfinite(*v))
		return request_fail(req, TDP_INVALID_ARGUMENT, "optimizer.%s must be finite", key);
	return 0;
}

static int parse_optimizer(struct request *req, const msgpack_object *o, struct optimizer *opt)
{
	static const char *const keys[] = {
		"type", "lr", "momentum", "dampening", "nesterov", "weight_decay", "beta1", "beta2",
		"eps", "clip_norm", "schedule", "gamma", "step_size", "warmup", "total", "min_lr",
	};
	const msgpack_object *type = tdp_map_find(o, "type"), *nest = tdp_map_find(o, "nesterov");
	const msgpack_object *sched = tdp_map_find(o, "schedule");
	double step_size = 1, warmup = 0, total = 0;

	*opt = (struct optimizer){ .kind = OPT_SGD, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999,
				   .eps = 1e-8, .gamma = 0.1, .step_size = 1 };
	strcpy(opt->schedule, "constant");
	for (uint32_t k = 0; k < o->via.map.size; k++) {
		bool known = false;

		for (size_t j = 0; j < sizeof(keys) / sizeof(keys[0]); j++)
			known = known || tdp_obj_str_eq(&o->via.map.ptr[k].key, keys[j]);
		if (!known)
			return request_fail(req, TDP_INVALID_ARGUMENT, "optimizer: unknown key");
	}
	if (type) {
		if (tdp_obj_str_eq(type, "sgd"))
			opt->kind = OPT_SGD;
		else if (tdp_obj_str_eq(type, "adam"))
			opt->kind = OPT_ADAM;
		else if (tdp_obj_str_eq(type, "adamw"))
			opt->kind = OPT_ADAMW;
		else
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "optimizer.type must be \"sgd\", \"adam\" or \"adamw\"");
	}
	if (opt->kind == OPT_ADAMW)
		opt->weight_decay = 0.01;
	if (opt->kind != OPT_SGD)
		opt->lr = 0.001;
	if (num(req, o, "lr", &opt->lr) < 0 || num(req, o, "momentum", &opt->momentum) < 0 ||
	    num(req, o, "dampening", &opt->dampening) < 0 ||
	    num(req, o, "weight_decay", &opt->weight_decay) < 0 || num(req, o, "beta1", &opt->beta1) < 0 ||
	    num(req, o, "beta2", &opt->beta2) < 0 || num(req, o, "eps", &opt->eps) < 0 ||
	    num(req, o, "clip_norm", &opt->clip_norm) < 0 || num(req, o, "gamma", &opt->gamma) < 0 ||
	    num(req, o, "step_size", &step_size) < 0 || num(req, o, "warmup", &warmup) < 0 ||
	    num(req, o, "total", &total) < 0 || num(req, o, "min_lr", &opt->min_lr) < 0)
		return -1;
	if (nest && nest->type != MSGPACK_OBJECT_BOOLEAN)
		return request_fail(req, TDP_INVALID_ARGUMENT, "optimizer.nesterov must be a boolean");
	opt->nesterov = nest && nest->via.boolean;
	if (sched && tdp_obj_strcpy(sched, opt->schedule, sizeof(opt->schedule)) < 0)
		return request_fail(req, TDP_INVALID_ARGUMENT, "optimizer.schedule must be a short string");
	if (strcmp(opt->schedule, "constant") && strcmp(opt->schedule, "step") &&
	    strcmp(opt->schedule, "cosine"))
		return request_fail(req, TDP_INVALID_ARGUMENT,
				    "optimizer.schedule must be \"constant\", \"step\" or \"cosine\"");
	if (!(opt->lr > 0) || opt->momentum < 0 || opt->weight_decay < 0 || opt->eps <= 0 ||
	    opt->beta1 < 0 || opt->beta1 >= 1 || opt->beta2 < 0 || opt->beta2 >= 1 || opt->clip_norm < 0 ||
	    step_size < 1 || warmup < 0 || total < 0 ||
	    step_size > INT32_MAX || warmup > INT32_MAX || total > INT32_MAX)
		return request_fail(req, TDP_INVALID_ARGUMENT, "optimizer: a hyperparameter is out of range");
	if (opt->nesterov && opt->momentum <= 0)
		return request_fail(req, TDP_INVALID_ARGUMENT, "optimizer: nesterov needs momentum > 0");
	opt->step_size = (int64_t)step_size;
	opt->warmup = (int64_t)warmup;
	opt->total = (int64_t)total;
	if (!strcmp(opt->schedule, "cosine") && opt->total <= opt->warmup)
		return request_fail(req, TDP_INVALID_ARGUMENT, "optimizer: cosine needs total > warmup");
	return 0;
}

/* The learning rate at `step` (1-based): linear warmup, then the schedule. */
static double lr_at(const struct optimizer *opt, int64_t step)
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

struct step_ctx {
	struct request *req;
	struct graph *gr;
	char why[300];
};

/* Append a node by op name; refs >= 0 are nodes, `t` is a stored tensor
 * input where a ref is -1. Returns the node or -1 (request_fail done). */
static int emit(struct step_ctx *sc, const char *op, const int *refs, struct tensor *const *t,
		unsigned n, const struct graph_attr *attrs, unsigned nattrs)
{
	int r = graph_emit(sc->gr, op, refs, t, n, attrs, nattrs, sc->why, sizeof(sc->why));

	if (r < 0)
		request_fail(sc->req, TDP_INVALID_ARGUMENT, "building the update (%s): %s", op, sc->why);
	return r;
}

static int emit_stored_out(struct step_ctx *sc, int node, const char *name)
{
	struct node *nd = &sc->gr->nodes[node];

	if (strlen(name) > TDP_MAX_NAME_LEN)
		return request_fail(sc->req, TDP_INVALID_ARGUMENT, "the state name %s is too long", name);
	snprintf(nd->out_name, sizeof(nd->out_name), "%s", name);
	nd->has_out = true;
	return 0;
}

/* emit_stored_out for a tensor derived from parameter `p` (its state or
 * gradient; its name is in p's namespace): it belongs to p's owner. */
static int emit_derived_out(struct step_ctx *sc, int node, const char *name, const struct tensor *p)
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

/* The stored state tensor `<param><suffix>` (its name goes to `name`):
 * returns 1 and sets *ref and *stored when it exists, 0 when it does not yet
 * (first step), -1 after request_fail when it does not fit the parameter. */
static int state_input(struct step_ctx *sc, struct tensor *p, const char *suffix, char *name,
		       int *ref, struct tensor **stored)
{
	char why[TDP_MAX_ERROR_MESSAGE], shown[NAMES_SHOWN_MAX], pshown[NAMES_SHOWN_MAX];
	struct tensor *s;
	int code;

	snprintf(name, TDP_MAX_NAME_LEN + 32, "%s%s", p->name, suffix);
	*stored = NULL;
	if (strlen(name) > TDP_MAX_NAME_LEN)
		return request_fail(sc->req, TDP_INVALID_ARGUMENT, "the state name %s is too long", name);
	/* The step reads the state and stores its successor over it. */
	code = lookup_derived_why(sc->req, "optimizer state", name, p, ACCESS_READ | ACCESS_WRITE, &s, why,
				  sizeof(why));
	if (code == TDP_NOT_FOUND)
		return 0;
	if (code)
		return request_fail(sc->req, code, "%s", why);
	if (s->dtype != p->dtype || s->rank != p->rank ||
	    memcmp(s->shape, p->shape, p->rank * sizeof(p->shape[0])) != 0)
		return request_fail(sc->req, TDP_FAILED_PRECONDITION,
				    "optimizer state '%s' does not match the shape and dtype of '%s'; "
				    "delete it to start the state afresh", lookup_show(sc->req, name, shown),
				    lookup_show(sc->req, p->name, pshown));
	*ref = -1;
	*stored = s;
	return 1;
}

/* Append the update of parameter `p` whose gradient is node `g`. */
static int emit_update(struct step_ctx *sc, const struct optimizer *opt, struct tensor *p, int g,
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
		int have = opt->momentum > 0 ? state_input(sc, p, ".momentum_buffer", n1, &refs[2], &st[2]) : 0;

		if (have < 0)
			return -1;
		if (have)
			n = 3;
		r = emit(sc, "sgd_param", refs, st, n, a, 5);
		if (r < 0 || emit_stored_out(sc, r, p->name) < 0)
			return -1;
		if (opt->momentum > 0) {
			int br[3] = { g, -1, refs[2] };
			struct tensor *bs[3] = { NULL, p, st[2] };

			snprintf(n1, sizeof(n1), "%s.momentum_buffer", p->name);
			r = emit(sc, "sgd_buf", br, bs, n, a + 1, 3);
			if (r < 0 || emit_derived_out(sc, r, n1, p) < 0)
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

		int have_m = state_input(sc, p, ".exp_avg", n1, &mref[1], &ms[1]);
		int have_v = state_input(sc, p, ".exp_avg_sq", n2, &vref[1], &vs[1]);

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
			zero = emit(sc, "zeros", NULL, NULL, 0, z, 2);
			if (zero < 0)
				return -1;
			mref[1] = vref[1] = zero;
			ms[1] = vs[1] = NULL;
		}
		m = emit(sc, "adam_m", mref, ms, 3, am, 3);
		v = m < 0 ? -1 : emit(sc, "adam_v", vref, vs, 3, av, 3);
		if (v < 0 || emit_derived_out(sc, m, n1, p) < 0 || emit_derived_out(sc, v, n2, p) < 0)
			return -1;
		refs[1] = m;
		refs[2] = v;
		r = emit(sc, "adam_param", refs, st, 3, ap, 7);
		if (r < 0 || emit_stored_out(sc, r, p->name) < 0)
			return -1;
	}
	return 0;
}

/* Scale every gradient by min(1, clip / (global norm + 1e-6)). */
static int emit_clip(struct step_ctx *sc, double clip, int *grads, unsigned n)
{
	int total = -1, coef;

	for (unsigned p = 0; p < n; p++) {
		int in2[2] = { grads[p], grads[p] }, sq;

		sq = emit(sc, "mul", in2, NULL, 2, NULL, 0);
		sq = sq < 0 ? -1 : emit(sc, "sum", &sq, NULL, 1, NULL, 0);
		if (sq < 0)
			return -1;
		if (total < 0) {
			total = sq;
		} else {
			int in[2] = { total, sq };

			total = emit(sc, "add", in, NULL, 2, NULL, 0);
			if (total < 0)
				return -1;
		}
	}
	{
		struct graph_attr eps = { .name = "scalar", .f = 1e-6 };
		struct graph_attr rev[2] = { { .name = "scalar", .f = clip }, { .name = "reverse", .b = true } };
		struct graph_attr one = { .name = "scalar", .f = 1.0 };

		coef = emit(sc, "sqrt", &total, NULL, 1, NULL, 0);
		coef = coef < 0 ? -1 : emit(sc, "add", &coef, NULL, 1, &eps, 1);
		coef = coef < 0 ? -1 : emit(sc, "div", &coef, NULL, 1, rev, 2);
		coef = coef < 0 ? -1 : emit(sc, "minimum", &coef, NULL, 1, &one, 1);
		if (coef < 0)
			return -1;
	}
	for (unsigned p = 0; p < n; p++) {
		int in[2] = { grads[p], coef };

		grads[p] = emit(sc, "mul", in, NULL, 2, NULL, 0);
		if (grads[p] < 0)
			return -1;
	}
	return 0;
}

/* Replace the `n` gradient nodes grads[] by views into one f32 vector: each
 * flattened, all concatenated (eight at a time) into node *ret_flat, then
 * sliced and reshaped back, so that whatever reads a gradient after
 * *ret_flat reads the vector (data parallel: train_parallel.h). */
static int emit_flat_grads(struct step_ctx *sc, struct tensor *const *params, int *grads, unsigned n,
			   int *ret_flat)
{
	char pshown[NAMES_SHOWN_MAX];
	int parts[MAX_PARAMS];
	unsigned np = n;
	int64_t off = 0;

	for (unsigned k = 0; k < n; k++) {
		int64_t count = (int64_t)params[k]->count;
		struct graph_attr a = { .name = "shape", .ints = &count, .nints = 1 };

		if (params[k]->dtype != TDP_DTYPE_F32)
			return request_fail(sc->req, TDP_DTYPE_MISMATCH, "data-parallel training needs f32 "
					    "parameters; '%s' is %s", lookup_show(sc->req, params[k]->name, pshown),
					    tdp_dtype_name(params[k]->dtype));
		parts[k] = emit(sc, "reshape", &grads[k], NULL, 1, &a, 1);
		if (parts[k] < 0)
			return -1;
	}
	while (np > 1) {
		unsigned out = 0;

		for (unsigned k = 0; k < np; k += OP_MAX_INPUTS) {
			unsigned m = np - k < OP_MAX_INPUTS ? np - k : OP_MAX_INPUTS;

			parts[out] = m == 1 ? parts[k] : emit(sc, "concat", &parts[k], NULL, m, NULL, 0);
			if (parts[out++] < 0)
				return -1;
		}
		np = out;
	}
	/* Its own memory: the mean is written into it. */
	if (sc->gr->nodes[parts[0]].ctx.view && (parts[0] = emit(sc, "copy", &parts[0], NULL, 1, NULL, 0)) < 0)
		return -1;
	*ret_flat = parts[0];
	for (unsigned k = 0; k < n; k++) {
		int64_t end = off + (int64_t)params[k]->count, dims[TDP_MAX_RANK];
		struct graph_attr sl[2] = { { .name = "starts", .ints = &off, .nints = 1 },
					    { .name = "ends", .ints = &end, .nints = 1 } };
		struct graph_attr sh = { .name = "shape", .ints = dims, .nints = params[k]->rank };
		int piece = emit(sc, "slice", ret_flat, NULL, 1, sl, 2);

		for (unsigned d = 0; d < params[k]->rank; d++)
			dims[d] = (int64_t)params[k]->shape[d];
		if (piece < 0 || (grads[k] = emit(sc, "reshape", &piece, NULL, 1, &sh, 1)) < 0)
			return -1;
		off = end;
	}
	return 0;
}

/* What train.step and train.run share: the loss, the parameters, the
 * optimizer. */
struct train_spec {
	struct optimizer opt;      /* kind OPT_NONE: gradients only */
	char loss[TDP_MAX_NAME_LEN + 1];
	unsigned np;
	char names[MAX_PARAMS][TDP_MAX_NAME_LEN + 1];
	bool grads;                /* store <param>.grad */
	int fuse;                  /* fuse elementwise chains: 1, 0, -1 the device's default */
};

static int parse_spec(struct request *req, const msgpack_object *loss, const msgpack_object *params,
		      const msgpack_object *opt, const msgpack_object *grads, struct train_spec *spec)
{
	memset(spec, 0, sizeof(*spec));
	spec->opt.kind = OPT_NONE;
	if (opt && parse_optimizer(req, opt, &spec->opt) < 0)
		return -1;
	if (tdp_obj_strcpy(loss, spec->loss, sizeof(spec->loss)) < 0)
		return request_fail(req, TDP_INVALID_ARGUMENT, "loss must be a node id");
	spec->np = params->via.array.size;
	if (spec->np == 0 || spec->np > MAX_PARAMS)
		return request_fail(req, TDP_INVALID_ARGUMENT, "params must name 1 to %d tensors", MAX_PARAMS);
	/* Parameter names become store keys here (names.h); derived names
	 * built from them are in the parameter's namespace. */
	for (unsigned k = 0; k < spec->np; k++)
		if (params->via.array.ptr[k].type != MSGPACK_OBJECT_STR ||
		    names_qualify(req->cred.uid, params->via.array.ptr[k].via.str.ptr,
				  params->via.array.ptr[k].via.str.size, spec->names[k], NULL) < 0)
			return request_fail(req, TDP_INVALID_ARGUMENT, "params[%u] must be a tensor name", k);
	spec->grads = grads && grads->via.boolean;
	spec->fuse = -1;
	return 0;
}

/* Build one step's graph (feeds, the client's nodes, and with `train` the
 * backward pass and the updates) without running anything. */
static int build_step(struct request *req, const struct train_spec *spec, const msgpack_object *nodes,
		      const msgpack_object *outputs, const struct feeds *fd, int64_t step, bool train,
		      struct graph *gr, unsigned *ret_loss, double *ret_lr, int *ret_flat)
{
	struct step_ctx sc = { .req = req, .gr = gr };
	char pshown[NAMES_SHOWN_MAX];
	struct tensor *params[MAX_PARAMS];
	int grads[MAX_PARAMS];
	unsigned loss;
	double lr = 0;

	gr->req = req;
	if (feeds_emit(gr, fd) < 0 || graph_parse(gr, nodes, outputs) < 0)
		return -1;
	for (loss = 0; loss < gr->n; loss++)
		if (gr->nodes[loss].id[0] && !strcmp(gr->nodes[loss].id, spec->loss))
			break;
	if (loss == gr->n)
		return request_fail(req, TDP_INVALID_ARGUMENT, "loss names no node id");
	/* Training steps fuse elementwise chains; the loss is read back after the
	 * run. Evaluation reads metric nodes too, so it runs unfused. */
	gr->fuse = train && (spec->fuse < 0 ? graph_fuse_default(req->d->gpus[0]) : spec->fuse);
	gr->nodes[loss].keep = true;
	if (train) {
		for (unsigned k = 0; k < spec->np; k++) {
			/* A step reads its parameters and stores their updates over them. */
			if (lookup_tensor(req, "parameter", spec->names[k], ACCESS_READ | ACCESS_WRITE,
					  &params[k]) < 0)
				return -1;
			if (!op_dtype_is_float(params[k]->dtype))
				return request_fail(req, TDP_DTYPE_MISMATCH, "parameter '%s' is %s, not a float tensor",
						    lookup_show(req, spec->names[k], pshown), tdp_dtype_name(params[k]->dtype));
			for (unsigned j = 0; j < k; j++)
				if (params[j] == params[k])
					return request_fail(req, TDP_INVALID_ARGUMENT, "parameter '%s' is listed twice",
							    lookup_show(req, spec->names[k], pshown));
			/* A replica's graph reads (and autograd looks for) its own copy. */
			if (!graph_stored(gr, params[k]))
				return request_fail(req, TDP_INTERNAL, "parameter '%s' has no replica",
						    lookup_show(req, spec->names[k], pshown));
			params[k] = graph_stored(gr, params[k]);
		}
		for (unsigned i = 0; i < gr->n; i++)
			for (unsigned k = 0; k < spec->np; k++)
				if (gr->nodes[i].has_out && !strcmp(gr->nodes[i].out_name, spec->names[k]))
					return graph_node_fail(gr, i, TDP_INVALID_ARGUMENT,
							       "stores over a parameter the step updates");
		if (autograd_build(gr, loss, params, spec->np, grads) < 0)
			return -1;
		/* Data parallel: the gradients meet in one vector, averaged across
		 * devices between the two halves of the step (train_parallel.h). */
		if (ret_flat && emit_flat_grads(&sc, params, grads, spec->np, ret_flat) < 0)
			return -1;
		if (spec->opt.kind != OPT_NONE && spec->opt.clip_norm > 0 &&
		    emit_clip(&sc, spec->opt.clip_norm, grads, spec->np) < 0)
			return -1;
		for (unsigned k = 0; spec->grads && k < spec->np; k++) {
			char name[TDP_MAX_NAME_LEN + 32];

			snprintf(name, sizeof(name), "%s.grad", params[k]->name);
			if (gr->nodes[grads[k]].has_out) {
				/* The node is stored already; store a copy too. */
				grads[k] = emit(&sc, "copy", &grads[k], NULL, 1, NULL, 0);
				if (grads[k] < 0)
					return -1;
			}
			if (emit_derived_out(&sc, grads[k], name, params[k]) < 0)
				return -1;
		}
		if (spec->opt.kind != OPT_NONE) {
			lr = lr_at(&spec->opt, step);
			for (unsigned k = 0; k < spec->np; k++)
				if (emit_update(&sc, &spec->opt, params[k], grads[k], step, lr) < 0)
					return -1;
		}
	}
	*ret_loss = loss;
	*ret_lr = lr;
	return 0;
}

/* build_step, then run the graph and read the loss. Nothing is committed:
 * the caller stores results (graph_commit) and frees the graph. */
static int run_step(struct request *req, const struct train_spec *spec, const msgpack_object *nodes,
		    const msgpack_object *outputs, const struct feeds *fd, int64_t step, bool train,
		    struct graph *gr, unsigned *ret_loss, double *ret_loss_value, double *ret_lr)
{
	unsigned loss;
	double lr;

	if (build_step(req, spec, nodes, outputs, fd, step, train, gr, &loss, &lr, NULL) < 0 ||
	    graph_check_outputs(gr) < 0 || graph_execute(gr) < 0 ||
	    forward_read_scalar(req, gr, loss, ret_loss_value) < 0)
		return -1;
	if (train && !isfinite(*ret_loss_value))
		return request_fail(req, TDP_FAILED_PRECONDITION,
				    "the loss is %s at step %lld; parameters and state are unchanged",
				    isnan(*ret_loss_value) ? "NaN" : "infinite", (long long)step);
	*ret_loss = loss;
	*ret_lr = lr;
	return 0;
}

int train_model_check(struct request *req, const struct model *m)
{
	struct graph gr = { .req = req };
	struct train_spec *spec = malloc(sizeof(*spec));
	unsigned loss;
	double lr;
	int r = -1;

	if (!spec)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	if (parse_spec(req, m->loss_obj, m->params_obj, m->optimizer, NULL, spec) < 0)
		goto out;
	/* Each input is a zero placeholder of its example dtype and shape. */
	for (unsigned k = 0; k < m->ninputs; k++) {
		const struct model_input *in = &m->inputs[k];
		struct tensor *t = in->has_spec ? NULL : lookup_readable(req, in->name, strlen(in->name));
		int64_t dims[TDP_MAX_RANK] = { 0 };
		struct graph_attr z[2] = { { .name = "shape", .ints = dims },
					   { .name = "dtype", .s = tdp_dtype_name(in->has_spec ? in->dtype : 0) } };
		char why[300];
		int node;

		if (!in->has_spec && !t) {
			request_fail(req, TDP_INVALID_ARGUMENT,
				     "input '%s' is no stored tensor to check the graph with; "
				     "declare it as {\"name\", \"dtype\", \"shape\"}", in->name);
			goto out;
		}
		z[0].nints = in->has_spec ? in->rank : t->rank;
		for (unsigned d = 0; d < z[0].nints; d++)
			dims[d] = (int64_t)(in->has_spec ? in->shape[d] : t->shape[d]);
		if (t)
			z[1].s = tdp_dtype_name(t->dtype);
		node = graph_emit(&gr, "zeros", NULL, NULL, 0, z, 2, why, sizeof(why));
		if (node < 0) {
			request_fail(req, TDP_INVALID_ARGUMENT, "input '%s': %s", in->name, why);
			goto out;
		}
		snprintf(gr.nodes[node].id, sizeof(gr.nodes[node].id), "%s", in->name);
	}
	if (build_step(req, spec, m->nodes, NULL, NULL, 1, true, &gr, &loss, &lr, NULL) < 0)
		goto out;
	for (unsigned k = 0; k < m->noutputs; k++)
		if (forward_find(&gr, m->outputs[k]) < 0) {
			request_fail(req, TDP_INVALID_ARGUMENT, "outputs[%u] '%s' names no node", k, m->outputs[k]);
			goto out;
		}
	r = 0;
out:
	graph_free(&gr);
	free(spec);
	return r;
}

/* Store every result marked for storing; with `pk`, pack their names. */
static int commit_all(struct request *req, struct graph *gr, msgpack_packer *pk)
{
	char shown[NAMES_SHOWN_MAX];

	for (unsigned i = 0; i < gr->n; i++) {
		struct tensor *t;

		if (!gr->nodes[i].has_out)
			continue;
		t = graph_commit(gr, i);
		if (!t || (pk && tdp_pack_cstr(pk, lookup_show(req, t->name, shown))))
			return request_fail(req, TDP_INTERNAL, "out of memory");
	}
	return 0;
}

/* Where a step's graph comes from: a model, or the request's own nodes,
 * loss and params. p[0..3] are nodes, loss, params and optimizer. */
struct source {
	struct model *m;
	const msgpack_object *nodes, *loss, *params, *opt;
};

static int resolve_source(struct request *req, const struct param *p, const msgpack_object *model,
			  struct source *src)
{
	*src = (struct source){ .nodes = p[0].value, .loss = p[1].value, .params = p[2].value,
				.opt = p[3].value };
	if (!model) {
		for (unsigned k = 0; k < 3; k++)
			if (!p[k].value)
				return request_fail(req, TDP_INVALID_ARGUMENT,
						    "missing parameter '%s' (or give 'model')", p[k].key);
		return 0;
	}
	if (src->nodes || src->loss || src->params)
		return request_fail(req, TDP_INVALID_ARGUMENT,
				    "give either 'model' or 'nodes', 'loss' and 'params', not both");
	src->m = model_lookup(req, model);
	if (!src->m)
		return -1;
	src->nodes = src->m->nodes;
	src->loss = src->m->loss_obj;
	src->params = src->m->params_obj;
	if (!src->opt)
		src->opt = src->m->optimizer;
	return 0;
}

int train_step(struct request *req)
{
	struct param p[] = {
		{ "nodes", PARAM_ARRAY, false, NULL },
		{ "loss", PARAM_STR, false, NULL },
		{ "params", PARAM_ARRAY, false, NULL },
		{ "optimizer", PARAM_MAP, false, NULL },
		{ "step", PARAM_UINT, false, NULL },
		{ "grads", PARAM_BOOL, false, NULL },
		{ "outputs", PARAM_ARRAY, false, NULL },
		{ "model", PARAM_STR, false, NULL },
		{ "data", PARAM_MAP, false, NULL },
		{ "fuse", PARAM_BOOL, false, NULL },
	};
	struct graph gr = { .req = req };
	struct train_spec *spec;
	struct feeds fd;
	struct source src;
	uint32_t nstored = 0, ninline = 0;
	int64_t step;
	unsigned loss;
	double lr = 0, loss_value = 0;
	int r = -1;

	if (params_parse(req, p, 10) < 0 || resolve_source(req, p, p[7].value, &src) < 0)
		return -1;
	step = src.m ? src.m->step + 1 : 1;
	if (p[4].value) {
		if (p[4].value->via.u64 < 1 || p[4].value->via.u64 > INT32_MAX)
			return request_fail(req, TDP_INVALID_ARGUMENT, "step must be 1 or more");
		step = (int64_t)p[4].value->via.u64;
	}
	if (step > INT32_MAX)
		return request_fail(req, TDP_FAILED_PRECONDITION, "the model's step count is at its limit");
	if (p[8].value && feeds_parse(req, p[8].value, &fd, "data") < 0)
		return -1;
	if (src.m && model_check_feeds(req, src.m, p[8].value ? &fd : NULL, true, "data") < 0)
		return -1;
	spec = malloc(sizeof(*spec));
	if (!spec)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	if (parse_spec(req, src.loss, src.params, src.opt, p[5].value, spec) < 0)
		goto out;
	if (p[9].value)
		spec->fuse = p[9].value->via.boolean;
	if (run_step(req, spec, src.nodes, p[6].value, p[8].value ? &fd : NULL, step, true, &gr, &loss,
		     &loss_value, &lr) < 0)
		goto out;
	for (unsigned i = 0; i < gr.n; i++) {
		nstored += gr.nodes[i].has_out;
		ninline += gr.nodes[i].inline_out;
	}
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 5) ||
	    tdp_pack_cstr(req->pk, "loss") || msgpack_pack_double(req->pk, loss_value) ||
	    tdp_pack_cstr(req->pk, "step") || msgpack_pack_int64(req->pk, step) ||
	    tdp_pack_cstr(req->pk, "lr") || msgpack_pack_double(req->pk, lr) ||
	    tdp_pack_cstr(req->pk, "outputs") || msgpack_pack_map(req->pk, ninline)) {
		request_fail(req, TDP_INTERNAL, "out of memory");
		goto out;
	}
	for (unsigned i = 0; i < gr.n; i++)
		if (gr.nodes[i].inline_out &&
		    (tdp_pack_cstr(req->pk, gr.nodes[i].id) || graph_write_inline(&gr, i) < 0)) {
			if (!req->code)
				request_fail(req, TDP_INTERNAL, "out of memory");
			goto out;
		}
	if (tdp_pack_cstr(req->pk, "stored") || msgpack_pack_array(req->pk, nstored)) {
		request_fail(req, TDP_INTERNAL, "out of memory");
		goto out;
	}
	/* Everything ran and the loss is finite: now parameters and state change. */
	r = commit_all(req, &gr, req->pk);
	/* The model's count follows the steps that updated it. */
	if (r == 0 && src.m && spec->opt.kind != OPT_NONE)
		src.m->step = step;
out:
	graph_free(&gr);
	free(spec);
	return r;
}

/* ---- train.run: many steps, one per event-loop turn ---------------------- */

#define MAX_METRICS 8

struct train_job {
	struct conn_deferred def;  /* conn->deferred while the run goes on */
	struct daemon *d;
	struct conn *c;            /* NULL once the client went away */
	struct train_job *next;
	struct request req;        /* msgid, peer, where answers go */
	msgpack_packer pk;
	struct tdp_buf raw;        /* a copy of the request's params */
	msgpack_unpacked params;   /* decoded from raw */
	const msgpack_object *nodes;
	struct train_spec spec;
	struct feeds train, eval;
	bool has_eval;
	struct tensor index;       /* the minibatch's row numbers, not in the store */
	uint32_t device;           /* the data's device, where index lives */
	uint32_t devs[GPU_MAX_DEVICES]; /* data parallel: devs[0] = device, then the replicas' */
	unsigned ndev;             /* 1: one device */
	uint64_t shard;            /* rows per device per step */
	struct dp *dp;             /* the replicas (train_parallel.h), NULL on one device */
	uint32_t *perm;
	uint64_t nsamples, batch, per_epoch, total, done, epochs;
	int64_t start_step;
	uint64_t seed, progress_every, eval_every;
	bool shuffle, has_stop;
	double stop_loss, last_loss;
	char metrics[MAX_METRICS][TDP_MAX_NAME_LEN + 1];
	unsigned nmetrics;
	bool have_eval_result;
	double eval_loss, eval_metrics[MAX_METRICS];
	int64_t start_ns;
	char model[TDP_MAX_NAME_LEN + 1]; /* the model trained, "" for none */
	uint64_t model_serial;     /* its definition: a replaced model is left alone */
};

static struct train_job *jobs;

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The order of samples in `epoch`: a Fisher-Yates shuffle seeded by the run's
 * seed and the epoch, so runs are reproducible. */
static void shuffle_epoch(struct train_job *job, uint64_t epoch)
{
	uint64_t s = job->seed * 0x100000001b3ull + epoch;

	for (uint64_t i = 0; i < job->nsamples; i++)
		job->perm[i] = (uint32_t)i;
	if (!job->shuffle)
		return;
	for (uint64_t i = job->nsamples - 1; i > 0; i--) {
		uint64_t j = splitmix64(&s) % (i + 1);
		uint32_t t = job->perm[i];

		job->perm[i] = job->perm[j];
		job->perm[j] = t;
	}
}

static int notify_head(struct train_job *job, const char *method, uint32_t entries)
{
	return msgpack_pack_array(&job->pk, 3) || msgpack_pack_uint8(&job->pk, 2) ||
	       tdp_pack_cstr(&job->pk, method) || msgpack_pack_array(&job->pk, 1) ||
	       msgpack_pack_map(&job->pk, entries);
}

static int kv_num(msgpack_packer *pk, const char *k, double v)
{
	return tdp_pack_cstr(pk, k) || msgpack_pack_double(pk, v);
}

static int kv_int(msgpack_packer *pk, const char *k, uint64_t v)
{
	return tdp_pack_cstr(pk, k) || msgpack_pack_uint64(pk, v);
}

static double elapsed(const struct train_job *job)
{
	return (double)(daemon_now_ns(CLOCK_MONOTONIC) - job->start_ns) / 1e9;
}

static void notify_progress(struct train_job *job, double lr)
{
	double t = elapsed(job);

	notify_head(job, "train.progress", 9);
	kv_int(&job->pk, "step", (uint64_t)job->start_step + job->done - 1);
	kv_int(&job->pk, "run_step", job->done);
	kv_int(&job->pk, "steps", job->total);
	kv_int(&job->pk, "epoch", (job->done - 1) / job->per_epoch + 1);
	kv_int(&job->pk, "epochs", job->epochs);
	kv_num(&job->pk, "loss", job->last_loss);
	kv_num(&job->pk, "lr", lr);
	kv_num(&job->pk, "samples_per_s", t > 0 ? (double)(job->done * job->batch) / t : 0);
	kv_num(&job->pk, "elapsed", t);
}

static int write_eval(msgpack_packer *pk, struct train_job *job)
{
	if (tdp_pack_cstr(pk, "loss") || msgpack_pack_double(pk, job->eval_loss) ||
	    tdp_pack_cstr(pk, "metrics") || msgpack_pack_map(pk, job->nmetrics))
		return -1;
	for (unsigned m = 0; m < job->nmetrics; m++)
		if (kv_num(pk, job->metrics[m], job->eval_metrics[m]))
			return -1;
	return 0;
}

/* Forward pass over the whole evaluation set: loss and metrics. */
static int run_eval(struct train_job *job)
{
	struct graph gr = { .req = &job->req };
	unsigned loss;
	double lr;
	int r = run_step(&job->req, &job->spec, job->nodes, NULL, &job->eval,
			 job->start_step + (int64_t)job->done, false, &gr, &loss, &job->eval_loss, &lr);

	for (unsigned m = 0; r == 0 && m < job->nmetrics; m++) {
		unsigned i;

		for (i = 0; i < gr.n; i++)
			if (!strcmp(gr.nodes[i].id, job->metrics[m]))
				break;
		if (i == gr.n || gr.nodes[i].ctx.out.count != 1 || !op_dtype_is_float(gr.nodes[i].ctx.out.dtype))
			r = request_fail(&job->req, TDP_INVALID_ARGUMENT,
					 "eval.metrics: '%s' is no floating scalar node", job->metrics[m]);
		else
			r = forward_read_scalar(&job->req, &gr, i, &job->eval_metrics[m]);
	}
	graph_free(&gr);
	if (r < 0)
		return -1;
	job->have_eval_result = true;
	notify_head(job, "train.eval", 5);
	kv_int(&job->pk, "step", (uint64_t)job->start_step + job->done - 1);
	kv_int(&job->pk, "run_step", job->done);
	kv_int(&job->pk, "epoch", (job->done - 1) / job->per_epoch + 1);
	write_eval(&job->pk, job);
	return 0;
}

/* A data-parallel run's "devices" and "replica_max_diff" (-1: unreadable). */
static void write_parallel(struct train_job *job)
{
	struct tensor *params[MAX_PARAMS];
	double diff = -1;
	unsigned n = 0;

	for (unsigned k = 0; k < job->spec.np; k++)
		if (store_lookup(job->d->store, job->spec.names[k], strlen(job->spec.names[k]), &access_daemon,
				 0, &params[n], NULL) == 0)
			n++;
	if (n == job->spec.np)
		diff = dp_max_diff(job->dp, params, n);
	if (tdp_pack_cstr(&job->pk, "devices") || msgpack_pack_array(&job->pk, job->ndev))
		return;
	for (unsigned i = 0; i < job->ndev; i++)
		if (msgpack_pack_uint32(&job->pk, job->devs[i]))
			return;
	kv_num(&job->pk, "replica_max_diff", diff);
}

static void job_finish(struct train_job *job, const char *stopped)
{
	msgpack_packer *pk = &job->pk;
	double t = elapsed(job);

	if (tdp_write_result_head(pk, job->req.msgid) < 0 || msgpack_pack_map(pk, 7 + (job->dp ? 2 : 0)) ||
	    kv_int(pk, "steps", job->done) ||
	    kv_int(pk, "epochs", job->done / job->per_epoch) ||
	    kv_num(pk, "loss", job->last_loss) || kv_num(pk, "seconds", t) ||
	    kv_num(pk, "samples_per_s", t > 0 ? (double)(job->done * job->batch) / t : 0) ||
	    tdp_pack_cstr(pk, "stopped") || tdp_pack_cstr(pk, stopped) ||
	    tdp_pack_cstr(pk, "eval") ||
	    (job->have_eval_result ? (msgpack_pack_map(pk, 2) || write_eval(pk, job)) : msgpack_pack_nil(pk)))
		return;
	if (job->dp)
		write_parallel(job);
}

static void job_fail(struct train_job *job)
{
	job->d->requests_failed++;
	metrics_request_error(&job->req.d->metrics, job->req.slot);
	tdp_write_error(&job->pk, job->req.msgid, job->req.code ? job->req.code : TDP_INTERNAL,
			job->req.message);
}

/* One step on one device: upload the batch's rows, run, store. */
static int step_one(struct train_job *job, int64_t step, uint64_t in_epoch, double *ret_lr)
{
	struct graph gr = { .req = &job->req };
	unsigned loss;
	int r;

	r = gpu_upload(devices_of(job->d, &job->index), &job->index.alloc, job->perm + in_epoch * job->batch);
	if (r < 0)
		return request_fail(&job->req, r == -ENODEV ? TDP_DEVICE_LOST : TDP_INTERNAL,
				    "feeding the batch failed");
	r = run_step(&job->req, &job->spec, job->nodes, NULL, &job->train, step, true, &gr, &loss,
		     &job->last_loss, ret_lr);
	if (r == 0)
		r = commit_all(&job->req, &gr, NULL);
	graph_free(&gr);
	return r;
}

/* One data-parallel step (docs/devices.md): each device its shard of the
 * batch, forward and backward at once on all, the gradients averaged on
 * the host, then each device's update, at once on all. The shard's row
 * numbers, the gradients and the loss travel through each device's
 * exchange buffer inside the step's two submissions (no round trips of
 * their own). */
static int step_parallel(struct train_job *job, int64_t step, uint64_t in_epoch, double *ret_lr)
{
	struct graph gr[GPU_MAX_DEVICES];
	struct gpu_host_buffer *x[GPU_MAX_DEVICES];
	struct tensor *ix[GPU_MAX_DEVICES];
	struct graph_copy cin[GPU_MAX_DEVICES], cout[GPU_MAX_DEVICES];
	const struct dp_layout *at = &job->dp->at;
	unsigned n = job->ndev, loss[GPU_MAX_DEVICES];
	int flat[GPU_MAX_DEVICES] = { 0 }, r = 0;
	double sum = 0;

	memset(gr, 0, n * sizeof(gr[0]));
	for (unsigned i = 0; i < n; i++) {
		ix[i] = i == 0 ? &job->index : job->dp->r[i - 1].index;
		x[i] = dp_xfer(job->dp, i);
		gr[i].req = &job->req;
		gr[i].replica = i == 0 ? NULL : &job->dp->r[i - 1].view;
		memcpy((uint8_t *)x[i]->map + at->index, job->perm + in_epoch * job->batch + i * job->shard,
		       job->shard * 4);
	}
	for (unsigned i = 0; i < n; i++) {
		r = build_step(&job->req, &job->spec, job->nodes, NULL, &job->train, step, true, &gr[i],
			       &loss[i], ret_lr, &flat[i]);
		gr[i].fuse = false; /* a fused kernel could span the two halves */
		if (r < 0 || (i == 0 && (r = graph_check_outputs(&gr[0])) < 0))
			goto out;
		if (gr[i].nodes[flat[i]].ctx.out.count != job->dp->flat_count) {
			r = request_fail(&job->req, TDP_INTERNAL, "the gradients changed size during the run");
			goto out;
		}
	}
	/* Forward and backward on every device (rows in, gradients out)... */
	for (unsigned i = 0; r == 0 && i < n; i++) {
		cin[i] = (struct graph_copy){ .node = -1, .alloc = &ix[i]->alloc, .host = x[i]->buffer,
					      .offset = at->index };
		cout[i] = (struct graph_copy){ .node = flat[i], .host = x[i]->buffer, .offset = 0 };
		gr[i].copies_before = &cin[i];
		gr[i].copies_after = &cout[i];
		gr[i].ncopies_before = gr[i].ncopies_after = 1;
		r = graph_submit_part(&gr[i], 0, (unsigned)flat[i] + 1);
	}
	for (unsigned i = 0; i < n; i++)
		if (graph_wait(&gr[i]) < 0 && r == 0)
			r = -1;
	if (r < 0)
		goto out;
	/* ...the mean gradient... */
	dp_average(job->dp);
	/* ...and every device's update (mean in, loss out). */
	for (unsigned i = 0; r == 0 && i < n; i++) {
		cin[i] = (struct graph_copy){ .node = flat[i], .host = x[i]->buffer, .offset = 0 };
		cout[i] = (struct graph_copy){ .node = (int)loss[i], .host = x[i]->buffer, .offset = at->loss };
		gr[i].copies_before = &cin[i];
		gr[i].copies_after = &cout[i];
		gr[i].ncopies_before = gr[i].ncopies_after = 1;
		r = graph_submit_part(&gr[i], (unsigned)flat[i] + 1, gr[i].n);
	}
	for (unsigned i = 0; i < n; i++)
		if (graph_wait(&gr[i]) < 0 && r == 0)
			r = -1;
	if (r < 0)
		goto out;
	for (unsigned i = 0; i < n; i++)
		sum += forward_scalar_value(gr[i].nodes[loss[i]].ctx.out.dtype, (uint8_t *)x[i]->map + at->loss);
	job->last_loss = sum / n;
	if (!isfinite(job->last_loss)) {
		r = request_fail(&job->req, TDP_FAILED_PRECONDITION,
				 "the loss is %s at step %lld; parameters and state are unchanged",
				 isnan(job->last_loss) ? "NaN" : "infinite", (long long)step);
		goto out;
	}
	r = commit_all(&job->req, &gr[0], NULL);
	for (unsigned i = 1; r == 0 && i < n; i++)
		if (dp_commit(job->dp, &job->dp->r[i - 1], &gr[i]) < 0)
			r = request_fail(&job->req, TDP_INTERNAL, "out of memory");
out:
	for (unsigned i = 0; i < n; i++)
		graph_free(&gr[i]);
	return r;
}

/* One training step of `job`. Returns true while the job has more to do. */
static bool job_step(struct train_job *job)
{
	uint64_t in_epoch = job->done % job->per_epoch;
	int64_t step = job->start_step + (int64_t)job->done;
	double lr = 0;

	if (in_epoch == 0)
		shuffle_epoch(job, job->done / job->per_epoch);
	job->req.code = 0;
	if ((job->dp ? step_parallel(job, step, in_epoch, &lr) : step_one(job, step, in_epoch, &lr)) < 0) {
		job_fail(job);
		return false;
	}
	job->done++;
	if (job->model[0]) {
		struct model *m = models_find_serial(job->d->models, job->model, job->model_serial);

		if (m)
			m->step = step;
	}
	if (job->done % job->progress_every == 0 || job->done == job->total)
		notify_progress(job, lr);
	if (job->has_eval && (job->done % job->eval_every == 0 || job->done == job->total) &&
	    run_eval(job) < 0) {
		job_fail(job);
		return false;
	}
	if (job->has_stop && job->last_loss <= job->stop_loss) {
		job_finish(job, "stop_loss");
		return false;
	}
	if (job->done == job->total) {
		job_finish(job, "done");
		return false;
	}
	return true;
}

static void job_free(struct train_job *job)
{
	dp_free(job->dp);
	gpu_memory_free(devices_of(job->d, &job->index), &job->index.alloc);
	msgpack_unpacked_destroy(&job->params);
	tdp_buf_free(&job->raw);
	free(job->perm);
	free(job);
}

/* The job's client went away (conn_deferred.cancel): the run stops at its
 * next turn, where train_jobs_run frees it. */
static void train_job_cancel(struct conn_deferred *def)
{
	struct train_job *job = (struct train_job *)((char *)def - offsetof(struct train_job, def));

	job->c = NULL;
}

bool train_jobs_run(void *data)
{
	struct train_job **pp = &jobs;
	bool more = false;

	(void)data;
	while (*pp) {
		struct train_job *job = *pp;
		bool go_on = job->c != NULL;

		if (go_on && !conn_backlogged(job->c))
			go_on = job_step(job);
		if (job->c)
			conn_kick(job->c);
		if (!go_on) {
			if (job->c) {
				job->c->deferred = NULL;
				conn_kick(job->c);
			}
			*pp = job->next;
			job_free(job);
			continue;
		}
		more = true;
		pp = &job->next;
	}
	return more;
}

void train_jobs_free(void)
{
	while (jobs) {
		struct train_job *job = jobs;

		jobs = job->next;
		job_free(job);
	}
}

unsigned train_jobs_abort(int code, const char *message)
{
	unsigned n = 0;

	while (jobs) {
		struct train_job *job = jobs;

		jobs = job->next;
		if (job->c) {
			request_fail(&job->req, code, "%s", message);
			job_fail(job);
			job->c->deferred = NULL;
			conn_kick(job->c);
		}
		job_free(job);
		n++;
	}
	return n;
}

/* Parse the run's own parameters (data, sizes, eval...) into `job`. */
static int job_setup(struct request *req, struct train_job *job, const struct param *p)
{
	const msgpack_object *eval = p[10].value;
	struct tensor *first;
	uint64_t epochs = p[6].value ? p[6].value->via.u64 : 1;

	if (feeds_parse(req, p[4].value, &job->train, "data") < 0)
		return -1;
	if (lookup_tensor(req, "data", job->train.f[0].src, ACCESS_READ, &first) < 0)
		return -1;
	if (first->rank == 0)
		return request_fail(req, TDP_NOT_FOUND, "data: '%s' is no stored tensor with rows",
				    job->train.f[0].src);
	job->nsamples = first->shape[0];
	job->device = first->device;
	for (unsigned k = 1; k < job->train.n; k++) {
		struct tensor *t;

		if (lookup_tensor(req, "data", job->train.f[k].src, ACCESS_READ, &t) < 0)
			return -1;
		if (t->rank == 0 || t->shape[0] != job->nsamples)
			return request_fail(req, TDP_SHAPE_MISMATCH,
					    "data: '%s' must be stored with %llu rows like '%s'",
					    job->train.f[k].src, (unsigned long long)job->nsamples,
					    job->train.f[0].src);
	}
	job->batch = p[5].value->via.u64;
	if (job->batch == 0 || job->batch > job->nsamples || job->nsamples > INT32_MAX)
		return request_fail(req, TDP_INVALID_ARGUMENT, "batch_size must be 1 to %llu (the rows of the data)",
				    (unsigned long long)job->nsamples);
	job->per_epoch = job->nsamples / job->batch; /* the last partial batch is dropped */
	if (p[7].value) {
		job->total = p[7].value->via.u64;
		if (p[6].value)
			return request_fail(req, TDP_INVALID_ARGUMENT, "give epochs or steps, not both");
	} else {
		job->total = epochs * job->per_epoch;
	}
	if (job->total == 0 || job->total > 100000000)
		return request_fail(req, TDP_INVALID_ARGUMENT, "a run has 1 to 100000000 steps");
	job->epochs = (job->total + job->per_epoch - 1) / job->per_epoch;
	job->seed = p[8].value ? p[8].value->via.u64 : 0;
	job->shuffle = !p[9].value || p[9].value->via.boolean;
	if (p[11].value)
		job->start_step = (int64_t)p[11].value->via.u64;
	if (job->start_step < 1 || job->start_step > INT32_MAX)
		return request_fail(req, TDP_INVALID_ARGUMENT, "start_step must be 1 or more");
	job->progress_every = p[12].value ? p[12].value->via.u64 : (job->total >= 100 ? job->total / 100 : 1);
	if (job->progress_every == 0)
		return request_fail(req, TDP_INVALID_ARGUMENT, "progress_every must be 1 or more");
	if (p[13].value) {
		job->has_stop = true;
		job->stop_loss = params_number(p[13].value);
	}
	if (eval) {
		const msgpack_object *every = tdp_map_find(eval, "every"), *metrics = tdp_map_find(eval, "metrics");

		for (uint32_t k = 0; k < eval->via.map.size; k++)
			if (!tdp_obj_str_eq(&eval->via.map.ptr[k].key, "data") &&
			    !tdp_obj_str_eq(&eval->via.map.ptr[k].key, "every") &&
			    !tdp_obj_str_eq(&eval->via.map.ptr[k].key, "metrics"))
				return request_fail(req, TDP_INVALID_ARGUMENT, "eval takes data, every and metrics");
		if (feeds_parse(req, tdp_map_find(eval, "data"), &job->eval, "eval.data") < 0)
			return -1;
		job->has_eval = true;
		job->eval_every = job->per_epoch;
		if (every && (tdp_obj_uint(every, &job->eval_every) < 0 || job->eval_every == 0))
			return request_fail(req, TDP_INVALID_ARGUMENT, "eval.every must be 1 or more");
		if (metrics) {
			if (metrics->type != MSGPACK_OBJECT_ARRAY || metrics->via.array.size > MAX_METRICS)
				return request_fail(req, TDP_INVALID_ARGUMENT, "eval.metrics: up to %d node ids",
						    MAX_METRICS);
			job->nmetrics = metrics->via.array.size;
			for (unsigned m = 0; m < job->nmetrics; m++)
				if (tdp_obj_strcpy(&metrics->via.array.ptr[m], job->metrics[m],
						   sizeof(job->metrics[m])) < 0)
					return request_fail(req, TDP_INVALID_ARGUMENT, "eval.metrics: node ids");
		}
	}
	return 0;
}

/* train.run's `devices` (docs/devices.md): none or one device id means one
 * device; two or more, data parallel with the batch split evenly. */
static int parse_devices(struct request *req, struct train_job *job, const msgpack_object *o)
{
	uint32_t n = o ? o->via.array.size : 0;

	job->ndev = 1;
	job->devs[0] = job->device;
	job->shard = job->batch;
	if (n == 0)
		return 0;
	if (n > req->d->ngpus)
		return request_fail(req, TDP_INVALID_ARGUMENT, "devices: %u ids, but tensord uses %u devices",
				    n, req->d->ngpus);
	for (uint32_t i = 0; i < n; i++) {
		char what[32];

		snprintf(what, sizeof(what), "devices[%u]", i);
		if (devices_param(req, &o->via.array.ptr[i], what, &job->devs[i]) < 0)
			return -1;
		for (uint32_t j = 0; j < i; j++)
			if (job->devs[j] == job->devs[i])
				return request_fail(req, TDP_INVALID_ARGUMENT, "devices: %u is listed twice",
						    job->devs[i]);
	}
	if (job->devs[0] != job->device)
		return request_fail(req, TDP_FAILED_PRECONDITION, "devices[0] must be the device the data "
				    "and parameters are on (%u), not %u", job->device, job->devs[0]);
	if (job->batch % n)
		return request_fail(req, TDP_INVALID_ARGUMENT, "batch_size %llu does not split evenly over "
				    "%u devices", (unsigned long long)job->batch, n);
	job->ndev = n;
	job->shard = job->batch / n;
	return 0;
}

/* Copy what a step reads (the first step's stored inputs) to the replicas. */
static int start_replicas(struct request *req, struct train_job *job)
{
	struct graph gr = { .req = req };
	struct tensor **copy = NULL;
	unsigned ncopy = 0, loss;
	double lr;
	int flat, r;

	r = build_step(req, &job->spec, job->nodes, NULL, &job->train, job->start_step, true, &gr, &loss,
		       &lr, &flat);
	if (r == 0 && !(copy = calloc(gr.n * OP_MAX_INPUTS + 1, sizeof(*copy))))
		r = request_fail(req, TDP_INTERNAL, "out of memory");
	for (unsigned i = 0; r == 0 && i < gr.n; i++)
		for (unsigned k = 0; k < gr.nodes[i].ctx.ninputs; k++) {
			struct tensor *t = gr.nodes[i].src[k] < 0 ? gr.nodes[i].stored[k] : NULL;
			unsigned j;

			if (!t || t == &job->index)
				continue;
			for (j = 0; j < ncopy && copy[j] != t; j++)
				;
			if (j == ncopy)
				copy[ncopy++] = t;
		}
	if (r == 0) {
		r = dp_start(req->d, job->devs, job->ndev, copy, ncopy, job->shard,
			     gr.nodes[flat].ctx.out.count, &job->dp);
		if (r < 0)
			r = request_fail(req, r == -ENODEV ? TDP_DEVICE_LOST : TDP_RESOURCE_EXHAUSTED,
					 "copying the parameters and data to the other devices failed (%s)",
					 strerror(-r));
	}
	free(copy);
	graph_free(&gr);
	return r;
}

int train_run(struct request *req)
{
	struct param p[] = {
		{ "nodes", PARAM_ARRAY, false, NULL },      /* 0 */
		{ "loss", PARAM_STR, false, NULL },
		{ "params", PARAM_ARRAY, false, NULL },
		{ "optimizer", PARAM_MAP, false, NULL },
		{ "data", PARAM_MAP, true, NULL },          /* 4 */
		{ "batch_size", PARAM_UINT, true, NULL },
		{ "epochs", PARAM_UINT, false, NULL },
		{ "steps", PARAM_UINT, false, NULL },
		{ "seed", PARAM_UINT, false, NULL },        /* 8 */
		{ "shuffle", PARAM_BOOL, false, NULL },
		{ "eval", PARAM_MAP, false, NULL },
		{ "start_step", PARAM_UINT, false, NULL },
		{ "progress_every", PARAM_UINT, false, NULL }, /* 12 */
		{ "stop_loss", PARAM_NUMBER, false, NULL },
		{ "model", PARAM_STR, false, NULL },        /* 14 */
		{ "devices", PARAM_ARRAY, false, NULL },
	};
	struct source src;
	struct train_job *job;
	msgpack_sbuffer sb;
	msgpack_packer spk;
	struct graph gr = { .req = req };
	unsigned loss;
	double lv, lr;
	int r;

	if (params_parse(req, p, 16) < 0 || resolve_source(req, p, p[14].value, &src) < 0)
		return -1;
	if (!req->conn)
		return request_fail(req, TDP_INTERNAL, "train.run needs a connection");
	job = calloc(1, sizeof(*job));
	if (!job)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	job->d = req->d;
	msgpack_unpacked_init(&job->params);
	job->start_step = src.m ? src.m->step + 1 : 1;
	if (parse_spec(req, src.loss, src.params, src.opt, NULL, &job->spec) < 0 ||
	    job_setup(req, job, p) < 0 || parse_devices(req, job, p[15].value) < 0)
		goto fail;
	if (src.m) {
		if (model_check_feeds(req, src.m, &job->train, true, "data") < 0 ||
		    (job->has_eval && model_check_feeds(req, src.m, &job->eval, true, "eval.data") < 0))
			goto fail;
		strcpy(job->model, src.m->name);
		job->model_serial = src.m->serial;
	}
	if (job->spec.opt.kind == OPT_NONE)
		job->spec.opt = (struct optimizer){ .kind = OPT_SGD, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999,
						    .eps = 1e-8, .gamma = 0.1, .step_size = 1 };
	if (!job->spec.opt.schedule[0])
		strcpy(job->spec.opt.schedule, "constant");
	/* Keep the request's params: the steps build their graphs from them. */
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&spk, &sb, msgpack_sbuffer_write);
	if (msgpack_pack_array(&spk, 2) || msgpack_pack_object(&spk, *req->params) ||
	    (src.m ? msgpack_pack_object(&spk, src.m->u.data) : msgpack_pack_nil(&spk)) ||
	    tdp_buf_append(&job->raw, sb.data, sb.size) < 0) {
		msgpack_sbuffer_destroy(&sb);
		request_fail(req, TDP_INTERNAL, "out of memory");
		goto fail;
	}
	msgpack_sbuffer_destroy(&sb);
	if (tdp_unpack(&job->params, tdp_buf_head(&job->raw), tdp_buf_len(&job->raw)) < 0) {
		request_fail(req, TDP_INTERNAL, "cannot keep the parameters");
		goto fail;
	}
	job->nodes = tdp_map_find(&job->params.data.via.array.ptr[src.m ? 1 : 0], "nodes");
	job->perm = malloc(job->nsamples * sizeof(*job->perm));
	/* The minibatch's row numbers live with the data. */
	job->index = (struct tensor){ .name = "#index", .name_len = 6, .dtype = TDP_DTYPE_I32, .rank = 1,
				      .shape = { job->shard }, .count = job->shard, .bytes = job->shard * 4,
				      .device = job->device };
	if (!job->perm || gpu_memory_alloc(devices_of(req->d, &job->index), job->index.bytes,
					   &job->index.alloc) < 0) {
		request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of memory for the run");
		goto fail;
	}
	job->train.index = &job->index;
	/* Check the whole graph once now, so a bad model fails at once. */
	shuffle_epoch(job, 0);
	r = gpu_upload(devices_of(req->d, &job->index), &job->index.alloc, job->perm);
	if (r < 0 || run_step(req, &job->spec, job->nodes, NULL, &job->train, job->start_step, false,
			      &gr, &loss, &lv, &lr) < 0) {
		if (r < 0)
			request_fail(req, TDP_INTERNAL, "feeding the batch failed");
		graph_free(&gr);
		goto fail;
	}
	graph_free(&gr);
	if (job->ndev > 1 && start_replicas(req, job) < 0)
		goto fail;
	job->req = *req;
	job->req.params = NULL;
	job->req.method = "train.run";
	job->c = req->conn;
	msgpack_packer_init(&job->pk, &job->c->out, tdp_buf_msgpack_write);
	job->req.pk = &job->pk;
	job->req.out = &job->c->out;
	job->start_ns = daemon_now_ns(CLOCK_MONOTONIC);
	job->def.cancel = train_job_cancel;
	job->c->deferred = &job->def;
	job->next = jobs;
	jobs = job;
	loop_wake_idle(req->d->loop);
	return REQUEST_DEFERRED;
fail:
	job_free(job);
	return -1;
}
