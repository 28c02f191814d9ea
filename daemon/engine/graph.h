/* Running ops on stored tensors: one op (op.run) or a graph of them
 * (graph.run), recorded into one command buffer and one submission. Named
 * outputs are stored only when the whole request succeeded. */
#pragma once

#include <msgpack.h>

#include "serve/request.h"

/* Serve `op.run {op, inputs, attrs?, out?}`. */
int method_op_run(struct request *req);

struct graph;

/* Fill `gr` (with gr->req set) from a graph.run `nodes` array and optional
 * `outputs` array: resolve, check and infer every node, mark stored and
 * inline results. Returns 0 or request_fail() naming the node. */
int graph_parse(struct graph *gr, const msgpack_object *nodes, const msgpack_object *outs);

/* Serve `graph.run {nodes, outputs?}`. */
int method_graph_run(struct request *req);
