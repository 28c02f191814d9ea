/* A request answered later (docs/architecture.md, "Deferred answers"): one
 * object and one path, whatever the answer waits for -- a GPU completion
 * (methods/async_request.h: op.run, graph.run, train.step, model.predict,
 * model.evaluate, kernel.run, tensor.copy, memfd transfers), an op.run
 * batch (methods/op_batch.c), a compile child or build thread
 * (kernel.create), a training job (train.run's sink, job.watch), another
 * step (a waiting train.step) or a stream's parts (tensor.get). The owner
 * embeds a struct deferred_answer, takes the request over with
 * deferred_answer_start, writes its answer into `req` / `pk`, and ends with
 * deferred_answer_done, after deferred_answer_fail when it failed. Like
 * sd-bus's kept message and sd_bus_reply_method_errno, or Redis's blocked
 * client: a departed client's work still takes effect, only the answer goes
 * nowhere. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>

#include "methods/request.h"

struct deferred_answer {
	struct request_deferred def;    /* the connection's handle (request_defer) */
	struct request req;             /* request_defer's copy: where the answer goes */
	msgpack_packer pk;              /* writes into the connection's output */
	bool gone;                      /* the client went away: nobody is answered */
	bool batched;                   /* one of an op.run batch (deferred_answer_start_batched) */
	/* NULL, or called once when the client went away (`gone` is set by
	 * then): the owner stops or frees what it holds. Not for a batched
	 * answer, which request_conn_closed marks `gone` itself. */
	void (*on_gone)(struct deferred_answer *da);
};

/* The deferred answer whose connection handle is `def` (the owner's
 * request_deferred.more and window_gone are handed that). */
static inline struct deferred_answer *deferred_answer_of(const struct request_deferred *def)
{
	return (struct deferred_answer *)((char *)def - offsetof(struct deferred_answer, def));
}

/* Take over answering `req` later (request_defer: the connection's later
 * requests wait until deferred_answer_done). `on_gone` as in the struct.
 * The handler then returns REQUEST_DEFERRED. Returns 0, or
 * request_fail(INTERNAL) when `req` came on no connection. */
int deferred_answer_start(struct deferred_answer *da, struct request *req,
			  void (*on_gone)(struct deferred_answer *da));

/* The same as one of an op.run batch (request_defer_batched: the
 * connection goes on serving its later requests meanwhile). Returns 0, or
 * request_fail(INTERNAL) when `req` came on no connection. */
int deferred_answer_start_batched(struct deferred_answer *da, struct request *req);

/* Where the answer starts in the output: what deferred_answer_fail drops
 * back to. */
static inline size_t deferred_answer_mark(const struct deferred_answer *da)
{
	return tdp_buf_len(da->req.out);
}

/* The answer is written: send it and let the connection go on with its
 * later requests (for a batched one, count it answered: the batch kicks the
 * connection once all its answers are written, request_batch_kick).
 * Nothing for a departed client. */
void deferred_answer_done(struct deferred_answer *da);

/* The request failed (da->req.call.err says why): the one error answer of
 * a deferred request. Drops what its answer wrote past `mark`
 * (deferred_answer_mark before it began), counts the failure (info's
 * requests_failed, the method's error metric) and writes the error
 * response; for a departed client only counts and logs it. The owner
 * then ends with deferred_answer_done, as on success. */
void deferred_answer_fail(struct deferred_answer *da, size_t mark);
