/* The memory plan of a training step's graph (docs/performance.md, "Memory
 * planning"): results that no one reads after a part of the graph share one
 * arena of device memory per device, each at an offset that no result alive
 * at the same time overlaps, so a step needs the memory of what is alive at
 * once rather than of every node, and the same arena again at the next step
 * (gpu/memory.c keeps emptied blocks of the same size). */
#pragma once

#include "engine/graph_core.h"

/* One device's arena of a planned part. */
struct graph_arena {
	uint32_t device;
	struct gpu_alloc alloc;
	bool cached;                     /* the cache's (graph.arena_cache), not the graph's */
};

#define GRAPH_ARENA_CACHE 16

/* Arenas kept across graphs whose submissions one queue per device runs in
 * order (a job's steps: each submission ends with a full barrier,
 * gpu_rec_submit), so that the steps in flight share them: their planned
 * intermediates are never alive at once on the GPU. */
struct graph_arena_cache {
	struct graph_arena a[GRAPH_ARENA_CACHE];
	unsigned n;
	uint64_t scratch_hint;           /* the most scratch one node of a graph took */
};

/* Free the arenas of `c` (every graph that used them freed). */
void graph_arena_cache_free(struct graph_arena_cache *c, struct gpu_device *const *gpus);

/* Plan nodes [first, last) of `gr` (after graph_fuse_plan): places every
 * result that lives only inside the part and is neither stored, kept, returned
 * nor copied (node.planned, node.alloc in an arena). A device whose arena
 * cannot be had is left unplanned (its nodes get memory of their own as
 * without a plan). Returns 0 or -ENOMEM (nothing planned). */
int graph_plan_part(struct graph *gr, unsigned first, unsigned last);

/* Free the arenas of `gr`'s plans (after its work ended). */
void graph_plan_free(struct graph *gr);
