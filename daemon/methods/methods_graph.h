/* op.run and graph.run (docs/protocol.md, "Ops and graphs"), and packing a
 * graph's results, which model.predict and train.step answer with too. */
#pragma once

#include "methods/request.h"

struct graph;

/* Serve `op.run {op, inputs, attrs?, out?, profile?, device?}`. */
int method_op_run(struct request *req);

/* Serve `graph.run {nodes, outputs?, profile?, fuse?}`. */
int method_graph_run(struct request *req);

/* Pack {dtype, shape, bytes, data} of node `i`'s result (after
 * graph_execute), with room for `extra` more entries the caller packs after
 * it into the same map; the data is read from the device straight into the
 * response. Returns 0 or request_fail(). */
int graph_pack_result(struct request *req, struct graph *gr, unsigned i, unsigned extra);

/* graph_pack_result with the data taken from `src` (the result's bytes,
 * already copied to the host inside the graph's submission) when non-NULL. */
int graph_pack_result_from(struct request *req, struct graph *gr, unsigned i, unsigned extra, const void *src);

/* Pack the "outputs" (each node returned inline, by id) and "stored" (each
 * node stored: committed now, its name and metadata) entries of a graph's
 * answer, after graph_execute, into a map the caller opened. Returns 0 or
 * request_fail(). */
int graph_pack_outputs_stored(struct request *req, struct graph *gr);
