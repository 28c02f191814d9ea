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
#include "methods/tensor_meta.h"
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

int graph_op_run(struct request *req)
{
	struct param p[] = {
		{ "op", PARAM_STR, true, NULL },
		{ "inputs", PARAM_ARRAY, true, NULL },
		{ "attrs", PARAM_MAP, false, NULL },
		{ "out", PARAM_STR, false, NULL },
		{ "profile", PARAM_BOOL, false, NULL },
		{ "device", PARAM_UINT, false, NULL },
	};
	struct graph gr = { .req = req };
	struct node *nd;
	unsigned extra;
	int r = -1;

	if (params_parse(req, p, 6) < 0 || graph_alloc_nodes(&gr, 1) < 0)
		return -1;
	extra = p[4].value && p[4].value->via.boolean;
	nd = &gr.nodes[0];
	if (build_node(&gr, 0, p[0].value, p[1].value, p[2].value, p[5].value) < 0) {
		graph_node_fail(&gr, 0, nd->ctx.err.code, nd->ctx.err.message);
		goto out;
	}
	if (p[3].value) {
		if (out_name(&gr, 0, p[3].value, nd->out_name) < 0)
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

/* An op node takes op and attrs, a kernel node kernel, push, groups and
 * result (graph_parse's np[] order). */
static int node_kind_fail(struct graph *gr, unsigned i, const struct param *np)
{
	const char *why = NULL;

	if (!np[1].value && !np[5].value)
		why = "missing parameter 'op' (or 'kernel', for a custom kernel)";
	else if (np[1].value && np[5].value)
		why = "give op or kernel, not both";
	else if (np[5].value && np[3].value)
		why = "attrs are an op's; a kernel node takes push";
	else if (np[1].value && (np[6].value || np[7].value || np[8].value))
		why = "push, groups and result are a kernel node's";
	return why ? graph_node_fail(gr, i, TDP_INVALID_ARGUMENT, why) : 0;
}

int graph_parse(struct graph *gr, const msgpack_object *nodes, const msgpack_object *outs)
{
	struct request *req = gr->req;
	struct param np[] = {
		{ "id", PARAM_STR, false, NULL },
		{ "op", PARAM_STR, false, NULL },
		{ "inputs", PARAM_ARRAY, true, NULL },
		{ "attrs", PARAM_MAP, false, NULL },
		{ "out", PARAM_STR, false, NULL },
		/* a custom kernel's node instead of an op's (kernel_node.c) */
		{ "kernel", PARAM_STR, false, NULL },
		{ "push", PARAM_MAP, false, NULL },
		{ "groups", PARAM_ARRAY, false, NULL },
		{ "result", PARAM_UINT, false, NULL },
		{ "device", PARAM_UINT, false, NULL },
	};
	const unsigned nnp = sizeof(np) / sizeof(np[0]);

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
		const msgpack_object *push;

		/* Each node is a params-like map: reuse the checker, prefixing errors. */
		if (nodes->via.array.ptr[i - base].type != MSGPACK_OBJECT_MAP) {
			graph_node_fail(gr, i, TDP_INVALID_ARGUMENT,
					"a node must be a map {id, op, inputs, attrs, out, device}");
			return -1;
		}
		sub.params = &nodes->via.array.ptr[i - base];
		/* push is a map of members or raw bytes, as in kernel.run. */
		push = tdp_map_find(sub.params, "push");
		np[6].type = push && push->type == MSGPACK_OBJECT_BIN ? PARAM_BIN : PARAM_MAP;
		if (params_parse(&sub, np, nnp) < 0) {
			graph_node_fail(gr, i, sub.err.code, sub.err.message);
			return -1;
		}
		if (np[0].value) {
			if (np[0].value->via.str.size == 0 || np[0].value->via.str.size > TDP_MAX_NAME_LEN) {
				graph_node_fail(gr, i, TDP_INVALID_ARGUMENT, "id must be 1-255 bytes");
				return -1;
			}
			for (unsigned j = 0; j < i; j++)
				if (!strcmp(gr->nodes[j].id, nd->id)) {
					graph_node_fail(gr, i, TDP_INVALID_ARGUMENT, "id used by an earlier node");
					return -1;
				}
		}
		if (node_kind_fail(gr, i, np) < 0)
			return -1;
		if (np[5].value) {
			nd->ctx.def = &kernel_node_op;
			if (resolve_inputs(gr, i, np[2].value) < 0 || place_node(gr, i, np[9].value) < 0 ||
			    kernel_node_build(gr, i, np[5].value, np[6].value, np[7].value, np[8].value) < 0) {
				graph_node_fail(gr, i, nd->ctx.err.code, nd->ctx.err.message);
				return -1;
			}
		} else if (build_node(gr, i, np[1].value, np[2].value, np[3].value, np[9].value) < 0) {
			graph_node_fail(gr, i, nd->ctx.err.code, nd->ctx.err.message);
			return -1;
		}
		if (np[4].value) {
			if (out_name(gr, i, np[4].value, nd->out_name) < 0)
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

int graph_run(struct request *req)
{
	struct param p[] = {
		{ "nodes", PARAM_ARRAY, true, NULL },
		{ "outputs", PARAM_ARRAY, false, NULL },
		{ "profile", PARAM_BOOL, false, NULL },
		{ "fuse", PARAM_BOOL, false, NULL },
	};
	struct graph gr = { .req = req };
	uint32_t nstored = 0, ninline = 0;
	bool profile;
	int r = -1;

	if (params_parse(req, p, 4) < 0)
		return -1;
	profile = p[2].value && p[2].value->via.boolean;
	gr.fuse = p[3].value ? p[3].value->via.boolean : graph_fuse_default(req->d->gpus[0]);
	if (graph_parse(&gr, p[0].value, p[1].value) < 0)
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
