/* train.run's jobs: the scheduler (one step of every job per loop turn),
 * the steps on one device or data parallel, evaluation, and the reports
 * through the job's sink (job.h). */
#include "train/job.h"
#include "train/job_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/loop.h"
#include "daemon.h"
#include "devices.h"
#include "dtype.h"
#include "engine/forward.h"
#include "engine/graph_core.h"
#include "gpu/transfer.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/lookup.h"
#include "store/model.h"
#include "store/store.h"
#include "train/label_check.h"
#include "train/train_parallel.h"

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The order of samples in `epoch`: a Fisher-Yates shuffle seeded by the run's
 * seed and the epoch, so runs are reproducible. */
void job_shuffle_epoch(struct train_job *job, uint64_t epoch)
{
	uint64_t s = job->p.seed * 0x100000001b3ull + epoch;

	for (uint64_t i = 0; i < job->p.nsamples; i++)
		job->perm[i] = (uint32_t)i;
	if (!job->p.shuffle)
		return;
	for (uint64_t i = job->p.nsamples - 1; i > 0; i--) {
		uint64_t j = splitmix64(&s) % (i + 1);
		uint32_t t = job->perm[i];

		job->perm[i] = job->perm[j];
		job->perm[j] = t;
	}
}

static double elapsed(const struct train_job *job)
{
	return (double)(daemon_now_ns(CLOCK_MONOTONIC) - job->start_ns) / 1e9;
}

/* Where the run stands (after job->done steps). */
static struct train_status status_of(const struct train_job *job)
{
	double t = elapsed(job);
	uint64_t ran = job->done - job->p.resume_done; /* in this daemon: the rates' steps */
	struct train_status st = {
		.step = job->p.start_step + (int64_t)job->done - 1,
		.run_step = job->done,
		.steps = job->p.total,
		.epoch = job->done ? (job->done - 1) / job->p.per_epoch + 1 : 0,
		.epochs = job->p.epochs,
		.epochs_done = job->done / job->p.per_epoch,
		.loss = job->last_loss,
		.lr = job->lr,
		.samples_per_s = t > 0 ? (double)(ran * job->p.batch * job->p.accumulate) / t : 0,
		.elapsed = t,
		.has_eval = job->have_eval_result,
		.eval_loss = job->eval_loss,
		.metrics = job->p.metrics,
		.nmetrics = job->p.nmetrics,
		.devs = job->p.devs,
		.ndev = job->p.ndev,
		.replica_max_diff = -1,
		.nranks = job->p.nranks,
		.profile = job->p.profile && !job->g,
		.gpu_ns = ran ? (double)job->gpu_ns / (double)ran : 0,
		.dispatches = ran ? (double)job->dispatches / (double)ran : 0,
		.peak_bytes = job->peak_bytes,
		.scaled = job->p.spec.precision == TDP_DTYPE_F16,
		.skipped_steps = job->skipped_steps,
		.loss_scale = job->loss_scale,
	};

	memcpy(st.eval_metrics, job->eval_metrics, sizeof(st.eval_metrics));
	return st;
}

/* Forward pass over the whole evaluation set: loss and metrics. */
static int run_eval(struct train_job *job)
{
	struct graph gr = { .call = &job->call };
	struct step_input in = { .spec = &job->p.spec, .nodes = job->nodes, .feeds = &job->p.eval,
				 .step = job->p.start_step + (int64_t)job->done };
	struct step_nodes sn;
	int r = train_run_step(&job->call, &in, &gr, &sn, &job->eval_loss);

	for (unsigned m = 0; r == 0 && m < job->p.nmetrics; m++) {
		int i = forward_find(&gr, job->p.metrics[m]);

		if (i < 0 || gr.nodes[i].ctx.out.count != 1 || !op_dtype_is_float(gr.nodes[i].ctx.out.dtype))
			r = td_fail(&job->call.err, TDP_INVALID_ARGUMENT,
				    "eval.metrics: '%s' is no floating scalar node", job->p.metrics[m]);
		else
			r = forward_read_scalar(&job->call, &gr, (unsigned)i, &job->eval_metrics[m]);
	}
	graph_free(&gr);
	if (r < 0)
		return -1;
	job->have_eval_result = true;
	return 0;
}

/* The largest difference between a parameter and its replicas (-1:
 * unreadable), at the end of a data-parallel run. */
static double replica_max_diff(struct train_job *job)
{
	struct tensor *params[MAX_PARAMS];
	unsigned n = 0;

	for (unsigned k = 0; k < job->p.spec.np; k++)
		if (store_lookup(job->call.d->store, job->p.spec.names[k], strlen(job->p.spec.names[k]),
				 &access_daemon, 0, &params[n], NULL) == 0)
			n++;
	return n == job->p.spec.np ? dp_max_diff(job->dp, params, n) : -1;
}

void job_finish(struct train_job *job, const char *stopped)
{
	struct train_status st = status_of(job);

	/* Drained: the run resumes later, with its data. */
	job->keep_data = !strcmp(stopped, "drained");
	if (job->dp) {
		st.replica_max_diff = replica_max_diff(job);
		st.exchange = dp_exchange_name(job->dp);
	}
	if (job->g)
		st.exchange = group_exchange_name(job);
	job->sink->finish(job->sink_data, &st, stopped);
}

/* One turn of `job`: data parallel (job_parallel.c) or on one device
 * job_pipe.c's. Returns true while the job has more to do. */
static bool job_step(struct train_job *job, bool hold)
{
	return job->dp ? dp_turn(job, hold) : pipe_turn(job, hold);
}

/* Whether what `job` has in flight landed (all: every step of it). */
static bool job_landed(const struct train_job *job, bool all)
{
	return job->dp ? dp_landed(job, all) : pipe_landed(job, all);
}

bool job_after_step(struct train_job *job, int64_t step)
{
	struct train_status st;

	job->done++;
	if (job->p.model[0]) {
		struct model *m = models_find_serial(job->call.d->models, job->p.model, job->p.model_serial);

		if (m)
			m->step = step;
	}
	if (job->done % job->p.progress_every == 0 || job->done == job->p.total) {
		st = status_of(job);
		job->sink->progress(job->sink_data, &st);
	}
	if (job->p.has_eval && (job->done % job->p.eval_every == 0 || job->done == job->p.total)) {
		if (run_eval(job) < 0) {
			job->sink->fail(job->sink_data, &job->call.err);
			return false;
		}
		st = status_of(job);
		job->sink->eval(job->sink_data, &st);
	}
	if (job->p.has_stop && job->last_loss <= job->p.stop_loss) {
		job_finish(job, "stop_loss");
		return false;
	}
	if (job->done == job->p.total) {
		job_finish(job, "done");
		return false;
	}
	return true;
}

/* The run ended (done, stopped, cancelled, failed, or its client went
 * away): delete its `cleanup` tensors, with the caller's rights, those still
 * there. Not when the daemon stopped it to resume it (a drain, a shutdown,
 * a device loss). */
static void job_cleanup(struct train_job *job)
{
	for (unsigned k = 0; !job->keep_data && k < job->p.ncleanup; k++) {
		const char *key = job->p.cleanup[k];
		struct tensor *t;

		if (lookup_tensor_why(&job->call, "cleanup", key, ACCESS_WRITE | LOOKUP_EXISTING, &t, NULL, 0) == 0)
			store_delete(job->call.d->store, key, strlen(key));
	}
}

static void job_free(struct train_job *job)
{
	/* Steps still running are waited for (graph_free), not applied. */
	pipe_discard(job);
	dp_discard(job);
	graph_arena_cache_free(&job->arenas, job->call.d->gpus);
	gpu_host_buffer_free(devices_of(job->call.d, &job->index), &job->xfer);
	group_end(job);
	dp_free(job->dp);
	gpu_memory_free(devices_of(job->call.d, &job->index), &job->index.alloc);
	msgpack_unpacked_destroy(&job->params);
	tdp_buf_free(&job->raw);
	free(job->perm);
	free(job);
}

void train_job_detach(struct train_job *job)
{
	if (job->g) {
		/* The others wait for this member's next exchange: it carries the
		 * stop, then the run ends without reports. */
		job->sink = &group_silent_sink;
		job->sink_data = NULL;
		train_job_cancel(job);
		return;
	}
	job->detached = true;
}

struct train_status train_job_status(const struct train_job *job)
{
	return status_of(job);
}

void train_job_cancel(struct train_job *job)
{
	job->cancelled = true;
	loop_wake_idle(job->call.d->loop);
}

void train_jobs_drain(struct daemon *d)
{
	for (struct train_job *job = d->jobs; job; job = job->next)
		if (!job->g && !job->cancelled) {
			job->stop_reason = "drained";
			train_job_cancel(job);
		}
}

/* How long a job may keep submitting while another waits for the device:
 * it then drains (submits nothing more until its steps in flight landed)
 * and goes to the back of the list, so every job gets turns, the newest
 * never ahead of the oldest for good (issue 34: a newer run stopped every
 * older one). Long enough that a job of short steps keeps its pipeline
 * full for a while, short next to a person's patience. */
#define JOB_SLICE_NS (20 * 1000 * 1000)

/* Whether `job` (steps in flight, others waiting) should stop submitting. */
static bool job_yields(const struct train_job *job)
{
	return job->yield && daemon_now_ns(CLOCK_MONOTONIC) - job->slice_start_ns >= JOB_SLICE_NS;
}

/* Put `job` (in no list) at the end of its daemon's list. */
static void jobs_append(struct train_job *job)
{
	struct train_job **pp = &job->call.d->jobs;

	while (*pp)
		pp = &(*pp)->next;
	job->next = NULL;
	*pp = job;
}

/* Move `job` (in the list) to its end. */
static void job_to_back(struct train_job *job)
{
	struct train_job **pp = &job->call.d->jobs;

	while (*pp && *pp != job)
		pp = &(*pp)->next;
	if (!*pp)
		return;
	*pp = job->next;
	jobs_append(job);
}

/* `job` may submit now: a turn after waiting starts its slice. */
static bool job_go(struct train_job *job)
{
	if (!job->nfly && !job->yield)
		job->slice_start_ns = daemon_now_ns(CLOCK_MONOTONIC);
	return job_step(job, job_yields(job));
}

bool train_jobs_run(void *data)
{
	struct daemon *d = data;
	struct train_job **pp = &d->jobs, *job, *runner = NULL, *drained = NULL;
	bool more = false, busy = false, held = false;

	/* One job runs steps at a time: each builds its graph from what the
	 * steps before it stored (or, pipelined, are about to store), as when
	 * every step was waited for. */
	for (job = d->jobs; job; job = job->next)
		if (job->nfly > 0) {
			busy = true;
			runner = job;
		}
	while (*pp) {
		bool go_on = !(job = *pp)->detached, wait = false;

		/* Its completion wakes the loop: the oldest step's, or for a
		 * departed client's job every one (freeing it waits for none). */
		if (job->nfly && !job_landed(job, job->detached)) {
			pp = &job->next;
			continue;
		}
		if (go_on && job->g) {
			go_on = group_step(job); /* cancelling is the group's business */
		} else if (go_on && job->nfly) {
			busy = false;
			go_on = job_go(job); /* the steps that landed, then more */
			busy = go_on && job->nfly;
			if (go_on && !job->nfly && job->yield)
				drained = job;
		} else if (go_on && job->cancelled) {
			job_finish(job, job->stop_reason ? job->stop_reason : "cancelled");
			go_on = false;
		} else if (go_on && (busy || drained)) {
			/* A turn that ended this pass: the next is chosen by
			 * share, at the next pass (jobs_by_share below). */
			held = wait = true;
			if (runner)
				runner->yield = true;
		} else if (go_on && job->sink->ready(job->sink_data)) {
			go_on = job_go(job);
			busy = go_on && job->nfly;
			runner = busy ? job : runner;
		}
		if (!job->detached)
			job->sink->flush(job->sink_data);
		if (!go_on) {
			if (!job->detached)
				job->sink->release(job->sink_data);
			/* A departed client's job whose steps landed holds nobody
			 * back any more (the jobs held for it would wait for a
			 * wake-up that never comes). */
			if (job->nfly)
				busy = false;
			if (drained == job)
				drained = NULL;
			if (runner == job)
				runner = NULL;
			*pp = job->next;
			job_cleanup(job);
			job_free(job);
			continue;
		}
		/* A group run waiting for MPI is woken by the cluster's eventfd,
		 * a step in flight by its completion. */
		if ((!job->g || !group_waiting(job)) && (!job->nfly || job_landed(job, false)) && !wait)
			more = true;
		pp = &job->next;
	}
	/* A job that yielded and drained waits behind the others of its
	 * share; the user furthest behind goes next. */
	if (drained) {
		drained->yield = false;
		job_to_back(drained);
		jobs_by_share(d);
	}
	/* A job held back for one that landed meanwhile goes next turn. */
	return more || (held && !busy);
}

void train_jobs_free(struct daemon *d)
{
	while (d->jobs) {
		struct train_job *job = d->jobs;

		d->jobs = job->next;
		job_free(job);
	}
}

unsigned train_jobs_abort(struct daemon *d, int code, const char *message)
{
	unsigned n = 0;

	while (d->jobs) {
		struct train_job *job = d->jobs;

		d->jobs = job->next;
		if (!job->detached) {
			td_fail(&job->call.err, code, "%s", message);
			job->sink->fail(job->sink_data, &job->call.err);
			job->sink->release(job->sink_data);
		}
		job_free(job);
		n++;
	}
	return n;
}

/* Copy what a step reads (the first step's stored inputs) to the replicas. */
static int start_replicas(struct caller *call, struct train_job *job)
{
	struct graph gr = { .call = call };
	struct tensor **copy = NULL;
	struct step_nodes sn;
	unsigned ncopy = 0;
	int r;

	r = train_build_step(call, &(struct step_input){ .spec = &job->p.spec, .nodes = job->nodes,
							   .feeds = &job->p.train, .step = job->p.start_step,
							   .train = true, .flat = true }, &gr, &sn);
	if (r == 0 && !(copy = calloc(gr.n * OP_MAX_INPUTS + 1, sizeof(*copy))))
		r = td_fail(&call->err, TDP_INTERNAL, "out of memory");
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
		job->depth = job_default_depth(job, DP_MAX_DEPTH);
		r = dp_start(call->d, job->p.devs, job->p.ndev, copy, ncopy, job->p.shard,
			     gr.nodes[sn.flat].ctx.out.count, job->depth, &job->dp);
		if (r < 0)
			r = td_fail(&call->err, r == -ENODEV ? TDP_DEVICE_LOST : TDP_RESOURCE_EXHAUSTED,
					 "copying the parameters and data to the other devices failed (%s)",
					 strerror(-r));
	}
	free(copy);
	graph_free(&gr);
	return r;
}

/* Keep a copy of the request's params and the model's definition: the
 * steps build their graphs from the nodes in them. */
static int keep_params(struct caller *call, struct train_job *job, const msgpack_object *params,
		       const msgpack_object *model_data)
{
	msgpack_sbuffer sb;
	msgpack_packer spk;
	int fail;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&spk, &sb, msgpack_sbuffer_write);
	fail = msgpack_pack_array(&spk, 2) || msgpack_pack_object(&spk, *params) ||
	       (model_data ? msgpack_pack_object(&spk, *model_data) : msgpack_pack_nil(&spk)) ||
	       tdp_buf_append(&job->raw, sb.data, sb.size) < 0;
	msgpack_sbuffer_destroy(&sb);
	if (fail)
		return td_fail(&call->err, TDP_INTERNAL, "out of memory");
	if (tdp_unpack(&job->params, tdp_buf_head(&job->raw), tdp_buf_len(&job->raw)) < 0)
		return td_fail(&call->err, TDP_INTERNAL, "cannot keep the parameters");
	job->nodes = tdp_map_find(&job->params.data.via.array.ptr[model_data ? 1 : 0], "nodes");
	return 0;
}

int train_job_start(struct caller *call, const struct train_plan *plan, const msgpack_object *params,
		    const msgpack_object *model_data, const struct train_sink *sink, void *data,
		    struct train_job **ret)
{
	struct train_job *job = calloc(1, sizeof(*job));
	struct graph gr = { .call = call };
	struct step_nodes sn;
	double lv;
	int r;

	if (!job)
		return td_fail(&call->err, TDP_INTERNAL, "out of memory");
	job->p = *plan;
	job->call = (struct caller){ .d = call->d, .cred = call->cred };
	msgpack_unpacked_init(&job->params);
	if (keep_params(call, job, params, model_data) < 0)
		goto fail;
	job->perm = malloc(job->p.nsamples * sizeof(*job->perm));
	/* The minibatch's row numbers live with the data. */
	job->index = (struct tensor){ .name = "#index", .name_len = 6, .dtype = TDP_DTYPE_I32, .rank = 1,
				      .shape = { job->p.shard }, .count = job->p.shard, .bytes = job->p.shard * 4,
				      .device = job->p.device };
	if (!job->perm || gpu_memory_alloc(devices_of(call->d, &job->index), job->index.bytes,
					   &job->index.alloc) < 0) {
		td_fail(&call->err, TDP_RESOURCE_EXHAUSTED, "out of memory for the run");
		goto fail;
	}
	job->p.train.index = &job->index;
	/* One device: the steps' rows in and losses out (job_pipe.c). */
	if (job->p.ndev <= 1 && job->p.nranks <= 1 && pipe_start(call, job) < 0)
		goto fail;
	/* Check the whole graph once now, so a bad model fails at once. */
	job_shuffle_epoch(job, 0);
	r = gpu_upload(devices_of(call->d, &job->index), &job->index.alloc, job->perm);
	if (r < 0 || train_run_step(call, &(struct step_input){ .spec = &job->p.spec, .nodes = job->nodes,
							     .feeds = &job->p.train, .step = job->p.start_step },
				    &gr, &sn, &lv) < 0 || train_check_labels(call, &gr, &job->p.train) < 0) {
		if (r < 0)
			td_fail(&call->err, TDP_INTERNAL, "feeding the batch failed");
		graph_free(&gr);
		goto fail;
	}
	graph_free(&gr);
	if (job->p.ndev > 1 && start_replicas(call, job) < 0)
		goto fail;
	if (job->p.nranks > 1 && group_begin(call, job) < 0)
		goto fail;
	/* A resumed run goes on where it stopped: its step count, this epoch's
	 * shuffle, its next micro-batch (docs/durability.md, "Jobs"). */
	if (job->p.resume_done) {
		job->done = job->p.resume_done;
		job->next_unit = job->done * job->p.accumulate;
		job_shuffle_epoch(job, job->done / job->p.per_epoch);
	}
	job->sink = sink;
	job->sink_data = data;
	job->start_ns = daemon_now_ns(CLOCK_MONOTONIC);
	/* At the back: the jobs before it keep their turns (train_jobs_run). */
	jobs_share_join(job);
	jobs_append(job);
	loop_wake_idle(call->d->loop);
	*ret = job;
	return 0;
fail:
	job_free(job);
	return -1;
}

const msgpack_object *train_job_request(const struct train_job *job)
{
	return &job->params.data.via.array.ptr[0];
}

const struct access_cred *train_job_cred(const struct train_job *job)
{
	return &job->call.cred;
}

const struct train_job *train_job_next(const struct train_job *job)
{
	return job->next;
}
