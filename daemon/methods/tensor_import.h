/* tensor.put and tensor.get through a memfd the device copies itself
 * (VK_EXT_external_memory_host, gpu/host_import.h): the daemon's mapping of
 * the memfd is imported and one vkCmdCopyBuffer moves the bytes between it
 * and the tensor's device memory, answered when the copy completed
 * (async_request.h). docs/architecture.md, "Transfers". */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "methods/memfd.h"
#include "methods/request.h"
#include "store/store.h"

struct gpu_device;

/* Transfers smaller than this take the host copy: an import (pinning the
 * pages, a submission) costs more than a memcpy of them. */
#define TENSOR_IMPORT_MIN ((uint64_t)256 << 10)

/* Puts are copied in chunks of at most this many bytes, one submission
 * each, chained at completion: each has its own time limit and other work
 * on the device's queue runs between them. A get is one submission (see
 * submit_chunk). */
#define TENSOR_IMPORT_CHUNK ((uint64_t)128 << 20)

/* From this many copy threads (base/copy_pool.h) on, memfd transfers copy
 * through staging instead of importing the client's pages. */
#define TENSOR_IMPORT_MAX_COPY_THREADS 4u

/* What tensor_import_put and tensor_import_get return when they did not
 * take the transfer (distinct from the handler returns 0, -1 and
 * REQUEST_DEFERRED). */
#define TENSOR_IMPORT_NOT_TAKEN 2

/* The alignment to ask memfd_map_param for when a transfer of `bytes` on
 * `g` (a put when `put`) may be imported; 0 when it will not be (too small,
 * tensor memory the host maps, a device without the extension, a put on a
 * device that does not import read-only pages, or copy threads enough for
 * the staged copy to be faster). */
uint64_t tensor_import_align(const struct gpu_device *g, uint64_t bytes, bool put);

/* Put: copy `map` (memfd_map_param with tensor_import_align) into `t`'s
 * memory on `g` (allocated, t->bytes long), then store `t` as
 * tensor_store_new does with `mode` (and set it on a replacement when
 * `has_mode`) and answer its metadata. Returns TENSOR_IMPORT_NOT_TAKEN
 * when the import is not possible (nothing taken: the caller copies as
 * before); else `t` and the mapping are the transfer's and the handler's
 * return comes back (0, -1 or REQUEST_DEFERRED). */
int tensor_import_put(struct request *req, struct gpu_device *g, struct tensor *t,
		      struct memfd_map *map, uint32_t mode, bool has_mode);

/* Get: copy `t`'s bytes on `g` into `map` and answer `t`'s metadata as it
 * was now. Returns TENSOR_IMPORT_NOT_TAKEN when the import is not
 * possible (the mapping is still the caller's); else the mapping is the
 * transfer's and the handler's return comes back. */
int tensor_import_get(struct request *req, struct gpu_device *g, const struct tensor *t,
		      struct memfd_map *map);
