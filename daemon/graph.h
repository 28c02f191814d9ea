/* Running ops on stored tensors: one op (op.run) or a graph of them
 * (graph.run), recorded into one command buffer and one submission. Named
 * outputs are stored only when the whole request succeeded. */
#pragma once

#include <msgpack.h>

#include "request.h"

/* Serve `op.run {op, inputs, attrs?, out?}`. */
int graph_op_run(struct request *req);

/* Serve `graph.run {nodes, outputs?}`. */
int graph_run(struct request *req);
