#include "engine/forward.h"
#include "store/lookup.h"
#include "store/names.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "dtype.h"
#include "gpu/transfer.h"
#include "pack.h"
#include "status.h"
#include "store/store.h"

int feeds_parse(struct caller *call, const msgpack_object *map, struct feeds *fd, const char *what)
{
	memset(fd, 0, sizeof(*fd));
	if (!map || map->type != MSGPACK_OBJECT_MAP || map->via.map.size == 0 ||
	    map->via.map.size > OP_MAX_INPUTS)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "%s must map 1 to %d input names to tensors",
				    what, OP_MAX_INPUTS);
	fd->n = map->via.map.size;
	for (unsigned k = 0; k < fd->n; k++) {
		if (tdp_obj_strcpy(&map->via.map.ptr[k].key, fd->f[k].id, sizeof(fd->f[k].id)) < 0 ||
		    map->via.map.ptr[k].val.type != MSGPACK_OBJECT_STR ||
		    /* the tensor's name as a store key (names.h) */
		    names_qualify(call->cred.uid, map->via.map.ptr[k].val.via.str.ptr,
				  map->via.map.ptr[k].val.via.str.size, fd->f[k].src, NULL) < 0 ||
		    !fd->f[k].id[0])
			return td_fail(&call->err, TDP_INVALID_ARGUMENT, "%s: names must be strings of 1-%d bytes",
					    what, TDP_MAX_NAME_LEN);
		for (unsigned j = 0; j < k; j++)
			if (!strcmp(fd->f[j].id, fd->f[k].id))
				return td_fail(&call->err, TDP_INVALID_ARGUMENT, "%s: input '%s' given twice",
						    what, fd->f[k].id);
	}
	return 0;
}

struct tensor *feeds_source(struct caller *call, const struct feeds *fd, unsigned k)
{
	char what[TDP_MAX_NAME_LEN + 32];
	struct tensor *t;

	snprintf(what, sizeof(what), "input '%s'", fd->f[k].id);
	if (lookup_tensor(call, what, fd->f[k].src, ACCESS_READ, &t) < 0)
		return NULL;
	return t;
}

int feeds_emit(struct graph *gr, const struct feeds *fd)
{
	struct caller *call = gr->call;
	char why[300];

	for (unsigned k = 0; fd && k < fd->n; k++) {
		struct tensor *t = feeds_source(call, fd, k);
		int64_t dims[TDP_MAX_RANK];
		const char *op;
		int r, src[2] = { -1, -1 };

		if (!t)
			return -1;
		if (fd->index) {
			struct tensor *in[2] = { t, fd->index };

			op = "gather";
			r = graph_emit(gr, op, src, in, 2, NULL, 0, why, sizeof(why));
		} else if (fd->rows) {
			int64_t s = (int64_t)fd->row0, e = (int64_t)fd->row1;
			struct graph_attr a[2] = { { .name = "starts", .ints = &s, .nints = 1 },
						   { .name = "ends", .ints = &e, .nints = 1 } };

			op = "slice";
			char shown[NAMES_SHOWN_MAX];

			if (t->rank == 0)
				return td_fail(&call->err, TDP_SHAPE_MISMATCH, "data: '%s' is a scalar, not rows",
						    lookup_show(call, t->name, shown));
			r = graph_emit(gr, op, src, &t, 1, a, 2, why, sizeof(why));
		} else {
			struct graph_attr a = { .name = "shape", .ints = dims, .nints = t->rank };

			for (unsigned d = 0; d < t->rank; d++)
				dims[d] = (int64_t)t->shape[d];
			op = "reshape";
			r = graph_emit(gr, op, src, &t, 1, &a, 1, why, sizeof(why));
		}
		if (r < 0)
			return td_fail(&call->err, TDP_INVALID_ARGUMENT, "feeding '%s' (%s): %s", fd->f[k].id, op, why);
		snprintf(gr->nodes[r].id, sizeof(gr->nodes[r].id), "%s", fd->f[k].id);
	}
	return 0;
}

/* The id of node object `o` as (ptr, len), or len 0 when it has none. */
static const msgpack_object *node_id(const msgpack_object *o)
{
	const msgpack_object *id = o->type == MSGPACK_OBJECT_MAP ? tdp_map_find(o, "id") : NULL;

	return id && id->type == MSGPACK_OBJECT_STR && id->via.str.size > 0 ? id : NULL;
}

static bool str_eq(const msgpack_object *a, const msgpack_object *b)
{
	return a->via.str.size == b->via.str.size && !memcmp(a->via.str.ptr, b->via.str.ptr, a->via.str.size);
}

int forward_prune(struct caller *call, const msgpack_object *nodes, const char *const *want,
		  unsigned nwant, const char *what, msgpack_object **ret, uint32_t *ret_kept)
{
	uint32_t n = nodes->via.array.size, kept = 0;
	msgpack_object *out;
	bool *need;

	if (n == 0)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "the graph has no nodes");
	need = calloc(n, sizeof(*need));
	if (!need)
		return td_fail(&call->err, TDP_INTERNAL, "out of memory");
	for (unsigned w = 0; w < nwant; w++) {
		uint32_t i;

		for (i = n; i-- > 0;)
			if (node_id(&nodes->via.array.ptr[i]) &&
			    tdp_obj_str_eq(node_id(&nodes->via.array.ptr[i]), want[w]))
				break;
		if (i == UINT32_MAX) {
			free(need);
			return td_fail(&call->err, TDP_INVALID_ARGUMENT, "%s: '%s' names no node of the model",
					    what, want[w]);
		}
		need[i] = true;
	}
	/* Nodes only refer to earlier ones, so one backward sweep finds all. */
	for (uint32_t i = n; i-- > 0;) {
		const msgpack_object *in;

		if (!need[i])
			continue;
		kept++;
		in = tdp_map_find(&nodes->via.array.ptr[i], "inputs");
		for (uint32_t k = 0; in && in->type == MSGPACK_OBJECT_ARRAY && k < in->via.array.size; k++) {
			const msgpack_object *ref = &in->via.array.ptr[k];

			if (ref->type != MSGPACK_OBJECT_STR)
				continue;
			for (uint32_t j = i; j-- > 0;) {
				const msgpack_object *id = node_id(&nodes->via.array.ptr[j]);

				if (id && str_eq(id, ref)) {
					need[j] = true;
					break;
				}
			}
		}
	}
	out = malloc(kept * sizeof(*out));
	if (!out) {
		free(need);
		return td_fail(&call->err, TDP_INTERNAL, "out of memory");
	}
	kept = 0;
	for (uint32_t i = 0; i < n; i++)
		if (need[i])
			out[kept++] = nodes->via.array.ptr[i];
	free(need);
	*ret = out;
	*ret_kept = kept;
	return 0;
}

int forward_find(const struct graph *gr, const char *id)
{
	for (unsigned i = 0; i < gr->n; i++)
		if (gr->nodes[i].id[0] && !strcmp(gr->nodes[i].id, id))
			return (int)i;
	return -1;
}

double forward_scalar_value(int dtype, const uint8_t *b)
{
	uint32_t u;
	float f;

	switch (dtype) {
	case TDP_DTYPE_F32:
		memcpy(&f, b, 4);
		return f;
	case TDP_DTYPE_BF16:
		u = (uint32_t)(b[0] | b[1] << 8) << 16;
		memcpy(&f, &u, 4);
		return f;
	default: { /* f16 */
		unsigned h = b[0] | b[1] << 8, e = (h >> 10) & 31, m = h & 1023;
		double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 1024, (int)e - 25);

		return (h & 0x8000) ? -v : v;
	}
	}
}

int forward_read_scalar(struct caller *call, struct graph *gr, unsigned i, double *ret)
{
	struct node *nd = &gr->nodes[i];
	uint8_t b[4] = { 0 };
	int r;

	if (nd->ctx.out.count != 1 || !op_dtype_is_float(nd->ctx.out.dtype))
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "'%s' is no floating scalar node", nd->id);
	r = gpu_download(nd->ctx.g, nd->result, b);
	if (r < 0)
		return td_fail(&call->err, r == -ENODEV ? TDP_DEVICE_LOST : TDP_INTERNAL,
				    "reading '%s' back failed", nd->id);
	*ret = forward_scalar_value(nd->ctx.out.dtype, b);
	return 0;
}
