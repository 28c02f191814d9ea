/* Client memory passed as a memfd with SCM_RIGHTS (docs/protocol.md,
 * "Passing memory"): checked and mapped for one tensor.put or tensor.get. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct request;

/* A mapping of `bytes` bytes of a passed memfd. */
struct memfd_map {
	void *base;             /* what mmap returned */
	size_t len;             /* its length (a multiple of the `align` asked for when
				   the file holds that much) */
	uint8_t *data;          /* the first byte asked for */
};

/* Map `bytes` bytes at `offset` of the request's passed fd number `index`
 * (req->fds): for reading (put: the memfd must be sealed with F_SEAL_SHRINK
 * and F_SEAL_WRITE) or for writing (get: sealed with F_SEAL_SHRINK, not
 * against writing). `align` (0, or a power of two of at least a page): map
 * whole units of it where the file's pages reach that far, for a device
 * import (gpu/host_import.h). The range must be pages the client made (no
 * hole, SEEK_HOLE), checked before anything is mapped, for a put as for a
 * get. The mapping is the daemon's own: it stays
 * valid when the client closes the fd or unmaps its memory. Returns 0 with
 * *ret_map set, or request_fail() with a reason the client can act on. */
int memfd_map_param(struct request *req, uint64_t index, uint64_t offset, uint64_t bytes,
		    bool writable, uint64_t align, struct memfd_map *ret_map);

/* Unmap what memfd_map_param mapped (the fd itself belongs to the
 * connection). */
void memfd_unmap(struct memfd_map *m);
