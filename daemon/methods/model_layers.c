/* The layer form of model.define inside methods/: see model_layers.h. */
#include "methods/model_layers.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/lookup.h"
#include "store/store.h"

static int pack_outputs(msgpack_packer *pk, const struct model *m)
{
	for (unsigned k = 0; k < m->noutputs; k++)
		if (tdp_pack_cstr(pk, m->outputs[k]))
			return -1;
	return 0;
}

/* A layer model's model.stat entries: layers, nodes, outputs, param_count and
 * parameters [{name, dtype, shape, layer}] (docs/protocol.md). */
int model_pack_layers(struct request *req, msgpack_packer *pk, const struct model *m)
{
	const msgpack_object *layers = tdp_map_find(m->given, "layers");
	uint64_t count = 0;

	for (unsigned k = 0; k < m->nparams; k++) {
		struct tensor *t = lookup_readable(&req->call, m->params[k], strlen(m->params[k]));

		count += t ? t->count : 0;
	}
	if (tdp_pack_cstr(pk, "layers") || (layers ? msgpack_pack_object(pk, *layers) : msgpack_pack_nil(pk)) ||
	    tdp_pack_cstr(pk, "nodes") || msgpack_pack_object(pk, *m->nodes) ||
	    tdp_pack_cstr(pk, "outputs") || msgpack_pack_array(pk, m->noutputs) ||
	    pack_outputs(pk, m) || tdp_pack_cstr(pk, "param_count") || msgpack_pack_uint64(pk, count) ||
	    tdp_pack_cstr(pk, "parameters") || msgpack_pack_array(pk, m->nparams))
		return -1;
	for (unsigned k = 0; k < m->nparams; k++) {
		struct tensor *t = lookup_readable(&req->call, m->params[k], strlen(m->params[k]));
		const msgpack_object *l = m->param_layer ? &m->param_layer->via.array.ptr[k] : NULL;

		if (msgpack_pack_map(pk, 4) || tdp_pack_cstr(pk, "name") || tdp_pack_cstr(pk, m->params[k]) ||
		    tdp_pack_cstr(pk, "dtype") || (t ? tdp_pack_cstr(pk, tdp_dtype_name(t->dtype)) : msgpack_pack_nil(pk)) ||
		    tdp_pack_cstr(pk, "shape") || (t ? tdp_pack_u64_array(pk, t->shape, t->rank) : msgpack_pack_nil(pk)) ||
		    tdp_pack_cstr(pk, "layer") ||
		    (l && l->via.str.size ? msgpack_pack_object(pk, *l) : msgpack_pack_nil(pk)))
			return -1;
	}
	return 0;
}

/* The layer form (train/layers.h): expand, then build the model from the
 * expanded definition (*ret_m), and create the parameters not stored yet
 * (want[k] set for those made: the caller deletes them if it fails later). */
int model_define_layers(struct request *req, const char *name, struct layers_out *lo, bool **ret_want,
			 struct model **ret_m)
{
	char text[TDP_MAX_NAME_LEN + 2], why[TDP_MAX_ERROR_MESSAGE];
	msgpack_unpacked u;
	int r;

	if (tdp_obj_strcpy(tdp_map_find(req->params, "name"), text, sizeof(text)) < 0 ||
	    layers_expand(&req->call, req->params, text, lo) < 0)
		return -1;
	msgpack_unpacked_init(&u);
	if (tdp_unpack(&u, (const uint8_t *)lo->def.data, lo->def.size) < 0) {
		msgpack_unpacked_destroy(&u);
		return request_fail(req, TDP_INTERNAL, "out of memory");
	}
	why[0] = '\0';
	r = model_new(name, &u.data, ret_m, why, sizeof(why));
	msgpack_unpacked_destroy(&u);
	if (r == -EINVAL)
		return request_fail(req, TDP_INVALID_ARGUMENT, "%s", why);
	if (r == -EFBIG)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "%s", why);
	if (r < 0 || !(*ret_want = calloc(lo->np ? lo->np : 1, sizeof(bool))))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	if (layer_init_check(&req->call, lo->p, lo->np, *ret_want) < 0)
		return -1;
	if (layer_init_create(&req->call, lo->p, lo->np, *ret_want, lo->seed) < 0) {
		layer_init_undo(&req->call, lo->p, lo->np, *ret_want);
		memset(*ret_want, 0, lo->np * sizeof(bool));
		return -1;
	}
	return 0;
}

