#include "methods/params.h"

#include <stdio.h>
#include <string.h>

#include "name.h"
#include "pack.h"
#include "methods/request.h"
#include "status.h"
#include "store/lookup.h"

static const char *type_word(enum param_type t)
{
	switch (t) {
	case PARAM_STR: return "a string";
	case PARAM_UINT: return "a non-negative integer";
	case PARAM_BOOL: return "a boolean";
	case PARAM_ARRAY: return "an array";
	case PARAM_BIN: return "binary (msgpack bin)";
	case PARAM_NUMBER: return "a number";
	default: return "a map";
	}
}

static bool type_ok(const msgpack_object *o, enum param_type t)
{
	switch (t) {
	case PARAM_STR: return o->type == MSGPACK_OBJECT_STR;
	case PARAM_UINT: return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
	case PARAM_BOOL: return o->type == MSGPACK_OBJECT_BOOLEAN;
	case PARAM_ARRAY: return o->type == MSGPACK_OBJECT_ARRAY;
	case PARAM_BIN: return o->type == MSGPACK_OBJECT_BIN;
	case PARAM_NUMBER:
		return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER || o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
		       o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64;
	default: return o->type == MSGPACK_OBJECT_MAP;
	}
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

int params_parse(struct request *req, struct param *spec, size_t n)
{
	uint32_t count = req->params ? req->params->via.map.size : 0;
	char key[80];

	for (size_t j = 0; j < n; j++)
		spec[j].value = NULL;
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
		if (spec[j].value)
			return request_fail(req, TDP_INVALID_ARGUMENT, "parameter '%s' given twice",
					    spec[j].key);
		if (!type_ok(&kv->val, spec[j].type))
			return request_fail(req, TDP_INVALID_ARGUMENT, "parameter '%s' must be %s",
					    spec[j].key, type_word(spec[j].type));
		spec[j].value = &kv->val;
	}
	for (size_t j = 0; j < n; j++)
		if (spec[j].required && !spec[j].value)
			return request_fail(req, TDP_INVALID_ARGUMENT, "missing parameter '%s'",
					    spec[j].key);
	return 0;
}

int params_name(struct request *req, const msgpack_object *o, char *dst)
{
	if (!tdp_name_valid(o->via.str.ptr, o->via.str.size))
		return request_fail(req, TDP_INVALID_ARGUMENT,
				    "invalid tensor name (1-%d bytes of A-Z a-z 0-9 . _ : / -)",
				    TDP_MAX_NAME_LEN);
	memcpy(dst, o->via.str.ptr, o->via.str.size);
	dst[o->via.str.size] = '\0';
	return (int)o->via.str.size;
}

int params_tensor_key(struct request *req, const msgpack_object *o, char *dst)
{
	return lookup_key(&req->call, o->via.str.ptr, o->via.str.size, dst);
}

double params_number(const msgpack_object *o)
{
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		return (double)o->via.u64;
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		return (double)o->via.i64;
	return o->via.f64;
}
