/* Requests answered when their device work completed (docs/architecture.md,
 * "Deferred answers"): op.run and graph.run (methods_graph.c), train.step,
 * model.predict, model.evaluate, kernel.run, tensor.copy and memfd transfers
 * record and submit on the loop, poll for at most GRAPH_SPIN_NS
 * (gpu_recs_finished_within), and otherwise defer their answer
 * (deferred_answer_start) until the completion thread reports the
 * submission done. The owner embeds a struct async_req and says how to
 * finish (answer and commit) and how to free itself. */
#pragma once

#include <stdbool.h>

#include "methods/deferred_answer.h"
#include "methods/request.h"

struct graph;
struct gpu_recorder;

/* What `finish` returns besides 0 and -1 (request_fail): values of their
 * own, apart from a handler's REQUEST_* returns. */
enum async_req_finish {
	ASYNC_REQ_AGAIN = 3,            /* it submitted more work (async_req.again) */
};

struct async_req {
	/* Where the answer goes (da.req, da.pk), set up once it is deferred;
	 * da.gone (false until then): the client went away, nobody is
	 * answered. */
	struct deferred_answer da;
	bool deferred;                  /* deferred_answer_start was called */
	bool async;                     /* async_req_possible when it started */
	/* Set by `finish` when it returns ASYNC_REQ_AGAIN: the next graph to
	 * run (built and checked, the owner's), e.g. model.evaluate's next
	 * batch; `finish` is called again once it completed. */
	struct graph *again;
	/* Or a recording `finish` began (gpu_rec_begin_async), recorded and
	 * submitted: watched the same way (a memfd transfer's next chunk). */
	struct gpu_recorder *again_rec;
	/* Called once the work completed (or failed): wait for its outcome
	 * (returns at once by then), write the whole answer into `req` and
	 * commit what the request changes (only when everything succeeded).
	 * For a departed client `req` writes into a scratch buffer that is
	 * dropped: the request still takes effect. Returns 0, request_fail, or
	 * ASYNC_REQ_AGAIN after setting `again` or `again_rec` (not for a
	 * departed client's request, which then ends: only requests without
	 * effects chain; a submitted `again_rec` is still watched for it, as
	 * work left running would outlive `release`: such a `finish` checks
	 * `da.gone` before submitting more). */
	int (*finish)(struct async_req *a, struct request *req);
	/* Free the owner (it holds `a`). Called exactly once: after `finish`,
	 * or instead of it when the submission failed. */
	void (*release)(struct async_req *a);
};

/* Whether `req` may be answered later: it came on a connection and
 * async_graphs is on (else the handler waits, as before). */
bool async_req_possible(const struct request *req);

/* Run graph `gr` (parsed, checked, gr->call == &req->call) that `a`'s owner
 * holds, and finish `a`: now (graph_execute, or graph_execute_async when the
 * graph completed within GRAPH_SPIN_NS; then finish and release run here and
 * their result is returned), or later from the loop (returns
 * REQUEST_DEFERRED; gr->call then points at a->da.req.call). On a failed
 * submission `a` is released and -1 returned with req's error set. */
int async_req_run_graph(struct request *req, struct async_req *a, struct graph *gr);

/* The same for a recording begun with gpu_rec_begin_async (gpu_rec_begin
 * when !async_req_possible), recorded and submitted (gpu_rec_submit; rec
 * lives in the owner): poll, else watch it. `finish` calls gpu_rec_wait for
 * the outcome. Returns finish's result (0 or -1) or REQUEST_DEFERRED. */
int async_req_run_rec(struct request *req, struct async_req *a, struct gpu_recorder *rec);
