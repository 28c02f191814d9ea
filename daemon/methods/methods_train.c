/* train.step (docs/protocol.md, "Training"): read the request, build and
 * run one step (train/step.h), answer with the loss, the inline outputs and
 * the names stored. */
#include "methods/methods_train.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "engine/forward.h"
#include "engine/graph_core.h"
#include "methods/async_request.h"
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
	int64_t step;
	double lr;
	char model[TDP_MAX_NAME_LEN + 1];   /* "" without a model */
	uint64_t serial;                    /* the model's definition it trains */
	bool pending;                       /* counted in the model's steps_pending */
};

static void step_release(struct async_req *a)
{
	struct step_job *j = (struct step_job *)a;

	if (j->pending) {
		struct model *m = models_find_serial(j->d->models, j->model, j->serial);

		if (m && m->steps_pending)
			m->steps_pending--;
	}
	graph_free(&j->gr);
	free(j->spec);
	free(j);
}

/* The step ran (or failed): read the loss, answer, and only when it is
 * finite store the parameters, the state and the model's step count. */
static int step_finish(struct async_req *a, struct request *req)
{
	struct step_job *j = (struct step_job *)a;
	struct graph *gr = &j->gr;
	uint32_t nstored = 0, ninline = 0;
	double loss_value;
	struct model *m;

	if (graph_wait(gr) < 0 || forward_read_scalar(&req->call, gr, j->loss, &loss_value) < 0)
		return -1;
	if (!isfinite(loss_value))
		return request_fail(req, TDP_FAILED_PRECONDITION,
				    "the loss is %s at step %lld; parameters and state are unchanged",
				    isnan(loss_value) ? "NaN" : "infinite", (long long)j->step);
	for (unsigned i = 0; i < gr->n; i++) {
		nstored += gr->nodes[i].has_out;
		ninline += gr->nodes[i].inline_out;
	}
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 5) ||
	    tdp_pack_cstr(req->pk, "loss") || msgpack_pack_double(req->pk, loss_value) ||
	    tdp_pack_cstr(req->pk, "step") || msgpack_pack_int64(req->pk, j->step) ||
	    tdp_pack_cstr(req->pk, "lr") || msgpack_pack_double(req->pk, j->lr) ||
	    tdp_pack_cstr(req->pk, "outputs") || msgpack_pack_map(req->pk, ninline))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	for (unsigned i = 0; i < gr->n; i++)
		if (gr->nodes[i].inline_out &&
		    (tdp_pack_cstr(req->pk, gr->nodes[i].id) || graph_pack_result(req, gr, i, 0) < 0)) {
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
	if (train_commit_all(&req->call, gr) < 0)
		return -1;
	/* The model's count follows the steps that updated it (a model
	 * redefined meanwhile is another model: its count stays). */
	m = j->model[0] ? models_find_serial(j->d->models, j->model, j->serial) : NULL;
	if (m && j->spec->opt.kind != OPT_NONE && j->spec->apply)
		m->step = j->step;
	return 0;
}

/* Read the step's source, spec and step number into a new job `j`, and
 * build its graph. Returns 0, or -1 after request_fail. */
static int step_prepare(struct request *req, struct step_job *j, struct source *src,
			const msgpack_object *grads, const msgpack_object *outputs, const msgpack_object *data,
			uint64_t step_arg, bool has_step, const char *model, int fuse, bool accumulate, bool apply,
			uint64_t seed)
{
	struct train_spec *spec;
	struct feeds fd;
	int64_t step;

	if (train_resolve_source(req, model, src) < 0)
		return -1;
	/* Two connections' steps of one model are not interleaved: the second
	 * would read the parameters the first has not stored yet
	 * (docs/training.md, "Concurrent steps"). */
	if (src->m && src->m->steps_pending)
		return request_fail(req, TDP_UNAVAILABLE, "model '%s' has a train.step of another connection "
				    "running; retry once it completed", src->m->name);
	step = src->m ? src->m->step + 1 : 1;
	if (has_step) {
		if (step_arg < 1 || step_arg > INT32_MAX)
			return request_fail(req, TDP_INVALID_ARGUMENT, "step must be 1 or more");
		step = (int64_t)step_arg;
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
	if (train_spec_parse(&req->call, src->loss, src->params, src->opt, grads, spec) < 0)
		return -1;
	if (fuse >= 0)
		spec->fuse = fuse;
	if (src->m)
		train_spec_model(spec, src->m);
	spec->accumulate = accumulate;
	spec->apply = apply;
	spec->run_seed = seed;
	j->step = step;
	if (train_build_step(&req->call, spec, src->nodes, outputs, data ? &fd : NULL, step, true, &j->gr,
			     &j->loss, &j->lr, NULL) < 0 ||
	    graph_check_outputs(&j->gr) < 0)
		return -1;
	if (src->m) {
		strcpy(j->model, src->m->name);
		j->serial = src->m->serial;
	}
	return 0;
}

int method_train_step(struct request *req)
{
	struct source src;
	const msgpack_object *grads, *outputs, *data;
	uint64_t step_arg = 0, seed = 0;
	param_name model;
	bool has_step, has_model, fuse = false, has_fuse, accumulate = false, apply = true;
	const struct param p[] = {
		PARAM_OPT("nodes", PARAM_ARRAY, src.nodes),
		PARAM_OPT_OBJ("loss", PARAM_STR, src.loss),
		PARAM_OPT("params", PARAM_ARRAY, src.params),
		PARAM_OPT("optimizer", PARAM_MAP, src.opt),
		PARAM_OPT_GIVEN("step", PARAM_UINT, step_arg, has_step),
		PARAM_OPT_OBJ("grads", PARAM_BOOL, grads),
		PARAM_OPT("outputs", PARAM_ARRAY, outputs),
		PARAM_OPT_GIVEN("model", PARAM_TENSOR_KEY, model, has_model),
		PARAM_OPT("data", PARAM_MAP, data),
		PARAM_OPT_GIVEN("fuse", PARAM_BOOL, fuse, has_fuse),
		PARAM_OPT("accumulate", PARAM_BOOL, accumulate),
		PARAM_OPT("apply", PARAM_BOOL, apply),
		PARAM_OPT("seed", PARAM_UINT, seed),
	};
	struct step_job *j;

	if (PARAMS_PARSE(req, p) < 0)
		return -1;
	j = calloc(1, sizeof(*j));
	if (!j)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	j->d = req->call.d;
	j->gr.call = &req->call;
	j->a.finish = step_finish;
	j->a.release = step_release;
	if (step_prepare(req, j, &src, grads, outputs, data, step_arg, has_step, has_model ? model : NULL,
			 has_fuse ? fuse : -1, accumulate, apply, seed) < 0) {
		step_release(&j->a);
		return -1;
	}
	/* Counted until released: another connection's step of the model
	 * waits for it (refused meanwhile). */
	if (j->model[0]) {
		src.m->steps_pending++;
		j->pending = true;
	}
	return async_req_run_graph(req, &j->a, &j->gr);
}
