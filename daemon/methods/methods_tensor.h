/* tensor.put, tensor.get, tensor.stat, tensor.list, tensor.delete,
 * tensor.chmod, tensor.copy (docs/protocol.md, "Tensors"), and a tensor's
 * metadata map as a response, which op.run and graph.run write too. */
#pragma once

#include <msgpack.h>

#include "methods/request.h"
#include "store/store.h"

int method_tensor_put(struct request *req);
int method_tensor_get(struct request *req);
int method_tensor_stat(struct request *req);
int method_tensor_list(struct request *req);
int method_tensor_delete(struct request *req);
int method_tensor_chmod(struct request *req);
int method_tensor_copy(struct request *req);

/* Pack the metadata map of `t` into req->pk, its name as the request's
 * client sees it (names.h); nonzero on failure, like msgpack_pack_*. */
int tensor_write_meta(struct request *req, const struct tensor *t);

/* Pack `t`'s name as the request's client sees it; nonzero on failure. */
int tensor_pack_name(struct request *req, const struct tensor *t);

/* Write a whole successful response whose result is the metadata of `t`.
 * Returns 0 or request_fail(). */
int tensor_write_meta_result(struct request *req, const struct tensor *t);

/* As tensor_write_meta_result, with room for `extra` more entries the caller
 * packs after it into the same map. */
int tensor_write_meta_result_map(struct request *req, const struct tensor *t, unsigned extra);

struct gpu_device;

/* Fail `req` for the device error `r` (-errno of gpu/) while doing `what`:
 * DEVICE_LOST, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED or INTERNAL with a
 * readable message. Returns -1 (request_fail). */
int tensor_device_error(struct request *req, const struct gpu_device *g, int r, const char *what);

/* Store `t` (its memory on `g`, filled) with `mode`, owned by its
 * namespace's owner; a replacement keeps the old owner, group and mode. On
 * failure its memory is freed (not `t`). Returns 0 or request_fail(). */
int tensor_store_new(struct request *req, struct gpu_device *g, struct tensor *t, uint32_t mode);
