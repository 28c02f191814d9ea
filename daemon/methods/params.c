#include "methods/params.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "base/map_check.h"
#include "devices.h"
#include "mode.h"
#include "name.h"
#include "methods/request.h"
#include "pack.h"
#include "status.h"
#include "store/lookup.h"

/* The wire type each kind needs (map_check checks it). */
static enum map_type wire_type(enum param_type t)
{
	switch (t) {
	case PARAM_STR:
	case PARAM_NAME:
	case PARAM_TENSOR_KEY:
	case PARAM_MODE:
		return MAP_STR;
	case PARAM_UINT:
	case PARAM_DEVICE:
		return MAP_UINT;
	case PARAM_BOOL: return MAP_BOOL;
	case PARAM_ARRAY: return MAP_ARRAY;
	case PARAM_BIN: return MAP_BIN;
	case PARAM_NUMBER: return MAP_NUMBER;
	case PARAM_MAP_OR_BIN: return MAP_MAP_OR_BIN;
	default: return MAP_MAP;
	}
}

/* Whether an absent parameter's destination becomes NULL (pointer kinds). */
static bool is_pointer(const struct param *p)
{
	return p->raw || p->type == PARAM_STR || p->type == PARAM_ARRAY || p->type == PARAM_BIN ||
	       p->type == PARAM_MAP || p->type == PARAM_MAP_OR_BIN;
}

/* Decode the present value `o` of `p` into its destination. */
static int decode(struct request *req, const struct param *p, const msgpack_object *o)
{
	const msgpack_object_str *s = &o->via.str;

	if (p->raw) {
		*(const msgpack_object **)p->dst = o;
		return 0;
	}
	switch (p->type) {
	case PARAM_STR:
		*(struct param_str *)p->dst = (struct param_str){ s->ptr, s->size };
		return 0;
	case PARAM_UINT:
		*(uint64_t *)p->dst = o->via.u64;
		return 0;
	case PARAM_BOOL:
		*(bool *)p->dst = o->via.boolean;
		return 0;
	case PARAM_NUMBER:
		return tdp_obj_number(o, p->dst);       /* map_check checked it is one */
	case PARAM_NAME:
		if (!tdp_name_valid(s->ptr, s->size))
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "invalid tensor name (1-%d bytes of A-Z a-z 0-9 . _ : / -)",
					    TDP_MAX_NAME_LEN);
		memcpy(p->dst, s->ptr, s->size);
		((char *)p->dst)[s->size] = '\0';
		return 0;
	case PARAM_TENSOR_KEY:
		return lookup_key(&req->call, s->ptr, s->size, p->dst) < 0 ? -1 : 0;
	case PARAM_MODE:
		if (tdp_mode_parse(s->ptr, s->size, p->dst) < 0)
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "mode must be 'private' or a comma list of group-read, group-write, "
					    "world-read, world-write");
		return 0;
	case PARAM_DEVICE:
		return devices_param(req, o, p->key, p->dst);
	default:        /* the object kinds */
		*(const msgpack_object **)p->dst = o;
		return 0;
	}
}

int params_parse(struct request *req, const struct param *spec, size_t n)
{
	struct map_field f[PARAMS_MAX];

	assert(n <= PARAMS_MAX);
	for (size_t j = 0; j < n; j++)
		f[j] = (struct map_field){ spec[j].key, wire_type(spec[j].type), spec[j].required, NULL };
	if (map_check(req->params, f, n, &req->call.err) < 0)
		return -1;
	for (size_t j = 0; j < n; j++) {
		if (spec[j].given)
			*spec[j].given = f[j].value != NULL;
		if (f[j].value) {
			if (decode(req, &spec[j], f[j].value) < 0)
				return -1;
		} else if (!spec[j].raw && spec[j].type == PARAM_STR) {
			*(struct param_str *)spec[j].dst = (struct param_str){ NULL, 0 };
		} else if (is_pointer(&spec[j])) {
			*(const msgpack_object **)spec[j].dst = NULL;
		}
	}
	return 0;
}

int params_none(struct request *req)
{
	return params_parse(req, NULL, 0);
}
