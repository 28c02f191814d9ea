/* Elementwise fusion for graph_execute: finds chains (DAG regions) of
 * elementwise nodes over one shape and float dtype and runs each as one
 * fused kernel (ops/fused.c, shaders/fused.comp). docs/architecture.md,
 * "Fusion", states the rules. */
#pragma once

#include "engine/graph_core.h"

/* Whether graphs on `g` fuse unless told otherwise: no, on every device for
 * now (graph_fuse.c says why). */
bool graph_fuse_default(const struct gpu_device *g);

/* Plan the fused kernels of `gr`: sets each node's `fused` and
 * `fused_internal` and gr->kernels. Nodes left out run as before. Returns 0
 * or -ENOMEM (then nothing is fused). */
int graph_fuse_plan(struct graph *gr);

/* Record the fused kernel of node `i` (a member of one) if `i` is its last
 * member; nothing for the others. Returns 0 or -1 with node i's ctx.err.code and
 * ctx.err.message set. */
int graph_fuse_record(struct graph *gr, unsigned i, struct gpu_recorder *rec);

/* The node at which node `i`'s work is recorded: the last member of its
 * fused kernel, else `i` itself. */
unsigned graph_fuse_recorded_at(const struct graph *gr, unsigned i);

/* Free what graph_fuse_plan allocated. */
void graph_fuse_free(struct graph *gr);
