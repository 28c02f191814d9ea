/* train.step (docs/protocol.md, "Training"): read the request, build and
 * run one step (train/step.h), answer with the loss, the inline outputs and
 * the names stored. */
#include "methods/methods_train.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "engine/forward.h"
#include "engine/graph_core.h"
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
	struct graph gr = { .call = &req->call };
	struct train_spec *spec;
	struct feeds fd;
	uint32_t nstored = 0, ninline = 0;
	int64_t step;
	unsigned loss;
	double lr = 0, loss_value = 0;
	int r = -1;

	if (PARAMS_PARSE(req, p) < 0 || train_resolve_source(req, has_model ? model : NULL, &src) < 0)
		return -1;
	step = src.m ? src.m->step + 1 : 1;
	if (has_step) {
		if (step_arg < 1 || step_arg > INT32_MAX)
			return request_fail(req, TDP_INVALID_ARGUMENT, "step must be 1 or more");
		step = (int64_t)step_arg;
	}
	if (step > INT32_MAX)
		return request_fail(req, TDP_FAILED_PRECONDITION, "the model's step count is at its limit");
	if (data && feeds_parse(&req->call, data, &fd, "data") < 0)
		return -1;
	if (src.m && model_check_feeds(req, src.m, data ? &fd : NULL, true, "data") < 0)
		return -1;
	spec = malloc(sizeof(*spec));
	if (!spec)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	if (train_spec_parse(&req->call, src.loss, src.params, src.opt, grads, spec) < 0)
		goto out;
	if (has_fuse)
		spec->fuse = fuse;
	if (src.m)
		train_spec_model(spec, src.m);
	spec->accumulate = accumulate;
	spec->apply = apply;
	spec->run_seed = seed;
	if (train_run_step(&req->call, spec, src.nodes, outputs, data ? &fd : NULL, step, true, &gr, &loss,
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
		    (tdp_pack_cstr(req->pk, gr.nodes[i].id) || graph_pack_result(req, &gr, i, 0) < 0)) {
			if (!td_failed(&req->call.err))
				request_fail(req, TDP_INTERNAL, "out of memory");
			goto out;
		}
	if (tdp_pack_cstr(req->pk, "stored") || msgpack_pack_array(req->pk, nstored)) {
		request_fail(req, TDP_INTERNAL, "out of memory");
		goto out;
	}
	for (unsigned i = 0; i < gr.n; i++) {
		char shown[NAMES_SHOWN_MAX];

		if (gr.nodes[i].has_out &&
		    tdp_pack_cstr(req->pk, lookup_show(&req->call, gr.nodes[i].out_name, shown))) {
			request_fail(req, TDP_INTERNAL, "out of memory");
			goto out;
		}
	}
	/* Everything ran and the loss is finite: now parameters and state change. */
	r = train_commit_all(&req->call, &gr);
	/* The model's count follows the steps that updated it. */
	if (r == 0 && src.m && spec->opt.kind != OPT_NONE && spec->apply)
		src.m->step = step;
out:
	graph_free(&gr);
	free(spec);
	return r;
}
