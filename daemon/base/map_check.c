#include "base/map_check.h"

#include <stdio.h>

#include "pack.h"
#include "status.h"

const char *map_type_word(enum map_type t)
{
	switch (t) {
	case MAP_STR: return "a string";
	case MAP_UINT: return "a non-negative integer";
	case MAP_BOOL: return "a boolean";
	case MAP_ARRAY: return "an array";
	case MAP_BIN: return "binary (msgpack bin)";
	case MAP_NUMBER: return "a number";
	/* kernel.run and graph nodes said "a map" before raw bytes were
	 * allowed; clients may match the text. */
	default: return "a map";
	}
}

bool map_type_ok(const msgpack_object *o, enum map_type t)
{
	switch (t) {
	case MAP_STR: return o->type == MSGPACK_OBJECT_STR;
	case MAP_UINT: return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
	case MAP_BOOL: return o->type == MSGPACK_OBJECT_BOOLEAN;
	case MAP_ARRAY: return o->type == MSGPACK_OBJECT_ARRAY;
	case MAP_BIN: return o->type == MSGPACK_OBJECT_BIN;
	case MAP_NUMBER:
		return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER || o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
		       o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64;
	case MAP_MAP_OR_BIN: return o->type == MSGPACK_OBJECT_MAP || o->type == MSGPACK_OBJECT_BIN;
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

int map_check(const msgpack_object *map, struct map_field *fields, size_t n, struct td_error *err)
{
	uint32_t count = map ? map->via.map.size : 0;
	char key[80];

	for (size_t j = 0; j < n; j++)
		fields[j].value = NULL;
	for (uint32_t i = 0; i < count; i++) {
		const msgpack_object_kv *kv = &map->via.map.ptr[i];
		size_t j;

		for (j = 0; j < n; j++)
			if (tdp_obj_str_eq(&kv->key, fields[j].key))
				break;
		if (j == n) {
			key_text(&kv->key, key, sizeof(key));
			return td_fail(err, TDP_INVALID_ARGUMENT, "unknown parameter %s", key);
		}
		if (fields[j].value)
			return td_fail(err, TDP_INVALID_ARGUMENT, "parameter '%s' given twice", fields[j].key);
		if (!map_type_ok(&kv->val, fields[j].type))
			return td_fail(err, TDP_INVALID_ARGUMENT, "parameter '%s' must be %s", fields[j].key,
				       map_type_word(fields[j].type));
		fields[j].value = &kv->val;
	}
	for (size_t j = 0; j < n; j++)
		if (fields[j].required && !fields[j].value)
			return td_fail(err, TDP_INVALID_ARGUMENT, "missing parameter '%s'", fields[j].key);
	return 0;
}
