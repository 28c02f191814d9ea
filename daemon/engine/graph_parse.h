/* Reading a graph's msgpack form into a `struct graph` (graph_core.h). */
#pragma once

#include <msgpack.h>

struct graph;

/* Append the nodes of a `nodes` array (graph.run's form) to `gr` (gr->call
 * set; nodes already there are the daemon's, e.g. feeds) and mark the nodes
 * an optional `outputs` array names as returned inline: resolve, check and
 * infer every node. Returns 0 or -1 with gr->call->err naming the node. */
int graph_parse(struct graph *gr, const msgpack_object *nodes, const msgpack_object *outs);

/* Append op.run's one node: op name `op`, `inputs` array, optional `attrs`
 * map, `out` name and `device` id (NULL when absent). Returns 0 or -1 with
 * gr->call->err set. */
int graph_parse_op(struct graph *gr, const msgpack_object *op, const msgpack_object *inputs,
		   const msgpack_object *attrs, const msgpack_object *out, const msgpack_object *device);
