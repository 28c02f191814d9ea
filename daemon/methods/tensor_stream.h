/* A large tensor.get on the plain path, streamed: the bytes go from a device
 * snapshot into the connection's output a chunk at a time as the socket
 * drains, instead of the whole reply being built in memory first
 * (docs/architecture.md, "Connections"). */
#pragma once

#include <stdint.h>

#include "methods/request.h"
#include "store/store.h"

/* Gets of at least this many bytes stream. */
#define TENSOR_STREAM_MIN ((uint64_t)16 << 20)

struct tensor_stream;

/* Snapshot `t` on its device (a device-side copy, so later writes to the
 * tensor do not show in the answer). Returns 1 with *ret_s set; 0 when the
 * get should not stream (the device memory is host-mapped, so a snapshot
 * would save no host memory; the uid's buffers are full; no device memory
 * for it): the caller answers the plain way; or -1 after request_fail(). */
int tensor_stream_new(struct request *req, const struct tensor *t, struct tensor_stream **ret_s);

/* Take over the answer, whose head up to the data's bin header the caller
 * wrote: returns REQUEST_DEFERRED, or -1 after request_fail() with `s`
 * freed. */
int tensor_stream_start(struct request *req, struct tensor_stream *s);

/* Free a stream that was not started. */
void tensor_stream_free(struct tensor_stream *s);
