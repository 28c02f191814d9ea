/* Reading a graph from its msgpack form: graph.run's and train.step's `nodes`
 * and `outputs`, a model's stored nodes, op.run's one op. Every node is
 * checked, its inputs resolved (earlier node ids, else stored tensors the
 * caller may read), placed, its attrs read by the op's spec and its result
 * inferred; a failure names the node. The graph's msgpack form is the
 * format models are stored in, so the engine reads it itself; it never sees
 * the request around it (docs/architecture.md). */
#include "engine/graph_parse.h"

#include <stdlib.h>
#include <string.h>

#include "base/map_check.h"
#include "daemon.h"
#include "engine/graph_core.h"
#include "engine/kernel_node.h"
#include "name.h"
#include "ops/op.h"
#include "pack.h"
#include "status.h"
#include "store/lookup.h"
#include "store/names.h"

/* A node's id and index: graph->ids, sorted by id then index, lets a graph
 * of thousands of nodes find a name in log time. */
struct graph_id {
	const char *id;
	unsigned node;
};

static int graph_id_cmp(const void *pa, const void *pb)
{
	const struct graph_id *a = pa, *b = pb;
	int c = strcmp(a->id, b->id);

	return c ? c : (a->node > b->node) - (a->node < b->node);
}

/* gr->ids := every node with an id, sorted (pointing into gr->nodes, which
 * graph_parse does not grow once it has begun). Returns 0 or -1 after td_fail. */
static int ids_build(struct graph *gr)
{
	gr->ids = malloc((gr->n ? gr->n : 1) * sizeof(*gr->ids));
	if (!gr->ids)
		return td_fail(&gr->call->err, TDP_RESOURCE_EXHAUSTED, "out of memory for the graph");
	gr->nids = 0;
	for (unsigned i = 0; i < gr->n; i++)
		if (gr->nodes[i].id[0])
			gr->ids[gr->nids++] = (struct graph_id){ .id = gr->nodes[i].id, .node = i };
	qsort(gr->ids, gr->nids, sizeof(*gr->ids), graph_id_cmp);
	return 0;
}

/* The nodes named `name` nearest node i: *before the last one before it,
 * *after the first one after it, each -1 if none. Without gr->ids (op.run's
 * one node), a scan. */
static void ids_around(const struct graph *gr, const char *name, unsigned i, int *before, int *after)
{
	unsigned lo = 0, hi = gr->nids;

	*before = *after = -1;
	if (!gr->ids) {
		for (unsigned j = 0; j < gr->n; j++)
			if (j != i && gr->nodes[j].id[0] && !strcmp(gr->nodes[j].id, name)) {
				if (j < i)
					*before = (int)j;
				else if (*after < 0)
					*after = (int)j;
			}
		return;
	}
	/* The first entry not below (name, i). */
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;

		if (graph_id_cmp(&gr->ids[mid], &(struct graph_id){ .id = name, .node = i }) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0 && !strcmp(gr->ids[lo - 1].id, name))
		*before = (int)gr->ids[lo - 1].node;
	if (lo < gr->nids && gr->ids[lo].node == i && !strcmp(gr->ids[lo].id, name))
		lo++;
	if (lo < gr->nids && !strcmp(gr->ids[lo].id, name))
		*after = (int)gr->ids[lo].node;
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
	return 0;
}

/* Resolve input `k` of node `i`: an earlier node's id, else a stored tensor. */
static int resolve_input(struct graph *gr, unsigned i, unsigned k, const msgpack_object *ref)
{
	struct op_ctx *ctx = &gr->nodes[i].ctx;
	char name[NAMES_SHOWN_MAX], key[TDP_MAX_NAME_LEN + 1], why[TDP_MAX_ERROR_MESSAGE];
	struct tensor *t;
	int code, before, after;

	if (tdp_obj_strcpy(ref, name, sizeof(name)) < 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "input %u must be a name of up to %d bytes", k,
			       TDP_MAX_NAME_LEN);
	gr->nodes[i].src[k] = -1;
	ids_around(gr, name, i, &before, &after);
	if (before >= 0) {
		ctx->in[k] = gr->nodes[before].ctx.out;
		gr->nodes[i].src[k] = before;
		return 0;
	}
	if (after >= 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT,
			       "input %u '%s' is node %d, which comes later (nodes must be in order; "
			       "cycles are not allowed)", k, name, after);
	if (names_qualify(gr->call->cred.uid, name, strlen(name), key, NULL) < 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "input %u is neither an earlier node nor a valid "
			       "tensor name", k);
	code = lookup_tensor_why(gr->call, NULL, key, ACCESS_READ, &t, why, sizeof(why));
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

/* Place node `i` (inputs resolved) on `device` (a node's or op.run's
 * device, or NULL) or where its inputs are. */
static int place_node(struct graph *gr, unsigned i, const msgpack_object *device)
{
	uint32_t ngpus = gr->call->d->ngpus;

	if (device && device->via.u64 >= ngpus)
		return op_fail(&gr->nodes[i].ctx, TDP_INVALID_ARGUMENT, "device must be a device id, 0 to %u "
			       "(tensord uses %u device%s; see info)", ngpus - 1, ngpus, ngpus == 1 ? "" : "s");
	return graph_place_node(gr, i, device ? (int)device->via.u64 : -1);
}

/* Levenshtein distance of a and b, at most 3 (more: 3). */
static unsigned edit_distance(const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);
	unsigned row[41];

	if (na > 40 || nb > 40)
		return 3;
	for (size_t j = 0; j <= nb; j++)
		row[j] = (unsigned)j;
	for (size_t i = 1; i <= na; i++) {
		unsigned diag = row[0];

		row[0] = (unsigned)i;
		for (size_t j = 1; j <= nb; j++) {
			unsigned up = row[j], best = diag + (a[i - 1] != b[j - 1]);

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			diag = up;
			row[j] = best;
		}
	}
	return row[nb] < 3 ? row[nb] : 3;
}

/* The registered op nearest to `name` (at most 2 edits), or NULL. */
static const char *nearest_op(const char *name)
{
	size_t n;
	const struct op_def *const *all = op_all(&n);
	const char *best = NULL;
	unsigned dist = 3;

	for (size_t k = 0; k < n; k++) {
		unsigned d = edit_distance(name, all[k]->name);

		if (d < dist) {
			dist = d;
			best = all[k]->name;
		}
	}
	return best;
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
		const char *near;

		for (char *c = name; *c; c++)
			if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
				*c = '?';
		near = nearest_op(name);
		if (near)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "unknown op '%s'; did you mean '%s'? (docs/ops.md "
				       "lists them)", name, near);
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
	    names_qualify(gr->call->cred.uid, o->via.str.ptr, o->via.str.size, dst, NULL) < 0)
		return graph_node_fail(gr, i, TDP_INVALID_ARGUMENT,
				 "out must be a tensor name (1-255 bytes of A-Z a-z 0-9 . _ : / -, optionally "
				 "after ~user/; with the namespace's uid and a slash at most 255)");
	return 0;
}

/* A node's fields (graph_parse): an op node takes op and attrs, a kernel
 * node kernel, push, groups and result. */
struct node_fields {
	struct map_field f[10];
};

enum { F_ID, F_OP, F_INPUTS, F_ATTRS, F_OUT, F_KERNEL, F_PUSH, F_GROUPS, F_RESULT, F_DEVICE };

static const struct map_field node_fields_spec[10] = {
	[F_ID] = { "id", MAP_STR, false, NULL },
	[F_OP] = { "op", MAP_STR, false, NULL },
	[F_INPUTS] = { "inputs", MAP_ARRAY, true, NULL },
	[F_ATTRS] = { "attrs", MAP_MAP, false, NULL },
	[F_OUT] = { "out", MAP_STR, false, NULL },
	/* a custom kernel's node instead of an op's (kernel_node.c) */
	[F_KERNEL] = { "kernel", MAP_STR, false, NULL },
	[F_PUSH] = { "push", MAP_MAP, false, NULL },
	[F_GROUPS] = { "groups", MAP_ARRAY, false, NULL },
	[F_RESULT] = { "result", MAP_UINT, false, NULL },
	[F_DEVICE] = { "device", MAP_UINT, false, NULL },
};

static int node_kind_fail(struct graph *gr, unsigned i, const struct map_field *f)
{
	const char *why = NULL;

	if (!f[F_OP].value && !f[F_KERNEL].value)
		why = "missing parameter 'op' (or 'kernel', for a custom kernel)";
	else if (f[F_OP].value && f[F_KERNEL].value)
		why = "give op or kernel, not both";
	else if (f[F_KERNEL].value && f[F_ATTRS].value)
		why = "attrs are an op's; a kernel node takes push";
	else if (f[F_OP].value && (f[F_PUSH].value || f[F_GROUPS].value || f[F_RESULT].value))
		why = "push, groups and result are a kernel node's";
	return why ? graph_node_fail(gr, i, TDP_INVALID_ARGUMENT, why) : 0;
}

/* Check node `i`'s map (its fields into `nf`) and its id. */
static int check_node(struct graph *gr, unsigned i, const msgpack_object *map, struct node_fields *nf)
{
	const msgpack_object *push;
	struct td_error err = { 0 };

	if (map->type != MSGPACK_OBJECT_MAP)
		return graph_node_fail(gr, i, TDP_INVALID_ARGUMENT,
				       "a node must be a map {id, op, inputs, attrs, out, device}");
	memcpy(nf->f, node_fields_spec, sizeof(nf->f));
	/* push is a map of members or raw bytes, as in kernel.run. */
	push = tdp_map_find(map, "push");
	nf->f[F_PUSH].type = push && push->type == MSGPACK_OBJECT_BIN ? MAP_BIN : MAP_MAP;
	if (map_check(map, nf->f, 10, &err) < 0)
		return graph_node_fail(gr, i, err.code, err.message);
	if (nf->f[F_ID].value) {
		if (nf->f[F_ID].value->via.str.size == 0 || nf->f[F_ID].value->via.str.size > TDP_MAX_NAME_LEN)
			return graph_node_fail(gr, i, TDP_INVALID_ARGUMENT, "id must be 1-255 bytes");
		int before, after;

		ids_around(gr, gr->nodes[i].id, i, &before, &after);
		if (before >= 0)
			return graph_node_fail(gr, i, TDP_INVALID_ARGUMENT, "id used by an earlier node");
	}
	return node_kind_fail(gr, i, nf->f);
}

/* Set up node `i` from its checked fields. */
static int parse_node(struct graph *gr, unsigned i, const struct map_field *f)
{
	struct node *nd = &gr->nodes[i];

	if (f[F_KERNEL].value) {
		nd->ctx.def = &kernel_node_op;
		if (resolve_inputs(gr, i, f[F_INPUTS].value) < 0 || place_node(gr, i, f[F_DEVICE].value) < 0 ||
		    kernel_node_build(gr, i, f[F_KERNEL].value, f[F_PUSH].value, f[F_GROUPS].value,
				      f[F_RESULT].value) < 0)
			return graph_node_fail(gr, i, nd->ctx.err.code, nd->ctx.err.message);
	} else if (build_node(gr, i, f[F_OP].value, f[F_INPUTS].value, f[F_ATTRS].value, f[F_DEVICE].value) < 0) {
		return graph_node_fail(gr, i, nd->ctx.err.code, nd->ctx.err.message);
	}
	if (f[F_OUT].value) {
		if (out_name(gr, i, f[F_OUT].value, nd->out_name) < 0)
			return -1;
		nd->has_out = true;
	}
	return 0;
}

/* graph_parse with gr->ids built. */
static int parse_indexed(struct graph *gr, unsigned base, const msgpack_object *nodes,
			 const msgpack_object *outs)
{
	for (unsigned i = base; i < gr->n; i++) {
		struct node_fields nf;

		if (check_node(gr, i, &nodes->via.array.ptr[i - base], &nf) < 0 || parse_node(gr, i, nf.f) < 0)
			return -1;
	}
	for (uint32_t k = 0; outs && k < outs->via.array.size; k++) {
		const msgpack_object *o = &outs->via.array.ptr[k];
		unsigned i;

		for (i = 0; i < gr->n; i++)
			if (gr->nodes[i].id[0] && tdp_obj_str_eq(o, gr->nodes[i].id))
				break;
		if (i == gr->n)
			return td_fail(&gr->call->err, TDP_INVALID_ARGUMENT, "outputs[%u] names no node id", k);
		gr->nodes[i].inline_out = true;
	}
	return 0;
}

int graph_parse(struct graph *gr, const msgpack_object *nodes, const msgpack_object *outs)
{
	unsigned base = gr->n;
	int r;

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
	if (ids_build(gr) < 0)
		return -1;
	r = parse_indexed(gr, base, nodes, outs);
	free(gr->ids);
	gr->ids = NULL;
	gr->nids = 0;
	return r;
}

int graph_parse_op(struct graph *gr, const msgpack_object *op, const msgpack_object *inputs,
		   const msgpack_object *attrs, const msgpack_object *out, const msgpack_object *device)
{
	struct node *nd;

	if (graph_alloc_nodes(gr, 1) < 0)
		return -1;
	nd = &gr->nodes[gr->n - 1];
	if (build_node(gr, gr->n - 1, op, inputs, attrs, device) < 0)
		return graph_node_fail(gr, gr->n - 1, nd->ctx.err.code, nd->ctx.err.message);
	if (out) {
		if (out_name(gr, gr->n - 1, out, nd->out_name) < 0)
			return -1;
		nd->has_out = true;
	}
	return 0;
}
