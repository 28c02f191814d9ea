/* train.run: a training job that runs one step per event-loop turn, its
 * progress and eval notifications, its deferred reply, cancel and abort. */
#include "train/step.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd/autograd.h"
#include "base/clock.h"
#include "base/loop.h"
#include "daemon.h"
#include "devices.h"
#include "dtype.h"
#include "engine/forward.h"
#include "engine/graph.h"
#include "engine/graph_core.h"
#include "engine/graph_fuse.h"
#include "gpu/transfer.h"
#include "pack.h"
#include "rpc.h"
#include "serve/conn.h"
#include "status.h"
#include "store/lookup.h"
#include "store/model.h"
#include "store/names.h"
#include "store/store.h"
#include "train/train_parallel.h"

#define MAX_METRICS 8

struct train_job {
	struct conn_deferred def;  /* conn->deferred while the run goes on */
	struct daemon *d;
	struct conn *c;            /* NULL once the client went away */
	struct train_job *next;
	struct request req;        /* msgid, peer, where answers go */
	msgpack_packer pk;
	struct tdp_buf raw;        /* a copy of the request's params */
	msgpack_unpacked params;   /* decoded from raw */
	const msgpack_object *nodes;
	struct train_spec spec;
	struct feeds train, eval;
	bool has_eval;
	struct tensor index;       /* the minibatch's row numbers, not in the store */
	uint32_t device;           /* the data's device, where index lives */
	uint32_t devs[GPU_MAX_DEVICES]; /* data parallel: devs[0] = device, then the replicas' */
	unsigned ndev;             /* 1: one device */
	uint64_t shard;            /* rows per device per step */
	struct dp *dp;             /* the replicas (train_parallel.h), NULL on one device */
	uint32_t *perm;
	uint64_t nsamples, batch, per_epoch, total, done, epochs;
	int64_t start_step;
	uint64_t seed, progress_every, eval_every;
	bool shuffle, has_stop;
	double stop_loss, last_loss;
	char metrics[MAX_METRICS][TDP_MAX_NAME_LEN + 1];
	unsigned nmetrics;
	bool have_eval_result;
	double eval_loss, eval_metrics[MAX_METRICS];
	int64_t start_ns;
	char model[TDP_MAX_NAME_LEN + 1]; /* the model trained, "" for none */
	uint64_t model_serial;     /* its definition: a replaced model is left alone */
};

static struct train_job *jobs;

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The order of samples in `epoch`: a Fisher-Yates shuffle seeded by the run's
 * seed and the epoch, so runs are reproducible. */
static void shuffle_epoch(struct train_job *job, uint64_t epoch)
{
	uint64_t s = job->seed * 0x100000001b3ull + epoch;

	for (uint64_t i = 0; i < job->nsamples; i++)
		job->perm[i] = (uint32_t)i;
	if (!job->shuffle)
		return;
	for (uint64_t i = job->nsamples - 1; i > 0; i--) {
		uint64_t j = splitmix64(&s) % (i + 1);
		uint32_t t = job->perm[i];

		job->perm[i] = job->perm[j];
		job->perm[j] = t;
	}
}

static int notify_head(struct train_job *job, const char *method, uint32_t entries)
{
	return msgpack_pack_array(&job->pk, 3) || msgpack_pack_uint8(&job->pk, 2) ||
	       tdp_pack_cstr(&job->pk, method) || msgpack_pack_array(&job->pk, 1) ||
	       msgpack_pack_map(&job->pk, entries);
}

static int kv_num(msgpack_packer *pk, const char *k, double v)
{
	return tdp_pack_cstr(pk, k) || msgpack_pack_double(pk, v);
}

static int kv_int(msgpack_packer *pk, const char *k, uint64_t v)
{
	return tdp_pack_cstr(pk, k) || msgpack_pack_uint64(pk, v);
}

static double elapsed(const struct train_job *job)
{
	return (double)(daemon_now_ns(CLOCK_MONOTONIC) - job->start_ns) / 1e9;
}

static void notify_progress(struct train_job *job, double lr)
{
	double t = elapsed(job);

	notify_head(job, "train.progress", 9);
	kv_int(&job->pk, "step", (uint64_t)job->start_step + job->done - 1);
	kv_int(&job->pk, "run_step", job->done);
	kv_int(&job->pk, "steps", job->total);
	kv_int(&job->pk, "epoch", (job->done - 1) / job->per_epoch + 1);
	kv_int(&job->pk, "epochs", job->epochs);
	kv_num(&job->pk, "loss", job->last_loss);
	kv_num(&job->pk, "lr", lr);
	kv_num(&job->pk, "samples_per_s", t > 0 ? (double)(job->done * job->batch) / t : 0);
	kv_num(&job->pk, "elapsed", t);
}

static int write_eval(msgpack_packer *pk, struct train_job *job)
{
	if (tdp_pack_cstr(pk, "loss") || msgpack_pack_double(pk, job->eval_loss) ||
	    tdp_pack_cstr(pk, "metrics") || msgpack_pack_map(pk, job->nmetrics))
		return -1;
	for (unsigned m = 0; m < job->nmetrics; m++)
		if (kv_num(pk, job->metrics[m], job->eval_metrics[m]))
			return -1;
	return 0;
}

/* Forward pass over the whole evaluation set: loss and metrics. */
static int run_eval(struct train_job *job)
{
	struct graph gr = { .req = &job->req };
	unsigned loss;
	double lr;
	int r = train_run_step(&job->req, &job->spec, job->nodes, NULL, &job->eval,
			       job->start_step + (int64_t)job->done, false, &gr, &loss, &job->eval_loss, &lr);

	for (unsigned m = 0; r == 0 && m < job->nmetrics; m++) {
		unsigned i;

		for (i = 0; i < gr.n; i++)
			if (!strcmp(gr.nodes[i].id, job->metrics[m]))
				break;
		if (i == gr.n || gr.nodes[i].ctx.out.count != 1 || !op_dtype_is_float(gr.nodes[i].ctx.out.dtype))
			r = request_fail(&job->req, TDP_INVALID_ARGUMENT,
					 "eval.metrics: '%s' is no floating scalar node", job->metrics[m]);
		else
			r = forward_read_scalar(&job->req, &gr, i, &job->eval_metrics[m]);
	}
	graph_free(&gr);
	if (r < 0)
		return -1;
	job->have_eval_result = true;
	notify_head(job, "train.eval", 5);
	kv_int(&job->pk, "step", (uint64_t)job->start_step + job->done - 1);
	kv_int(&job->pk, "run_step", job->done);
	kv_int(&job->pk, "epoch", (job->done - 1) / job->per_epoch + 1);
	write_eval(&job->pk, job);
	return 0;
}

/* A data-parallel run's "devices" and "replica_max_diff" (-1: unreadable). */
static void write_parallel(struct train_job *job)
{
	struct tensor *params[MAX_PARAMS];
	double diff = -1;
	unsigned n = 0;

	for (unsigned k = 0; k < job->spec.np; k++)
		if (store_lookup(job->d->store, job->spec.names[k], strlen(job->spec.names[k]), &access_daemon,
				 0, &params[n], NULL) == 0)
			n++;
	if (n == job->spec.np)
		diff = dp_max_diff(job->dp, params, n);
	if (tdp_pack_cstr(&job->pk, "devices") || msgpack_pack_array(&job->pk, job->ndev))
		return;
	for (unsigned i = 0; i < job->ndev; i++)
		if (msgpack_pack_uint32(&job->pk, job->devs[i]))
			return;
	kv_num(&job->pk, "replica_max_diff", diff);
}

static void job_finish(struct train_job *job, const char *stopped)
{
	msgpack_packer *pk = &job->pk;
	double t = elapsed(job);

	if (tdp_write_result_head(pk, job->req.msgid) < 0 || msgpack_pack_map(pk, 7 + (job->dp ? 2 : 0)) ||
	    kv_int(pk, "steps", job->done) ||
	    kv_int(pk, "epochs", job->done / job->per_epoch) ||
	    kv_num(pk, "loss", job->last_loss) || kv_num(pk, "seconds", t) ||
	    kv_num(pk, "samples_per_s", t > 0 ? (double)(job->done * job->batch) / t : 0) ||
	    tdp_pack_cstr(pk, "stopped") || tdp_pack_cstr(pk, stopped) ||
	    tdp_pack_cstr(pk, "eval") ||
	    (job->have_eval_result ? (msgpack_pack_map(pk, 2) || write_eval(pk, job)) : msgpack_pack_nil(pk)))
		return;
	if (job->dp)
		write_parallel(job);
}

static void job_fail(struct train_job *job)
{
	job->d->requests_failed++;
	metrics_request_error(&job->req.d->metrics, job->req.slot);
	request_pack_error(&job->req, &job->pk);
}

/* One step on one device: upload the batch's rows, run, store. */
static int step_one(struct train_job *job, int64_t step, uint64_t in_epoch, double *ret_lr)
{
	struct graph gr = { .req = &job->req };
	unsigned loss;
	int r;

	r = gpu_upload(devices_of(job->d, &job->index), &job->index.alloc, job->perm + in_epoch * job->batch);
	if (r < 0)
		return request_fail(&job->req, r == -ENODEV ? TDP_DEVICE_LOST : TDP_INTERNAL,
				    "feeding the batch failed");
	r = train_run_step(&job->req, &job->spec, job->nodes, NULL, &job->train, step, true, &gr, &loss,
			   &job->last_loss, ret_lr);
	if (r == 0)
		r = train_commit_all(&job->req, &gr, NULL);
	graph_free(&gr);
	return r;
}

/* One data-parallel step (docs/devices.md): each device its shard of the
 * batch, forward and backward at once on all, the gradients averaged on
 * the host, then each device's update, at once on all. The shard's row
 * numbers, the gradients and the loss travel through each device's
 * exchange buffer inside the step's two submissions (no round trips of
 * their own). */
static int step_parallel(struct train_job *job, int64_t step, uint64_t in_epoch, double *ret_lr)
{
	struct graph gr[GPU_MAX_DEVICES];
	struct gpu_host_buffer *x[GPU_MAX_DEVICES];
	struct tensor *ix[GPU_MAX_DEVICES];
	struct graph_copy cin[GPU_MAX_DEVICES], cout[GPU_MAX_DEVICES];
	const struct dp_layout *at = &job->dp->at;
	unsigned n = job->ndev, loss[GPU_MAX_DEVICES];
	int flat[GPU_MAX_DEVICES] = { 0 }, r = 0;
	double sum = 0;

	memset(gr, 0, n * sizeof(gr[0]));
	for (unsigned i = 0; i < n; i++) {
		ix[i] = i == 0 ? &job->index : job->dp->r[i - 1].index;
		x[i] = dp_xfer(job->dp, i);
		gr[i].req = &job->req;
		gr[i].replica = i == 0 ? NULL : &job->dp->r[i - 1].view;
		memcpy((uint8_t *)x[i]->map + at->index, job->perm + in_epoch * job->batch + i * job->shard,
		       job->shard * 4);
	}
	for (unsigned i = 0; i < n; i++) {
		r = train_build_step(&job->req, &job->spec, job->nodes, NULL, &job->train, step, true, &gr[i],
				     &loss[i], ret_lr, &flat[i]);
		gr[i].fuse = false; /* a fused kernel could span the two halves */
		if (r < 0 || (i == 0 && (r = graph_check_outputs(&gr[0])) < 0))
			goto out;
		if (gr[i].nodes[flat[i]].ctx.out.count != job->dp->flat_count) {
			r = request_fail(&job->req, TDP_INTERNAL, "the gradients changed size during the run");
			goto out;
		}
	}
	/* Forward and backward on every device (rows in, gradients out)... */
	for (unsigned i = 0; r == 0 && i < n; i++) {
		cin[i] = (struct graph_copy){ .node = -1, .alloc = &ix[i]->alloc, .host = x[i]->buffer,
					      .offset = at->index };
		cout[i] = (struct graph_copy){ .node = flat[i], .host = x[i]->buffer, .offset = 0 };
		gr[i].copies_before = &cin[i];
		gr[i].copies_after = &cout[i];
		gr[i].ncopies_before = gr[i].ncopies_after = 1;
		r = graph_submit_part(&gr[i], 0, (unsigned)flat[i] + 1);
	}
	for (unsigned i = 0; i < n; i++)
		if (graph_wait(&gr[i]) < 0 && r == 0)
			r = -1;
	if (r < 0)
		goto out;
	/* ...the mean gradient... */
	dp_average(job->dp);
	/* ...and every device's update (mean in, loss out). */
	for (unsigned i = 0; r == 0 && i < n; i++) {
		cin[i] = (struct graph_copy){ .node = flat[i], .host = x[i]->buffer, .offset = 0 };
		cout[i] = (struct graph_copy){ .node = (int)loss[i], .host = x[i]->buffer, .offset = at->loss };
		gr[i].copies_before = &cin[i];
		gr[i].copies_after = &cout[i];
		gr[i].ncopies_before = gr[i].ncopies_after = 1;
		r = graph_submit_part(&gr[i], (unsigned)flat[i] + 1, gr[i].n);
	}
	for (unsigned i = 0; i < n; i++)
		if (graph_wait(&gr[i]) < 0 && r == 0)
			r = -1;
	if (r < 0)
		goto out;
	for (unsigned i = 0; i < n; i++)
		sum += forward_scalar_value(gr[i].nodes[loss[i]].ctx.out.dtype, (uint8_t *)x[i]->map + at->loss);
	job->last_loss = sum / n;
	if (!isfinite(job->last_loss)) {
		r = request_fail(&job->req, TDP_FAILED_PRECONDITION,
				 "the loss is %s at step %lld; parameters and state are unchanged",
				 isnan(job->last_loss) ? "NaN" : "infinite", (long long)step);
		goto out;
	}
	r = train_commit_all(&job->req, &gr[0], NULL);
	for (unsigned i = 1; r == 0 && i < n; i++)
		if (dp_commit(job->dp, &job->dp->r[i - 1], &gr[i]) < 0)
			r = request_fail(&job->req, TDP_INTERNAL, "out of memory");
out:
	for (unsigned i = 0; i < n; i++)
		graph_free(&gr[i]);
	return r;
}

/* One training step of `job`. Returns true while the job has more to do. */
static bool job_step(struct train_job *job)
{
	uint64_t in_epoch = job->done % job->per_epoch;
	int64_t step = job->start_step + (int64_t)job->done;
	double lr = 0;

	if (in_epoch == 0)
		shuffle_epoch(job, job->done / job->per_epoch);
	td_error_clear(&job->req.err);
	if ((job->dp ? step_parallel(job, step, in_epoch, &lr) : step_one(job, step, in_epoch, &lr)) < 0) {
		job_fail(job);
		return false;
	}
	job->done++;
	if (job->model[0]) {
		struct model *m = models_find_serial(job->d->models, job->model, job->model_serial);

		if (m)
			m->step = step;
	}
	if (job->done % job->progress_every == 0 || job->done == job->total)
		notify_progress(job, lr);
	if (job->has_eval && (job->done % job->eval_every == 0 || job->done == job->total) &&
	    run_eval(job) < 0) {
		job_fail(job);
		return false;
	}
	if (job->has_stop && job->last_loss <= job->stop_loss) {
		job_finish(job, "stop_loss");
		return false;
	}
	if (job->done == job->total) {
		job_finish(job, "done");
		return false;
	}
	return true;
}

static void job_free(struct train_job *job)
{
	dp_free(job->dp);
	gpu_memory_free(devices_of(job->d, &job->index), &job->index.alloc);
	msgpack_unpacked_destroy(&job->params);
	tdp_buf_free(&job->raw);
	free(job->perm);
	free(job);
}

/* The job's client went away (conn_deferred.cancel): the run stops at its
 * next turn, where train_jobs_run frees it. */
static void train_job_cancel(struct conn_deferred *def)
{
	struct train_job *job = (struct train_job *)((char *)def - offsetof(struct train_job, def));

	job->c = NULL;
}

bool train_jobs_run(void *data)
{
	struct train_job **pp = &jobs;
	bool more = false;

	(void)data;
	while (*pp) {
		struct train_job *job = *pp;
		bool go_on = job->c != NULL;

		if (go_on && !conn_backlogged(job->c))
			go_on = job_step(job);
		if (job->c)
			conn_kick(job->c);
		if (!go_on) {
			if (job->c) {
				job->c->deferred = NULL;
				conn_kick(job->c);
			}
			*pp = job->next;
			job_free(job);
			continue;
		}
		more = true;
		pp = &job->next;
	}
	return more;
}

void train_jobs_free(void)
{
	while (jobs) {
		struct train_job *job = jobs;

		jobs = job->next;
		job_free(job);
	}
}

unsigned train_jobs_abort(int code, const char *message)
{
	unsigned n = 0;

	while (jobs) {
		struct train_job *job = jobs;

		jobs = job->next;
		if (job->c) {
			request_fail(&job->req, code, "%s", message);
			job_fail(job);
			job->c->deferred = NULL;
			conn_kick(job->c);
		}
		job_free(job);
		n++;
	}
	return n;
}

/* train.run's own parameters (besides the step's source), as params_parse
 * decoded them. */
struct run_params {
	const msgpack_object *data, *eval, *devices;
	uint64_t batch_size, epochs, steps, seed, start_step, progress_every;
	bool shuffle, has_epochs, has_steps, has_start_step, has_progress_every, has_stop_loss;
	double stop_loss;
};

/* Parse the run's own parameters (data, sizes, eval...) into `job`. */
static int job_setup(struct request *req, struct train_job *job, const struct run_params *rp)
{
	const msgpack_object *eval = rp->eval;
	struct tensor *first;
	uint64_t epochs = rp->has_epochs ? rp->epochs : 1;

	if (feeds_parse(req, rp->data, &job->train, "data") < 0)
		return -1;
	if (lookup_tensor(req, "data", job->train.f[0].src, ACCESS_READ, &first) < 0)
		return -1;
	if (first->rank == 0)
		return request_fail(req, TDP_NOT_FOUND, "data: '%s' is no stored tensor with rows",
				    job->train.f[0].src);
	job->nsamples = first->shape[0];
	job->device = first->device;
	for (unsigned k = 1; k < job->train.n; k++) {
		struct tensor *t;

		if (lookup_tensor(req, "data", job->train.f[k].src, ACCESS_READ, &t) < 0)
			return -1;
		if (t->rank == 0 || t->shape[0] != job->nsamples)
			return request_fail(req, TDP_SHAPE_MISMATCH,
					    "data: '%s' must be stored with %llu rows like '%s'",
					    job->train.f[k].src, (unsigned long long)job->nsamples,
					    job->train.f[0].src);
	}
	job->batch = rp->batch_size;
	if (job->batch == 0 || job->batch > job->nsamples || job->nsamples > INT32_MAX)
		return request_fail(req, TDP_INVALID_ARGUMENT, "batch_size must be 1 to %llu (the rows of the data)",
				    (unsigned long long)job->nsamples);
	job->per_epoch = job->nsamples / job->batch; /* the last partial batch is dropped */
	if (rp->has_steps) {
		job->total = rp->steps;
		if (rp->has_epochs)
			return request_fail(req, TDP_INVALID_ARGUMENT, "give epochs or steps, not both");
	} else {
		job->total = epochs * job->per_epoch;
	}
	if (job->total == 0 || job->total > 100000000)
		return request_fail(req, TDP_INVALID_ARGUMENT, "a run has 1 to 100000000 steps");
	job->epochs = (job->total + job->per_epoch - 1) / job->per_epoch;
	job->seed = rp->seed;
	job->shuffle = rp->shuffle;
	if (rp->has_start_step)
		job->start_step = (int64_t)rp->start_step;
	if (job->start_step < 1 || job->start_step > INT32_MAX)
		return request_fail(req, TDP_INVALID_ARGUMENT, "start_step must be 1 or more");
	job->progress_every = rp->has_progress_every ? rp->progress_every
						     : (job->total >= 100 ? job->total / 100 : 1);
	if (job->progress_every == 0)
		return request_fail(req, TDP_INVALID_ARGUMENT, "progress_every must be 1 or more");
	if (rp->has_stop_loss) {
		job->has_stop = true;
		job->stop_loss = rp->stop_loss;
	}
	if (eval) {
		const msgpack_object *every = tdp_map_find(eval, "every"), *metrics = tdp_map_find(eval, "metrics");

		for (uint32_t k = 0; k < eval->via.map.size; k++)
			if (!tdp_obj_str_eq(&eval->via.map.ptr[k].key, "data") &&
			    !tdp_obj_str_eq(&eval->via.map.ptr[k].key, "every") &&
			    !tdp_obj_str_eq(&eval->via.map.ptr[k].key, "metrics"))
				return request_fail(req, TDP_INVALID_ARGUMENT, "eval takes data, every and metrics");
		if (feeds_parse(req, tdp_map_find(eval, "data"), &job->eval, "eval.data") < 0)
			return -1;
		job->has_eval = true;
		job->eval_every = job->per_epoch;
		if (every && (tdp_obj_uint(every, &job->eval_every) < 0 || job->eval_every == 0))
			return request_fail(req, TDP_INVALID_ARGUMENT, "eval.every must be 1 or more");
		if (metrics) {
			if (metrics->type != MSGPACK_OBJECT_ARRAY || metrics->via.array.size > MAX_METRICS)
				return request_fail(req, TDP_INVALID_ARGUMENT, "eval.metrics: up to %d node ids",
						    MAX_METRICS);
			job->nmetrics = metrics->via.array.size;
			for (unsigned m = 0; m < job->nmetrics; m++)
				if (tdp_obj_strcpy(&metrics->via.array.ptr[m], job->metrics[m],
						   sizeof(job->metrics[m])) < 0)
					return request_fail(req, TDP_INVALID_ARGUMENT, "eval.metrics: node ids");
		}
	}
	return 0;
}

/* train.run's `devices` (docs/devices.md): none or one device id means one
 * device; two or more, data parallel with the batch split evenly. */
static int parse_devices(struct request *req, struct train_job *job, const msgpack_object *o)
{
	uint32_t n = o ? o->via.array.size : 0;

	job->ndev = 1;
	job->devs[0] = job->device;
	job->shard = job->batch;
	if (n == 0)
		return 0;
	if (n > req->d->ngpus)
		return request_fail(req, TDP_INVALID_ARGUMENT, "devices: %u ids, but tensord uses %u devices",
				    n, req->d->ngpus);
	for (uint32_t i = 0; i < n; i++) {
		char what[32];

		snprintf(what, sizeof(what), "devices[%u]", i);
		if (devices_param(req, &o->via.array.ptr[i], what, &job->devs[i]) < 0)
			return -1;
		for (uint32_t j = 0; j < i; j++)
			if (job->devs[j] == job->devs[i])
				return request_fail(req, TDP_INVALID_ARGUMENT, "devices: %u is listed twice",
						    job->devs[i]);
	}
	if (job->devs[0] != job->device)
		return request_fail(req, TDP_FAILED_PRECONDITION, "devices[0] must be the device the data "
				    "and parameters are on (%u), not %u", job->device, job->devs[0]);
	if (job->batch % n)
		return request_fail(req, TDP_INVALID_ARGUMENT, "batch_size %llu does not split evenly over "
				    "%u devices", (unsigned long long)job->batch, n);
	job->ndev = n;
	job->shard = job->batch / n;
	return 0;
}

/* Copy what a step reads (the first step's stored inputs) to the replicas. */
static int start_replicas(struct request *req, struct train_job *job)
{
	struct graph gr = { .req = req };
	struct tensor **copy = NULL;
	unsigned ncopy = 0, loss;
	double lr;
	int flat, r;

	r = train_build_step(req, &job->spec, job->nodes, NULL, &job->train, job->start_step, true, &gr, &loss,
			     &lr, &flat);
	if (r == 0 && !(copy = calloc(gr.n * OP_MAX_INPUTS + 1, sizeof(*copy))))
		r = request_fail(req, TDP_INTERNAL, "out of memory");
	for (unsigned i = 0; r == 0 && i < gr.n; i++)
		for (unsigned k = 0; k < gr.nodes[i].ctx.ninputs; k++) {
			struct tensor *t = gr.nodes[i].src[k] < 0 ? gr.nodes[i].stored[k] : NULL;
			unsigned j;

			if (!t || t == &job->index)
				continue;
			for (j = 0; j < ncopy && copy[j] != t; j++)
				;
			if (j == ncopy)
				copy[ncopy++] = t;
		}
	if (r == 0) {
		r = dp_start(req->d, job->devs, job->ndev, copy, ncopy, job->shard,
			     gr.nodes[flat].ctx.out.count, &job->dp);
		if (r < 0)
			r = request_fail(req, r == -ENODEV ? TDP_DEVICE_LOST : TDP_RESOURCE_EXHAUSTED,
					 "copying the parameters and data to the other devices failed (%s)",
					 strerror(-r));
	}
	free(copy);
	graph_free(&gr);
	return r;
}

int method_train_run(struct request *req)
{
	struct source src;
	struct run_params rp = { .shuffle = true };
	param_name model;
	bool has_model;
	const struct param p[] = {
		PARAM_OPT("nodes", PARAM_ARRAY, src.nodes),
		PARAM_OPT_OBJ("loss", PARAM_STR, src.loss),
		PARAM_OPT("params", PARAM_ARRAY, src.params),
		PARAM_OPT("optimizer", PARAM_MAP, src.opt),
		PARAM_REQ("data", PARAM_MAP, rp.data),
		PARAM_REQ("batch_size", PARAM_UINT, rp.batch_size),
		PARAM_OPT_GIVEN("epochs", PARAM_UINT, rp.epochs, rp.has_epochs),
		PARAM_OPT_GIVEN("steps", PARAM_UINT, rp.steps, rp.has_steps),
		PARAM_OPT("seed", PARAM_UINT, rp.seed),
		PARAM_OPT("shuffle", PARAM_BOOL, rp.shuffle),
		PARAM_OPT("eval", PARAM_MAP, rp.eval),
		PARAM_OPT_GIVEN("start_step", PARAM_UINT, rp.start_step, rp.has_start_step),
		PARAM_OPT_GIVEN("progress_every", PARAM_UINT, rp.progress_every, rp.has_progress_every),
		PARAM_OPT_GIVEN("stop_loss", PARAM_NUMBER, rp.stop_loss, rp.has_stop_loss),
		PARAM_OPT_GIVEN("model", PARAM_TENSOR_KEY, model, has_model),
		PARAM_OPT("devices", PARAM_ARRAY, rp.devices),
	};
	struct train_job *job;
	msgpack_sbuffer sb;
	msgpack_packer spk;
	struct graph gr = { .req = req };
	unsigned loss;
	double lv, lr;
	int r;

	if (PARAMS_PARSE(req, p) < 0 || train_resolve_source(req, has_model ? model : NULL, &src) < 0)
		return -1;
	if (!req->conn)
		return request_fail(req, TDP_INTERNAL, "train.run needs a connection");
	job = calloc(1, sizeof(*job));
	if (!job)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	job->d = req->d;
	msgpack_unpacked_init(&job->params);
	job->start_step = src.m ? src.m->step + 1 : 1;
	if (train_spec_parse(req, src.loss, src.params, src.opt, NULL, &job->spec) < 0 ||
	    job_setup(req, job, &rp) < 0 || parse_devices(req, job, rp.devices) < 0)
		goto fail;
	if (src.m) {
		if (model_check_feeds(req, src.m, &job->train, true, "data") < 0 ||
		    (job->has_eval && model_check_feeds(req, src.m, &job->eval, true, "eval.data") < 0))
			goto fail;
		strcpy(job->model, src.m->name);
		job->model_serial = src.m->serial;
	}
	if (job->spec.opt.kind == OPT_NONE)
		job->spec.opt = (struct optimizer){ .kind = OPT_SGD, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999,
						    .eps = 1e-8, .gamma = 0.1, .step_size = 1 };
	if (!job->spec.opt.schedule[0])
		strcpy(job->spec.opt.schedule, "constant");
	/* Keep the request's params: the steps build their graphs from them. */
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&spk, &sb, msgpack_sbuffer_write);
	if (msgpack_pack_array(&spk, 2) || msgpack_pack_object(&spk, *req->params) ||
	    (src.m ? msgpack_pack_object(&spk, src.m->u.data) : msgpack_pack_nil(&spk)) ||
	    tdp_buf_append(&job->raw, sb.data, sb.size) < 0) {
		msgpack_sbuffer_destroy(&sb);
		request_fail(req, TDP_INTERNAL, "out of memory");
		goto fail;
	}
	msgpack_sbuffer_destroy(&sb);
	if (tdp_unpack(&job->params, tdp_buf_head(&job->raw), tdp_buf_len(&job->raw)) < 0) {
		request_fail(req, TDP_INTERNAL, "cannot keep the parameters");
		goto fail;
	}
	job->nodes = tdp_map_find(&job->params.data.via.array.ptr[src.m ? 1 : 0], "nodes");
	job->perm = malloc(job->nsamples * sizeof(*job->perm));
	/* The minibatch's row numbers live with the data. */
	job->index = (struct tensor){ .name = "#index", .name_len = 6, .dtype = TDP_DTYPE_I32, .rank = 1,
				      .shape = { job->shard }, .count = job->shard, .bytes = job->shard * 4,
				      .device = job->device };
	if (!job->perm || gpu_memory_alloc(devices_of(req->d, &job->index), job->index.bytes,
					   &job->index.alloc) < 0) {
		request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of memory for the run");
		goto fail;
	}
	job->train.index = &job->index;
	/* Check the whole graph once now, so a bad model fails at once. */
	shuffle_epoch(job, 0);
	r = gpu_upload(devices_of(req->d, &job->index), &job->index.alloc, job->perm);
	if (r < 0 || train_run_step(req, &job->spec, job->nodes, NULL, &job->train, job->start_step, false,
				    &gr, &loss, &lv, &lr) < 0) {
		if (r < 0)
			request_fail(req, TDP_INTERNAL, "feeding the batch failed");
		graph_free(&gr);
		goto fail;
	}
	graph_free(&gr);
	if (job->ndev > 1 && start_replicas(req, job) < 0)
		goto fail;
	job->req = *req;
	job->req.params = NULL;
	job->req.method = "train.run";
	job->c = req->conn;
	msgpack_packer_init(&job->pk, &job->c->out, tdp_buf_msgpack_write);
	job->req.pk = &job->pk;
	job->req.out = &job->c->out;
	job->start_ns = daemon_now_ns(CLOCK_MONOTONIC);
	job->def.cancel = train_job_cancel;
	job->c->deferred = &job->def;
	job->next = jobs;
	jobs = job;
	loop_wake_idle(req->d->loop);
	return REQUEST_DEFERRED;
fail:
	job_free(job);
	return -1;
}
