/* One request being served: what a method handler gets, and how it answers. */
#pragma once

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/error.h"
#include "buf.h"
#include "store/caller.h"
#include "wire_limits.h"

struct daemon;
struct conn;

/* A handler's return for a request it answers later itself (train.run). */
#define REQUEST_DEFERRED 1

struct request {
	/* The daemon, the peer's credentials (SO_PEERCRED: what store_lookup
	 * checks) and the error sink: what the layers below are handed. */
	struct caller call;
	struct conn *conn;              /* the connection it came on */
	uint32_t msgid;
	const char *method;             /* NUL-terminated */
	unsigned slot;                  /* its metrics slot: request_method_name() */
	const msgpack_object *params;   /* the params map, or NULL */
	msgpack_packer *pk;             /* writes into the connection's output */
	struct tdp_buf *out;
};

/* Record an error for the response in req->call.err (td_fail): `code` is a
 * tdp_status; the answer prefixes the method name. Always returns -1, so
 * handlers can `return request_fail(...)`. */
__attribute__((format(printf, 3, 4)))
int request_fail(struct request *req, int code, const char *fmt, ...);

/* Write the error response for the failure recorded in req->call.err (INTERNAL
 * when none is) into `pk`: "<method>: <message>". Returns 0 or -ENOMEM. */
int request_pack_error(const struct request *req, msgpack_packer *pk);

/* A method handler: writes the whole response with tdp_write_result_head() and
 * the result object and returns 0, or returns request_fail(). On failure
 * anything it wrote is discarded. */
typedef int (*method_fn)(struct request *req);

/* Serve one request: find the method, run it, and leave exactly one response
 * for `req->msgid` in `req->out`. Returns 0, or -ENOMEM when not even an error
 * response could be written (the connection must then be closed). */
int request_dispatch(struct request *req, const char *method, size_t method_len);

/* The methods the daemon serves, in dispatch-table order: slots
 * 0..request_method_count()-1; slot request_method_count() counts requests
 * for names no method has. */
unsigned request_method_count(void);

/* The method name of a metrics slot; "other" for the slot of unknown names. */
const char *request_method_name(unsigned slot);
