/* The one error sink: every layer that can fail for a reason a client should
 * read records it in a `struct td_error` with td_fail(). The request layer
 * answers it (prefixed with the method name), the graph prefixes a node's
 * failure with the node and op, and nothing else carries a {code, message}
 * of its own. */
#pragma once

#include <stdarg.h>

#include "wire_limits.h"

struct td_error {
	int code;                               /* a tdp_status; TDP_OK (0) until td_fail */
	char message[TDP_MAX_ERROR_MESSAGE];    /* NUL-terminated, for the client */
};

/* Record an error in `err`: `code` is a tdp_status, the message is printf
 * formatted (and cut to fit). A later call overwrites an earlier one. Always
 * returns -1, so callers can `return td_fail(...)`. */
__attribute__((format(printf, 3, 4)))
int td_fail(struct td_error *err, int code, const char *fmt, ...);

/* td_fail with the arguments as a va_list. Returns -1. */
__attribute__((format(printf, 3, 0)))
int td_vfail(struct td_error *err, int code, const char *fmt, va_list ap);

/* Forget any recorded error. */
void td_error_clear(struct td_error *err);

/* Whether an error is recorded. */
static inline int td_failed(const struct td_error *err)
{
	return err->code != 0;
}
