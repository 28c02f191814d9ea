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
	size_t len;             /* its length */
	uint8_t *data;          /* the first byte asked for */
};

/* Map `bytes` bytes at `offset` of the request's passed fd number `index`
 * (req->fds): for reading (put: the memfd must be sealed with F_SEAL_SHRINK
 * and F_SEAL_WRITE) or for writing (get: sealed with F_SEAL_SHRINK, not
 * against writing). Returns 0 with *ret_map set, or request_fail() with a
 * reason the client can act on. */
int memfd_map_param(struct request *req, uint64_t index, uint64_t offset, uint64_t bytes,
		    bool writable, struct memfd_map *ret_map);

/* Unmap what memfd_map_param mapped (the fd itself belongs to the
 * connection). */
void memfd_unmap(struct memfd_map *m);
