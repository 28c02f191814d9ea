/* Requests answered when their device work completed (async_request.h). */
#include "methods/async_request.h"

#include <stddef.h>

#include "buf.h"
#include "daemon.h"
#include "engine/graph_core.h"
#include "gpu/completion.h"
#include "gpu/device.h"
#include "gpu/recorder.h"
#include "rpc.h"
#include "status.h"

bool async_req_possible(const struct request *req)
{
	return req->conn && req->call.d->cfg.async_graphs;
}

static void graph_completed(struct graph *gr, void *data);
static void rec_completed(void *data);

/* Run a->again (graph_execute, or graph_execute_async with a->async), or
 * watch a->again_rec. Returns 1 when it completed (or is to be waited for
 * by `finish`), 0 when graph_completed or rec_completed will be called, -1
 * with the error set. */
static int run_again(struct async_req *a)
{
	struct graph *gr = a->again;
	struct gpu_recorder *rec = a->again_rec;

	a->again = NULL;
	a->again_rec = NULL;
	if (rec)
		return !a->async || rec->slot < GPU_CMD_SYNC || gpu_rec_watch(rec, rec_completed, a) < 0;
	if (!a->async)
		return graph_execute(gr) < 0 ? -1 : 1;
	return graph_execute_async(gr, graph_completed, a);
}

/* Finish `a` on the loop: answer (or, for a departed client, write the
 * answer nowhere) and release it, unless `finish` chained more work. */
static void async_req_complete(struct async_req *a)
{
	struct request *req = &a->da.req;
	struct tdp_buf scratch = { 0 };
	size_t mark;
	int r;

	/* The client went away: the work still takes effect here; only the
	 * answer, written into a scratch buffer that is dropped, has nobody
	 * to go to. */
	if (a->da.gone) {
		req->conn = NULL;
		req->out = &scratch;
		msgpack_packer_init(&a->da.pk, &scratch, tdp_buf_msgpack_write);
	}
	mark = deferred_answer_mark(&a->da);
	/* A departed client's chain ends, except a recording `finish`
	 * submitted: it must complete before `release`. */
	while ((r = a->finish(a, req)) == ASYNC_REQ_AGAIN && (!a->da.gone || a->again_rec)) {
		struct graph *gr = a->again;

		r = run_again(a);
		if (r == 0) {
			if (gr)
				gr->call = &req->call;
			return;
		}
		if (r < 0)
			break;
	}
	if (r < 0)
		deferred_answer_fail(&a->da, mark);
	tdp_buf_free(&scratch);
	deferred_answer_done(&a->da);
	a->release(a);
}

static int async_req_defer(struct request *req, struct async_req *a)
{
	deferred_answer_start(&a->da, req, NULL); /* cannot fail: req->conn is set */
	a->deferred = true;
	return REQUEST_DEFERRED;
}

/* Finish `a` now (the work completed within the handler), running what
 * `finish` chains until one part is left to the completion thread. */
static int async_req_finish_now(struct request *req, struct async_req *a)
{
	int r;

	while ((r = a->finish(a, req)) == ASYNC_REQ_AGAIN) {
		struct graph *gr = a->again;

		r = run_again(a);
		if (r == 0) {
			if (gr)
				gr->call = &a->da.req.call;
			return async_req_defer(req, a);
		}
		if (r < 0)
			break;
	}
	a->release(a);
	return r < 0 ? -1 : 0;
}

static void graph_completed(struct graph *gr, void *data)
{
	(void)gr;
	async_req_complete(data);
}

int async_req_run_graph(struct request *req, struct async_req *a, struct graph *gr)
{
	int r;

	a->async = async_req_possible(req);
	a->da.gone = false;
	a->again = gr;
	r = run_again(a);
	if (r < 0) {
		a->release(a);
		return -1;
	}
	if (r > 0)
		return async_req_finish_now(req, a);
	gr->call = &a->da.req.call;
	return async_req_defer(req, a);
}

static void rec_completed(void *data)
{
	async_req_complete(data);
}

int async_req_run_rec(struct request *req, struct async_req *a, struct gpu_recorder *rec)
{
	a->async = async_req_possible(req);
	a->da.gone = false;
	if (!a->async || rec->slot < GPU_CMD_SYNC ||
	    gpu_recs_finished_within(rec, 1, GRAPH_SPIN_NS) ||
	    gpu_rec_watch(rec, rec_completed, a) < 0)
		return async_req_finish_now(req, a);
	return async_req_defer(req, a);
}
