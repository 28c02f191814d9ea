/* Looking up stored tensors for a request: store_lookup with the client's
 * credentials, and the error the protocol reports when it fails. Every
 * handler that names a stored tensor comes through here or through
 * store_lookup directly, so the access rule (docs/security.md) is applied in
 * one place. */
#pragma once

#include <stddef.h>

#include "request.h"
#include "store.h"

/* Find tensor `name` (NUL-terminated) for the request's client wanting
 * `want` (ACCESS_* bits). Returns 0 with *ret set, or a status code
 * (TDP_NOT_FOUND, TDP_PERMISSION_DENIED) with a reason naming `what`
 * ("input 0", "parameter", NULL for none) written to `why` (`cap` bytes). */
int lookup_tensor_why(const struct request *req, const char *what, const char *name, unsigned want,
		      struct tensor **ret, char *why, size_t cap);

/* lookup_tensor_why that reports a failure through request_fail(). Returns 0
 * with *ret set, or -1. */
int lookup_tensor(struct request *req, const char *what, const char *name, unsigned want,
		  struct tensor **ret);

/* Check that the outputs a request is about to store fit the owners' quotas
 * (store_quota_check): `n` entries of name, bytes. A name that exists keeps
 * its owner; a new one is charged to the client. Returns 0 or request_fail()
 * (RESOURCE_EXHAUSTED naming the quota). */
struct lookup_output {
	const char *name;
	uint64_t bytes;
};
int lookup_check_quota(struct request *req, const struct lookup_output *outs, size_t n);

/* The tensor `name` (`len` bytes) if the request's client may read it, else
 * NULL (absent or not readable; nothing is reported). */
struct tensor *lookup_readable(const struct request *req, const char *name, size_t len);
