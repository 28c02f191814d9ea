#include "methods/methods_graph.h"

#include <stdbool.h>

#include "daemon.h"
#include "dtype.h"
#include "engine/graph_core.h"
#include "engine/graph_fuse.h"
#include "engine/graph_parse.h"
#include "methods/methods_tensor.h"
#include "pack.h"
#include "rpc.h"
#include "methods/params.h"
#include "status.h"

int graph_pack_result(struct request *req, struct graph *gr, unsigned i, unsigned extra)
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
	for (unsigned i = 0; i < gr->n; i++) {
		struct tensor *t;

		if (!gr->nodes[i].has_out)
			continue;
		t = graph_commit(gr, i);
		if (!t || tensor_pack_name(req, t) || tensor_write_meta(req, t))
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
	struct graph gr = { .call = &req->call };
	struct node *nd;
	unsigned extra;
	int r = -1;

	if (PARAMS_PARSE(req, p) < 0)
		return -1;
	extra = profile;
	if (graph_parse_op(&gr, op, inputs, attrs, out, device) < 0)
		goto out;
	nd = &gr.nodes[0];
	if (graph_check_outputs(&gr) < 0 || graph_execute(&gr) < 0)
		goto out;
	if (nd->has_out) {
		struct tensor *t = graph_commit(&gr, 0);

		if (!t) {
			request_fail(req, TDP_INTERNAL, "out of memory");
			goto out;
		}
		r = tensor_write_meta_result_map(req, t, extra);
	} else {
		r = tdp_write_result_head(req->pk, req->msgid) < 0 ? -1 : graph_pack_result(req, &gr, 0, extra);
	}
	if (r == 0 && extra && pack_gpu_ns(req, &gr) < 0)
		r = -1;
out:
	graph_free(&gr);
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
	struct graph gr = { .call = &req->call };
	int r = -1;

	if (PARAMS_PARSE(req, p) < 0)
		return -1;
	gr.fuse = has_fuse ? fuse : graph_fuse_default(req->call.d->gpus[0]);
	if (graph_parse(&gr, nodes, outputs) < 0)
		goto out;
	if (graph_check_outputs(&gr) < 0 || graph_execute(&gr) < 0)
		goto out;
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 2 + 2 * profile)) {
		request_fail(req, TDP_INTERNAL, "out of memory");
		goto out;
	}
	if (graph_pack_outputs_stored(req, &gr) < 0)
		goto out;
	r = profile ? pack_gpu_ns(req, &gr) : 0;
	if (r == 0 && profile &&
	    (tdp_pack_cstr(req->pk, "dispatches") || msgpack_pack_uint64(req->pk, gr.dispatches)))
		r = request_fail(req, TDP_INTERNAL, "out of memory");
out:
	graph_free(&gr);
	return r;
}
