/* Looking up stored tensors for a caller (caller.h): store_lookup with the
 * client's credentials, and the error the protocol reports when it fails. Every
 * handler that names a stored tensor comes through here or through
 * store_lookup directly, so the access rule (docs/security.md) is applied in
 * one place. */
#pragma once

#include <stddef.h>

#include "store/caller.h"
#include "store/names.h"
#include "store/store.h"

/* Find the tensor of store key `name` (NUL-terminated; names.h: a client's
 * text becomes a key through lookup_key) for the caller wanting
 * `want` (ACCESS_* bits). Returns 0 with *ret set, or a status code
 * (TDP_NOT_FOUND, TDP_PERMISSION_DENIED) with a reason naming `what`
 * ("input 0", "parameter", NULL for none) written to `why` (`cap` bytes).
 * A name that does not exist, wanted for writing (to create it), in a
 * namespace the client may not create names in is TDP_PERMISSION_DENIED,
 * unless `want` has LOOKUP_EXISTING (the caller only acts on an existing
 * tensor: delete). A name in the caller's overlay (caller.h) is found there
 * first, with the same access rule. */
#define LOOKUP_EXISTING (1u << 8)
int lookup_tensor_why(const struct caller *c, const char *what, const char *name, unsigned want,
		      struct tensor **ret, char *why, size_t cap);

/* lookup_tensor_why for a tensor derived from `base` (optimizer state,
 * `.grad`): it lives in base's namespace and must belong to base's owner;
 * one that belongs to anyone else is TDP_FAILED_PRECONDITION, never used.
 * A missing one is TDP_NOT_FOUND whoever asks (it is created on base's
 * owner's behalf, see graph_core.h `out_like`). The overlay comes first, as
 * in lookup_tensor_why. */
int lookup_derived_why(const struct caller *c, const char *what, const char *name,
		       const struct tensor *base, unsigned want, struct tensor **ret, char *why, size_t cap);

/* The client's text `text` (`len` bytes: "name", "~user/name") as a store
 * key into `key` (TDP_MAX_NAME_LEN + 1 bytes). Returns its length or
 * td_fail(INVALID_ARGUMENT). */
int lookup_key(struct caller *c, const char *text, size_t len, char *key);

/* Store key `key` as the caller sees it (names_show), in `out`
 * (NAMES_SHOWN_MAX bytes). Returns `out`. */
const char *lookup_show(const struct caller *c, const char *key, char *out);

/* lookup_tensor_why that reports a failure through td_fail(). Returns 0
 * with *ret set, or -1. */
int lookup_tensor(struct caller *c, const char *what, const char *name, unsigned want,
		  struct tensor **ret);

/* Check that the outputs a caller is about to store fit the owners' quotas
 * (store_quota_check): `n` entries of name, bytes. A name that exists keeps
 * its owner; a new one is charged to its namespace's owner (names_new_owner). Returns 0 or td_fail()
 * (RESOURCE_EXHAUSTED naming the quota). */
struct lookup_output {
	const char *name;
	uint64_t bytes;
};
int lookup_check_quota(struct caller *c, const struct lookup_output *outs, size_t n);

/* The tensor of client text `name` (`len` bytes, resolved in the client's
 * namespace) if the client may read it, else NULL (absent or not readable;
 * nothing is reported). */
struct tensor *lookup_readable(const struct caller *c, const char *name, size_t len);
