/* The tensor store: name → tensor, with the metadata the protocol reports.
 * The bytes live in device memory (struct gpu_alloc); the store only tracks
 * them and calls its release hook when a tensor goes away. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/memory.h"
#include "wire_limits.h"

struct tensor {
	char name[TDP_MAX_NAME_LEN + 1];
	size_t name_len;
	int dtype;                  /* enum tdp_dtype */
	unsigned rank;
	uint64_t shape[TDP_MAX_RANK];
	uint64_t count;             /* elements */
	uint64_t bytes;
	uint32_t owner;             /* uid */
	int64_t created_ns;         /* CLOCK_REALTIME */
	int64_t modified_ns;
	uint64_t version;
	uint32_t device;
	struct gpu_alloc alloc;
	struct tensor *hash_next;
};

/* Called when the store drops a tensor, to free its device memory. */
typedef void (*store_release_fn)(void *userdata, struct tensor *t);

struct store;

/* A store of at most `max_tensors` tensors. NULL on ENOMEM. */
struct store *store_new(uint32_t max_tensors, store_release_fn release, void *userdata);

/* Release every tensor and the store; NULL is accepted. */
void store_free(struct store *s);

/* The tensor named `name` (`len` bytes), or NULL. */
struct tensor *store_find(struct store *s, const char *name, size_t len);

/* Insert `t` (heap-allocated, owned by the store from now on) under its name.
 * If the name is taken, `t` takes the old tensor's place, inheriting its
 * created time and bumping its version, and the old one is released. Returns
 * 0, or -ENOSPC when a new name would exceed the tensor limit (`t` is then
 * still the caller's). */
int store_put(struct store *s, struct tensor *t);

/* Remove and release the tensor named `name`. Returns 0 or -ENOENT. */
int store_delete(struct store *s, const char *name, size_t len);

/* Change the tensor limit (configuration reload). Tensors already over a
 * lowered limit stay; new names are refused until the count drops. */
void store_set_max_tensors(struct store *s, uint32_t max_tensors);

/* Whether one more name fits under the tensor limit. */
bool store_has_room(const struct store *s);

/* Tensors whose name starts with `prefix` (NULL for all), sorted by name. On
 * success *ret_list is a malloc'd array of *ret_count pointers into the store,
 * valid until the store changes (free() the array). */
int store_list(struct store *s, const char *prefix, size_t prefix_len,
	       struct tensor ***ret_list, size_t *ret_count);

/* Number of tensors and their total bytes. */
void store_totals(const struct store *s, uint64_t *ret_count, uint64_t *ret_bytes);
