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

/* Whether tensor_import_put or tensor_import_get took the transfer: its
 * own answer, apart from the handler's return (enum request_result) that a
 * taken one hands back. */
enum tensor_import_taken {
	TENSOR_IMPORT_NOT_TAKEN = 0, /* the import is not possible: nothing taken */
	TENSOR_IMPORT_TAKEN = 1,     /* the transfer's; *ret_result is the handler's return */
};

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
 * before); else TENSOR_IMPORT_TAKEN: `t` and the mapping are the
 * transfer's and *ret_result is the handler's return (REQUEST_ANSWERED,
 * REQUEST_FAILED or REQUEST_DEFERRED). */
enum tensor_import_taken tensor_import_put(struct request *req, struct gpu_device *g,
					   struct tensor *t, struct memfd_map *map, uint32_t mode,
					   bool has_mode, int *ret_result);

/* Get: copy `t`'s bytes on `g` into `map` and answer `t`'s metadata as it
 * was now. Returns TENSOR_IMPORT_NOT_TAKEN when the import is not
 * possible (the mapping is still the caller's); else TENSOR_IMPORT_TAKEN:
 * the mapping is the transfer's and *ret_result the handler's return. */
enum tensor_import_taken tensor_import_get(struct request *req, struct gpu_device *g,
					   const struct tensor *t, struct memfd_map *map,
					   int *ret_result);
