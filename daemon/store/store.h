/* The tensor store: name → tensor, with the metadata the protocol reports.
 * The bytes live in device memory (struct gpu_alloc); the store only tracks
 * them and calls its release hook when a tensor goes away. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/memory.h"
#include "store/access.h"
#include "wire_limits.h"

struct tensor {
	char name[TDP_MAX_NAME_LEN + 1];
	size_t name_len;
	int dtype;                  /* enum tdp_dtype */
	unsigned rank;
	uint64_t shape[TDP_MAX_RANK];
	uint64_t count;             /* elements */
	uint64_t bytes;
	uint32_t owner;             /* uid, charged for the tensor's quota */
	uint32_t group;             /* gid the group-* modes refer to */
	uint32_t mode;              /* TDP_MODE_* bits (proto/mode.h) */
	int64_t created_ns;         /* CLOCK_REALTIME */
	int64_t modified_ns;
	uint64_t version;
	uint32_t device;
	struct gpu_alloc alloc;
	struct tensor *hash_next;
	/* docs/durability.md: changed since its checkpoint file was written */
	bool dirty;
	struct tensor *dirty_prev, *dirty_next;
	uint32_t ckpt_failures;     /* checkpoint writes failed in a row */
	int64_t ckpt_retry_ns;      /* CLOCK_MONOTONIC: the timer retries it after */
};

/* Called when the store drops a tensor, to free its device memory. */
typedef void (*store_release_fn)(void *userdata, struct tensor *t);

struct store;

/* A store of at most `max_tensors` tensors. NULL on ENOMEM. */
struct store *store_new(uint32_t max_tensors, store_release_fn release, void *userdata);

/* Release every tensor and the store; NULL is accepted. */
void store_free(struct store *s);

/* Why store_lookup refused: the tensor's owner, group and mode. */
struct store_denial {
	uint32_t owner;
	uint32_t group;
	uint32_t mode;
};

/* The one way to reach a stored tensor for a client: find `name` (`len`
 * bytes) for `who`, who wants to do `want` (ACCESS_* bits) with it. Returns 0
 * with *ret set, -ENOENT, or -EACCES when the tensor exists but its mode does
 * not allow `want` to `who` (then `denial`, if not NULL, says why). */
int store_lookup(struct store *s, const char *name, size_t len, const struct access_cred *who,
		 unsigned want, struct tensor **ret, struct store_denial *denial);

/* Insert `t` (heap-allocated, owned by the store from now on) under its name.
 * If the name is taken, `t` takes the old tensor's place, inheriting its
 * created time, owner, group and mode and bumping its version, and the old
 * one is released. Returns 0, -ENOSPC when a new name would exceed the tensor
 * limit, or -ENOMEM (`t` is then still the caller's and nothing changed).
 * Quotas are not checked here: callers check them (store_quota_check) before
 * doing the work whose result they store. */
int store_put(struct store *s, struct tensor *t);

/* Remove and release the tensor named `name`. Returns 0 or -ENOENT. */
int store_delete(struct store *s, const char *name, size_t len);

/* Give `t` (in the store) the name `name` (`len` bytes), which must be
 * free: the old name counts as deleted and `t` as dirty for checkpoints.
 * Returns 0, -EEXIST (taken), -ENAMETOOLONG or -ENOENT (`t` not stored). */
int store_rename(struct store *s, struct tensor *t, const char *name, size_t len);

/* Change the tensor limit (configuration reload). Tensors already over a
 * lowered limit stay; new names are refused until the count drops. */
void store_set_max_tensors(struct store *s, uint32_t max_tensors);

/* Whether one more name fits under the tensor limit. */
bool store_has_room(const struct store *s);

/* Tensors whose name starts with `prefix` (NULL for all) and that `who` may
 * read, sorted by name. On success *ret_list is a malloc'd array of
 * *ret_count pointers into the store, valid until the store changes (free()
 * the array). */
int store_list(struct store *s, const char *prefix, size_t prefix_len, const struct access_cred *who,
	       struct tensor ***ret_list, size_t *ret_count);

/* Number of tensors and their total bytes. */
void store_totals(const struct store *s, uint64_t *ret_count, uint64_t *ret_bytes);

/* What one uid holds: tensors it owns and their bytes. */
#define STORE_DEVICES 16          /* = GPU_MAX_DEVICES (devices_query.c checks) */

struct store_usage {
	uint64_t tensors;
	uint64_t bytes;
	uint64_t device_tensors[STORE_DEVICES]; /* of those, on each device id */
	uint64_t device_bytes[STORE_DEVICES];
};

/* Per-uid quotas on owned tensors and bytes; 0 means no quota. */
void store_set_quota(struct store *s, uint64_t user_max_tensors, uint64_t user_max_bytes);

/* The usage of `uid` (zeros for a uid holding nothing). */
void store_usage_of(const struct store *s, uint32_t uid, struct store_usage *ret);

/* Whether `uid` may own `dtensors` more tensors and `dbytes` more bytes (either
 * may be negative: a replacement by a smaller tensor). Also makes sure the
 * accounting entry for `uid` exists, so a store_put that follows cannot fail
 * for memory. Returns 0; -EDQUOT when over a quota, with `limit` (if not
 * NULL) set to the config key of the quota ("user_max_tensors" or
 * "user_max_bytes"); or -ENOMEM. */
int store_quota_check(struct store *s, uint32_t uid, int64_t dtensors, int64_t dbytes,
		      const char **limit);

/* store_quota_check against the quotas `max_tensors` and `max_bytes` (0:
 * none) of this uid rather than the store's (config's user_quota_*). */
int store_quota_check_limits(struct store *s, uint32_t uid, int64_t dtensors, int64_t dbytes,
			     uint64_t max_tensors, uint64_t max_bytes, const char **limit);

/* Dirty tracking for checkpoints (docs/durability.md). While on, every
 * tensor a store_put inserts is dirty (oldest first) until store_mark_clean,
 * and every deleted name is remembered until store_take_deleted hands it
 * out. Off (the default) tracks nothing. */
void store_track_dirty(struct store *s, bool on);

/* Mark `t` (in the store) dirty again: a change that did not go through
 * store_put (tensor.chmod). No-op while tracking is off. */
void store_mark_dirty(struct store *s, struct tensor *t);

/* `t`'s current bytes and metadata are durable. */
void store_mark_clean(struct store *s, struct tensor *t);

/* The oldest dirty tensor, or NULL. */
struct tensor *store_first_dirty(const struct store *s);

/* Dirty tensors and their bytes, and deletions not yet handed out. */
void store_dirty_totals(const struct store *s, uint64_t *ret_count, uint64_t *ret_bytes,
			uint64_t *ret_deleted);

/* Hand out one remembered deletion: copies the name into `name`
 * (TDP_MAX_NAME_LEN + 1 bytes) and returns its length; 0 when none is left.
 * A deletion that could not be remembered (out of memory) sets the flag
 * store_take_lost_deletions() reports instead. */
size_t store_take_deleted(struct store *s, char *name);

/* Whether a deletion was lost since the last call (then the caller must
 * reconcile the checkpoint directory with the store); clears the flag. */
bool store_take_lost_deletions(struct store *s);

/* Call `fn` on every tensor (in no order); the store must not change meanwhile. */
void store_foreach(struct store *s, void (*fn)(void *data, struct tensor *t), void *data);

/* Release every tensor and forget remembered deletions, recording nothing
 * (device recovery, recover.c: the tensors' memory belonged to a lost
 * device). Limits, quotas and the tracking switch stay. */
void store_clear(struct store *s);
