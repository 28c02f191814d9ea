/* One client connection: buffered, non-blocking I/O, msgpack-RPC framing,
 * in-order request processing and backpressure. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"
#include "loop.h"
#include "scan.h"

struct daemon;
struct server;
struct train_job;

struct conn {
	struct loop_source src;
	struct daemon *d;
	uid_t uid;
	pid_t pid;
	struct tdp_buf in;
	struct tdp_buf out;
	struct tdp_scanner scan;
	bool peer_closed;       /* read() saw EOF: answer what is buffered, then close */
	bool closing;           /* close once the output is flushed */
	bool dead;              /* closed; freed after the current event batch */
	int64_t last_active_ns; /* CLOCK_MONOTONIC of the last event */
	struct train_job *job;  /* a train.run in progress: later requests wait */
	struct conn *next;
};

/* Wrap accepted socket `fd` (taken over) and start watching it. Returns NULL
 * on failure, with `fd` closed. */
struct conn *conn_new(struct daemon *d, int fd);

/* Close the socket now; the memory stays until conn_free() so that pending
 * events of the same batch can still look at `dead`. */
void conn_close(struct conn *c);

/* Flush output and serve waiting requests after work done outside the
 * connection's own events (a training step wrote a notification, or the
 * connection's job ended). */
void conn_kick(struct conn *c);

/* Whether so much output waits that the connection takes no more work. */
bool conn_backlogged(const struct conn *c);

/* Give large, empty buffers back to the system if the connection has been
 * idle a while (called periodically with the CLOCK_MONOTONIC time). */
void conn_trim_idle(struct conn *c, int64_t now_ns);

/* Free a closed connection. */
void conn_free(struct conn *c);
