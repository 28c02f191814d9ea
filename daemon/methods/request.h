/* One request being served: what a method handler gets, and how it answers. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/error.h"
#include "buf.h"
#include "store/caller.h"
#include "wire_limits.h"

struct daemon;
struct conn;
struct loop_source;

/* What a method handler (method_fn) returns. Handlers return an int
 * holding one of these, so that `return request_fail(...)` (-1) stays
 * short. */
enum request_result {
	REQUEST_FAILED = -1,    /* request_fail() said why: the error is the answer */
	REQUEST_ANSWERED = 0,   /* the whole answer is written */
	/* It answers later itself, after deferred_answer_start
	 * (methods/deferred_answer.h: train.run, a kernel.create compiling, a
	 * submission still running) or deferred_answer_start_batched (an
	 * op.run batch). */
	REQUEST_DEFERRED = 1,
	/* It was not served: nothing of it took effect, and the connection
	 * serves it again once its batched requests (methods/op_batch.h) were
	 * answered. */
	REQUEST_HOLD = 2,
};

/* An answer given later: while one is pending, the connection's later
 * requests wait. It lives in a struct deferred_answer
 * (methods/deferred_answer.h) next to the copy of the request that
 * request_defer made. */
struct request_deferred {
	/* The client went away before the answer: no request_* call on the copy
	 * after this; free what the owner holds once the current batch of loop
	 * events is done. */
	void (*cancel)(struct request_deferred *def);
	/* NULL, or the answer is written in parts (a streamed tensor.get): called
	 * while little output waits and `window` is empty, it appends the next
	 * part to the output or shows it in `window`, and returns 0 when more
	 * will follow, 1 when the answer is complete (it freed what it held;
	 * the connection goes on with its next requests), or -errno when it
	 * cannot go on (the connection is closed, which calls `cancel`). A 0
	 * that added nothing means no part is ready yet: the owner calls
	 * request_wake once one is. While it runs, a peer that stopped sending
	 * still reads. */
	int (*more)(struct request_deferred *def);
	/* The part `more` showed outside the output (memory the owner holds,
	 * so it needs no copy): sent once the output before it went, the
	 * connection moving `window` past what the socket took. */
	const uint8_t *window;
	size_t window_len;
	/* NULL, or whether the memory `window` shows is gone (a stream's parts
	 * on a device lost and re-created meanwhile): the connection then ends
	 * instead of sending it. */
	bool (*window_gone)(const struct request_deferred *def);
	/* Bytes the answer still holds for the client (a stream's snapshot):
	 * they count as the uid's buffered bytes (user_max_buffer_bytes). */
	uint64_t held_bytes;
};

struct request {
	/* The daemon, the peer's credentials (SO_PEERCRED: what store_lookup
	 * checks) and the error sink: what the layers below are handed. */
	struct caller call;
	struct conn *conn;              /* the connection it came on */
	uint32_t msgid;
	const char *method;             /* NUL-terminated */
	unsigned slot;                  /* its metrics slot: request_method_name() */
	const msgpack_object *params;   /* the params map, or NULL */
	msgpack_packer *pk;             /* writes into the connection's output */
	/* The fds passed with the message (SCM_RIGHTS, docs/protocol.md): the
	 * connection closes them once the handler returned. */
	const int *fds;
	unsigned nfds;
	struct tdp_buf *out;
	/* Where its answer starts in `out`: a failure drops what follows. An
	 * op.run batch closed while it is served writes earlier answers there
	 * first and moves it (request_settle). */
	size_t mark;
};

/* Record an error for the response in req->call.err (td_fail): `code` is a
 * tdp_status; the answer prefixes the method name. Always returns -1, so
 * handlers can `return request_fail(...)`. */
__attribute__((format(printf, 3, 4)))
int request_fail(struct request *req, int code, const char *fmt, ...);

/* Write the error response for the failure recorded in req->call.err (INTERNAL
 * when none is) into `pk`: "<method>: <message>". Returns 0 or -ENOMEM. */
int request_pack_error(const struct request *req, msgpack_packer *pk);

/* Take over answering `req` later: copy it into *later (no params; its
 * `pk`, set up here, writes into the connection's output) and hold the
 * connection's later requests until request_deferred_done. The handler then
 * returns REQUEST_DEFERRED. Returns 0, or request_fail(INTERNAL) when `req`
 * came on no connection. Implemented by the connection (serve/conn.c). */
int request_defer(struct request *req, struct request_deferred *def, struct request *later,
		  msgpack_packer *pk);

/* Take over answering `req` later as one of a batch (methods/op_batch.c):
 * request_defer's copy, but the connection goes on serving its later
 * requests (which join the batch, or close it and wait: REQUEST_HOLD).
 * Returns 0, or request_fail(INTERNAL) when `req` came on no connection. */
int request_defer_batched(struct request *req, struct request *later, msgpack_packer *pk);

/* The batch holding `later` was submitted and runs: its connection serves
 * no more requests until its batched requests were answered. */
void request_batch_hold(const struct request *later);

/* Whether req's connection has batched requests not answered yet. */
bool request_batch_pending(const struct request *req);

/* Batched `later` is answered (written): once the connection's last one
 * is, the connection may go on (request_batch_kick). */
void request_batch_done(const struct request *later);

/* Let the connection of answered `later` send what was written and go on
 * with its requests: `now` at once (not while any connection is being
 * served; an op.run batch it opens stays open: the caller closes it before
 * it goes on), else on its next turn (after the current event). Nothing
 * for a closed connection. */
void request_batch_kick(const struct request *later, bool now);

/* Whether loop source `src` is a client connection's: its events only
 * serve requests, which join an open op.run batch or close it themselves
 * (request_settle), so the batcher's before hook leaves the batch open for
 * them. Implemented by serve/deferred.c. */
bool request_conn_source(const struct loop_source *src);

/* The bytes the connections of the request's uid buffer, held answers
 * (request_deferred.held_bytes) included, and the user_max_buffer_bytes
 * they must stay under (0: no limit). Implemented by serve/deferred.c. */
uint64_t request_user_buffered(const struct request *req, uint64_t *ret_limit);

/* Whether the client reads its output too slowly to take more now
 * (max_output_backlog). */
bool request_backlogged(const struct request *later);

/* Send what was written into later->out so far. */
void request_flush(const struct request *later);

/* The deferred answer `later` (request_deferred.more) has a part ready:
 * its connection takes it on its next turn (after the current event).
 * Nothing for a closed connection. */
void request_wake(const struct request *later);

/* The deferred answer is written: send it, and let the connection go on
 * with its next requests. */
void request_deferred_done(const struct request *later);

/* What the connection tells the methods layer, which implements these
 * (methods/op_batch.c: an op.run batch is the one thing it holds open
 * across requests). */

/* `req` does not join an op.run batch and is about to be served, or
 * answered with an error: close the open batch first, so that it reads
 * what the batch stores (a batch that finished within the poll writes its
 * answers first; req->mark is set past them). Returns whether req's
 * connection still waits for answers of its batched requests: then serve
 * `req` later (REQUEST_HOLD). */
bool request_settle(struct request *req);

/* Close (submit) the open op.run batch, if any: before a connection
 * writes what is not a request's answer behind its batched requests, and
 * after it was served from outside its own events (conn_kick), so that
 * nothing changes what the batch reads. */
void request_batch_close(struct daemon *d);

/* Connection `c` closed: its requests that the methods layer holds
 * (batched op.runs) still take effect, their stored outputs committed,
 * but get no answer. */
void request_conn_closed(struct daemon *d, const struct conn *c);

/* A method handler: writes the whole response with tdp_write_result_head() and
 * the result object and returns REQUEST_ANSWERED, or returns request_fail()
 * (REQUEST_FAILED), REQUEST_DEFERRED or REQUEST_HOLD (enum request_result).
 * On failure anything it wrote is discarded. */
typedef int (*method_fn)(struct request *req);

/* Serve one request: find the method, run it, and leave exactly one response
 * for `req->msgid` in `req->out` (or have it written later: a deferred
 * answer). Returns REQUEST_ANSWERED, REQUEST_HOLD when it was not served
 * and nothing was written (serve it again after the connection's batched
 * requests were answered), or -ENOMEM when not even an error response
 * could be written (the connection must then be closed). Decides by the
 * flags of the method table's row, never by the handler. */
int request_dispatch(struct request *req, const char *method, size_t method_len);

/* The methods the daemon serves, in dispatch-table order: slots
 * 0..request_method_count()-1; slot request_method_count() counts requests
 * for names no method has. */
unsigned request_method_count(void);

/* The method name of a metrics slot; "other" for the slot of unknown names. */
const char *request_method_name(unsigned slot);
