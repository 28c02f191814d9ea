/* Shared autocast copies of a training step's product operands
 * (graph_casts.c). */
#pragma once

struct graph;

/* Find the operands of nodes [first, last) that autocast products cast
 * whole and that several of them read (the same node's result within a
 * window of nodes, or the same stored tensor): gr->casts, one struct
 * op_cast each, unplaced, and each reader's ctx.cast pointing at it. The
 * plan (graph_plan.c) then places them or, failing, leaves them without
 * memory (the readers cast into scratch as before). Returns 0, or -1 out
 * of memory (none shared). */
int graph_casts_plan(struct graph *gr, unsigned first, unsigned last);

/* Forget gr->casts and the readers' pointers to them. */
void graph_casts_free(struct graph *gr);
