/* train.step (docs/protocol.md, "Training"): read the request, build and
 * run one step (train/step.h), answer with the loss, the inline outputs and
 * the names stored. */
#include "methods/methods_train.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/metrics.h"
#include "buf.h"
#include "daemon.h"
#include "dtype.h"
#include "engine/forward.h"
#include "engine/graph_core.h"
#include "methods/async_request.h"
#include "methods/deferred_answer.h"
#include "methods/methods_graph.h"
#include "methods/methods_model.h"
#include "pack.h"
#include "rpc.h"
#include "methods/params.h"
#include "status.h"
#include "store/lookup.h"
#include "store/model.h"
#include "store/names.h"
#include "train/step.h"

int train_resolve_source(struct request *req, const char *model, struct source *src)
{
	const msgpack_object *given[3] = { src->nodes, src->loss, src->params };
	static const char *const key[3] = { "nodes", "loss", "params" };

	src->m = NULL;
	if (!model) {
		for (unsigned k = 0; k < 3; k++)
			if (!given[k])
				return request_fail(req, TDP_INVALID_ARGUMENT,
						    "missing parameter '%s' (or give 'model')", key[k]);
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

/* A train.step answered when its submission completed (async_request.h):
 * the loss is read, checked and the results committed only then. */
struct step_job {
	struct async_req a;
	struct daemon *d;
	struct graph gr;
	struct train_spec *spec;
	unsigned loss;
	int found, scale;                   /* precision f16: step_nodes' (-1: none) */
	int64_t step;
	double lr;
	char model[TDP_MAX_NAME_LEN + 1];   /* "" without a model */
	uint64_t serial;                    /* the model's definition it trains */
	bool pending;                       /* counted in the model's steps_pending */
	bool profile;                       /* answer with gpu_ns and dispatches */
	/* Tensor memory the host cannot map: the loss (at 0; precision f16's
	 * skipped flag at 8 and scale at 12) and each inline
	 * output (at off[i]) are copied here at the end of the step's own
	 * submission, so nothing is read back after it. */
	struct gpu_device *xg;
	struct gpu_host_buffer x;
	uint64_t *off;
	struct graph_copy *copies;
};

/* A train.step of a model that has another connection's step running
 * (docs/training.md, "Concurrent steps"): deferred with a copy of its
 * params, and served when that step is released, in arrival order. */
struct step_waiter {
	struct deferred_answer da;          /* da.req.params: `u`'s */
	struct daemon *d;
	char model[TDP_MAX_NAME_LEN + 1];
	uint64_t serial;                    /* the definition whose step it waits for */
	struct tdp_buf buf;                 /* the params, packed */
	msgpack_unpacked u;                 /* ... and decoded: da.req.params */
	struct step_waiter *next;
};

/* Every waiting train.step is on d->step_waiters, in arrival order. */
static void waiter_free(struct step_waiter *w)
{
	struct step_waiter **pp;

	for (pp = &w->d->step_waiters; *pp && *pp != w; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = w->next;
	msgpack_unpacked_destroy(&w->u);
	tdp_buf_free(&w->buf);
	free(w);
}

/* Its client went away: it never ran, and never will. */
static void waiter_cancel(struct deferred_answer *da)
{
	waiter_free((struct step_waiter *)da);
}

static int train_step_serve(struct request *req);

/* Serve waiter `w` now (unlinked by the caller): as a new request on its
 * connection, answered now or deferred again. */
static void waiter_run(struct step_waiter *w)
{
	size_t mark = deferred_answer_mark(&w->da);
	int r;

	r = train_step_serve(&w->da.req);
	if (r < 0)
		deferred_answer_fail(&w->da, mark);
	/* Deferred again: the connection now waits for the step's own answer. */
	if (r != REQUEST_DEFERRED)
		deferred_answer_done(&w->da);
	msgpack_unpacked_destroy(&w->u);
	tdp_buf_free(&w->buf);
	free(w);
}

/* A step of model `name` (definition `serial`) was released: serve the
 * steps waiting for it, until one of them runs (or none is left). */
static void waiters_run(struct daemon *d, const char *name, uint64_t serial)
{
	for (;;) {
		struct model *m = models_find_serial(d->models, name, serial);
		struct step_waiter **pp, *w;

		if (m && m->steps_pending)
			return;
		for (pp = &d->step_waiters; *pp; pp = &(*pp)->next)
			if ((*pp)->d == d && (*pp)->serial == serial && !strcmp((*pp)->model, name))
				break;
		w = *pp;
		if (!w)
			return;
		*pp = w->next;
		waiter_run(w);
	}
}

/* Defer `req` until the running step of `m` is released. Returns
 * REQUEST_DEFERRED or request_fail. */
static int step_wait(struct request *req, const struct model *m)
{
	struct step_waiter *w = calloc(1, sizeof(*w)), **pp;
	msgpack_packer pk;
	size_t off = 0;

	if (!w)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	w->d = req->call.d;
	msgpack_packer_init(&pk, &w->buf, tdp_buf_msgpack_write);
	msgpack_unpacked_init(&w->u);
	if (!req->params || msgpack_pack_object(&pk, *req->params) ||
	    msgpack_unpack_next(&w->u, (const char *)tdp_buf_head(&w->buf), tdp_buf_len(&w->buf), &off) !=
		    MSGPACK_UNPACK_SUCCESS) {
		waiter_free(w);
		return request_fail(req, TDP_INTERNAL, "out of memory");
	}
	if (deferred_answer_start(&w->da, req, waiter_cancel) < 0) {
		waiter_free(w);
		return -1;
	}
	w->da.req.params = &w->u.data;
	w->da.req.fds = NULL;
	w->da.req.nfds = 0;
	strcpy(w->model, m->name);
	w->serial = m->serial;
	for (pp = &w->d->step_waiters; *pp; pp = &(*pp)->next)
		;
	*pp = w;
	return REQUEST_DEFERRED;
}

static void step_release(struct async_req *a)
{
	struct step_job *j = (struct step_job *)a;
	char name[TDP_MAX_NAME_LEN + 1];
	struct daemon *d = j->d;
	uint64_t serial = j->serial;
	bool pending = j->pending;

	if (pending) {
		struct model *m = models_find_serial(d->models, j->model, j->serial);

		if (m && m->steps_pending)
			m->steps_pending--;
		strcpy(name, j->model);
	}
	graph_free(&j->gr);
	if (j->xg)
		gpu_host_buffer_put(j->xg, &j->x);
	free(j->off);
	free(j->copies);
	free(j->spec);
	free(j);
	if (pending)
		waiters_run(d, name, serial);
}

/* Scalar node `node` (f32) of the step that ran: from the host buffer at
 * `off` where the step copied it there, else read back; 0 when `node` is
 * -1. Returns 0 or -1 after td_fail. */
static int step_scalar(struct request *req, struct step_job *j, int node, uint64_t off, double *ret)
{
	if (node < 0) {
		*ret = 0;
		return 0;
	}
	if (j->x.map) {
		*ret = forward_scalar_value(TDP_DTYPE_F32, (const uint8_t *)j->x.map + off);
		return 0;
	}
	return forward_read_scalar(&req->call, &j->gr, (unsigned)node, ret);
}

/* The step ran (or failed): read the loss, answer, and only when it is
 * finite store the parameters, the state and the model's step count. */
static int step_finish(struct async_req *a, struct request *req)
{
	struct step_job *j = (struct step_job *)a;
	struct graph *gr = &j->gr;
	uint32_t nstored = 0, ninline = 0;
	double loss_value, found, scale;
	bool scaled = j->scale >= 0;
	struct model *m;

	if (graph_wait(gr) < 0)
		return -1;
	if (j->x.map)
		loss_value = forward_scalar_value(gr->nodes[j->loss].ctx.out.dtype, (const uint8_t *)j->x.map);
	else if (forward_read_scalar(&req->call, gr, j->loss, &loss_value) < 0)
		return -1;
	if (!isfinite(loss_value))
		return request_fail(req, TDP_FAILED_PRECONDITION,
				    "the loss is %s at step %lld; parameters and state are unchanged",
				    isnan(loss_value) ? "NaN" : "infinite", (long long)j->step);
	if (step_scalar(req, j, j->found, 8, &found) < 0 || step_scalar(req, j, j->scale, 12, &scale) < 0)
		return -1;
	for (unsigned i = 0; i < gr->n; i++) {
		nstored += gr->nodes[i].has_out;
		ninline += gr->nodes[i].inline_out;
	}
	if (tdp_write_result_head(req->pk, req->msgid) < 0 ||
	    msgpack_pack_map(req->pk, 5 + 3 * j->profile + 2 * scaled) ||
	    (scaled && (tdp_pack_cstr(req->pk, "skipped") ||
			(found != 0 ? msgpack_pack_true(req->pk) : msgpack_pack_false(req->pk)) ||
			tdp_pack_cstr(req->pk, "loss_scale") || msgpack_pack_double(req->pk, scale))) ||
	    (j->profile && (tdp_pack_cstr(req->pk, "gpu_ns") || msgpack_pack_uint64(req->pk, gr->gpu_ns) ||
			    tdp_pack_cstr(req->pk, "dispatches") || msgpack_pack_uint64(req->pk, gr->dispatches) ||
			    tdp_pack_cstr(req->pk, "peak_bytes") || msgpack_pack_uint64(req->pk, gr->peak_bytes))) ||
	    tdp_pack_cstr(req->pk, "loss") || msgpack_pack_double(req->pk, loss_value) ||
	    tdp_pack_cstr(req->pk, "step") || msgpack_pack_int64(req->pk, j->step) ||
	    tdp_pack_cstr(req->pk, "lr") || msgpack_pack_double(req->pk, j->lr) ||
	    tdp_pack_cstr(req->pk, "outputs") || msgpack_pack_map(req->pk, ninline))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	for (unsigned i = 0; i < gr->n; i++)
		if (gr->nodes[i].inline_out &&
		    (tdp_pack_cstr(req->pk, gr->nodes[i].id) ||
		     graph_pack_result_from(req, gr, i, 0, j->x.map ? (const uint8_t *)j->x.map + j->off[i] : NULL) < 0)) {
			if (!td_failed(&req->call.err))
				request_fail(req, TDP_INTERNAL, "out of memory");
			return -1;
		}
	if (tdp_pack_cstr(req->pk, "stored") || msgpack_pack_array(req->pk, nstored))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	for (unsigned i = 0; i < gr->n; i++) {
		char shown[NAMES_SHOWN_MAX];

		if (gr->nodes[i].has_out &&
		    tdp_pack_cstr(req->pk, lookup_show(&req->call, gr->nodes[i].out_name, shown)))
			return request_fail(req, TDP_INTERNAL, "out of memory");
	}
	/* Everything ran and the loss is finite: now parameters and state change. */
	gr->call = &req->call;
	if (graph_commit_all(gr) < 0)
		return -1;
	/* The model's count follows the steps that updated it (a model
	 * redefined meanwhile is another model: its count stays). */
	m = j->model[0] ? models_find_serial(j->d->models, j->model, j->serial) : NULL;
	if (m && j->spec->opt.kind != OPT_NONE && j->spec->apply)
		m->step = j->step;
	return 0;
}

/* On a device whose tensor memory the host cannot map, have the step's
 * submission copy its loss and inline outputs to a host buffer at its end
 * (one submission, no read-backs after it). Nothing to do where the memory
 * is mapped or the graph spans devices. Returns 0 or -1 after request_fail. */
static int step_copies_out(struct request *req, struct step_job *j)
{
	struct graph *gr = &j->gr;
	const struct node *ln = &gr->nodes[j->loss];
	struct gpu_device *g = req->call.d->gpus[gr->nodes[0].device];
	uint64_t size = 16;
	unsigned n = 1;

	if (g->mem.host_mapped)
		return 0;
	/* As forward_read_scalar would say after the run (nothing ran yet). */
	if (ln->ctx.out.count != 1 || !op_dtype_is_float(ln->ctx.out.dtype))
		return request_fail(req, TDP_INVALID_ARGUMENT, "'%s' is no floating scalar node", ln->id);
	for (unsigned i = 0; i < gr->n; i++)
		if (gr->nodes[i].device != gr->nodes[0].device)
			return 0;
	j->off = calloc(gr->n, sizeof(*j->off));
	j->copies = calloc(gr->n + 3, sizeof(*j->copies));
	if (!j->off || !j->copies)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	for (unsigned i = 0; i < gr->n; i++)
		if (gr->nodes[i].inline_out && gr->nodes[i].ctx.out.bytes) {
			j->off[i] = size;
			size += (gr->nodes[i].ctx.out.bytes + 15) & ~(uint64_t)15;
			n++;
		}
	if (gpu_host_buffer_get(g, size, &j->x) < 0)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of host memory for the step's results");
	j->xg = g;
	n = 0;
	j->copies[n++] = (struct graph_copy){ .node = (int)j->loss, .host = j->x.buffer, .offset = 0 };
	if (j->found >= 0)
		j->copies[n++] = (struct graph_copy){ .node = j->found, .host = j->x.buffer, .offset = 8 };
	if (j->scale >= 0)
		j->copies[n++] = (struct graph_copy){ .node = j->scale, .host = j->x.buffer, .offset = 12 };
	for (unsigned i = 0; i < gr->n; i++)
		if (j->off[i])
			j->copies[n++] = (struct graph_copy){ .node = (int)i, .host = j->x.buffer, .offset = j->off[i] };
	gr->copies_after = j->copies;
	gr->ncopies_after = n;
	return 0;
}

/* train.step's parameters (train_step_serve reads them, step_prepare uses
 * them). */
struct step_params {
	struct source src;            /* nodes, loss, params, optimizer; or the model's */
	const msgpack_object *grads, *outputs, *data;
	uint64_t step, seed;
	param_name model;
	bool has_step, has_model, fuse, has_fuse, accumulate, apply;
};

/* Read the step's source, spec and step number into a new job `j`, and
 * build its graph. Returns 0, 1 when the model has a step running (the
 * request must wait: step_wait), or -1 after request_fail. */
static int step_prepare(struct request *req, struct step_job *j, struct step_params *sp)
{
	struct source *src = &sp->src;
	const msgpack_object *data = sp->data;
	struct train_spec *spec;
	struct feeds fd;
	int64_t step;

	if (train_resolve_source(req, sp->has_model ? sp->model : NULL, src) < 0)
		return -1;
	/* Two connections' steps of one model are not interleaved: the second
	 * would read the parameters the first has not stored yet
	 * (docs/training.md, "Concurrent steps"). */
	if (src->m && src->m->steps_pending)
		return 1;
	step = src->m ? src->m->step + 1 : 1;
	if (sp->has_step) {
		if (sp->step < 1 || sp->step > INT32_MAX)
			return request_fail(req, TDP_INVALID_ARGUMENT, "step must be 1 or more");
		step = (int64_t)sp->step;
	}
	if (step > INT32_MAX)
		return request_fail(req, TDP_FAILED_PRECONDITION, "the model's step count is at its limit");
	if (data && feeds_parse(&req->call, data, &fd, "data") < 0)
		return -1;
	if (src->m && model_check_feeds(req, src->m, data ? &fd : NULL, true, "data") < 0)
		return -1;
	spec = j->spec = malloc(sizeof(*spec));
	if (!spec)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	if (train_spec_parse(&req->call, src->loss, src->params, src->opt, sp->grads, spec) < 0)
		return -1;
	if (sp->has_fuse)
		spec->fuse = sp->fuse;
	if (src->m)
		train_spec_model(spec, src->m);
	if (train_spec_precision(&req->call, src->precision, spec) < 0 ||
	    train_spec_loss_scale(&req->call, src->loss_scale, spec) < 0)
		return -1;
	spec->accumulate = sp->accumulate;
	spec->apply = sp->apply;
	spec->run_seed = sp->seed;
	j->step = step;
	struct step_input in = { .spec = spec, .nodes = src->nodes, .outputs = sp->outputs,
				 .feeds = data ? &fd : NULL, .step = step, .train = true };
	struct step_nodes sn;

	if (train_build_step(&req->call, &in, &j->gr, &sn) < 0 || graph_check_outputs(&j->gr) < 0)
		return -1;
	j->loss = sn.loss;
	j->found = sn.found;
	j->scale = sn.scale;
	j->lr = sn.lr;
	if (src->m) {
		strcpy(j->model, src->m->name);
		j->serial = src->m->serial;
	}
	return 0;
}

int method_train_step(struct request *req)
{
	return train_step_serve(req);
}

/* train.step, for a request just arrived or one that waited (step_wait). */
static int train_step_serve(struct request *req)
{
	struct step_params sp = { .apply = true };
	bool profile = false;
	const struct param p[] = {
		PARAM_OPT("nodes", PARAM_ARRAY, sp.src.nodes),
		PARAM_OPT_OBJ("loss", PARAM_STR, sp.src.loss),
		PARAM_OPT("params", PARAM_ARRAY, sp.src.params),
		PARAM_OPT("optimizer", PARAM_MAP, sp.src.opt),
		PARAM_OPT_GIVEN("step", PARAM_UINT, sp.step, sp.has_step),
		PARAM_OPT_OBJ("grads", PARAM_BOOL, sp.grads),
		PARAM_OPT("outputs", PARAM_ARRAY, sp.outputs),
		PARAM_OPT_GIVEN("model", PARAM_TENSOR_KEY, sp.model, sp.has_model),
		PARAM_OPT("data", PARAM_MAP, sp.data),
		PARAM_OPT_GIVEN("fuse", PARAM_BOOL, sp.fuse, sp.has_fuse),
		PARAM_OPT("accumulate", PARAM_BOOL, sp.accumulate),
		PARAM_OPT("apply", PARAM_BOOL, sp.apply),
		PARAM_OPT("seed", PARAM_UINT, sp.seed),
		PARAM_OPT("profile", PARAM_BOOL, profile),
		PARAM_OPT_OBJ("precision", PARAM_STR, sp.src.precision),
		PARAM_OPT_OBJ("loss_scale", PARAM_MAP, sp.src.loss_scale),
	};
	struct step_job *j;
	int r;

	if (PARAMS_PARSE(req, p) < 0)
		return -1;
	j = calloc(1, sizeof(*j));
	if (!j)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	j->d = req->call.d;
	j->gr.call = &req->call;
	j->a.finish = step_finish;
	j->a.release = step_release;
	j->profile = profile;
	r = step_prepare(req, j, &sp);
	if (r != 0) {
		step_release(&j->a);
		return r < 0 ? -1 : step_wait(req, sp.src.m);
	}
	if (step_copies_out(req, j) < 0) {
		step_release(&j->a);
		return -1;
	}
	/* Counted until released: another connection's step of the model
	 * waits for it (step_wait). */
	if (j->model[0]) {
		sp.src.m->steps_pending++;
		j->pending = true;
	}
	return async_req_run_graph(req, &j->a, &j->gr);
}
