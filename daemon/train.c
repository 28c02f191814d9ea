#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "daemon.h"
#include "dtype.h"
#include "gpu/transfer.h"
#include "graph.h"
#include "graph_core.h"
#include "pack.h"
#include "params.h"
#include "rpc.h"
#include "status.h"
#include "store.h"
#include "tensor_meta.h"

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
	    step_size < 1 || warmup < 0 || total < 0)
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

/* A stored state tensor `<param><suffix>`, or a zeros node shaped like the
 * parameter when it does not exist yet (first step). Sets *ref and *stored. */
static int state_input(struct step_ctx *sc, struct tensor *p, const char *suffix, char *name,
		       int *ref, struct tensor **stored)
{
	struct tensor *s;

	snprintf(name, TDP_MAX_NAME_LEN + 32, "%s%s", p->name, suffix);
	s = store_find(sc->req->d->store, name, strlen(name));
	if (s && s->dtype == p->dtype && s->count == p->count) {
		*ref = -1;
		*stored = s;
		return 1;
	}
	*stored = NULL;
	return 0;
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

		if (opt->momentum > 0 && state_input(sc, p, ".momentum_buffer", n1, &refs[2], &st[2]))
			n = 3;
		r = emit(sc, "sgd_param", refs, st, n, a, 5);
		if (r < 0 || emit_stored_out(sc, r, p->name) < 0)
			return -1;
		if (opt->momentum > 0) {
			int br[3] = { g, -1, refs[2] };
			struct tensor *bs[3] = { NULL, p, st[2] };

			snprintf(n1, sizeof(n1), "%s.momentum_buffer", p->name);
			r = emit(sc, "sgd_buf", br, bs, n, a + 1, 3);
			if (r < 0 || emit_stored_out(sc, r, n1) < 0)
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
		if (v < 0 || emit_stored_out(sc, m, n1) < 0 || emit_stored_out(sc, v, n2) < 0)
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

/* The loss value, read back from the device. */
static int read_loss(struct step_ctx *sc, unsigned loss, double *ret)
{
	struct node *nd = &sc->gr->nodes[loss];
	uint8_t b[4] = { 0 };
	uint32_t u = 0;
	float f;
	int r = gpu_download(sc->req->d->gpu, nd->result, b);

	if (r < 0)
		return request_fail(sc->req, r == -ENODEV ? TDP_DEVICE_LOST : TDP_INTERNAL,
				    "reading the loss failed");
	switch (nd->ctx.out.dtype) {
	case TDP_DTYPE_F32:
		memcpy(&f, b, 4);
		*ret = f;
		return 0;
	case TDP_DTYPE_BF16:
		u = (uint32_t)(b[0] | b[1] << 8) << 16;
		memcpy(&f, &u, 4);
		*ret = f;
		return 0;
	default: { /* f16 */
		unsigned h = b[0] | b[1] << 8, e = (h >> 10) & 31, m = h & 1023;
		double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 1024, (int)e - 25);

		*ret = (h & 0x8000) ? -v : v;
		return 0;
	}
	}
}

int train_step(struct request *req)
{
	struct param p[] = {
		{ "nodes", PARAM_ARRAY, true, NULL },
		{ "loss", PARAM_STR, true, NULL },
		{ "params", PARAM_ARRAY, true, NULL },
		{ "optimizer", PARAM_MAP, false, NULL },
		{ "step", PARAM_UINT, false, NULL },
		{ "grads", PARAM_BOOL, false, NULL },
		{ "outputs", PARAM_ARRAY, false, NULL },
	};
	struct graph gr = { .req = req };
	struct step_ctx sc = { .req = req, .gr = &gr };
	struct optimizer opt = { .kind = OPT_NONE };
	struct tensor *params[MAX_PARAMS];
	int grads[MAX_PARAMS];
	uint32_t np, nstored = 0, ninline = 0;
	int64_t step = 1;
	unsigned loss;
	double lr = 0, loss_value = 0;
	int r = -1;

	if (params_parse(req, p, 7) < 0)
		return -1;
	if (p[3].value && parse_optimizer(req, p[3].value, &opt) < 0)
		return -1;
	if (p[4].value) {
		if (p[4].value->via.u64 < 1 || p[4].value->via.u64 > INT32_MAX)
			return request_fail(req, TDP_INVALID_ARGUMENT, "step must be 1 or more");
		step = (int64_t)p[4].value->via.u64;
	}
	np = p[2].value->via.array.size;
	if (np == 0 || np > MAX_PARAMS)
		return request_fail(req, TDP_INVALID_ARGUMENT, "params must name 1 to %d tensors", MAX_PARAMS);
	for (uint32_t k = 0; k < np; k++) {
		const msgpack_object *o = &p[2].value->via.array.ptr[k];
		char name[TDP_MAX_NAME_LEN + 1];

		if (tdp_obj_strcpy(o, name, sizeof(name)) < 0 ||
		    !(params[k] = store_find(req->d->store, name, strlen(name))))
			return request_fail(req, TDP_NOT_FOUND, "params[%u] is no stored tensor", k);
		if (!op_dtype_is_float(params[k]->dtype))
			return request_fail(req, TDP_DTYPE_MISMATCH, "parameter '%s' is %s, not a float tensor",
					    name, tdp_dtype_name(params[k]->dtype));
		for (uint32_t j = 0; j < k; j++)
			if (params[j] == params[k])
				return request_fail(req, TDP_INVALID_ARGUMENT, "parameter '%s' is listed twice", name);
	}
	if (graph_parse(&gr, p[0].value, p[6].value) < 0)
		goto out;
	for (loss = 0; loss < gr.n; loss++)
		if (gr.nodes[loss].id[0] && tdp_obj_str_eq(p[1].value, gr.nodes[loss].id))
			break;
	if (loss == gr.n) {
		request_fail(req, TDP_INVALID_ARGUMENT, "loss names no node id");
		goto out;
	}
	for (unsigned i = 0; i < gr.n; i++)
		for (uint32_t k = 0; k < np; k++)
			if (gr.nodes[i].has_out && !strcmp(gr.nodes[i].out_name, params[k]->name)) {
				graph_node_fail(&gr, i, TDP_INVALID_ARGUMENT,
						"stores over a parameter the step updates");
				goto out;
			}
	if (autograd_build(&gr, loss, params, np, grads) < 0)
		goto out;
	if (opt.kind != OPT_NONE && opt.clip_norm > 0 && emit_clip(&sc, opt.clip_norm, grads, np) < 0)
		goto out;
	if (p[5].value && p[5].value->via.boolean) {
		for (uint32_t k = 0; k < np; k++) {
			char name[TDP_MAX_NAME_LEN + 32];

			snprintf(name, sizeof(name), "%s.grad", params[k]->name);
			if (gr.nodes[grads[k]].has_out || gr.nodes[grads[k]].aliased) {
				/* The node is shared; store a copy. */
				grads[k] = emit(&sc, "copy", &grads[k], NULL, 1, NULL, 0);
				if (grads[k] < 0)
					goto out;
			}
			if (emit_stored_out(&sc, grads[k], name) < 0)
				goto out;
		}
	}
	if (opt.kind != OPT_NONE) {
		lr = lr_at(&opt, step);
		for (uint32_t k = 0; k < np; k++)
			if (emit_update(&sc, &opt, params[k], grads[k], step, lr) < 0)
				goto out;
	}
	if (graph_check_outputs(&gr) < 0 || graph_execute(&gr) < 0 || read_loss(&sc, loss, &loss_value) < 0)
		goto out;
	if (!isfinite(loss_value)) {
		request_fail(req, TDP_FAILED_PRECONDITION,
			     "the loss is %s at step %lld; parameters and state are unchanged",
			     isnan(loss_value) ? "NaN" : "infinite", (long long)step);
		goto out;
	}
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
	for (unsigned i = 0; i < gr.n; i++) {
		struct tensor *t;

		if (!gr.nodes[i].has_out)
			continue;
		t = graph_commit(&gr, i);
		if (!t || tdp_pack_cstr(req->pk, t->name)) {
			request_fail(req, TDP_INTERNAL, "out of memory");
			goto out;
		}
	}
	r = 0;
out:
	graph_free(&gr);
	return r;
}
