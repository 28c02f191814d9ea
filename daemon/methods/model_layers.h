/* The layer form of model.define inside methods/ (docs/protocol.md,
 * model.define): building the model from the expanded layers and creating
 * its parameters, and the entries model.stat adds for a layer model. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>

#include "methods/request.h"
#include "store/model.h"
#include "train/layers.h"

/* Expand the request's layers (model key `name`) into *lo, build the model
 * *ret_m from the expanded definition and create the parameters not
 * stored yet: *ret_want (calloc'd, lo->np entries, the caller frees it)
 * marks those created, which the caller deletes (layer_init_undo) if the
 * definition fails later. Returns 0 or -1 after request_fail; on failure
 * *ret_m may be set (the caller frees it). */
int model_define_layers(struct request *req, const char *name, struct layers_out *lo, bool **ret_want,
			struct model **ret_m);

/* Pack a layer model's model.stat entries ("layers", "nodes", "outputs",
 * "param_count", "parameters": five key/value pairs). Returns 0 or -1. */
int model_pack_layers(struct request *req, msgpack_packer *pk, const struct model *m);
