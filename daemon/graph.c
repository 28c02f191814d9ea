#include "graph.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "dtype.h"
#include "gpu/device.h"
#include "gpu/transfer.h"
#include "name.h"
#include "ops/op.h"
#include "pack.h"
#include "params.h"
#include "rpc.h"
#include "status.h"
#include "store.h"
#include "tensor_meta.h"

#define GRAPH_MAX_NODES 4096

struct node {
	char id[TDP_MAX_NAME_LEN + 1];   /* "" for op.run's single node */
	char out_name[TDP_MAX_NAME_LEN + 1];
	bool has_out;                    /* store the result under out_name */
	bool inline_out;                 /* return the result's data */
	struct op_ctx ctx;
	int src[OP_MAX_INPUTS];          /* producing node of each input, -1: stored */
	struct gpu_alloc alloc;          /* the result's own memory */
	struct gpu_alloc *result;        /* &alloc, or input 0's memory for a view */
	bool aliased;                    /* a view sharing input 0's memory */
};

struct graph {
	struct request *req;
	struct node *nodes;
	unsigned n;
};

/* Report a node's failure with its position, id and op. */
static int node_fail(struct graph *gr, unsigned i, int code, const char *what)
{
	struct node *nd = &gr->nodes[i];
	const char *op = nd->ctx.def ? nd->ctx.def->name : "?";

	if (gr->n == 1 && !nd->id[0])
		return request_fail(gr->req, code, "%s: %s", op, what);
	return request_fail(gr->req, code, "node %u%s%s%s (%s): %s", i, nd->id[0] ? " '" : "",
			    nd->id, nd->id[0] ? "'" : "", op, what);
}

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
	for (unsigned i = 0; spec && spec[i].name; i++)
		if (spec[i].required && !ctx->attr[i].set)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "missing attr '%s'", spec[i].name);
	return 0;
}

/* Resolve input `k` of node `i`: an earlier node's id, else a stored tensor. */
static int resolve_input(struct graph *gr, unsigned i, unsigned k, const msgpack_object *ref)
{
	struct op_ctx *ctx = &gr->nodes[i].ctx;
	char name[TDP_MAX_NAME_LEN + 1];
	struct tensor *t;

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
	t = tdp_name_valid(name, strlen(name)) ? store_find(gr->req->d->store, name, strlen(name)) : NULL;
	if (!t)
		return op_fail(ctx, TDP_NOT_FOUND, "input %u '%s' is neither an earlier node nor a stored tensor",
			       k, name);
	ctx->in[k] = (struct op_tensor){
		.dtype = t->dtype, .rank = t->rank, .count = t->count, .bytes = t->bytes,
		.alloc = &t->alloc,
	};
	memcpy(ctx->in[k].shape, t->shape, sizeof(t->shape));
	return 0;
}

/* Set up node `i` from its op name, inputs and attrs, and infer its result. */
static int build_node(struct graph *gr, unsigned i, const msgpack_object *op,
		      const msgpack_object *inputs, const msgpack_object *attrs)
{
	struct node *nd = &gr->nodes[i];
	struct op_ctx *ctx = &nd->ctx;
	struct daemon *d = gr->req->d;

	ctx->g = d->gpu;
	if (op->type != MSGPACK_OBJECT_STR || !(ctx->def = op_find(op->via.str.ptr, op->via.str.size))) {
		char name[40] = "?";

		tdp_obj_strcpy(op, name, sizeof(name));
		for (char *c = name; *c; c++)
			if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
				*c = '?';
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "unknown op '%s' (docs/ops.md lists them)", name);
	}
	if (inputs->type != MSGPACK_OBJECT_ARRAY)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "inputs must be an array of names");
	if (inputs->via.array.size < ctx->def->min_inputs || inputs->via.array.size > ctx->def->max_inputs) {
		if (ctx->def->min_inputs == ctx->def->max_inputs)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "takes %u inputs, got %u",
				       ctx->def->min_inputs, inputs->via.array.size);
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "takes %u to %u inputs, got %u",
			       ctx->def->min_inputs, ctx->def->max_inputs, inputs->via.array.size);
	}
	ctx->ninputs = inputs->via.array.size;
	for (unsigned k = 0; k < ctx->ninputs; k++)
		if (resolve_input(gr, i, k, &inputs->via.array.ptr[k]) < 0)
			return -1;
	if (parse_attrs(ctx, attrs) < 0 || ctx->def->infer(ctx) < 0)
		return -1;
	if (op_tensor_sizes(&ctx->out) < 0 || ctx->out.bytes > d->cfg.max_tensor_bytes)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "the result is larger than the limit of %llu bytes",
			       (unsigned long long)d->cfg.max_tensor_bytes);
	return 0;
}

/* Check named outputs: valid, distinct, ours to replace, within the tensor limit. */
static int check_outputs(struct graph *gr)
{
	struct request *req = gr->req;
	uint64_t count, bytes, fresh = 0;

	for (unsigned i = 0; i < gr->n; i++) {
		struct node *nd = &gr->nodes[i];
		struct tensor *old;

		if (!nd->has_out)
			continue;
		for (unsigned j = 0; j < i; j++)
			if (gr->nodes[j].has_out && !strcmp(gr->nodes[j].out_name, nd->out_name))
				return node_fail(gr, i, TDP_INVALID_ARGUMENT, "two nodes store the same name");
		old = store_find(req->d->store, nd->out_name, strlen(nd->out_name));
		if (old && req->uid != 0 && req->uid != old->owner)
			return node_fail(gr, i, TDP_PERMISSION_DENIED, "the output name belongs to another user");
		fresh += !old;
	}
	store_totals(req->d->store, &count, &bytes);
	if (count + fresh > req->d->cfg.max_tensors)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "storing the outputs would pass %llu tensors",
				    (unsigned long long)req->d->cfg.max_tensors);
	return 0;
}

static int device_fail(struct graph *gr, int r)
{
	if (r == -ENODEV)
		return request_fail(gr->req, TDP_DEVICE_LOST, "the GPU was lost");
	return request_fail(gr->req, TDP_INTERNAL, "the GPU submission failed (%s)", strerror(-r));
}

/* Allocate every result, record every node, submit once and wait. */
static int execute(struct graph *gr)
{
	struct gpu_device *g = gr->req->d->gpu;
	struct gpu_recorder rec;
	int r;

	for (unsigned i = 0; i < gr->n; i++) {
		struct node *nd = &gr->nodes[i];

		/* Inputs made by earlier nodes had no memory when they were resolved. */
		for (unsigned k = 0; k < nd->ctx.ninputs; k++)
			if (nd->src[k] >= 0)
				nd->ctx.in[k].alloc = gr->nodes[nd->src[k]].result;
		if (nd->ctx.view && !nd->has_out) {
			nd->result = nd->ctx.in[0].alloc;
			nd->aliased = true;
		} else {
			r = gpu_memory_alloc(g, nd->ctx.out.bytes, &nd->alloc);
			if (r < 0)
				return node_fail(gr, i, TDP_RESOURCE_EXHAUSTED,
						 "out of device memory for the result");
			nd->result = &nd->alloc;
		}
		nd->ctx.out.alloc = nd->result;
	}
	r = gpu_rec_begin(&rec, g);
	if (r < 0)
		return device_fail(gr, r);
	for (unsigned i = 0; i < gr->n; i++) {
		struct node *nd = &gr->nodes[i];

		if (nd->ctx.out.count == 0 || nd->aliased)
			continue;
		if (nd->ctx.def->record(&nd->ctx, &rec) < 0) {
			gpu_rec_abort(&rec);
			return node_fail(gr, i, nd->ctx.code, nd->ctx.message);
		}
	}
	r = gpu_rec_submit_wait(&rec);
	if (r < 0)
		return device_fail(gr, r);
	return 0;
}

/* Move node `i`'s result into the store under its out name. */
static struct tensor *commit(struct graph *gr, unsigned i)
{
	struct node *nd = &gr->nodes[i];
	struct request *req = gr->req;
	struct tensor *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->name_len = strlen(nd->out_name);
	memcpy(t->name, nd->out_name, t->name_len + 1);
	t->dtype = nd->ctx.out.dtype;
	t->rank = nd->ctx.out.rank;
	memcpy(t->shape, nd->ctx.out.shape, sizeof(t->shape));
	t->count = nd->ctx.out.count;
	t->bytes = nd->ctx.out.bytes;
	t->owner = req->uid;
	t->device = req->d->gpu->desc.index;
	t->created_ns = t->modified_ns = daemon_now_ns(CLOCK_REALTIME);
	t->alloc = nd->alloc;
	nd->alloc = (struct gpu_alloc){ 0 };
	store_put(req->d->store, t); /* room was checked before running */
	return t;
}

/* {dtype, shape, bytes, data} of node `i`'s result, data read from the GPU
 * straight into the response. */
static int write_inline(struct graph *gr, unsigned i)
{
	const struct op_tensor *t = &gr->nodes[i].ctx.out;
	msgpack_packer *pk = gr->req->pk;
	int fail = msgpack_pack_map(pk, 4) ||
		   tdp_pack_cstr(pk, "dtype") || tdp_pack_cstr(pk, tdp_dtype_name(t->dtype)) ||
		   tdp_pack_cstr(pk, "shape") || msgpack_pack_array(pk, t->rank);
	void *dst;
	int r;

	for (unsigned d = 0; !fail && d < t->rank; d++)
		fail = msgpack_pack_uint64(pk, t->shape[d]);
	if (fail || tdp_pack_cstr(pk, "bytes") || msgpack_pack_uint64(pk, t->bytes) ||
	    tdp_pack_cstr(pk, "data") || msgpack_pack_bin(pk, t->bytes))
		return request_fail(gr->req, TDP_INTERNAL, "out of memory");
	dst = tdp_buf_extend(gr->req->out, t->bytes);
	if (!dst)
		return request_fail(gr->req, TDP_RESOURCE_EXHAUSTED, "out of host memory for the result");
	r = gpu_download(gr->req->d->gpu, gr->nodes[i].result, dst);
	if (r < 0)
		return device_fail(gr, r);
	return 0;
}

static void graph_free(struct graph *gr)
{
	struct gpu_device *g = gr->req->d->gpu;

	for (unsigned i = 0; gr->nodes && i < gr->n; i++) {
		struct op_scratch *s = &gr->nodes[i].ctx.scratch;

		gpu_memory_free(g, &gr->nodes[i].alloc);
		for (unsigned k = 0; k < s->n; k++)
			gpu_memory_free(g, &s->allocs[k]);
	}
	free(gr->nodes);
}

static int alloc_nodes(struct graph *gr, uint32_t n)
{
	if (n == 0 || n > GRAPH_MAX_NODES)
		return request_fail(gr->req, TDP_INVALID_ARGUMENT, "a graph has 1 to %d nodes, not %u",
				    GRAPH_MAX_NODES, n);
	gr->nodes = calloc(n, sizeof(*gr->nodes));
	if (!gr->nodes)
		return request_fail(gr->req, TDP_INTERNAL, "out of memory");
	gr->n = n;
	return 0;
}

/* Read an output name argument into `dst`. */
static int out_name(struct graph *gr, unsigned i, const msgpack_object *o, char *dst)
{
	if (o->type != MSGPACK_OBJECT_STR || !tdp_name_valid(o->via.str.ptr, o->via.str.size))
		return node_fail(gr, i, TDP_INVALID_ARGUMENT,
				 "out must be a tensor name (1-255 bytes of A-Z a-z 0-9 . _ : / -)");
	memcpy(dst, o->via.str.ptr, o->via.str.size);
	dst[o->via.str.size] = '\0';
	return 0;
}

int graph_op_run(struct request *req)
{
	struct param p[] = {
		{ "op", PARAM_STR, true, NULL },
		{ "inputs", PARAM_ARRAY, true, NULL },
		{ "attrs", PARAM_MAP, false, NULL },
		{ "out", PARAM_STR, false, NULL },
	};
	struct graph gr = { .req = req };
	struct node *nd;
	int r = -1;

	if (params_parse(req, p, 4) < 0 || alloc_nodes(&gr, 1) < 0)
		return -1;
	nd = &gr.nodes[0];
	if (build_node(&gr, 0, p[0].value, p[1].value, p[2].value) < 0) {
		node_fail(&gr, 0, nd->ctx.code, nd->ctx.message);
		goto out;
	}
	if (p[3].value) {
		if (out_name(&gr, 0, p[3].value, nd->out_name) < 0)
			goto out;
		nd->has_out = true;
	}
	if (check_outputs(&gr) < 0 || execute(&gr) < 0)
		goto out;
	if (nd->has_out) {
		struct tensor *t = commit(&gr, 0);

		if (!t) {
			request_fail(req, TDP_INTERNAL, "out of memory");
			goto out;
		}
		r = tensor_write_meta_result(req, t);
	} else {
		r = tdp_write_result_head(req->pk, req->msgid) < 0 ? -1 : write_inline(&gr, 0);
	}
out:
	graph_free(&gr);
	return r;
}

int graph_run(struct request *req)
{
	struct param p[] = {
		{ "nodes", PARAM_ARRAY, true, NULL },
		{ "outputs", PARAM_ARRAY, false, NULL },
	};
	struct param np[] = {
		{ "id", PARAM_STR, false, NULL },
		{ "op", PARAM_STR, true, NULL },
		{ "inputs", PARAM_ARRAY, true, NULL },
		{ "attrs", PARAM_MAP, false, NULL },
		{ "out", PARAM_STR, false, NULL },
	};
	struct graph gr = { .req = req };
	const msgpack_object *nodes, *outs;
	uint32_t nstored = 0, ninline = 0;
	int r = -1;

	if (params_parse(req, p, 2) < 0)
		return -1;
	nodes = p[0].value;
	outs = p[1].value;
	if (alloc_nodes(&gr, nodes->via.array.size) < 0)
		return -1;
	/* Every id first, so that a reference to a later node is recognised as
	 * one (and refused) rather than read as a stored tensor's name. */
	for (unsigned i = 0; i < gr.n; i++) {
		const msgpack_object *id = nodes->via.array.ptr[i].type == MSGPACK_OBJECT_MAP ?
					   tdp_map_find(&nodes->via.array.ptr[i], "id") : NULL;

		if (id && id->type == MSGPACK_OBJECT_STR && id->via.str.size <= TDP_MAX_NAME_LEN)
			memcpy(gr.nodes[i].id, id->via.str.ptr, id->via.str.size);
	}
	for (unsigned i = 0; i < gr.n; i++) {
		struct node *nd = &gr.nodes[i];
		struct request sub = *req;

		/* Each node is a params-like map: reuse the checker, prefixing errors. */
		if (nodes->via.array.ptr[i].type != MSGPACK_OBJECT_MAP) {
			node_fail(&gr, i, TDP_INVALID_ARGUMENT, "a node must be a map {id, op, inputs, attrs, out}");
			goto out;
		}
		sub.params = &nodes->via.array.ptr[i];
		if (params_parse(&sub, np, 5) < 0) {
			node_fail(&gr, i, sub.code, strchr(sub.message, ' ') ? strchr(sub.message, ' ') + 1 : sub.message);
			goto out;
		}
		if (np[0].value) {
			if (np[0].value->via.str.size == 0 || np[0].value->via.str.size > TDP_MAX_NAME_LEN) {
				node_fail(&gr, i, TDP_INVALID_ARGUMENT, "id must be 1-255 bytes");
				goto out;
			}
			for (unsigned j = 0; j < i; j++)
				if (!strcmp(gr.nodes[j].id, nd->id)) {
					node_fail(&gr, i, TDP_INVALID_ARGUMENT, "id used by an earlier node");
					goto out;
				}
		}
		if (build_node(&gr, i, np[1].value, np[2].value, np[3].value) < 0) {
			node_fail(&gr, i, nd->ctx.code, nd->ctx.message);
			goto out;
		}
		if (np[4].value) {
			if (out_name(&gr, i, np[4].value, nd->out_name) < 0)
				goto out;
			nd->has_out = true;
			nstored++;
		}
	}
	for (uint32_t k = 0; outs && k < outs->via.array.size; k++) {
		const msgpack_object *o = &outs->via.array.ptr[k];
		unsigned i;

		for (i = 0; i < gr.n; i++)
			if (gr.nodes[i].id[0] && tdp_obj_str_eq(o, gr.nodes[i].id))
				break;
		if (i == gr.n) {
			request_fail(req, TDP_INVALID_ARGUMENT, "outputs[%u] names no node id", k);
			goto out;
		}
		if (!gr.nodes[i].inline_out)
			ninline++;
		gr.nodes[i].inline_out = true;
	}
	if (check_outputs(&gr) < 0 || execute(&gr) < 0)
		goto out;
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 2) ||
	    tdp_pack_cstr(req->pk, "outputs") || msgpack_pack_map(req->pk, ninline)) {
		request_fail(req, TDP_INTERNAL, "out of memory");
		goto out;
	}
	for (unsigned i = 0; i < gr.n; i++) {
		if (!gr.nodes[i].inline_out)
			continue;
		if (tdp_pack_cstr(req->pk, gr.nodes[i].id) || write_inline(&gr, i) < 0) {
			if (!req->code)
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
		t = commit(&gr, i);
		if (!t || tdp_pack_cstr(req->pk, t->name) || tensor_write_meta(req->pk, t)) {
			request_fail(req, TDP_INTERNAL, "out of memory");
			goto out;
		}
	}
	r = 0;
out:
	graph_free(&gr);
	return r;
}
