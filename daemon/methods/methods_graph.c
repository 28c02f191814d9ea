#include "methods/methods_graph.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "daemon.h"
#include "dtype.h"
#include "engine/graph_core.h"
#include "engine/graph_epilogue.h"
#include "engine/graph_fuse.h"
#include "engine/graph_parse.h"
#include "methods/async_request.h"
#include "methods/methods_tensor.h"
#include "methods/op_batch.h"
#include "methods/params.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"

int graph_pack_result(struct request *req, struct graph *gr, unsigned i, unsigned extra)
{
	return graph_pack_result_from(req, gr, i, extra, NULL);
}

int graph_pack_result_from(struct request *req, struct graph *gr, unsigned i, unsigned extra, const void *src)
{
	const struct op_tensor *t = &gr->nodes[i].ctx.out;
	msgpack_packer *pk = req->pk;
	int fail = msgpack_pack_map(pk, 4 + extra) ||
		   tdp_pack_cstr(pk, "dtype") || tdp_pack_cstr(pk, tdp_dtype_name(t->dtype)) ||
		   tdp_pack_cstr(pk, "shape") || msgpack_pack_array(pk, t->rank);
	void *dst;

	for (unsigned d = 0; !fail && d < t->rank; d++)
		fail = msgpack_pack_uint64(pk, t->shape[d]);
	if (fail || tdp_pack_cstr(pk, "bytes") || msgpack_pack_uint64(pk, t->bytes) ||
	    tdp_pack_cstr(pk, "data") || msgpack_pack_bin(pk, t->bytes))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	dst = tdp_buf_extend(req->out, t->bytes);
	if (!dst)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of host memory for the result");
	if (src) {
		memcpy(dst, src, t->bytes);
		return 0;
	}
	return graph_read_result(gr, i, dst);
}

int graph_pack_outputs_stored(struct request *req, struct graph *gr)
{
	uint32_t nstored = 0, ninline = 0;

	for (unsigned i = 0; i < gr->n; i++) {
		nstored += gr->nodes[i].has_out;
		ninline += gr->nodes[i].inline_out;
	}
	if (tdp_pack_cstr(req->pk, "outputs") || msgpack_pack_map(req->pk, ninline))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	for (unsigned i = 0; i < gr->n; i++) {
		if (!gr->nodes[i].inline_out)
			continue;
		if (tdp_pack_cstr(req->pk, gr->nodes[i].id) || graph_pack_result(req, gr, i, 0) < 0) {
			if (!td_failed(&req->call.err))
				request_fail(req, TDP_INTERNAL, "out of memory");
			return -1;
		}
	}
	if (tdp_pack_cstr(req->pk, "stored") || msgpack_pack_map(req->pk, nstored))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	/* Everything ran: only now do named results replace stored tensors. */
	if (graph_commit_all(gr) < 0)
		return -1;
	for (unsigned i = 0; i < gr->n; i++) {
		struct tensor *t = gr->nodes[i].committed;

		if (gr->nodes[i].has_out && (tensor_pack_name(req, t) || tensor_write_meta(req, t)))
			return request_fail(req, TDP_INTERNAL, "out of memory");
	}
	return 0;
}

/* The "gpu_ns" entry of a profiled result. */
static int pack_gpu_ns(struct request *req, const struct graph *gr)
{
	if (tdp_pack_cstr(req->pk, "gpu_ns") || msgpack_pack_uint64(req->pk, gr->gpu_ns))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

/* An op.run or graph.run answered when its submission completed
 * (async_request.h): the request is deferred meanwhile, so the
 * connection's later requests wait and other connections are served. */
struct graph_job {
	struct async_req a;
	struct graph gr;
	int (*answer)(struct request *req, struct graph *gr, const struct graph_job *j);
	bool profile;
	bool freed;                     /* gr was freed by graph_job_finish */
};

/* The graph ran (or failed): answer and commit. For a departed client only
 * its stored outputs are committed, as they would have been had the loop
 * waited for it. Frees the graph before the connection goes on. */
static int graph_job_finish(struct async_req *a, struct request *req)
{
	struct graph_job *j = (struct graph_job *)a;
	struct graph *gr = &j->gr;
	int r = 0;

	if (a->da.gone) {
		if (graph_wait(gr) == 0 && graph_commit_all(gr) < 0)
			log_info("uid %u: the results of a departed client's request are not stored: %s",
				 (unsigned)gr->call->cred.uid, gr->call->err.message);
	} else if (graph_wait(gr) < 0 || j->answer(req, gr, j) < 0) {
		r = -1;
	}
	graph_free(gr);
	j->freed = true;
	return r;
}

static void graph_job_release(struct async_req *a)
{
	struct graph_job *j = (struct graph_job *)a;

	if (!j->freed)
		graph_free(&j->gr);
	free(j);
}

static int op_run_answer(struct request *req, struct graph *gr, const struct graph_job *j)
{
	struct node *nd = &gr->nodes[0];
	unsigned extra = j->profile;
	int r;

	if (nd->has_out) {
		if (graph_commit_all(gr) < 0)
			return -1;
		r = tensor_write_meta_result_map(req, nd->committed, extra);
	} else {
		r = tdp_write_result_head(req->pk, req->msgid) < 0 ? -1 : graph_pack_result(req, gr, 0, extra);
	}
	if (r == 0 && extra && pack_gpu_ns(req, gr) < 0)
		r = -1;
	return r;
}

static struct graph_job *graph_job_new(struct request *req)
{
	struct graph_job *j = calloc(1, sizeof(*j));

	if (!j) {
		request_fail(req, TDP_INTERNAL, "out of memory");
		return NULL;
	}
	j->gr.call = &req->call;
	j->a.finish = graph_job_finish;
	j->a.release = graph_job_release;
	return j;
}

int method_op_run(struct request *req)
{
	const msgpack_object *op, *inputs, *attrs, *out, *device;
	bool profile = false;
	const struct param p[] = {
		PARAM_REQ_OBJ("op", PARAM_STR, op),
		PARAM_REQ("inputs", PARAM_ARRAY, inputs),
		PARAM_OPT("attrs", PARAM_MAP, attrs),
		PARAM_OPT_OBJ("out", PARAM_STR, out),
		PARAM_OPT("profile", PARAM_BOOL, profile),
		PARAM_OPT_OBJ("device", PARAM_UINT, device),
	};
	/* Parsed here; a job is allocated only for one that runs alone (a
	 * batched one moves into its batch). */
	struct graph gr = { .call = &req->call };
	struct graph_job *j;

	if (PARAMS_PARSE(req, p) < 0)
		return -1;
	for (;;) {
		if (graph_parse_op(&gr, op, inputs, attrs, out, device) < 0 || graph_check_outputs(&gr) < 0) {
			graph_free(&gr);
			return -1;
		}
		/* Small ones share a submission (op_batch.h). */
		switch (op_batch_offer(req, &gr, profile)) {
		case OP_BATCH_JOINED:
			return REQUEST_DEFERRED;
		case OP_BATCH_HOLD:
			graph_free(&gr);
			return REQUEST_HOLD;
		case OP_BATCH_RETRY:
			graph_free(&gr);
			gr = (struct graph){ .call = &req->call };
			continue;
		case OP_BATCH_NO:
			break;
		}
		if (!(j = graph_job_new(req))) {
			graph_free(&gr);
			return -1;
		}
		j->gr = gr;
		j->profile = profile;
		j->answer = op_run_answer;
		return async_req_run_graph(req, &j->a, &j->gr); /* frees j */
	}
}

static int graph_run_answer(struct request *req, struct graph *gr, const struct graph_job *j)
{
	bool profile = j->profile;
	int r;

	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 2 + 2 * profile))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	/* Only now do named results replace stored tensors (until then, other
	 * connections see the tensors they replace). */
	if (graph_pack_outputs_stored(req, gr) < 0)
		return -1;
	r = profile ? pack_gpu_ns(req, gr) : 0;
	if (r == 0 && profile &&
	    (tdp_pack_cstr(req->pk, "dispatches") || msgpack_pack_uint64(req->pk, gr->dispatches)))
		r = request_fail(req, TDP_INTERNAL, "out of memory");
	return r;
}

int method_graph_run(struct request *req)
{
	const msgpack_object *nodes, *outputs;
	bool profile = false, fuse = false, has_fuse;
	const struct param p[] = {
		PARAM_REQ("nodes", PARAM_ARRAY, nodes),
		PARAM_OPT("outputs", PARAM_ARRAY, outputs),
		PARAM_OPT("profile", PARAM_BOOL, profile),
		PARAM_OPT_GIVEN("fuse", PARAM_BOOL, fuse, has_fuse),
	};
	struct graph_job *j;

	if (PARAMS_PARSE(req, p) < 0 || !(j = graph_job_new(req)))
		return -1;
	j->profile = profile;
	j->answer = graph_run_answer;
	j->gr.fuse = has_fuse ? fuse : graph_fuse_default(req->call.d->gpus[0]);
	if (graph_parse(&j->gr, nodes, outputs) < 0 || graph_check_outputs(&j->gr) < 0) {
		graph_free(&j->gr);
		free(j);
		return -1;
	}
	/* Matmul epilogues: the same bits in fewer dispatches, unless `fuse: false`. */
	if (!has_fuse || fuse)
		graph_fuse_epilogues(&j->gr, 0);
	return async_req_run_graph(req, &j->a, &j->gr); /* frees j */
}
