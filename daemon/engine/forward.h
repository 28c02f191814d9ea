/* What training, evaluation and prediction share around a forward graph:
 * feeding stored data into it under input names, keeping only the nodes a
 * caller needs, and reading a scalar result back. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/graph_core.h"

/* Input node `id` is fed from stored tensor `src`. */
struct feed {
	char id[TDP_MAX_NAME_LEN + 1];
	char src[TDP_MAX_NAME_LEN + 1];
};

/* How a graph's inputs are fed: rows `index` of each source (a minibatch,
 * gather), rows [row0, row1) (slice, when `rows`), or the whole tensor (a
 * free view). */
struct feeds {
	struct feed f[OP_MAX_INPUTS];
	unsigned n;
	struct tensor *index;      /* i32 [batch], or NULL */
	bool rows;
	uint64_t row0, row1;
};

/* Read `map` {input id: stored tensor name} (1 to OP_MAX_INPUTS entries) into
 * `fd` (other fields zeroed). `what` names the argument in messages. Returns
 * 0 or -1 with call->err set. */
int feeds_parse(struct caller *call, const msgpack_object *map, struct feeds *fd, const char *what);

/* The stored tensor feed `k` reads, or NULL after td_fail(NOT_FOUND). */
struct tensor *feeds_source(struct caller *call, const struct feeds *fd, unsigned k);

/* Append one node per feed, with the feed's id, in front of the client's
 * nodes. `fd` may be NULL (nothing to feed). Returns 0 or -1 with call->err set. */
int feeds_emit(struct graph *gr, const struct feeds *fd);

/* Of the graph.run-style `nodes` array, keep only the nodes that the `nwant`
 * node ids in `want` depend on (in their order). On success *ret is a
 * malloc'd array of shallow copies of the kept node objects (free() it, after
 * which `nodes` must still outlive its use) and *ret_kept their count. An id
 * in `want` that names no node is INVALID_ARGUMENT naming `what`. */
int forward_prune(struct caller *call, const msgpack_object *nodes, const char *const *want,
		  unsigned nwant, const char *what, msgpack_object **ret, uint32_t *ret_kept);

/* The index of the node with id `id`, or -1. */
int forward_find(const struct graph *gr, const char *id);

/* Read the one element of floating scalar node `i` back from the device
 * (f32, f16 or bf16) into *ret. Returns 0 or -1 with call->err set. */
int forward_read_scalar(struct caller *call, struct graph *gr, unsigned i, double *ret);

/* The value of a floating scalar of `dtype` (f32, bf16, f16) stored at `b`. */
double forward_scalar_value(int dtype, const uint8_t *b);
