#include "engine/graph.h"
#include "engine/graph_core.h"
#include "engine/graph_fuse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "dtype.h"
#include "engine/kernel_node.h"
#include "gpu/device.h"
#include "gpu/transfer.h"
#include "methods/methods_tensor.h"
#include "name.h"
#include "ops/op.h"
#include "pack.h"
#include "rpc.h"
#include "serve/params.h"
#include "status.h"
#include "store/lookup.h"
#include "store/names.h"
#include "store/store.h"


static int parse_attr(struct op_ctx *ctx, const struct op_attr_spec *spec,
		      const msgpack_object *v, struct op_attr_value *out)
{
	int64_t x;

	switch (spec->type) {
	case ATTR_FLOAT:
		if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64)
			out->f = v->via.f64;
		else if (tdp_obj_int(v, &x) == 0)
			out->f = (double)x;
		else
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s' must be a number", spec->name);
		break;
	case ATTR_INT:
		if (tdp_obj_int(v, &out->i) < 0)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s' must be an integer", spec->name);
		out->f = (double)out->i;
		break;
	case ATTR_BOOL:
		if (v->type != MSGPACK_OBJECT_BOOLEAN)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s' must be true or false", spec->name);
		out->i = v->via.boolean;
		break;
	case ATTR_STR:
		if (tdp_obj_strcpy(v, out->s, sizeof(out->s)) < 0)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s' must be a short string",
				       spec->name);
		break;
	case ATTR_INTS:
		if (tdp_obj_int(v, &x) == 0) {
			out->ints[0] = x;
			out->nints = 1;
			break;
		}
		if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > OP_MAX_INTS)
			return op_fail(ctx, TDP_INVALID_ARGUMENT,
				       "attr '%s' must be an integer or up to %d of them", spec->name,
				       OP_MAX_INTS);
		for (uint32_t k = 0; k < v->via.array.size; k++)
			if (tdp_obj_int(&v->via.array.ptr[k], &out->ints[k]) < 0)
				return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s'[%u] must be an integer",
					       spec->name, k);
		out->nints = v->via.array.size;
		break;
	}
	out->set = true;
	return 0;
}

static int parse_attrs(struct op_ctx *ctx, const msgpack_object *attrs)
{
	const struct op_attr_spec *spec = ctx->def->attrs;

	if (attrs && attrs->type != MSGPACK_OBJECT_MAP)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attrs must be a map");
	for (uint32_t k = 0; attrs && k < attrs->via.map.size; k++) {
		const msgpack_object_kv *kv = &attrs->via.map.ptr[k];
		unsigned i;

		for (i = 0; spec && spec[i].name; i++)
			if (tdp_obj_str_eq(&kv->key, spec[i].name))
				break;
		if (!spec || !spec[i].name) {
			char key[40] = "?";

			tdp_obj_strcpy(&kv->key, key, sizeof(key));
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "unknown attr '%s'", key);
		}
		if (ctx->attr[i].set)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s' given twice", spec[i].name);
		if (parse_attr(ctx, &spec[i], &kv->val, &ctx->attr[i]) < 0)
			return -1;
	}
	return 0;
}

/* Resolve input `k` of node `i`: an earlier node's id, else a stored tensor. */
static int resolve_input(struct graph *gr, unsigned i, unsigned k, const msgpack_object *ref)
{
	struct op_ctx *ctx = &gr->nodes[i].ctx;
	char name[NAMES_SHOWN_MAX], key[TDP_MAX_NAME_LEN + 1], why[TDP_MAX_ERROR_MESSAGE];
	struct tensor *t;
	int code;

	if (tdp_obj_strcpy(ref, name, sizeof(name)) < 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "input %u must be a name of up to %d bytes", k,
			       TDP_MAX_NAME_LEN);
	gr->nodes[i].src[k] = -1;
	for (unsigned j = i; j-- > 0;) {
		if (gr->nodes[j].id[0] && !strcmp(gr->nodes[j].id, name)) {
			ctx->in[k] = gr->nodes[j].ctx.out;
			gr->nodes[i].src[k] = (int)j;
			return 0;
		}
	}
	for (unsigned j = i + 1; j < gr->n; j++)
		if (gr->nodes[j].id[0] && !strcmp(gr->nodes[j].id, name))
			return op_fail(ctx, TDP_INVALID_ARGUMENT,
				       "input %u '%s' is node %u, which comes later (nodes must be in order; "
				       "cycles are not allowed)", k, name, j);
	if (names_qualify(gr->req->cred.uid, name, strlen(name), key, NULL) < 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "input %u is neither an earlier node nor a valid "
			       "tensor name", k);
	code = lookup_tensor_why(gr->req, NULL, key, ACCESS_READ, &t, why, sizeof(why));
	if (code == TDP_NOT_FOUND)
		return op_fail(ctx, TDP_NOT_FOUND, "input %u '%s' is neither an earlier node nor a stored tensor",
			       k, name);
	if (code)
		return op_fail(ctx, code, "input %u: %s", k, why);
	if (!graph_stored(gr, t))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "input %u '%s' is not copied to the replicas "
			       "(a data-parallel run copies its parameters, their state and its data)", k, name);
	t = graph_stored(gr, t);
	ctx->in[k] = graph_stored_input(t);
	gr->nodes[i].stored[k] = t;
	return 0;
}

/* Resolve every input of node `i`. */
static int resolve_inputs(struct graph *gr, unsigned i, const msgpack_object *inputs)
{
	struct op_ctx *ctx = &gr->nodes[i].ctx;

	if (inputs->type != MSGPACK_OBJECT_ARRAY || inputs->via.array.size > OP_MAX_INPUTS)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "inputs must be an array of up to %d names",
			       OP_MAX_INPUTS);
	ctx->ninputs = inputs->via.array.size;
	for (unsigned k = 0; k < ctx->ninputs; k++)
		if (resolve_input(gr, i, k, &inputs->via.array.ptr[k]) < 0)
			return -1;
	return 0;
}

/* Place node `i` (inputs resolved) on `device` (a request's parameter, or
 * NULL) or where its inputs are. */
static int place_node(struct graph *gr, unsigned i, const msgpack_object *device)
{
	uint32_t ngpus = gr->req->d->ngpus;

	if (device && device->via.u64 >= ngpus)
		return op_fail(&gr->nodes[i].ctx, TDP_INVALID_ARGUMENT, "device must be a device id, 0 to %u "
			       "(tensord uses %u device%s; see info)", ngpus - 1, ngpus, ngpus == 1 ? "" : "s");
	return graph_place_node(gr, i, device ? (int)device->via.u64 : -1);
}

/* Set up node `i` from its op name, inputs and attrs, and infer its result. */
static int build_node(struct graph *gr, unsigned i, const msgpack_object *op,
		      const msgpack_object *inputs, const msgpack_object *attrs, const msgpack_object *device)
{
	struct node *nd = &gr->nodes[i];
	struct op_ctx *ctx = &nd->ctx;

	if (op->type != MSGPACK_OBJECT_STR || !(ctx->def = op_find(op->via.str.ptr, op->via.str.size))) {
		char name[40] = "?";

		tdp_obj_strcpy(op, name, sizeof(name));
		for (char *c = name; *c; c++)
			if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
				*c = '?';
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "unknown op '%s' (docs/ops.md lists them)", name);
	}
	if (resolve_inputs(gr, i, inputs) < 0 || place_node(gr, i, device) < 0 || parse_attrs(ctx, attrs) < 0)
		return -1;
	return graph_infer_node(gr, i);
}

/* Read an output name argument into `dst` as a store key (names.h). */
static int out_name(struct graph *gr, unsigned i, const msgpack_object *o, char *dst)
{
	if (o->type != MSGPACK_OBJECT_STR ||
	    names_qualify(gr->req->cred.uid, o->via.str.ptr, o->via.str.size, dst, NULL) < 0)
		return graph_node_fail(gr, i, TDP_INVALID_ARGUMENT,
				 "out must be a tensor name (1-255 bytes of A-Z a-z 0-9 . _ : / -, optionally "
				 "after ~user/; with the namespace's uid and a slash at most 255)");
	return 0;
}

/* The "gpu_ns" entry of a profiled result. */
static int pack_gpu_ns(struct graph *gr)
{
	if (tdp_pack_cstr(gr->req->pk, "gpu_ns") || msgpack_pack_uint64(gr->req->pk, gr->gpu_ns))
		return request_fail(gr->req, TDP_INTERNAL, "out of memory");
	return 0;
}

int method_op_run(struct request *req)
{
	const msgpack_object *op, *inputs, *attrs, *out, *device;
	bool profile = false;
	const struct param p[] = {
		PARAM_REQ_OBJ("op", PARAM_STR, op),
		PARAM_REQ("inputs", PARAM_ARRAY, inputs),
		PARAM_OPT("attrs", PARAM_MAP, attrs),
		PARAM_OPT_OBJ("out", PARAM_STR, out),
		PARAM_OPT("profile", PARAM_BOOL, profile),
		PARAM_OPT_OBJ("device", PARAM_UINT, device),
	};
	struct graph gr = { .req = req };
	struct node *nd;
	unsigned extra;
	int r = -1;

	if (PARAMS_PARSE(req, p) < 0 || graph_alloc_nodes(&gr, 1) < 0)
		return -1;
	extra = profile;
	nd = &gr.nodes[0];
	if (build_node(&gr, 0, op, inputs, attrs, device) < 0) {
		graph_node_fail(&gr, 0, nd->ctx.err.code, nd->ctx.err.message);
		goto out;
	}
	if (out) {
		if (out_name(&gr, 0, out, nd->out_name) < 0)
			goto out;
		nd->has_out = true;
	}
	if (graph_check_outputs(&gr) < 0 || graph_execute(&gr) < 0)
		goto out;
	if (nd->has_out) {
		struct tensor *t = graph_commit(&gr, 0);

		if (!t) {
			request_fail(req, TDP_INTERNAL, "out of memory");
			goto out;
		}
		r = tensor_write_meta_result_map(req, t, extra);
	} else {
		r = tdp_write_result_head(req->pk, req->msgid) < 0 ? -1 : graph_write_inline_map(&gr, 0, extra);
	}
	if (r == 0 && extra && pack_gpu_ns(&gr) < 0)
		r = -1;
out:
	graph_free(&gr);
	return r;
}

/* The parameters of one node map. */
struct node_params {
	const msgpack_object *id, *op, *inputs, *attrs, *out, *kernel, *push, *groups, *result, *device;
};

/* An op node takes op and attrs, a kernel node kernel, push, groups and
 * result. */
static int node_kind_fail(struct graph *gr, unsigned i, const struct node_params *np)
{
	const char *why = NULL;

	if (!np->op && !np->kernel)
		why = "missing parameter 'op' (or 'kernel', for a custom kernel)";
	else if (np->op && np->kernel)
		why = "give op or kernel, not both";
	else if (np->kernel && np->attrs)
		why = "attrs are an op's; a kernel node takes push";
	else if (np->op && (np->push || np->groups || np->result))
		why = "push, groups and result are a kernel node's";
	return why ? graph_node_fail(gr, i, TDP_INVALID_ARGUMENT, why) : 0;
}

int graph_parse(struct graph *gr, const msgpack_object *nodes, const msgpack_object *outs)
{
	struct request *req = gr->req;
	struct node_params np;
	const struct param spec[] = {
		PARAM_OPT_OBJ("id", PARAM_STR, np.id),
		PARAM_OPT_OBJ("op", PARAM_STR, np.op),
		PARAM_REQ("inputs", PARAM_ARRAY, np.inputs),
		PARAM_OPT("attrs", PARAM_MAP, np.attrs),
		PARAM_OPT_OBJ("out", PARAM_STR, np.out),
		/* a custom kernel's node instead of an op's (kernel_node.c) */
		PARAM_OPT_OBJ("kernel", PARAM_STR, np.kernel),
		/* a map of members or raw bytes, as in kernel.run */
		PARAM_OPT("push", PARAM_MAP_OR_BIN, np.push),
		PARAM_OPT("groups", PARAM_ARRAY, np.groups),
		PARAM_OPT_OBJ("result", PARAM_UINT, np.result),
		PARAM_OPT_OBJ("device", PARAM_UINT, np.device),
	};

	unsigned base = gr->n;

	gr->base = base;
	if (graph_alloc_nodes(gr, nodes->via.array.size) < 0)
		return -1;
	/* Every id first, so that a reference to a later node is recognised as
	 * one (and refused) rather than read as a stored tensor's name. */
	for (unsigned i = base; i < gr->n; i++) {
		const msgpack_object *id = nodes->via.array.ptr[i - base].type == MSGPACK_OBJECT_MAP ?
					   tdp_map_find(&nodes->via.array.ptr[i - base], "id") : NULL;

		if (id && id->type == MSGPACK_OBJECT_STR && id->via.str.size <= TDP_MAX_NAME_LEN)
			memcpy(gr->nodes[i].id, id->via.str.ptr, id->via.str.size);
	}
	for (unsigned i = base; i < gr->n; i++) {
		struct node *nd = &gr->nodes[i];
		struct request sub = *req;

		/* Each node is a params-like map: reuse the checker, prefixing errors. */
		if (nodes->via.array.ptr[i - base].type != MSGPACK_OBJECT_MAP) {
			graph_node_fail(gr, i, TDP_INVALID_ARGUMENT,
					"a node must be a map {id, op, inputs, attrs, out, device}");
			return -1;
		}
		sub.params = &nodes->via.array.ptr[i - base];
		if (PARAMS_PARSE(&sub, spec) < 0) {
			graph_node_fail(gr, i, sub.err.code, sub.err.message);
			return -1;
		}
		if (np.id) {
			if (np.id->via.str.size == 0 || np.id->via.str.size > TDP_MAX_NAME_LEN) {
				graph_node_fail(gr, i, TDP_INVALID_ARGUMENT, "id must be 1-255 bytes");
				return -1;
			}
			for (unsigned j = 0; j < i; j++)
				if (!strcmp(gr->nodes[j].id, nd->id)) {
					graph_node_fail(gr, i, TDP_INVALID_ARGUMENT, "id used by an earlier node");
					return -1;
				}
		}
		if (node_kind_fail(gr, i, &np) < 0)
			return -1;
		if (np.kernel) {
			nd->ctx.def = &kernel_node_op;
			if (resolve_inputs(gr, i, np.inputs) < 0 || place_node(gr, i, np.device) < 0 ||
			    kernel_node_build(gr, i, np.kernel, np.push, np.groups, np.result) < 0) {
				graph_node_fail(gr, i, nd->ctx.err.code, nd->ctx.err.message);
				return -1;
			}
		} else if (build_node(gr, i, np.op, np.inputs, np.attrs, np.device) < 0) {
			graph_node_fail(gr, i, nd->ctx.err.code, nd->ctx.err.message);
			return -1;
		}
		if (np.out) {
			if (out_name(gr, i, np.out, nd->out_name) < 0)
				return -1;
			nd->has_out = true;
		}
	}
	for (uint32_t k = 0; outs && k < outs->via.array.size; k++) {
		const msgpack_object *o = &outs->via.array.ptr[k];
		unsigned i;

		for (i = 0; i < gr->n; i++)
			if (gr->nodes[i].id[0] && tdp_obj_str_eq(o, gr->nodes[i].id))
				break;
		if (i == gr->n) {
			request_fail(req, TDP_INVALID_ARGUMENT, "outputs[%u] names no node id", k);
			return -1;
		}
		gr->nodes[i].inline_out = true;
	}
	return 0;
}

int method_graph_run(struct request *req)
{
	const msgpack_object *nodes, *outputs;
	bool profile = false, fuse = false, has_fuse;
	const struct param p[] = {
		PARAM_REQ("nodes", PARAM_ARRAY, nodes),
		PARAM_OPT("outputs", PARAM_ARRAY, outputs),
		PARAM_OPT("profile", PARAM_BOOL, profile),
		PARAM_OPT_GIVEN("fuse", PARAM_BOOL, fuse, has_fuse),
	};
	struct graph gr = { .req = req };
	uint32_t nstored = 0, ninline = 0;
	int r = -1;

	if (PARAMS_PARSE(req, p) < 0)
		return -1;
	gr.fuse = has_fuse ? fuse : graph_fuse_default(req->d->gpus[0]);
	if (graph_parse(&gr, nodes, outputs) < 0)
		goto out;
	for (unsigned i = 0; i < gr.n; i++) {
		nstored += gr.nodes[i].has_out;
		ninline += gr.nodes[i].inline_out;
	}
	if (graph_check_outputs(&gr) < 0 || graph_execute(&gr) < 0)
		goto out;
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 2 + 2 * profile) ||
	    tdp_pack_cstr(req->pk, "outputs") || msgpack_pack_map(req->pk, ninline)) {
		request_fail(req, TDP_INTERNAL, "out of memory");
		goto out;
	}
	for (unsigned i = 0; i < gr.n; i++) {
		if (!gr.nodes[i].inline_out)
			continue;
		if (tdp_pack_cstr(req->pk, gr.nodes[i].id) || graph_write_inline(&gr, i) < 0) {
			if (!td_failed(&req->err))
				request_fail(req, TDP_INTERNAL, "out of memory");
			goto out;
		}
	}
	if (tdp_pack_cstr(req->pk, "stored") || msgpack_pack_map(req->pk, nstored)) {
		request_fail(req, TDP_INTERNAL, "out of memory");
		goto out;
	}
	/* Everything ran: only now do named results replace stored tensors. */
	for (unsigned i = 0; i < gr.n; i++) {
		struct tensor *t;

		if (!gr.nodes[i].has_out)
			continue;
		t = graph_commit(&gr, i);
		if (!t || tensor_pack_name(req, t) || tensor_write_meta(req, t)) {
			request_fail(req, TDP_INTERNAL, "out of memory");
			goto out;
		}
	}
	r = profile ? pack_gpu_ns(&gr) : 0;
	if (r == 0 && profile &&
	    (tdp_pack_cstr(req->pk, "dispatches") || msgpack_pack_uint64(req->pk, gr.dispatches)))
		r = request_fail(req, TDP_INTERNAL, "out of memory");
out:
	graph_free(&gr);
	return r;
}
