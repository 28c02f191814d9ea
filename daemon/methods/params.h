/* A method's named arguments: each handler declares them once (key, type,
 * required, destination) and gets typed locals; params_parse checks the
 * request's params map against the declaration and decodes into them
 * (docs/architecture.md, "Parameters"). */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire_limits.h"

struct request;

/* What a parameter must be on the wire, and what its destination is. */
enum param_type {
	PARAM_STR,              /* struct param_str; .ptr NULL when absent */
	PARAM_UINT,             /* uint64_t: a non-negative integer */
	PARAM_BOOL,             /* bool */
	PARAM_ARRAY,            /* const msgpack_object *, NULL when absent */
	PARAM_BIN,              /* const msgpack_object *, NULL when absent */
	PARAM_MAP,              /* const msgpack_object *, NULL when absent */
	PARAM_NUMBER,           /* double: an integer or a float */
	PARAM_MAP_OR_BIN,       /* const msgpack_object *: a map, or raw bytes (push constants) */
	PARAM_NAME,             /* param_name: a str that is a valid tensor name (name.h) */
	PARAM_TENSOR_KEY,       /* param_name: "name" or "~user/name" as a store key (lookup_key) */
	PARAM_MODE,             /* uint32_t: a str tdp_mode_parse reads (mode.h) */
	PARAM_DEVICE,           /* uint32_t: a device id in use (devices_param) */
};

/* A PARAM_STR: the bytes inside the request (not NUL-terminated). */
struct param_str {
	const char *ptr;
	uint32_t len;
};

/* A PARAM_NAME or PARAM_TENSOR_KEY, NUL-terminated. */
typedef char param_name[TDP_MAX_NAME_LEN + 1];

/* One declared parameter; write them with the PARAM_* macros below. */
struct param {
	const char *key;
	enum param_type type;
	bool required;
	bool raw;               /* dst is a const msgpack_object **: checked, not decoded */
	void *dst;              /* the destination of `type` (above) */
	bool *given;            /* NULL, or set to whether the request holds the key */
};

/* The C type of each kind's destination: the macros check it at compile time. */
typedef struct param_str param_ctype_PARAM_STR;
typedef uint64_t param_ctype_PARAM_UINT;
typedef bool param_ctype_PARAM_BOOL;
typedef const msgpack_object *param_ctype_PARAM_ARRAY;
typedef const msgpack_object *param_ctype_PARAM_BIN;
typedef const msgpack_object *param_ctype_PARAM_MAP;
typedef double param_ctype_PARAM_NUMBER;
typedef const msgpack_object *param_ctype_PARAM_MAP_OR_BIN;
typedef param_name param_ctype_PARAM_NAME;
typedef param_name param_ctype_PARAM_TENSOR_KEY;
typedef uint32_t param_ctype_PARAM_MODE;
typedef uint32_t param_ctype_PARAM_DEVICE;

/* &dst as void *, a compile error unless dst has the type `t` decodes into
 * (`t` must be written as the enumerator itself). */
#define PARAM_DST_(t, dst) ((void *)(1 ? &(dst) : (param_ctype_##t *)0))
#define PARAM_OBJ_(obj) ((void *)(1 ? &(obj) : (const msgpack_object **)0))

/* A required parameter decoded into `dst`. */
#define PARAM_REQ(key, t, dst) { (key), (t), true, false, PARAM_DST_(t, dst), NULL }
/* An optional one: `dst` keeps what it held (its default) when absent,
 * except that pointer destinations become NULL. */
#define PARAM_OPT(key, t, dst) { (key), (t), false, false, PARAM_DST_(t, dst), NULL }
/* An optional one whose presence also lands in the bool `given`. */
#define PARAM_OPT_GIVEN(key, t, dst, given) { (key), (t), false, false, PARAM_DST_(t, dst), &(given) }
/* Type-checked but handed over as the msgpack object (`obj`, a const
 * msgpack_object *, NULL when absent), for code that reads or keeps the
 * object itself (the graph builder, a model's stored definition). */
#define PARAM_REQ_OBJ(key, t, obj) { (key), (t), true, true, PARAM_OBJ_(obj), NULL }
#define PARAM_OPT_OBJ(key, t, obj) { (key), (t), false, true, PARAM_OBJ_(obj), NULL }

/* Most parameters one method declares. */
#define PARAMS_MAX 32

/* Match the request's params map against `spec` (n entries, at most
 * PARAMS_MAX) and decode it: every key must be known and appear once with
 * the right type, then every required key must be there, then each given
 * parameter is decoded into its destination in `spec` order (a name, a
 * mode or a device id can be refused there). Returns 0, or -1 after
 * request_fail(INVALID_ARGUMENT); on failure destinations may be partly
 * written. */
int params_parse(struct request *req, const struct param *spec, size_t n);

/* params_parse with a declared array: PARAMS_PARSE(req, p). */
#define PARAMS_PARSE(req, spec) params_parse((req), (spec), sizeof(spec) / sizeof((spec)[0]))

/* Check that the request has no parameters (ping, info, ...). Returns 0 or
 * -1 after request_fail. */
int params_none(struct request *req);
