/* msgpack-RPC framing: turning one scanned message into a request, response or
 * notification, and writing them. Params are the protocol's `[ {map} ]`. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "scan.h"

struct tdp_message {
	int type;                      /* enum tdp_msg_type */
	uint32_t msgid;                /* requests and responses */
	const char *method;            /* requests and notifications; not NUL-terminated */
	uint32_t method_len;
	const msgpack_object *params;  /* the params map, or NULL for `[]` */
	const msgpack_object *error;   /* responses: nil or the error map */
	const msgpack_object *result;  /* responses */
};

/* Accept bin where a str is meant (docs/protocol.md, "Transport and
 * framing"): in the params tree `o`, rewrite in place every map key and every
 * value that is a bin holding valid UTF-8 into a str, except the values of
 * the byte-holding keys `data`, `spirv` and `push`: a str there becomes a
 * bin (clients that pack every byte string as raw). `depth` is that of `o`
 * (0 for the params map); nothing deeper than TDP_MAX_DEPTH is visited. */
void tdp_params_accept_bin(msgpack_object *o, unsigned depth);

/* Decode the `len` bytes of one message that tdp_scanner_feed() accepted into
 * `u` (initialised by the caller with msgpack_unpacked_init). Returns 0, or
 * -EBADMSG when msgpack-c refuses the bytes. */
int tdp_unpack(msgpack_unpacked *u, const uint8_t *buf, size_t len);

/* Check that `o` is a well-formed msgpack-RPC message and point `ret` into it.
 * A notification needs only to be [2, method, params]: a method that is no
 * string reads as "" and params that are not one map as NULL (any client's
 * notification is accepted, docs/protocol.md). Returns 0, or -EPROTO with a
 * reason written to `why` (size `why_len`). */
int tdp_message_parse(const msgpack_object *o, struct tdp_message *ret, char *why, size_t why_len);

/* The msgid of `o` if it is at least shaped like a request ([0, uint32, ...]),
 * so a malformed request can still be answered. Returns 0 or -ENOENT. */
int tdp_message_request_id(const msgpack_object *o, uint32_t *ret_msgid);

/* Write the head of a request, `[0, msgid, method, `; the caller then writes
 * the params array (normally one map). */
int tdp_write_request_head(msgpack_packer *pk, uint32_t msgid, const char *method);

/* Write the head of a successful response, `[1, msgid, nil, `; the caller then
 * writes the result. */
int tdp_write_result_head(msgpack_packer *pk, uint32_t msgid);

/* Write a whole error response `[1, msgid, {code, name, message}, nil]`. */
int tdp_write_error(msgpack_packer *pk, uint32_t msgid, int code, const char *message);

/* Write the error map {code, name, message} alone. */
int tdp_write_error_map(msgpack_packer *pk, int code, const char *message);

/* Write a notification `[2, method, [ {code, name, message} ]]` reporting an
 * error that is not tied to one request (a broken stream). */
int tdp_write_error_notification(msgpack_packer *pk, const char *method, int code,
				 const char *message);
