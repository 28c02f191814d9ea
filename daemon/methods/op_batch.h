/* Batching small op.runs (docs/architecture.md, "Batching"): op.runs that
 * arrive together, pipelined on one connection or from several connections
 * in one turn of the event loop, are recorded into one command buffer and
 * one submission and answered together, each with its own answer or error,
 * each connection's in order. The batch is closed (submitted) before any
 * request that does not join it, before any event other than a connection's
 * and before the loop's idle work, at the end of each batch of loop events,
 * and when it holds OP_BATCH_MAX requests; nothing else runs while it is
 * open, so the stored tensors it read cannot change under it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "methods/request.h"

struct daemon;
struct graph;

/* Requests per submission at most: the most one client's batch delays
 * another's request is recording this many small ops plus GRAPH_SPIN_NS. */
#define OP_BATCH_MAX 64
/* An op.run joins only when its inputs and result together hold at most
 * this many bytes: big ops get submissions of their own. */
#define OP_BATCH_MAX_BYTES ((uint64_t)256 << 10)

/* What op_batch_offer did with a parsed and checked op.run. */
enum op_batch_offer {
	OP_BATCH_JOINED,  /* it is in the batch, *gr taken over: return REQUEST_DEFERRED */
	OP_BATCH_NO,      /* run it alone now (the batch before it was closed) */
	OP_BATCH_HOLD,    /* serve it later (the handler returns REQUEST_HOLD): its
			   * connection waits for batched answers */
	OP_BATCH_RETRY,   /* parse it again: it read a name the batch just stored */
};

/* Offer op.run `req`, parsed into `gr` (one node, outputs checked): joins
 * the batch when batching is on (batch_requests, async_graphs), it came on
 * a connection, is not profiled, is small (OP_BATCH_MAX_BYTES) and reads
 * no name an earlier request of the open batch stores (that batch is closed
 * first, and then RETRY). Otherwise the open batch is closed first. On
 * JOINED *gr belongs to the batch (the caller forgets it); else the caller
 * still owns it. */
enum op_batch_offer op_batch_offer(struct request *req, struct graph *gr, bool profile);

/* Close the open batch: record nothing more, submit it, answer its
 * requests when it completes (at once when it finishes within
 * GRAPH_SPIN_NS). `now`: the connections answered go on at once
 * (request_batch_kick), which may open a new batch; else on their next turn
 * (for calls while a connection is being served or before another event). */
void op_batch_flush(struct daemon *d, bool now);

/* Subscribe the batcher to d->loop, once the server serves connections:
 * a before hook closes the open batch before any event that is not a
 * connection's and before the idle work, an after hook after each batch of
 * events. The connection side reaches the batcher through methods/request.h
 * (request_settle, request_batch_close, request_conn_closed). Returns 0 or
 * -ENOSPC (the loop's hook lists are full; nothing subscribed). */
int op_batch_init(struct daemon *d);

/* Unsubscribe and free the batching state, after the devices' completion
 * threads stopped (every submitted batch was answered). */
void op_batch_free(struct daemon *d);
