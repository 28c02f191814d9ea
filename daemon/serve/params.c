#include "serve/params.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "devices.h"
#include "mode.h"
#include "name.h"
#include "pack.h"
#include "serve/request.h"
#include "status.h"
#include "store/lookup.h"

/* The wire type each kind needs, as an error message says it. */
static const char *type_word(enum param_type t)
{
	switch (t) {
	case PARAM_STR:
	case PARAM_NAME:
	case PARAM_TENSOR_KEY:
	case PARAM_MODE:
		return "a string";
	case PARAM_UINT:
	case PARAM_DEVICE:
		return "a non-negative integer";
	case PARAM_BOOL: return "a boolean";
	case PARAM_ARRAY: return "an array";
	case PARAM_BIN: return "binary (msgpack bin)";
	case PARAM_NUMBER: return "a number";
	/* kernel.run and graph nodes said "a map" before raw bytes were
	 * allowed; clients may match the text. */
	default: return "a map";
	}
}

static bool type_ok(const msgpack_object *o, enum param_type t)
{
	switch (t) {
	case PARAM_STR:
	case PARAM_NAME:
	case PARAM_TENSOR_KEY:
	case PARAM_MODE:
		return o->type == MSGPACK_OBJECT_STR;
	case PARAM_UINT:
	case PARAM_DEVICE:
		return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
	case PARAM_BOOL: return o->type == MSGPACK_OBJECT_BOOLEAN;
	case PARAM_ARRAY: return o->type == MSGPACK_OBJECT_ARRAY;
	case PARAM_BIN: return o->type == MSGPACK_OBJECT_BIN;
	case PARAM_NUMBER:
		return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER || o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
		       o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64;
	case PARAM_MAP_OR_BIN: return o->type == MSGPACK_OBJECT_MAP || o->type == MSGPACK_OBJECT_BIN;
	default: return o->type == MSGPACK_OBJECT_MAP;
	}
}

/* Whether an absent parameter's destination becomes NULL (pointer kinds). */
static bool is_pointer(const struct param *p)
{
	return p->raw || p->type == PARAM_STR || p->type == PARAM_ARRAY || p->type == PARAM_BIN ||
	       p->type == PARAM_MAP || p->type == PARAM_MAP_OR_BIN;
}

/* A key, quoted and cut short, for error messages. */
static void key_text(const msgpack_object *k, char *dst, size_t cap)
{
	if (k->type != MSGPACK_OBJECT_STR) {
		snprintf(dst, cap, "(a non-string key)");
		return;
	}
	snprintf(dst, cap, "'%.*s'", k->via.str.size > 64 ? 64 : (int)k->via.str.size,
		 k->via.str.ptr);
	for (char *p = dst; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
			*p = '?';
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
		return tdp_obj_number(o, p->dst);       /* type_ok checked it is one */
	case PARAM_NAME:
		if (!tdp_name_valid(s->ptr, s->size))
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "invalid tensor name (1-%d bytes of A-Z a-z 0-9 . _ : / -)",
					    TDP_MAX_NAME_LEN);
		memcpy(p->dst, s->ptr, s->size);
		((char *)p->dst)[s->size] = '\0';
		return 0;
	case PARAM_TENSOR_KEY:
		return lookup_key(req, s->ptr, s->size, p->dst) < 0 ? -1 : 0;
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
	uint32_t count = req->params ? req->params->via.map.size : 0;
	const msgpack_object *seen[PARAMS_MAX] = { 0 };
	char key[80];

	assert(n <= PARAMS_MAX);
	for (uint32_t i = 0; i < count; i++) {
		const msgpack_object_kv *kv = &req->params->via.map.ptr[i];
		size_t j;

		for (j = 0; j < n; j++)
			if (tdp_obj_str_eq(&kv->key, spec[j].key))
				break;
		if (j == n) {
			key_text(&kv->key, key, sizeof(key));
			return request_fail(req, TDP_INVALID_ARGUMENT, "unknown parameter %s", key);
		}
		if (seen[j])
			return request_fail(req, TDP_INVALID_ARGUMENT, "parameter '%s' given twice",
					    spec[j].key);
		if (!type_ok(&kv->val, spec[j].type))
			return request_fail(req, TDP_INVALID_ARGUMENT, "parameter '%s' must be %s",
					    spec[j].key, type_word(spec[j].type));
		seen[j] = &kv->val;
	}
	for (size_t j = 0; j < n; j++)
		if (spec[j].required && !seen[j])
			return request_fail(req, TDP_INVALID_ARGUMENT, "missing parameter '%s'",
					    spec[j].key);
	for (size_t j = 0; j < n; j++) {
		if (spec[j].given)
			*spec[j].given = seen[j] != NULL;
		if (seen[j]) {
			if (decode(req, &spec[j], seen[j]) < 0)
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
