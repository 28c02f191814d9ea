/* One client connection: buffered, non-blocking I/O, msgpack-RPC framing,
 * in-order request processing and backpressure. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/loop.h"
#include "buf.h"
#include "scan.h"
#include "store/access.h"

struct daemon;
struct server;
struct request_deferred;

/* File descriptors a client may pass with SCM_RIGHTS (docs/protocol.md,
 * "Passing memory"): at most CONN_MAX_FDS_PER_SEND with one message; while
 * CONN_MAX_FDS wait on a connection, its later ones wait in the socket. */
#define CONN_MAX_FDS_PER_SEND 4
#define CONN_MAX_FDS 16

/* A passed descriptor, with the stream offset where the recvmsg() that
 * brought it ended: it belongs to the message holding that offset. */
struct conn_fd {
	int fd;
	uint64_t pos;
};

struct conn {
	struct loop_source src;
	struct daemon *d;
	struct access_cred cred; /* the peer, from SO_PEERCRED/SO_PEERGROUPS */
	uid_t uid;              /* cred.uid and cred.pid, for brevity */
	pid_t pid;
	struct tdp_buf in;
	struct tdp_buf out;
	struct msgpack_zone *zone; /* the parsed message's objects, reused (handle_message) */
	/* Requests read but not answered (the in-flight ones): the sizes of the
	 * complete messages at the head of `in`, a ring of cfg.max_inflight. */
	uint64_t *queue;
	uint32_t qcap;          /* cfg.max_inflight when the connection opened */
	uint32_t qhead, nqueued;
	size_t scanned;         /* bytes of `in` the queued messages take */
	struct tdp_scanner scan; /* the message after them, as far as it arrived */
	int scan_err;           /* the stream broke after the queued messages */
	bool peer_closed;       /* read() saw EOF: answer what is buffered, then close */
	bool closing;           /* close once the output is flushed */
	bool dead;              /* closed; freed after the current event batch */
	bool resume;            /* served its turn's budget with requests left */
	bool sndbuf_grown;      /* grow_send_buffer ran (conn.c) */
	int64_t last_active_ns; /* CLOCK_MONOTONIC of the last event */
	int64_t drained_ns;     /* CLOCK_MONOTONIC when output last moved or was empty */
	int64_t input_ns;       /* CLOCK_MONOTONIC when input last arrived */
	uint64_t in_base;       /* stream offset of the first byte of `in` */
	struct conn_fd fds[CONN_MAX_FDS]; /* passed fds not yet claimed, oldest first */
	unsigned nfds;
	bool unix_peer;         /* an AF_UNIX socket: the only kind that takes fds */
	struct request_deferred *deferred; /* a request answered later (request.h): later ones wait */
	/* Its op.runs in a batch (request_defer_batched), not answered yet;
	 * while that batch runs (batch_held) its later requests wait. */
	unsigned batched;
	bool batch_held;
	struct conn *next;
};

/* Wrap accepted socket `fd` (taken over) of peer `cred` and start watching
 * it. Returns NULL on failure, with `fd` closed. */
struct conn *conn_new(struct daemon *d, int fd, const struct access_cred *cred);

/* Close the socket now; the memory stays until conn_free() so that pending
 * events of the same batch can still look at `dead`. */
void conn_close(struct conn *c);

/* Flush output and serve waiting requests after work done outside the
 * connection's own events (a training step wrote a notification, or the
 * connection's job ended); an op.run batch they opened is closed before it
 * returns. */
void conn_kick(struct conn *c);

/* As conn_kick, but an op.run batch it opened stays open: the caller (the
 * batcher, methods/op_batch.c) closes it before anything else can change
 * what the batch reads, so that the connections it goes on with share one
 * batch. */
void conn_serve(struct conn *c);

/* Whether so much output waits (cfg.max_output_backlog) that the connection
 * takes no more work. */
bool conn_backlogged(const struct conn *c);

/* Serve the requests left over when the connection's last turn ran out of
 * budget (c->resume): called by the server after other clients had theirs. */
void conn_resume(struct conn *c);

/* Periodic upkeep (called about once a second with the CLOCK_MONOTONIC
 * time): give large, empty buffers back to the system if the connection has
 * been idle a while, and disconnect a client whose output sat unread for
 * cfg.stall_timeout seconds, or whose started message got no byte for
 * cfg.input_timeout seconds while the daemon was reading. */
void conn_tick(struct conn *c, int64_t now_ns);

/* Whether `src` is a connection's (request_conn_source: any other event
 * closes the op.run batch first). */
bool conn_source(const struct loop_source *src);

/* Free a closed connection. */
void conn_free(struct conn *c);
