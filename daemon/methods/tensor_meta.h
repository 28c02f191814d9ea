/* Writing a tensor's metadata map (docs/protocol.md, "Tensors"). */
#pragma once

#include <msgpack.h>

#include "methods/request.h"
#include "store/store.h"

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
