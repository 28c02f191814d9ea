#include "methods/op_batch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "daemon.h"
#include "engine/graph_core.h"
#include "gpu/completion.h"
#include "gpu/device.h"
#include "gpu/recorder.h"
#include "methods/deferred_answer.h"
#include "methods/methods_graph.h"
#include "methods/methods_tensor.h"
#include "rpc.h"
#include "store/store.h"
#include "status.h"

/* One batched op.run: its deferred answer and its graph. da.gone: its
 * client left (request_conn_closed): commit, answer nobody. */
struct batch_entry {
	struct deferred_answer da;
	struct graph gr;
	bool failed;                    /* recording it failed: da.req.call.err says why */
	bool fresh;                     /* it stores a name not stored yet */
};

/* One batch: a recording on one device and the requests recorded into it. */
struct batch_run {
	struct daemon *d;
	struct gpu_recorder rec;
	uint32_t device;
	unsigned n;
	struct batch_entry e[OP_BATCH_MAX];
	struct batch_run *next;         /* the submitted ones, oldest first */
};

struct op_batch {
	struct batch_run *open;         /* collecting, or NULL */
	struct batch_run *running;      /* submitted, watched by the completion thread */
	struct batch_run *spare;        /* one answered, kept for the next (70 KiB) */
};

/* `run` is done with: kept as the spare, else freed. */
static void run_release(struct daemon *d, struct batch_run *run)
{
	struct op_batch *b = d->batch;

	if (b && !b->spare)
		b->spare = run;
	else
		free(run);
}

/* The bytes an op.run's inputs and result hold: what decides "small". */
static uint64_t graph_bytes(const struct graph *gr)
{
	const struct op_ctx *ctx = &gr->nodes[0].ctx;
	uint64_t bytes = ctx->out.bytes;

	for (unsigned k = 0; k < ctx->ninputs; k++)
		bytes += ctx->in[k].bytes;
	return bytes;
}

static bool qualifies(const struct request *req, const struct graph *gr, bool profile)
{
	const struct daemon *d = req->call.d;
	uint32_t dev;

	if (!d->cfg.batch_requests || !d->cfg.async_graphs || !req->conn || profile || gr->n != 1 ||
	    gr->fuse || graph_bytes(gr) > OP_BATCH_MAX_BYTES)
		return false;
	/* A batch is watched by the device's completion thread. */
	dev = gr->nodes[0].device;
	return dev < d->ngpus && d->gpus[dev] && gpu_completion_on(d->gpus[dev]);
}

/* Whether `gr` reads a name that a request of `run` stores: it must see
 * what that one stores, which exists only once the batch completed. */
static bool reads_pending(const struct batch_run *run, const struct graph *gr)
{
	const struct node *nd = &gr->nodes[0];

	for (unsigned k = 0; k < nd->ctx.ninputs; k++) {
		if (nd->src[k] >= 0 || !nd->stored[k])
			continue;
		for (unsigned i = 0; i < run->n; i++) {
			const struct node *w = &run->e[i].gr.nodes[0];

			if (w->has_out && !strcmp(w->out_name, nd->stored[k]->name))
				return true;
		}
	}
	return false;
}

/* Whether `gr` stores a name not stored yet, or a larger tensor over a
 * stored one: the tensor count and quotas it was checked against
 * (graph_check_outputs) do not count another such request of the batch,
 * so a batch holds at most one. */
static bool stores_fresh(struct daemon *d, const struct request *req, const struct graph *gr)
{
	const struct node *nd = &gr->nodes[0];
	struct tensor *t = NULL;

	if (!nd->has_out)
		return false;
	if (store_lookup(d->store, nd->out_name, strlen(nd->out_name), &req->call.cred, 0, &t, NULL) == -ENOENT)
		return true;
	return t && t->bytes < nd->ctx.out.bytes;
}

static bool batch_has_fresh(const struct batch_run *run)
{
	for (unsigned i = 0; i < run->n; i++)
		if (run->e[i].fresh)
			return true;
	return false;
}

/* The answer of one request whose work ran: as op.run's without profile. */
static int answer(struct request *req, struct graph *gr)
{
	if (gr->nodes[0].has_out) {
		if (graph_commit_all(gr) < 0)
			return -1;
		return tensor_write_meta_result_map(req, gr->nodes[0].committed, 0);
	}
	if (tdp_write_result_head(req->pk, req->msgid) < 0)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return graph_pack_result(req, gr, 0, 0);
}

static void device_error(struct request *req, const struct daemon *d, int r)
{
	if (r == -ETIMEDOUT)
		request_fail(req, TDP_DEADLINE_EXCEEDED, "the batch ran past request_timeout (%.1f s); the "
			     "GPU is now marked lost and will be re-created",
			     (double)d->cfg.request_timeout_ms / 1e3);
	else if (r == -ENODEV)
		request_fail(req, TDP_DEVICE_LOST, "the GPU was lost");
	else
		request_fail(req, TDP_INTERNAL, "the GPU submission failed (%s)", strerror(-r));
}

/* The batch's submission ended with `r` (0 or -errno): answer each request
 * in order (its result, or its own error), commit the stored outputs of
 * those that ran, then let the connections go on (`now`: at once). Frees
 * `run`. */
static void answer_all(struct batch_run *run, int r, bool now)
{
	struct daemon *d = run->d;

	/* The batch's device time, shared out evenly (info's "users"). */
	for (unsigned i = 0; r == 0 && i < run->n; i++)
		usage_charge_gpu(&d->usage, (uint32_t)run->e[i].da.req.call.cred.uid, run->rec.gpu_ns / run->n);
	for (unsigned i = 0; i < run->n; i++) {
		struct batch_entry *e = &run->e[i];
		struct request *req = &e->da.req;
		size_t mark;

		if (e->da.gone) {
			/* It takes effect as if answered: only nobody reads it. */
			if (r == 0 && !e->failed && graph_commit_all(&e->gr) < 0)
				log_info("uid %u: the result of a departed client's op.run is not stored: %s",
					 (unsigned)req->call.cred.uid, req->call.err.message);
			continue;
		}
		mark = deferred_answer_mark(&e->da);
		if (r < 0)
			device_error(req, d, r);
		if (r < 0 || e->failed || answer(req, &e->gr) < 0)
			deferred_answer_fail(&e->da, mark);
		deferred_answer_done(&e->da);
	}
	for (unsigned i = 0; i < run->n; i++)
		graph_free(&run->e[i].gr);
	/* Every answer is written before any connection goes on: one that goes
	 * on may close another, or open the next batch. */
	for (unsigned i = 0; i < run->n; i++) {
		bool first = !run->e[i].da.gone;

		for (unsigned k = 0; first && k < i; k++)
			first = run->e[k].da.gone || run->e[k].da.req.conn != run->e[i].da.req.conn;
		if (first)
			request_batch_kick(&run->e[i].da.req, now);
	}
	run_release(d, run);
	/* What the connections that went on batched shares one batch, closed
	 * before the caller goes on (it may commit what the batch reads). */
	if (now)
		op_batch_flush(d, false);
}

/* The completion thread saw a watched batch end (from the loop). */
static void run_done(void *data)
{
	struct batch_run *run = data, **pp;
	struct op_batch *b = run->d->batch;

	for (pp = &b->running; *pp; pp = &(*pp)->next)
		if (*pp == run) {
			*pp = run->next;
			break;
		}
	answer_all(run, gpu_rec_wait(&run->rec), true);
}

void op_batch_flush(struct daemon *d, bool now)
{
	struct op_batch *b = d->batch;
	struct batch_run *run = b ? b->open : NULL;
	int r;

	if (!run)
		return;
	b->open = NULL;
	d->metrics.op_batches++;
	d->metrics.op_batched += run->n;
	r = gpu_rec_submit(&run->rec);
	if (r < 0) {
		answer_all(run, r, now);
		return;
	}
	/* The loop waits for the device itself only when it has nothing else
	 * to do: else the completion thread waits, and the loop serves the
	 * other connections (their requests make the next batch meanwhile).
	 * A batch of one request is one client waiting: no poll() to ask. */
	if (run->rec.slot < GPU_CMD_SYNC ||
	    ((run->n == 1 || !d->loop || !loop_busy(d->loop)) &&
	     gpu_recs_finished_within(&run->rec, 1, GRAPH_SPIN_NS))) {
		answer_all(run, gpu_rec_wait(&run->rec), now);
		return;
	}
	if (gpu_rec_watch(&run->rec, run_done, run) < 0) {
		/* No completion thread any more (shutting down): wait here. */
		answer_all(run, gpu_rec_wait(&run->rec), now);
		return;
	}
	for (unsigned i = 0; i < run->n; i++)
		if (!run->e[i].da.gone)
			request_batch_hold(&run->e[i].da.req);
	run->next = NULL;
	{
		struct batch_run **pp = &b->running;

		while (*pp)
			pp = &(*pp)->next;
		*pp = run;
	}
}

bool request_settle(struct request *req)
{
	op_batch_flush(req->call.d, false);
	if (req->out)
		req->mark = tdp_buf_len(req->out);
	return req->conn && request_batch_pending(req);
}

/* A new batch on the device of `gr`. NULL when none can be begun. */
static struct batch_run *run_new(struct daemon *d, const struct graph *gr)
{
	uint32_t dev = gr->nodes[0].device;
	struct batch_run *run = d->batch->spare;

	/* Entries are set as requests join: only the header is reset. */
	if (run)
		d->batch->spare = NULL;
	else if (!(run = malloc(sizeof(*run))))
		return NULL;
	run->n = 0;
	run->next = NULL;
	run->d = d;
	run->device = dev;
	memset(&run->rec, 0, sizeof(run->rec));
	if (gpu_rec_begin_async(&run->rec, d->gpus[dev]) < 0 || run->rec.slot < GPU_CMD_SYNC) {
		if (run->rec.cb)
			gpu_rec_abort(&run->rec);
		run_release(d, run);
		return NULL;
	}
	return run;
}

enum op_batch_offer op_batch_offer(struct request *req, struct graph *gr, bool profile)
{
	struct daemon *d = req->call.d;
	struct op_batch *b = d->batch;
	struct batch_run *run;
	struct batch_entry *e;
	bool fresh;

	if (!qualifies(req, gr, profile))
		return request_settle(req) ? OP_BATCH_HOLD : OP_BATCH_NO;
	if (!b && !(b = d->batch = calloc(1, sizeof(*b))))
		return request_settle(req) ? OP_BATCH_HOLD : OP_BATCH_NO;
	run = b->open;
	fresh = stores_fresh(d, req, gr);
	if (run && (run->device != gr->nodes[0].device || reads_pending(run, gr) ||
		    (fresh && batch_has_fresh(run)))) {
		/* What it resolved and was checked against may change with the
		 * batch's commits: parse and check it again after them. */
		bool reread = reads_pending(run, gr) || fresh;

		if (request_settle(req))
			return OP_BATCH_HOLD;
		if (reread)
			return OP_BATCH_RETRY;
		run = NULL;
	}
	if (!run && !(run = b->open = run_new(d, gr)))
		return request_settle(req) ? OP_BATCH_HOLD : OP_BATCH_NO;
	e = &run->e[run->n];
	if (deferred_answer_start_batched(&e->da, req) < 0) {
		if (run->n == 0) {
			gpu_rec_abort(&run->rec);
			b->open = NULL;
			run_release(d, run);
		}
		return OP_BATCH_NO;
	}
	run->n++;
	e->failed = false;
	e->fresh = fresh;
	e->gr = *gr;
	e->gr.call = &e->da.req.call;
	memset(gr, 0, sizeof(*gr));
	/* Its inputs are read only now, while recording: the batch keeps no
	 * pointer to a stored tensor. A failure is its own. */
	if (graph_record_into(&e->gr, &run->rec) < 0)
		e->failed = true;
	if (run->n == OP_BATCH_MAX)
		op_batch_flush(d, false);
	return OP_BATCH_JOINED;
}

void request_batch_close(struct daemon *d)
{
	op_batch_flush(d, false);
}

void request_conn_closed(struct daemon *d, const struct conn *c)
{
	struct op_batch *b = d->batch;

	if (!b)
		return;
	for (struct batch_run *run = b->open; run; run = NULL)
		for (unsigned i = 0; i < run->n; i++)
			if (run->e[i].da.req.conn == c)
				run->e[i].da.gone = true;
	for (struct batch_run *run = b->running; run; run = run->next)
		for (unsigned i = 0; i < run->n; i++)
			if (run->e[i].da.req.conn == c)
				run->e[i].da.gone = true;
}

/* The loop's before hook: an event that is not a connection's (a
 * completion committing results, a timer, a signal) or the idle work
 * (src NULL: training) comes after the open batch was closed: nothing but
 * requests joining it runs while it is open. */
static void batch_before(void *data, const struct loop_source *src)
{
	struct daemon *d = data;

	if (d->batch && d->batch->open && (!src || !request_conn_source(src)))
		op_batch_flush(d, false);
}

/* After each batch of events: close the batch the turn collected. Its
 * connections go on at once, and what they batch then is closed too
 * (those go on on their next turn), so none is left open while the loop
 * sleeps. */
static void batch_after(void *data)
{
	struct daemon *d = data;

	op_batch_flush(d, true);
	op_batch_flush(d, false);
}

int op_batch_init(struct daemon *d)
{
	int r = loop_add_before(d->loop, batch_before, d);

	if (r < 0)
		return r;
	r = loop_add_after(d->loop, batch_after, d);
	if (r < 0)
		loop_remove_before(d->loop, batch_before, d);
	return r;
}

void op_batch_free(struct daemon *d)
{
	struct op_batch *b = d->batch;

	if (d->loop) {
		loop_remove_before(d->loop, batch_before, d);
		loop_remove_after(d->loop, batch_after, d);
	}
	if (!b)
		return;
	if (b->open) {
		/* Not expected (the loop closes it after each batch of events):
		 * submitted and waited for, nobody answered. */
		for (unsigned i = 0; i < b->open->n; i++)
			b->open->e[i].da.gone = true;
		op_batch_flush(d, false);
	}
	if (b->running)
		log_error("op.run batches still running at shutdown");
	free(b->spare);
	free(b);
	d->batch = NULL;
}
