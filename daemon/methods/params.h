/* Checking a request's named arguments against what a method accepts. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct request;

enum param_type {
	PARAM_STR,
	PARAM_UINT,
	PARAM_BOOL,
	PARAM_ARRAY,
	PARAM_BIN,
	PARAM_MAP,
	PARAM_NUMBER,   /* an integer or a float */
};

struct param {
	const char *key;
	enum param_type type;
	bool required;
	const msgpack_object *value;    /* filled in: NULL when absent */
};

/* Match the request's params map against `spec` (n entries): every key must
 * be known and appear once with the right type, every required key must be
 * there. Fills spec[i].value. Returns 0 or request_fail(INVALID_ARGUMENT). */
int params_parse(struct request *req, struct param *spec, size_t n);

/* The value of a PARAM_NUMBER argument as a double. */
double params_number(const msgpack_object *o);

/* Read a tensor-name argument into `dst` (TDP_MAX_NAME_LEN + 1 bytes). Returns
 * its length, or request_fail(INVALID_ARGUMENT) when it is no valid name. */
int params_name(struct request *req, const msgpack_object *o, char *dst);

/* Read a tensor-name argument ("name" in the client's namespace, or
 * "~user/name") as a store key into `dst` (TDP_MAX_NAME_LEN + 1 bytes,
 * names.h). Returns its length, or request_fail(INVALID_ARGUMENT). */
int params_tensor_key(struct request *req, const msgpack_object *o, char *dst);
