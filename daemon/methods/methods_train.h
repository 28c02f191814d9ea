/* The train namespace's handlers (docs/protocol.md, "Training"). */
#pragma once

#include <msgpack.h>

#include "methods/params.h"
#include "methods/request.h"

struct model;

/* Serve `train.step {nodes, loss, params, optimizer?, step?, grads?, outputs?,
 * model?, data?, fuse?}`. */
int method_train_step(struct request *req);


/* Where a step's graph comes from: a model, or the request's own nodes,
 * loss and params. */
struct source {
	struct model *m;
	const msgpack_object *nodes, *loss, *params, *opt;
	const msgpack_object *precision; /* the request's (NULL: the model's, else f32) */
	const msgpack_object *loss_scale; /* the request's map over the model's (or the defaults) */
};

/* Complete *src, whose nodes, loss, params and opt hold the request's
 * (NULL when absent), from the model under store key `model` (NULL: none):
 * the request gives either the model or nodes, loss and params, not both.
 * Returns 0, or -1 after request_fail. */
int train_resolve_source(struct request *req, const char *model, struct source *src);
