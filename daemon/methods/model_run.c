/* The model methods that run a model forward: model.evaluate (loss and
 * metrics over a data set, batch after batch) and model.predict (outputs for
 * inputs), both answered at completion (async_request.h). Defining and
 * describing models is methods_model.c. */
#include "methods/methods_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "dtype.h"
#include "engine/graph_core.h"
#include "engine/graph_parse.h"
#include "methods/async_request.h"
#include "methods/methods_graph.h"
#include "methods/methods_tensor.h"
#include "methods/params.h"
#include "name.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/lookup.h"
#include "store/model.h"
#include "store/names.h"
#include "store/store.h"
#include "train/step.h"

#define MAX_METRICS 64

/* Whether key `key` names one of the model's parameters, as the client
 * resolves them. */
static bool is_param_key(struct request *req, const struct model *m, const char *key)
{
	char k2[TDP_MAX_NAME_LEN + 1];

	for (unsigned k = 0; k < m->nparams; k++)
		if (names_qualify(req->call.cred.uid, m->params[k], strlen(m->params[k]), k2, NULL) >= 0 &&
		    !strcmp(k2, key))
			return true;
	return false;
}

/* A forward pass of a model: the nodes `want` depends on, fed by `fd`. */
struct forward {
	struct graph gr;
	msgpack_object *kept;
	msgpack_object nodes;
};

static int forward_build(struct request *req, const struct model *m, const struct feeds *fd,
			 const char *const *want, unsigned nwant, const char *what,
			 const msgpack_object *outs, bool train, struct forward *fw)
{
	uint32_t kept;
	unsigned first;

	/* The model's precision, as torch.autocast around evaluation. */
	fw->gr = (struct graph){ .call = &req->call, .autocast = m->precision };
	fw->kept = NULL;
	if (forward_prune(&req->call, m->nodes, want, nwant, what, &fw->kept, &kept) < 0)
		return -1;
	fw->nodes = (msgpack_object){ .type = MSGPACK_OBJECT_ARRAY,
				      .via.array = { .size = kept, .ptr = fw->kept } };
	if (feeds_emit(&fw->gr, fd) < 0)
		return -1;
	first = fw->gr.n;
	if (graph_parse(&fw->gr, &fw->nodes, outs) < 0)
		return -1;
	/* The nodes' own seeds; dropout off and state nodes on their running
	 * statistics unless in train mode. */
	if (!train)
		train_seed_graph(&fw->gr, first, 0, 0, false);
	train_model_mode(&fw->gr, m, train);
	return 0;
}

static void forward_free(struct forward *fw)
{
	graph_free(&fw->gr);
	/* Freed twice is fine: model.evaluate frees each batch's graph. */
	fw->gr = (struct graph){ .call = fw->gr.call };
	free(fw->kept);
	fw->kept = NULL;
}

/* Read `ids` (an array of node-id strs, up to `max`) into `dst`. */
static int id_list(struct request *req, const msgpack_object *arr, unsigned max, const char *what,
		   const char **dst, unsigned *ret_n, char (*store)[TDP_MAX_NAME_LEN + 1])
{
	if (arr->via.array.size > max)
		return request_fail(req, TDP_INVALID_ARGUMENT, "%s: at most %u node ids", what, max);
	for (unsigned k = 0; k < arr->via.array.size; k++) {
		if (tdp_obj_strcpy(&arr->via.array.ptr[k], store[k], sizeof(store[k])) < 0 || !store[k][0])
			return request_fail(req, TDP_INVALID_ARGUMENT, "%s[%u] must be a node id", what, k);
		dst[k] = store[k];
	}
	*ret_n = arr->via.array.size;
	return 0;
}

/* `mode`: "eval" (default) or "train" (docs/protocol.md, model.evaluate). */
static int parse_mode(struct request *req, const msgpack_object *mode, bool *ret_train)
{
	if (mode && !tdp_obj_str_eq(mode, "eval") && !tdp_obj_str_eq(mode, "train"))
		return request_fail(req, TDP_INVALID_ARGUMENT, "mode must be \"eval\" or \"train\"");
	*ret_train = mode && tdp_obj_str_eq(mode, "train");
	return 0;
}

/* A model.evaluate answered at completion (async_request.h): one graph per
 * batch, each built, run and read after the one before it, the sums
 * answered after the last. */
struct eval_job {
	struct async_req a;
	struct forward fw;
	struct daemon *d;
	char model[TDP_MAX_NAME_LEN + 1];
	uint64_t serial;                    /* the definition evaluated */
	struct feeds fd;
	bool batched, train;
	char ids[MAX_METRICS + 1][TDP_MAX_NAME_LEN + 1];
	const char *want[MAX_METRICS + 1];
	unsigned nmetrics;
	int idx[MAX_METRICS + 1];
	double sums[MAX_METRICS + 1];
	uint64_t rows, batch, r0, n, batches;
};

static void eval_release(struct async_req *a)
{
	struct eval_job *j = (struct eval_job *)a;

	forward_free(&j->fw);
	free(j);
}

/* Build the graph of the batch at j->r0 into j->fw. Returns 0 or request_fail. */
static int eval_build(struct request *req, struct eval_job *j)
{
	/* Looked up again for each batch: it may be replaced or deleted
	 * between two (the batches stay of one definition). */
	struct model *m = models_find_serial(j->d->models, j->model, j->serial);

	if (!m)
		return request_fail(req, TDP_FAILED_PRECONDITION,
				    "model '%s' was deleted or redefined during the evaluation", j->model);
	j->n = j->rows - j->r0 < j->batch ? j->rows - j->r0 : j->batch;
	j->fd.rows = j->batched;
	j->fd.row0 = j->r0;
	j->fd.row1 = j->r0 + j->n;
	forward_free(&j->fw);
	if (forward_build(req, m, &j->fd, j->want, j->nmetrics + 1, "metrics", NULL, j->train, &j->fw) < 0)
		return -1;
	for (unsigned k = 0; k <= j->nmetrics; k++) {
		j->idx[k] = forward_find(&j->fw.gr, j->want[k]);
		if (j->idx[k] < 0 || j->fw.gr.nodes[j->idx[k]].ctx.out.count != 1 ||
		    !op_dtype_is_float(j->fw.gr.nodes[j->idx[k]].ctx.out.dtype))
			return request_fail(req, TDP_INVALID_ARGUMENT, "%s'%s' is no floating scalar node",
					    k ? "metrics: " : "loss: ", j->want[k]);
	}
	return 0;
}

/* A batch ran: add its metrics, then build the next batch (ASYNC_REQ_AGAIN)
 * or answer with the means. */
static int eval_finish(struct async_req *a, struct request *req)
{
	struct eval_job *j = (struct eval_job *)a;
	uint64_t rows = j->rows;
	double v;

	if (graph_wait(&j->fw.gr) < 0)
		return -1;
	for (unsigned k = 0; k <= j->nmetrics; k++) {
		if (forward_read_scalar(&req->call, &j->fw.gr, (unsigned)j->idx[k], &v) < 0)
			return -1;
		j->sums[k] += v * (double)(j->n ? j->n : 1);
	}
	forward_free(&j->fw);
	j->batches++;
	j->r0 += j->batch;
	if (rows && j->r0 < rows) {
		if (eval_build(req, j) < 0)
			return -1;
		a->again = &j->fw.gr;
		return ASYNC_REQ_AGAIN;
	}
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 4) ||
	    tdp_pack_cstr(req->pk, "loss") || msgpack_pack_double(req->pk, j->sums[0] / (double)(rows ? rows : 1)) ||
	    tdp_pack_cstr(req->pk, "metrics") || msgpack_pack_map(req->pk, j->nmetrics))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	for (unsigned k = 1; k <= j->nmetrics; k++)
		if (tdp_pack_cstr(req->pk, j->want[k]) ||
		    msgpack_pack_double(req->pk, j->sums[k] / (double)(rows ? rows : 1)))
			return request_fail(req, TDP_INTERNAL, "out of memory");
	if (tdp_pack_cstr(req->pk, "samples") || msgpack_pack_uint64(req->pk, rows) ||
	    tdp_pack_cstr(req->pk, "batches") || msgpack_pack_uint64(req->pk, j->batches))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

/* Check the evaluation's data (rows to split) into j->rows and j->batch. */
static int eval_rows(struct request *req, struct eval_job *j, uint64_t batch_size)
{
	char shown[NAMES_SHOWN_MAX], shown2[NAMES_SHOWN_MAX];
	bool batched = j->batched;
	uint64_t rows = 0;

	for (unsigned k = 0; k < j->fd.n; k++) {
		struct tensor *t = feeds_source(&req->call, &j->fd, k);

		if (!t)
			return -1;
		if (k == 0)
			rows = t->rank ? t->shape[0] : 1;
		else if (batched && (t->rank == 0 || t->shape[0] != rows))
			return request_fail(req, TDP_SHAPE_MISMATCH,
					    "data: '%s' must have %llu rows like '%s' to be split into batches",
					    lookup_show(&req->call, t->name, shown), (unsigned long long)rows,
					    lookup_show(&req->call, j->fd.f[0].src, shown2));
		if (batched && t->rank == 0)
			return request_fail(req, TDP_SHAPE_MISMATCH, "data: '%s' is a scalar, not rows",
					    lookup_show(&req->call, t->name, shown));
	}
	j->batch = batched ? batch_size : rows;
	if (batched && j->batch == 0)
		return request_fail(req, TDP_INVALID_ARGUMENT, "batch_size must be 1 or more");
	if (j->batch == 0 || j->batch > rows)
		j->batch = rows ? rows : 1;
	j->rows = rows;
	return 0;
}

int method_model_evaluate(struct request *req)
{
	param_name model;
	const msgpack_object *data, *metrics, *mode;
	uint64_t batch_size = 0;
	bool batched, train = false;
	const struct param p[] = {
		PARAM_REQ("model", PARAM_TENSOR_KEY, model),
		PARAM_REQ("data", PARAM_MAP, data),
		PARAM_OPT("metrics", PARAM_ARRAY, metrics),
		PARAM_OPT_GIVEN("batch_size", PARAM_UINT, batch_size, batched),
		PARAM_OPT_OBJ("mode", PARAM_STR, mode),
	};
	struct eval_job *j;
	struct model *m;

	if (PARAMS_PARSE(req, p) < 0 || parse_mode(req, mode, &train) < 0 || !(m = model_lookup(req, model)))
		return -1;
	j = calloc(1, sizeof(*j));
	if (!j)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	j->d = req->call.d;
	j->fw.gr.call = &req->call;
	j->a.finish = eval_finish;
	j->a.release = eval_release;
	j->batched = batched;
	j->train = train;
	strcpy(j->model, m->name);
	j->serial = m->serial;
	if (feeds_parse(&req->call, data, &j->fd, "data") < 0 || model_check_feeds(req, m, &j->fd, false, "data") < 0 ||
	    (metrics && id_list(req, metrics, MAX_METRICS, "metrics", j->want + 1, &j->nmetrics, j->ids + 1) < 0) ||
	    eval_rows(req, j, batch_size) < 0)
		goto fail;
	strcpy(j->ids[0], m->loss);
	j->want[0] = j->ids[0];
	if (eval_build(req, j) < 0)
		goto fail;
	return async_req_run_graph(req, &j->a, &j->fw.gr);
fail:
	eval_release(&j->a);
	return -1;
}

/* A model.predict answered at completion (async_request.h). */
struct predict_job {
	struct async_req a;
	struct forward fw;
};

static void predict_release(struct async_req *a)
{
	struct predict_job *j = (struct predict_job *)a;

	forward_free(&j->fw);
	free(j);
}

/* It ran: answer with the inline outputs, and only now store the others. */
static int predict_finish(struct async_req *a, struct request *req)
{
	struct predict_job *j = (struct predict_job *)a;

	if (graph_wait(&j->fw.gr) < 0)
		return -1;
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 2))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return graph_pack_outputs_stored(req, &j->fw.gr);
}

int method_model_predict(struct request *req)
{
	param_name model;
	const msgpack_object *inputs, *outputs, *out, *mode;
	bool train = false;
	const struct param p[] = {
		PARAM_REQ("model", PARAM_TENSOR_KEY, model),
		PARAM_REQ("inputs", PARAM_MAP, inputs),
		PARAM_OPT("outputs", PARAM_ARRAY, outputs),
		PARAM_OPT("out", PARAM_MAP, out),
		PARAM_OPT_OBJ("mode", PARAM_STR, mode),
	};
	char ids[2 * MODEL_MAX_OUTPUTS][TDP_MAX_NAME_LEN + 1];
	char names[MODEL_MAX_OUTPUTS][TDP_MAX_NAME_LEN + 1];
	const char *want[2 * MODEL_MAX_OUTPUTS];
	msgpack_object outs_store[MODEL_MAX_OUTPUTS], outs = { .type = MSGPACK_OBJECT_ARRAY };
	unsigned ninline = 0, nout = 0;
	struct predict_job *j;
	struct forward *fw;
	struct model *m;
	struct feeds fd;
	int r = -1;

	if (PARAMS_PARSE(req, p) < 0 || parse_mode(req, mode, &train) < 0 || !(m = model_lookup(req, model)) ||
	    feeds_parse(&req->call, inputs, &fd, "inputs") < 0 ||
	    model_check_feeds(req, m, &fd, false, "inputs") < 0)
		return -1;
	if (outputs) {
		if (id_list(req, outputs, MODEL_MAX_OUTPUTS, "outputs", want, &ninline, ids) < 0)
			return -1;
		outs = *outputs;
	} else if (!out) {
		if (m->noutputs == 0)
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "model '%s' has no default outputs: list node ids in 'outputs'", m->name);
		ninline = m->noutputs;
		for (unsigned k = 0; k < ninline; k++) {
			want[k] = m->outputs[k];
			outs_store[k] = (msgpack_object){ .type = MSGPACK_OBJECT_STR,
							  .via.str = { .size = (uint32_t)strlen(m->outputs[k]),
								       .ptr = m->outputs[k] } };
		}
		outs.via.array.size = ninline;
		outs.via.array.ptr = outs_store;
	}
	if (out) {
		if (out->via.map.size > MODEL_MAX_OUTPUTS)
			return request_fail(req, TDP_INVALID_ARGUMENT, "out: at most %d entries", MODEL_MAX_OUTPUTS);
		nout = out->via.map.size;
		for (unsigned k = 0; k < nout; k++) {
			char *id = ids[MODEL_MAX_OUTPUTS + k];

			if (tdp_obj_strcpy(&out->via.map.ptr[k].key, id, TDP_MAX_NAME_LEN + 1) < 0 || !id[0])
				return request_fail(req, TDP_INVALID_ARGUMENT, "out: keys must be node ids");
			if (out->via.map.ptr[k].val.type != MSGPACK_OBJECT_STR ||
			    names_qualify(req->call.cred.uid, out->via.map.ptr[k].val.via.str.ptr,
					  out->via.map.ptr[k].val.via.str.size, names[k], NULL) < 0)
				return request_fail(req, TDP_INVALID_ARGUMENT,
						    "out['%s'] must be a tensor name (1-%d bytes of A-Z a-z 0-9 . _ : / -)",
						    id, TDP_MAX_NAME_LEN);
			if (is_param_key(req, m, names[k]))
				return request_fail(req, TDP_INVALID_ARGUMENT,
						    "out['%s']: '%.*s' is a parameter of the model", id,
						    (int)out->via.map.ptr[k].val.via.str.size,
						    out->via.map.ptr[k].val.via.str.ptr);
			want[ninline + k] = id;
		}
	}
	if (ninline + nout == 0)
		return request_fail(req, TDP_INVALID_ARGUMENT, "nothing to predict: outputs is empty");
	j = calloc(1, sizeof(*j));
	if (!j)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	j->a.finish = predict_finish;
	j->a.release = predict_release;
	fw = &j->fw;
	if (forward_build(req, m, &fd, want, ninline + nout, "outputs", &outs, train, fw) < 0)
		goto out;
	for (unsigned k = 0; k < nout; k++) {
		int i = forward_find(&fw->gr, want[ninline + k]);

		if (i < 0 || fw->gr.nodes[i].has_out) {
			request_fail(req, TDP_INVALID_ARGUMENT, "out: node '%s' is listed twice", want[ninline + k]);
			goto out;
		}
		fw->gr.nodes[i].has_out = true;
		strcpy(fw->gr.nodes[i].out_name, names[k]);
	}
	if (graph_check_outputs(&fw->gr) < 0)
		goto out;
	return async_req_run_graph(req, &j->a, &fw->gr);
out:
	predict_release(&j->a);
	return r;
}
