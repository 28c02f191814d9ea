/* Checking a msgpack map of named arguments against what is accepted: the
 * one checker behind a request's params (serve/params.h) and a graph node's
 * fields (engine/graph_parse.c), so both refuse alike and say so alike. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

enum map_type {
	MAP_STR,
	MAP_UINT,
	MAP_BOOL,
	MAP_ARRAY,
	MAP_BIN,
	MAP_MAP,
	MAP_NUMBER,     /* an integer or a float */
	MAP_MAP_OR_BIN, /* a map, or raw bytes (push constants) */
};

struct map_field {
	const char *key;
	enum map_type type;
	bool required;
	const msgpack_object *value;    /* filled in: NULL when absent */
};

/* Match `map` (a msgpack map, or NULL for none) against `fields` (n
 * entries): every key must be known and appear once with the right type,
 * every required key must be there. Fills fields[i].value. Returns 0, or
 * td_fail(err, INVALID_ARGUMENT) ("unknown parameter 'x'", "parameter 'x'
 * given twice", "parameter 'x' must be a string", "missing parameter 'x'"). */
int map_check(const msgpack_object *map, struct map_field *fields, size_t n, struct td_error *err);

/* How a type is named in those messages ("a string", "a non-negative
 * integer", ...). */
const char *map_type_word(enum map_type t);

/* Whether `o` has type `t`. */
bool map_type_ok(const msgpack_object *o, enum map_type t);
