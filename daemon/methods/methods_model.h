/* model.define, model.list, model.stat, model.delete, model.evaluate and
 * model.predict (docs/protocol.md), and what train/ needs of models. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>

#include "engine/forward.h"
#include "methods/request.h"

struct model;

int method_model_define(struct request *req);
int method_model_list(struct request *req);
int method_model_stat(struct request *req);
int method_model_delete(struct request *req);
int method_model_evaluate(struct request *req);
int method_model_predict(struct request *req);

/* The model under store key `key` (a PARAM_TENSOR_KEY), or NULL after
 * request_fail (NOT_FOUND). */
struct model *model_lookup(struct request *req, const char *key);

/* Check the feeds `fd` (may be NULL) of a request on model `m`: each fed id
 * must be a declared input (when the model declares inputs); with
 * `need_all`, each declared input must be fed or stored under its name.
 * `what` names the argument. Returns 0 or request_fail(). */
int model_check_feeds(struct request *req, const struct model *m, const struct feeds *fd, bool need_all,
		      const char *what);
