/* The model methods: defining, listing, describing and deleting models.
 * Running them forward (model.evaluate, model.predict) is model_run.c;
 * training with a model is train.step/train.run with `model` (train/step.c). */
#include "methods/methods_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "daemon.h"
#include "dtype.h"
#include "engine/graph_parse.h"
#include "methods/async_request.h"
#include "methods/methods_graph.h"
#include "engine/graph_core.h"
#include "methods/methods_tensor.h"
#include "name.h"
#include "pack.h"
#include "rpc.h"
#include "methods/params.h"
#include "status.h"
#include "store/lookup.h"
#include "store/model.h"
#include "store/names.h"
#include "store/store.h"
#include "methods/model_layers.h"
#include "train/layers.h"
#include "train/step.h"

#define STATE_SUFFIXES 4

/* A parameter's optimizer state, and the loss scaler's of precision f16
 * (on the first parameter: train/loss_scale.h). */
static const char *const state_suffix[STATE_SUFFIXES] = { ".momentum_buffer", ".exp_avg", ".exp_avg_sq",
							  ".loss_scaler" };

static bool may_modify(const struct request *req, uint32_t owner)
{
	return req->call.cred.uid == 0 || req->call.cred.uid == owner;
}

struct model *model_lookup(struct request *req, const char *key)
{
	char shown[NAMES_SHOWN_MAX];
	struct model *m = models_find(req->call.d->models, key);

	if (!m)
		request_fail(req, TDP_NOT_FOUND, "no model named '%s'", lookup_show(&req->call, key, shown));
	return m;
}

int model_check_feeds(struct request *req, const struct model *m, const struct feeds *fd, bool need_all,
		      const char *what)
{
	char shown[NAMES_SHOWN_MAX];

	for (unsigned k = 0; fd && m->ninputs && k < fd->n; k++)
		if (!model_has_input(m, fd->f[k].id))
			return request_fail(req, TDP_INVALID_ARGUMENT, "%s: '%s' is not an input of model '%s'",
					    what, fd->f[k].id, lookup_show(&req->call, m->name, shown));
	for (unsigned i = 0; need_all && i < m->ninputs; i++) {
		const char *id = m->inputs[i].name;
		bool fed = false;

		for (unsigned k = 0; fd && k < fd->n; k++)
			fed = fed || !strcmp(fd->f[k].id, id);
		if (!fed && !lookup_readable(&req->call, id, strlen(id)))
			return request_fail(req, TDP_NOT_FOUND,
					    "%s: input '%s' of model '%s' is not fed and no tensor of that name "
					    "is stored", what, id, m->name);
	}
	return 0;
}

/* The stored state tensor `<param><suffix>`, or NULL. */
static struct tensor *state_tensor(struct request *req, const char *param, unsigned s)
{
	char name[TDP_MAX_NAME_LEN + 32];
	size_t n = (size_t)snprintf(name, sizeof(name), "%s%s", param, state_suffix[s]);

	return n <= TDP_MAX_NAME_LEN ? lookup_readable(&req->call, name, n) : NULL;
}

/* The stored running statistic `j` (0 mean, 1 var) of state node `k`, or
 * NULL. */
static struct tensor *buffer_tensor(struct request *req, const struct model *m, unsigned k, unsigned j)
{
	return lookup_readable(&req->call, m->state[k].buffer[j], strlen(m->state[k].buffer[j]));
}

/* Whether optimizer state is stored for any of m's parameters. */
static bool has_state(struct request *req, const struct model *m)
{
	for (unsigned k = 0; k < m->nparams; k++)
		for (unsigned s = 0; s < STATE_SUFFIXES; s++)
			if (state_tensor(req, m->params[k], s))
				return true;
	return false;
}

/* Bytes of the stored parameters and optimizer state. */
static uint64_t model_bytes(struct request *req, const struct model *m)
{
	uint64_t total = 0;

	for (unsigned k = 0; k < m->nparams; k++) {
		struct tensor *t = lookup_readable(&req->call, m->params[k], strlen(m->params[k]));

		total += t ? t->bytes : 0;
		for (unsigned s = 0; s < STATE_SUFFIXES; s++) {
			t = state_tensor(req, m->params[k], s);
			total += t ? t->bytes : 0;
		}
	}
	for (unsigned k = 0; k < m->nstate; k++)
		for (unsigned j = 0; j < 2; j++) {
			struct tensor *t = buffer_tensor(req, m, k, j);

			total += t ? t->bytes : 0;
		}
	return total;
}

static int pack_names(msgpack_packer *pk, char (*names)[TDP_MAX_NAME_LEN + 1], unsigned n)
{
	if (msgpack_pack_array(pk, n))
		return -1;
	for (unsigned k = 0; k < n; k++)
		if (tdp_pack_cstr(pk, names[k]))
			return -1;
	return 0;
}

/* Names `names` (store keys) as the client sees them. */
static int pack_shown(struct request *req, char (*names)[TDP_MAX_NAME_LEN + 1], unsigned n)
{
	char shown[NAMES_SHOWN_MAX];

	if (msgpack_pack_array(req->pk, n))
		return -1;
	for (unsigned k = 0; k < n; k++)
		if (tdp_pack_cstr(req->pk, lookup_show(&req->call, names[k], shown)))
			return -1;
	return 0;
}

/* The entries every model description has (name, step, owner, times, bytes). */
#define COMMON_ENTRIES 6

static int pack_common(struct request *req, msgpack_packer *pk, const struct model *m)
{
	char shown[NAMES_SHOWN_MAX];

	return tdp_pack_cstr(pk, "name") || tdp_pack_cstr(pk, lookup_show(&req->call, m->name, shown)) ||
	       tdp_pack_cstr(pk, "step") || msgpack_pack_int64(pk, m->step) ||
	       tdp_pack_cstr(pk, "owner") || msgpack_pack_uint32(pk, m->owner) ||
	       tdp_pack_cstr(pk, "created") || msgpack_pack_double(pk, (double)m->created_ns / 1e9) ||
	       tdp_pack_cstr(pk, "modified") || msgpack_pack_double(pk, (double)m->modified_ns / 1e9) ||
	       tdp_pack_cstr(pk, "bytes") || msgpack_pack_uint64(pk, model_bytes(req, m));
}

/* The model.stat result map of `m`. */
static int pack_stat(struct request *req, msgpack_packer *pk, const struct model *m)
{
	char shown[NAMES_SHOWN_MAX];
	uint32_t nstate = 0;

	for (unsigned k = 0; k < m->nparams; k++)
		for (unsigned s = 0; s < STATE_SUFFIXES; s++)
			nstate += state_tensor(req, m->params[k], s) != NULL;
	for (unsigned k = 0; k < m->nstate; k++)
		for (unsigned j = 0; j < 2; j++)
			nstate += buffer_tensor(req, m, k, j) != NULL;
	if (msgpack_pack_map(pk, COMMON_ENTRIES + 4 + (m->given ? 5 : 0)) || pack_common(req, pk, m) ||
	    tdp_pack_cstr(pk, "definition") || msgpack_pack_object(pk, m->given ? *m->given : m->u.data) ||
	    tdp_pack_cstr(pk, "precision") || tdp_pack_cstr(pk, tdp_dtype_name(m->precision)) ||
	    (m->given && model_pack_layers(req, pk, m)) ||
	    tdp_pack_cstr(pk, "params") || msgpack_pack_array(pk, m->nparams))
		return -1;
	for (unsigned k = 0; k < m->nparams; k++) {
		struct tensor *t = lookup_readable(&req->call, m->params[k], strlen(m->params[k]));

		if (msgpack_pack_map(pk, 5) || tdp_pack_cstr(pk, "name") || tdp_pack_cstr(pk, m->params[k]) ||
		    tdp_pack_cstr(pk, "stored") || (t ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) ||
		    tdp_pack_cstr(pk, "dtype") || (t ? tdp_pack_cstr(pk, tdp_dtype_name(t->dtype)) : msgpack_pack_nil(pk)) ||
		    tdp_pack_cstr(pk, "shape") || (t ? tdp_pack_u64_array(pk, t->shape, t->rank) : msgpack_pack_nil(pk)) ||
		    tdp_pack_cstr(pk, "bytes") || msgpack_pack_uint64(pk, t ? t->bytes : 0))
			return -1;
	}
	if (tdp_pack_cstr(pk, "state") || msgpack_pack_array(pk, nstate))
		return -1;
	for (unsigned k = 0; k < m->nparams; k++)
		for (unsigned s = 0; s < STATE_SUFFIXES; s++) {
			struct tensor *t = state_tensor(req, m->params[k], s);

			if (t && tdp_pack_cstr(pk, lookup_show(&req->call, t->name, shown)))
				return -1;
		}
	for (unsigned k = 0; k < m->nstate; k++)
		for (unsigned j = 0; j < 2; j++) {
			struct tensor *t = buffer_tensor(req, m, k, j);

			if (t && tdp_pack_cstr(pk, lookup_show(&req->call, t->name, shown)))
				return -1;
		}
	return 0;
}

/* The definition of a graph-form request: its own entries, minus name, step
 * and replace (kv: room for 9). */
static void graph_definition(struct request *req, msgpack_object_kv *kv, msgpack_object *def)
{
	static const char *const def_keys[] = { "nodes", "loss", "params", "inputs", "outputs", "optimizer",
						"state", "precision", "loss_scale" };

	*def = (msgpack_object){ .type = MSGPACK_OBJECT_MAP, .via.map.ptr = kv };
	for (uint32_t i = 0; i < req->params->via.map.size; i++)
		for (size_t k = 0; k < sizeof(def_keys) / sizeof(def_keys[0]); k++)
			if (tdp_obj_str_eq(&req->params->via.map.ptr[i].key, def_keys[k]))
				kv[def->via.map.size++] = req->params->via.map.ptr[i];
}

/* Checks before anything is built: the name is free (or replace), the
 * caller may create or modify it, there is room. */
static int define_allowed(struct request *req, const char *name, uint64_t step, bool replace)
{
	char shown[NAMES_SHOWN_MAX];
	struct model *old = models_find(req->call.d->models, name);

	lookup_show(&req->call, name, shown);
	if (old && !replace)
		return request_fail(req, TDP_ALREADY_EXISTS,
				    "model '%s' already exists (\"replace\": true redefines it)", shown);
	if (old && !may_modify(req, old->owner))
		return request_fail(req, TDP_PERMISSION_DENIED, "model '%s' belongs to uid %u", shown, old->owner);
	if (!old) {
		uint32_t ns;
		size_t off;

		if (names_key_split(name, strlen(name), &ns, &off) == 0 && !names_may_create(&req->call.cred, ns))
			return request_fail(req, TDP_PERMISSION_DENIED, "model '%s' would be in the namespace of "
					    "uid %u: only its owner or root may create names there", shown, ns);
	}
	if (!old && !models_has_room(req->call.d->models))
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "the daemon holds its limit of %d models",
				    MODEL_MAX_MODELS);
	if (!old && req->call.d->cfg.user_max_models &&
	    models_count_owner(req->call.d->models, req->call.cred.uid) >= req->call.d->cfg.user_max_models)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "uid %u already owns %llu models "
				    "(user_max_models)", (unsigned)req->call.cred.uid,
				    (unsigned long long)req->call.d->cfg.user_max_models);
	if (step > MODEL_MAX_STEP)
		return request_fail(req, TDP_INVALID_ARGUMENT, "step must be 0 to %d", MODEL_MAX_STEP);
	return 0;
}

int method_model_define(struct request *req)
{
	/* Model names are per-user like tensor names (docs/security.md). */
	param_name name;
	const msgpack_object *nodes, *loss, *params, *inputs, *outputs, *optimizer, *state, *layers, *input, *dtype;
	const msgpack_object *precision, *loss_scale;
	const msgpack_object *lv = tdp_map_find(req->params, "loss");
	bool layered = tdp_map_find(req->params, "layers") != NULL, seeded = false;
	uint64_t step = 0, seed = 0;
	bool replace = false, has_step;
	/* The definition (nodes to optimizer) is checked by model_new, from
	 * the request's own entries (graph form) or from their expansion. */
	const struct param p[] = {
		PARAM_REQ("name", PARAM_TENSOR_KEY, name),
		{ "nodes", PARAM_ARRAY, !layered, true, PARAM_OBJ_(nodes), NULL },
		{ "loss", layered && lv && lv->type == MSGPACK_OBJECT_MAP ? PARAM_MAP : PARAM_STR, true, true,
		  PARAM_OBJ_(loss), NULL },
		{ "params", PARAM_ARRAY, !layered, true, PARAM_OBJ_(params), NULL },
		PARAM_OPT("inputs", PARAM_ARRAY, inputs),
		PARAM_OPT("outputs", PARAM_ARRAY, outputs),
		PARAM_OPT("optimizer", PARAM_MAP, optimizer),
		PARAM_OPT("state", PARAM_ARRAY, state),
		PARAM_OPT_GIVEN("step", PARAM_UINT, step, has_step),
		PARAM_OPT("replace", PARAM_BOOL, replace),
		PARAM_OPT("layers", PARAM_ARRAY, layers),
		PARAM_OPT_OBJ("input", PARAM_STR, input),
		PARAM_OPT_GIVEN("seed", PARAM_UINT, seed, seeded),
		PARAM_OPT_OBJ("dtype", PARAM_STR, dtype),
		PARAM_OPT_OBJ("precision", PARAM_STR, precision),
		PARAM_OPT_OBJ("loss_scale", PARAM_MAP, loss_scale),
	};
	char why[TDP_MAX_ERROR_MESSAGE];
	msgpack_object_kv kv[9];
	uint32_t group;
	msgpack_object def;
	struct layers_out lo = { .np = 0 };
	bool *want = NULL;
	struct model *old, *m = NULL;
	int64_t now;
	int r = -1;

	msgpack_sbuffer_init(&lo.def);
	if (PARAMS_PARSE(req, p) < 0 || define_allowed(req, name, step, replace) < 0)
		goto out;
	if (!layered && (input || seeded || dtype)) {
		request_fail(req, TDP_INVALID_ARGUMENT, "input, seed and dtype go with layers");
		goto out;
	}
	if (nodes && nodes->via.array.size > GRAPH_MAX_NODES) {
		request_fail(req, TDP_RESOURCE_EXHAUSTED, "nodes: more than %d", GRAPH_MAX_NODES);
		goto out;
	}
	if (params && params->via.array.size > MODEL_MAX_PARAMS) {
		request_fail(req, TDP_INVALID_ARGUMENT, "params: more than %d", MODEL_MAX_PARAMS);
		goto out;
	}
	if (layered) {
		if (model_define_layers(req, name, &lo, &want, &m) < 0)
			goto out;
	} else {
		graph_definition(req, kv, &def);
		why[0] = '\0';
		r = model_new(name, &def, &m, why, sizeof(why));
		if (r < 0) {
			request_fail(req, r == -EINVAL ? TDP_INVALID_ARGUMENT : r == -EFBIG ? TDP_RESOURCE_EXHAUSTED
				     : TDP_INTERNAL, "%s", r == -EINVAL || r == -EFBIG ? why : "out of memory");
			r = -1;
			goto out;
		}
		r = -1;
	}
	if (train_model_check(&req->call, m) < 0)
		goto out;
	now = daemon_now_ns(CLOCK_REALTIME);
	old = models_find(req->call.d->models, name);
	if (old)
		m->owner = old->owner;
	else
		names_new_owner(&req->call.cred, name, &m->owner, &group);
	m->created_ns = old ? old->created_ns : now;
	m->modified_ns = now;
	/* The optimizer state is kept with the parameters (what is stored
	 * stays), so its step count is too: Adam's bias correction of step 1
	 * on moments of many steps would be wrong (issue 35). Without state,
	 * or when asked, it starts where the request says (0 by default). */
	m->step = (int64_t)step;
	if (!has_step && old && has_state(req, m))
		m->step = old->step;
	if (models_put(req->call.d->models, m) < 0) { /* room was checked above */
		request_fail(req, TDP_RESOURCE_EXHAUSTED, "no room for another model");
		goto out;
	}
	free(want);
	want = NULL;
	r = 0;
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || pack_stat(req, req->pk, m))
		r = request_fail(req, TDP_INTERNAL, "out of memory");
	m = NULL;
out:
	if (r < 0 && want)
		layer_init_undo(&req->call, lo.p, lo.np, want);
	free(want);
	model_free(m);
	layers_out_free(&lo);
	return r;
}

int method_model_stat(struct request *req)
{
	param_name name;
	const struct param p[] = { PARAM_REQ("name", PARAM_TENSOR_KEY, name) };
	struct model *m;

	if (PARAMS_PARSE(req, p) < 0 || !(m = model_lookup(req, name)))
		return -1;
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || pack_stat(req, req->pk, m))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

int method_model_list(struct request *req)
{
	struct model **list;
	size_t n, kept = 0;
	int fail;

	if (params_none(req) < 0)
		return -1;
	if (models_list(req->call.d->models, &list, &n) < 0)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	/* The caller's own namespace (docs/security.md, "Names"). */
	for (size_t i = 0; i < n; i++) {
		uint32_t ns;
		size_t off;

		if (names_key_split(list[i]->name, strlen(list[i]->name), &ns, &off) == 0 && ns == req->call.cred.uid)
			list[kept++] = list[i];
	}
	n = kept;
	fail = tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 1) ||
	       tdp_pack_cstr(req->pk, "models") || msgpack_pack_array(req->pk, (uint32_t)n);
	for (size_t i = 0; !fail && i < n; i++) {
		const struct model *m = list[i];
		const msgpack_object *type = m->optimizer ? tdp_map_find(m->optimizer, "type") : NULL;

		fail = msgpack_pack_map(req->pk, COMMON_ENTRIES + 5) || pack_common(req, req->pk, m) ||
		       tdp_pack_cstr(req->pk, "loss") || tdp_pack_cstr(req->pk, m->loss) ||
		       tdp_pack_cstr(req->pk, "params") || msgpack_pack_uint32(req->pk, m->nparams) ||
		       tdp_pack_cstr(req->pk, "inputs") || msgpack_pack_array(req->pk, m->ninputs);
		for (unsigned k = 0; !fail && k < m->ninputs; k++)
			fail = tdp_pack_cstr(req->pk, m->inputs[k].name);
		fail = fail || tdp_pack_cstr(req->pk, "outputs") || pack_names(req->pk, m->outputs, m->noutputs) ||
		       tdp_pack_cstr(req->pk, "optimizer") ||
		       (!m->optimizer ? msgpack_pack_nil(req->pk)
			: type ? msgpack_pack_object(req->pk, *type) : tdp_pack_cstr(req->pk, "sgd"));
	}
	free(list);
	if (fail)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

int method_model_delete(struct request *req)
{
	param_name name;
	bool tensors = false;
	const struct param p[] = {
		PARAM_REQ("name", PARAM_TENSOR_KEY, name),
		PARAM_OPT("tensors", PARAM_BOOL, tensors),
	};
	char shown[NAMES_SHOWN_MAX];
	char (*gone)[TDP_MAX_NAME_LEN + 1] = NULL;
	unsigned ngone = 0;
	struct model *m;
	int r = -1;

	if (PARAMS_PARSE(req, p) < 0 || !(m = model_lookup(req, name)))
		return -1;
	if (!may_modify(req, m->owner))
		return request_fail(req, TDP_PERMISSION_DENIED, "model '%s' belongs to uid %u",
				    lookup_show(&req->call, m->name, shown), m->owner);
	strcpy(name, m->name);
	if (tensors) {
		/* Every tensor first: all of them go, or none. */
		gone = calloc((size_t)m->nparams * (1 + STATE_SUFFIXES) + 2 * m->nstate, sizeof(*gone));
		if (!gone)
			return request_fail(req, TDP_INTERNAL, "out of memory");
		for (unsigned k = 0; k < m->nparams; k++)
			for (unsigned s = 0; s <= STATE_SUFFIXES; s++) {
				struct tensor *t = s == 0 ? lookup_readable(&req->call, m->params[k], strlen(m->params[k]))
							  : state_tensor(req, m->params[k], s - 1);

				if (!t)
					continue;
				if (!may_modify(req, t->owner)) {
					request_fail(req, TDP_PERMISSION_DENIED, "tensor '%s' belongs to uid %u",
						     lookup_show(&req->call, t->name, shown), t->owner);
					goto out;
				}
				strcpy(gone[ngone++], t->name);
			}
		for (unsigned k = 0; k < 2 * m->nstate; k++) {
			struct tensor *t = buffer_tensor(req, m, k / 2, k % 2);
			unsigned j;

			for (j = 0; t && j < ngone && strcmp(gone[j], t->name); j++)
				;
			if (!t || j < ngone)
				continue;
			if (!may_modify(req, t->owner)) {
				request_fail(req, TDP_PERMISSION_DENIED, "tensor '%s' belongs to uid %u",
					     lookup_show(&req->call, t->name, shown), t->owner);
				goto out;
			}
			strcpy(gone[ngone++], t->name);
		}
		for (unsigned k = 0; k < ngone; k++)
			store_delete(req->call.d->store, gone[k], strlen(gone[k]));
	}
	models_delete(req->call.d->models, name);
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 3) ||
	    tdp_pack_cstr(req->pk, "name") || tdp_pack_cstr(req->pk, lookup_show(&req->call, name, shown)) ||
	    tdp_pack_cstr(req->pk, "deleted") || msgpack_pack_true(req->pk) ||
	    tdp_pack_cstr(req->pk, "tensors") || pack_shown(req, gone, ngone)) {
		request_fail(req, TDP_INTERNAL, "out of memory");
		goto out;
	}
	r = 0;
out:
	free(gone);
	return r;
}
