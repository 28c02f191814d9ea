/* The layer form of model.define, whole: the stack's input, the loss map,
 * and the expanded definition (nodes, params, state, outputs, plus the
 * request's own definition as `given`) that model_new then checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/caller.h"
#include "train/layers_priv.h"

/* The keys of model.define that are the definition (not name, step, replace). */
static const char *const def_keys[] = { "inputs", "layers", "input", "loss", "seed", "dtype", "nodes",
					"params", "outputs", "optimizer", "state", "precision", "loss_scale" };

static bool is_def_key(const msgpack_object *k)
{
	for (size_t i = 0; i < sizeof(def_keys) / sizeof(def_keys[0]); i++)
		if (tdp_obj_str_eq(k, def_keys[i]))
			return true;
	return false;
}

/* The stack's input: `input` or inputs[0], and its shape when declared. */
static int stack_input(struct lx *x, const msgpack_object *req, char *id, struct shp *s)
{
	const msgpack_object *inputs = tdp_map_find(req, "inputs"), *input = tdp_map_find(req, "input");

	s->rank = -1;
	s->dtype = -1;
	if (!inputs || inputs->type != MSGPACK_OBJECT_ARRAY || inputs->via.array.size == 0)
		return lx_fail(x, NULL, "layers: the model needs 'inputs' (the first is what the first layer reads)");
	if (input && (tdp_obj_strcpy(input, id, LX_ID) < 0 || !id[0]))
		return lx_fail(x, NULL, "input must be the name of one of the model's inputs");
	for (uint32_t k = 0; k < inputs->via.array.size; k++) {
		const msgpack_object *o = &inputs->via.array.ptr[k];
		const msgpack_object *n = o->type == MSGPACK_OBJECT_MAP ? tdp_map_find(o, "name") : o;
		const msgpack_object *shape = o->type == MSGPACK_OBJECT_MAP ? tdp_map_find(o, "shape") : NULL;
		const msgpack_object *dt = o->type == MSGPACK_OBJECT_MAP ? tdp_map_find(o, "dtype") : NULL;
		char nm[LX_ID];

		if (!n || tdp_obj_strcpy(n, nm, sizeof(nm)) < 0)
			continue; /* model_new says what is wrong */
		if (input ? strcmp(nm, id) : k != 0)
			continue;
		strcpy(id, nm);
		if (shape && shape->type == MSGPACK_OBJECT_ARRAY && shape->via.array.size >= 1 &&
		    shape->via.array.size <= TDP_MAX_RANK) {
			s->rank = (int)shape->via.array.size;
			s->d[0] = -1;
			for (int d = 1; d < s->rank; d++) {
				uint64_t v;

				s->d[d] = tdp_obj_uint(&shape->via.array.ptr[d], &v) == 0 && v <= INT32_MAX ? (int64_t)v : -1;
			}
			s->dtype = dt && dt->type == MSGPACK_OBJECT_STR ? tdp_dtype_parse(dt->via.str.ptr, dt->via.str.size)
									: -1;
		}
		return 0;
	}
	return lx_fail(x, NULL, "input '%s' is none of the model's inputs", id);
}

/* `loss` as a map {type, target, reduction}: nodes ending at "loss". */
static int loss_map(struct lx *x, const msgpack_object *loss, const char *out, const struct shp *s)
{
	struct map_field f[] = { { "type", MAP_STR, true, NULL }, { "target", MAP_STR, true, NULL },
				 { "reduction", MAP_STR, false, NULL } };
	struct td_error err = { 0 };
	char target[LX_ID];
	const char *logits = out, *tgt = target;
	struct at red = { "reduction", 's', .s = "mean" };
	const char *op = NULL;
	bool ce;

	if (map_check(loss, f, 3, &err) < 0)
		return lx_fail(x, NULL, "loss: %s", err.message);
	ce = tdp_obj_str_eq(f[0].value, "cross_entropy");
	/* torch's BCEWithLogitsLoss: the op on logits and targets of one shape */
	if (tdp_obj_str_eq(f[0].value, "bce_with_logits"))
		op = "binary_cross_entropy_with_logits";
	else if (!ce && !tdp_obj_str_eq(f[0].value, "mse"))
		return lx_fail(x, NULL, "loss: type must be \"cross_entropy\", \"mse\" or \"bce_with_logits\" "
			       "(or give a node id)");
	if (tdp_obj_strcpy(f[1].value, target, sizeof(target)) < 0 || !target[0])
		return lx_fail(x, NULL, "loss: target must be an input or a node id");
	if (f[2].value) {
		if (!tdp_obj_str_eq(f[2].value, "mean") && !tdp_obj_str_eq(f[2].value, "sum"))
			return lx_fail(x, NULL, "loss: reduction must be \"mean\" or \"sum\"");
		red.s = tdp_obj_str_eq(f[2].value, "sum") ? "sum" : "mean";
	}
	if (ce && s->rank > 2) {
		int64_t two[2] = { -1, s->d[s->rank - 1] }, one[1] = { -1 };
		struct at a2 = { "shape", 'I', .v = two, .n = 2 }, a1 = { "shape", 'I', .v = one, .n = 1 };

		if (two[1] < 0)
			return lx_fail(x, NULL, "loss: cross_entropy over rank %d logits needs their last dim known",
				       s->rank);
		if (lx_emit(x, "loss/logits", "reshape", &logits, 1, &a2, 1) < 0 ||
		    lx_emit(x, "loss/target", "reshape", &tgt, 1, &a1, 1) < 0)
			return -1;
		logits = "loss/logits";
		tgt = "loss/target";
	}
	{
		const char *in[2] = { logits, tgt };

		return lx_emit(x, "loss", op ? op : ce ? "cross_entropy" : "mse", in, 2, &red, 1);
	}
}

static int pack_array_of(msgpack_packer *pk, const msgpack_object *arr)
{
	for (uint32_t k = 0; arr && k < arr->via.array.size; k++)
		if (msgpack_pack_object(pk, arr->via.array.ptr[k]))
			return -1;
	return 0;
}

/* The definition map model_new takes. */
static int pack_def(struct lx *x, const msgpack_object *req, const char *out, msgpack_packer *pk)
{
	const msgpack_object *nodes = tdp_map_find(req, "nodes"), *params = tdp_map_find(req, "params");
	const msgpack_object *state = tdp_map_find(req, "state"), *outputs = tdp_map_find(req, "outputs");
	const msgpack_object *opt = tdp_map_find(req, "optimizer"), *loss = tdp_map_find(req, "loss");
	const msgpack_object *prec = tdp_map_find(req, "precision"), *lsc = tdp_map_find(req, "loss_scale");
	uint32_t nraw = nodes ? nodes->via.array.size : 0, nparams = params ? params->via.array.size : 0;
	uint32_t nstate = state ? state->via.array.size : 0, ngiven = 0, np = 0;
	int fail;

	for (unsigned k = 0; k < x->np; k++)
		np += !x->p[k].buffer;
	for (uint32_t i = 0; i < req->via.map.size; i++)
		ngiven += is_def_key(&req->via.map.ptr[i].key);
	fail = msgpack_pack_map(pk, 7 + (opt ? 1 : 0) + (prec ? 1 : 0) + (lsc ? 1 : 0) +
				    (x->nstate + nstate ? 1 : 0)) ||
	       tdp_pack_cstr(pk, "nodes") || msgpack_pack_array(pk, x->nnodes + nraw) ||
	       msgpack_sbuffer_write(pk->data, x->nb.data, x->nb.size) || pack_array_of(pk, nodes) ||
	       tdp_pack_cstr(pk, "params") || msgpack_pack_array(pk, np + nparams);
	for (unsigned k = 0; !fail && k < x->np; k++)
		fail = !x->p[k].buffer && tdp_pack_cstr(pk, x->p[k].name);
	fail = fail || pack_array_of(pk, params) || tdp_pack_cstr(pk, "param_layer") ||
	       msgpack_pack_array(pk, np + nparams);
	for (unsigned k = 0; !fail && k < x->np; k++)
		fail = !x->p[k].buffer && tdp_pack_cstr(pk, x->p[k].layer);
	for (unsigned k = 0; !fail && k < nparams; k++)
		fail = tdp_pack_cstr(pk, "");
	fail = fail || tdp_pack_cstr(pk, "loss") ||
	       (loss->type == MSGPACK_OBJECT_MAP ? tdp_pack_cstr(pk, "loss") : msgpack_pack_object(pk, *loss)) ||
	       tdp_pack_cstr(pk, "inputs") || msgpack_pack_object(pk, *tdp_map_find(req, "inputs")) ||
	       tdp_pack_cstr(pk, "outputs");
	if (!fail && outputs)
		fail = msgpack_pack_object(pk, *outputs);
	else if (!fail)
		fail = msgpack_pack_array(pk, 1) || tdp_pack_cstr(pk, out);
	if (!fail && opt)
		fail = tdp_pack_cstr(pk, "optimizer") || msgpack_pack_object(pk, *opt);
	if (!fail && prec)
		fail = tdp_pack_cstr(pk, "precision") || msgpack_pack_object(pk, *prec);
	if (!fail && lsc)
		fail = tdp_pack_cstr(pk, "loss_scale") || msgpack_pack_object(pk, *lsc);
	if (!fail && x->nstate + nstate)
		fail = tdp_pack_cstr(pk, "state") || msgpack_pack_array(pk, x->nstate + nstate);
	for (unsigned k = 0; !fail && k < x->nstate; k++)
		fail = msgpack_pack_map(pk, 2) || tdp_pack_cstr(pk, "node") || tdp_pack_cstr(pk, x->state[k]) ||
		       tdp_pack_cstr(pk, "momentum") || msgpack_pack_double(pk, x->momentum[k]);
	fail = fail || pack_array_of(pk, state) || tdp_pack_cstr(pk, "given") || msgpack_pack_map(pk, ngiven);
	for (uint32_t i = 0; !fail && i < req->via.map.size; i++)
		if (is_def_key(&req->via.map.ptr[i].key))
			fail = msgpack_pack_object(pk, req->via.map.ptr[i].key) ||
			       msgpack_pack_object(pk, req->via.map.ptr[i].val);
	return fail ? td_fail(&x->call->err, TDP_INTERNAL, "out of memory") : 0;
}

/* seed and dtype of the request. */
static int parse_top(struct lx *x, const msgpack_object *req)
{
	const msgpack_object *seed = tdp_map_find(req, "seed"), *dt = tdp_map_find(req, "dtype");
	const msgpack_object *nodes = tdp_map_find(req, "nodes"), *layers = tdp_map_find(req, "layers");

	x->seed = 0;
	x->dtype = TDP_DTYPE_F32;
	if (seed && tdp_obj_uint(seed, &x->seed) < 0)
		return lx_fail(x, NULL, "seed must be a non-negative integer");
	if (dt) {
		x->dtype = dt->type == MSGPACK_OBJECT_STR ? tdp_dtype_parse(dt->via.str.ptr, dt->via.str.size) : -1;
		if (x->dtype != TDP_DTYPE_F32 && x->dtype != TDP_DTYPE_F16 && x->dtype != TDP_DTYPE_BF16)
			return lx_fail(x, NULL, "dtype must be f32, f16 or bf16 (the parameters' dtype)");
	}
	if (!layers || layers->type != MSGPACK_OBJECT_ARRAY)
		return lx_fail(x, NULL, "layers must be an array of layers");
	if (nodes && (nodes->type != MSGPACK_OBJECT_ARRAY || nodes->via.array.size > TDP_MAX_GRAPH_NODES))
		return lx_fail(x, NULL, "nodes must be an array of up to %d nodes", TDP_MAX_GRAPH_NODES);
	if (!tdp_map_find(req, "loss"))
		return lx_fail(x, NULL, "missing parameter 'loss' (a node id or {type, target})");
	return 0;
}

int layers_expand(struct caller *call, const msgpack_object *req, const char *model, struct layers_out *out)
{
	struct lx *x;
	struct shp s;
	char in[LX_ID], last[LX_ID];
	const msgpack_object *nodes, *loss;
	msgpack_packer pk;
	int r = -1;

	memset(out, 0, sizeof(*out));
	msgpack_sbuffer_init(&out->def);
	x = calloc(1, sizeof(*x));
	if (!x || !(out->p = calloc(LX_MAX_PARAMS, sizeof(*out->p)))) {
		free(x);
		return td_fail(&call->err, TDP_INTERNAL, "out of memory");
	}
	x->call = call;
	x->model = model;
	x->p = out->p;
	msgpack_sbuffer_init(&x->nb);
	msgpack_packer_init(&x->pk, &x->nb, msgpack_sbuffer_write);
	if (parse_top(x, req) < 0 || stack_input(x, req, in, &s) < 0 ||
	    lx_stack(x, NULL, tdp_map_find(req, "layers"), in, &s, last) < 0)
		goto out;
	loss = tdp_map_find(req, "loss");
	if (loss->type == MSGPACK_OBJECT_MAP && loss_map(x, loss, last, &s) < 0)
		goto out;
	nodes = tdp_map_find(req, "nodes");
	{
		const msgpack_object *params = tdp_map_find(req, "params");
		unsigned np = 0;

		for (unsigned k = 0; k < x->np; k++)
			np += !x->p[k].buffer;
		if (np == 0 && (!params || params->type != MSGPACK_OBJECT_ARRAY || params->via.array.size == 0)) {
			lx_fail(x, NULL, "layers: the model has no parameters to train (add a layer with weights, or "
				"stored params)");
			goto out;
		}
	}
	if (x->nnodes + (nodes ? nodes->via.array.size : 0) > TDP_MAX_GRAPH_NODES) {
		td_fail(&call->err, TDP_RESOURCE_EXHAUSTED, "layers expand to %u nodes; with the raw nodes more than %d",
			x->nnodes, TDP_MAX_GRAPH_NODES);
		goto out;
	}
	msgpack_packer_init(&pk, &out->def, msgpack_sbuffer_write);
	if (pack_def(x, req, last, &pk) < 0)
		goto out;
	out->np = x->np;
	out->seed = x->seed;
	r = 0;
out:
	msgpack_sbuffer_destroy(&x->nb);
	free(x);
	return r;
}

void layers_out_free(struct layers_out *out)
{
	msgpack_sbuffer_destroy(&out->def);
	free(out->p);
	out->p = NULL;
	out->np = 0;
}
