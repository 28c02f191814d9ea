#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "daemon.h"
#include "methods.h"
#include "methods/methods_core.h"
#include "methods/methods_graph.h"
#include "methods/methods_job.h"
#include "methods/methods_kernel.h"
#include "methods/methods_model.h"
#include "methods/methods_store.h"
#include "methods/methods_tensor.h"
#include "methods/methods_train.h"
#include "methods/methods_train_run.h"
#include "methods/request.h"
#include "persist/checkpoint.h"
#include "rpc.h"
#include "status.h"

/* What the dispatcher must know of a method, as flags of its row (as
 * Redis's command table and PipeWire's method tables carry them), never by
 * comparing handlers. */
enum method_flags {
	METHOD_TAKES_FDS = 1 << 0, /* passed memory may come with it (docs/protocol.md) */
	METHOD_BATCHES = 1 << 1,   /* may join the op.run batch: closes it itself
				      (request_settle) when it does not */
	METHOD_DEVICE = 1 << 2,    /* its answer waits for the GPU: jobs keep one step in
				      flight for a while after it (d->request_ns) */
};

static const struct {
	const char *name;
	size_t len;
	method_fn fn;
	unsigned flags;
} method_table[] = {
#define M(name, fn) { name, sizeof(name) - 1, fn, 0 }
#define MF(name, fn, flags) { name, sizeof(name) - 1, fn, flags }
	M(TDP_METHOD_PING, method_ping),
	M(TDP_METHOD_INFO, method_info),
	MF(TDP_METHOD_TENSOR_PUT, method_tensor_put, METHOD_TAKES_FDS | METHOD_DEVICE),
	MF(TDP_METHOD_TENSOR_GET, method_tensor_get, METHOD_TAKES_FDS | METHOD_DEVICE),
	M(TDP_METHOD_TENSOR_STAT, method_tensor_stat),
	M(TDP_METHOD_TENSOR_LIST, method_tensor_list),
	M(TDP_METHOD_TENSOR_DELETE, method_tensor_delete),
	M(TDP_METHOD_TENSOR_CHMOD, method_tensor_chmod),
	MF(TDP_METHOD_TENSOR_COPY, method_tensor_copy, METHOD_DEVICE),
	M(TDP_METHOD_STORE_SYNC, method_store_sync),
	MF(TDP_METHOD_OP_RUN, method_op_run, METHOD_BATCHES | METHOD_DEVICE),
	MF(TDP_METHOD_GRAPH_RUN, method_graph_run, METHOD_DEVICE),
	MF(TDP_METHOD_TRAIN_STEP, method_train_step, METHOD_DEVICE),
	M(TDP_METHOD_TRAIN_RUN, method_train_run),
	M(TDP_METHOD_MODEL_DEFINE, method_model_define),
	M(TDP_METHOD_MODEL_LIST, method_model_list),
	M(TDP_METHOD_MODEL_STAT, method_model_stat),
	M(TDP_METHOD_MODEL_DELETE, method_model_delete),
	MF(TDP_METHOD_MODEL_EVALUATE, method_model_evaluate, METHOD_DEVICE),
	MF(TDP_METHOD_MODEL_PREDICT, method_model_predict, METHOD_DEVICE),
	M(TDP_METHOD_KERNEL_CREATE, method_kernel_create),
	MF(TDP_METHOD_KERNEL_RUN, method_kernel_run, METHOD_DEVICE),
	M(TDP_METHOD_KERNEL_LIST, method_kernel_list),
	M(TDP_METHOD_KERNEL_DELETE, method_kernel_delete),
	M(TDP_METHOD_JOB_LIST, method_job_list),
	M(TDP_METHOD_JOB_STAT, method_job_stat),
	M(TDP_METHOD_JOB_CANCEL, method_job_cancel),
	M(TDP_METHOD_JOB_WATCH, method_job_watch),
	M(TDP_METHOD_JOB_DRAIN, method_job_drain),
};
#undef M
#undef MF

#define METHOD_COUNT (sizeof(method_table) / sizeof(method_table[0]))
_Static_assert(METHOD_COUNT < METRICS_MAX_METHODS, "metrics.h: raise METRICS_MAX_METHODS");

unsigned request_method_count(void)
{
	return (unsigned)METHOD_COUNT;
}

const char *request_method_name(unsigned slot)
{
	return slot < METHOD_COUNT ? method_table[slot].name : "other";
}

int request_dispatch(struct request *req, const char *method, size_t method_len)
{
	char name[TDP_MAX_METHOD_LEN + 1];
	struct usage_user *who;
	method_fn fn = NULL;
	unsigned flags = 0;
	int64_t t0 = daemon_now_ns(CLOCK_MONOTONIC);
	int r = REQUEST_FAILED;

	req->mark = tdp_buf_len(req->out);
	td_error_clear(&req->call.err);
	req->slot = (unsigned)METHOD_COUNT;
	for (size_t i = 0; i < METHOD_COUNT; i++) {
		if (method_table[i].len == method_len && memcmp(method_table[i].name, method, method_len) == 0) {
			fn = method_table[i].fn;
			flags = method_table[i].flags;
			req->slot = (unsigned)i;
			break;
		}
	}
	/* The name errors and logs show: the table's, else the client's with
	 * what is not printable ASCII replaced. */
	if (fn) {
		req->method = method_table[req->slot].name;
	} else {
		snprintf(name, sizeof(name), "%.*s", (int)method_len, method);
		for (char *p = name; *p; p++)
			if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
				*p = '?';
		req->method = name;
	}
	/* Clients that pack strings as bin are served as if they sent str
	 * (docs/protocol.md). The tree is this request's own unpacked copy. */
	if (req->params)
		tdp_params_accept_bin((msgpack_object *)req->params, 0);
	/* A method that does not batch closes the op.run batch first, and
	 * waits while the batch holding its connection's earlier requests
	 * runs; one that batches decides itself, unless fds came with it
	 * (it is then refused below, after the batch's answers). */
	if ((!(flags & METHOD_BATCHES) || req->nfds) && request_settle(req))
		return REQUEST_HOLD;
	if (flags & METHOD_DEVICE)
		req->call.d->request_ns = t0;
	if (!fn)
		request_fail(req, TDP_UNIMPLEMENTED, "no such method");
	else if (req->nfds && !(flags & METHOD_TAKES_FDS))
		/* Passed memory is for the methods that say so (docs/protocol.md). */
		request_fail(req, TDP_INVALID_ARGUMENT, "%u file descriptor%s came with a request "
			     "that takes none", req->nfds, req->nfds == 1 ? "" : "s");
	else
		r = fn(req);
	/* A batching request that failed behind batched requests of its
	 * connection may have read a name one of those stores: once they are
	 * answered (or, held, when they were), it is served again. */
	if (r < 0 && (flags & METHOD_BATCHES) && req->conn && request_batch_pending(req)) {
		req->out->end = req->out->start + req->mark;
		if (request_settle(req))
			return REQUEST_HOLD;
		td_error_clear(&req->call.err);
		r = fn(req);
	}
	if (r == REQUEST_HOLD)
		return REQUEST_HOLD;
	req->call.d->requests++;
	if ((who = usage_of(&req->call.d->usage, (uint32_t)req->call.cred.uid)))
		who->requests++;
	metrics_request(&req->call.d->metrics, req->slot, !(r == REQUEST_ANSWERED || r == REQUEST_DEFERRED),
			(uint64_t)(daemon_now_ns(CLOCK_MONOTONIC) - t0));
	if (r == REQUEST_ANSWERED || r == REQUEST_DEFERRED)
		return REQUEST_ANSWERED;
	if (fn && !td_failed(&req->call.err))
		request_fail(req, TDP_INTERNAL, "failed without a reason");
	req->call.d->requests_failed++;
	/* Drop whatever the handler wrote before failing; answer the error. */
	req->out->end = req->out->start + req->mark;
	log_debug("msgid %u: %s: %s", req->msgid, req->method, req->call.err.message);
	if (request_pack_error(req, req->pk) < 0) {
		req->out->end = req->out->start + req->mark;
		return -ENOMEM;
	}
	return REQUEST_ANSWERED;
}
