/* The daemon's counters, reported by `info` under "counters" (docs/protocol.md)
 * and printed by `tensorctl metrics` in the Prometheus text format. Counters
 * only grow while the daemon runs; they start at zero with each process. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* Room for every method of the dispatch table plus one slot for unknown names
 * (dispatch.c checks the table fits). */
#define METRICS_MAX_METHODS 64

struct metrics_method {
	uint64_t requests;      /* requests dispatched to the method */
	uint64_t errors;        /* of those, answered with an error */
	uint64_t busy_ns;       /* time the handler held the event loop */
};

struct metrics {
	struct metrics_method method[METRICS_MAX_METHODS];
	uint64_t bytes_in;              /* read from client sockets */
	uint64_t bytes_out;             /* written to client sockets */
	uint64_t connections;           /* accepted and served */
	uint64_t connections_open;      /* open now (serve/server.c counts them) */
	uint64_t connections_refused;   /* turned away: max_connections, max_connections_per_user,
					   unreadable credentials */
	uint64_t protocol_errors;       /* streams closed as unparseable */
	uint64_t reloads;               /* SIGHUP reloads that applied a config */
	uint64_t reload_failures;       /* SIGHUP reloads refused (bad config) */
	uint64_t op_batches;            /* op.run batches submitted (methods/op_batch.c) */
	uint64_t op_batched;            /* op.runs answered from them */
	/* Checkpoints (persist/checkpoint.c), info's "persistence": */
	uint64_t checkpoints;           /* passes that completed (periodic, store.sync, final) */
	uint64_t checkpoints_failed;    /* passes that could not complete (an fsync failed, ...) */
	uint64_t checkpoint_failed_writes; /* tensors and models a pass could not write */
	int64_t last_checkpoint_unix_ns; /* CLOCK_REALTIME at the last pass's end, 0: none yet */
	uint64_t last_checkpoint_ns;    /* how long it took */
	bool last_checkpoint_ok;        /* it completed and wrote everything it tried */
};

/* Count one finished request of method slot `slot` (see request_method_slot)
 * that took `ns` nanoseconds on the loop; `failed` when it was answered with
 * an error. Out-of-range slots are ignored. */
void metrics_request(struct metrics *m, unsigned slot, bool failed, uint64_t ns);

/* Count an error for a request answered later (train.run), whose request was
 * counted when it was dispatched. */
void metrics_request_error(struct metrics *m, unsigned slot);
