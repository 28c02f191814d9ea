/* train.run (docs/protocol.md, "train.run"): read the request into a plan,
 * start the job (train/job.h) and answer for it: train.progress and
 * train.eval notifications on the client's connection while it runs, the
 * response at its end. The reply is deferred; the connection serves the
 * client's later requests only after it. */
#include "methods/methods_train_run.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "daemon.h"
#include "devices.h"
#include "engine/forward.h"
#include "methods/deferred_answer.h"
#include "methods/methods_job.h"
#include "methods/methods_model.h"
#include "methods/methods_train.h"
#include "pack.h"
#include "rpc.h"
#include "methods/params.h"
#include "status.h"
#include "store/lookup.h"
#include "store/model.h"
#include "train/cluster.h"
#include "train/job.h"
#include "train/jobs_table.h"

/* The client's side of a run: its deferred reply (da.req: msgid, peer,
 * where the notifications and the answer go). */
struct run_client {
	struct deferred_answer da;
	struct train_job *job;
};

static struct run_client *client_of(void *data)
{
	return data;
}

static bool client_ready(void *data)
{
	return !request_backlogged(&client_of(data)->da.req);
}

static void client_flush(void *data)
{
	request_flush(&client_of(data)->da.req);
}

static int notify_head(msgpack_packer *pk, const char *method, uint32_t entries)
{
	return msgpack_pack_array(pk, 3) || msgpack_pack_uint8(pk, 2) || tdp_pack_cstr(pk, method) ||
	       msgpack_pack_array(pk, 1) || msgpack_pack_map(pk, entries);
}

static int kv_num(msgpack_packer *pk, const char *k, double v)
{
	return tdp_pack_cstr(pk, k) || msgpack_pack_double(pk, v);
}

static int kv_int(msgpack_packer *pk, const char *k, uint64_t v)
{
	return tdp_pack_cstr(pk, k) || msgpack_pack_uint64(pk, v);
}

int train_pack_progress(msgpack_packer *pk, const struct train_status *st)
{
	return notify_head(pk, "train.progress", 9) || kv_int(pk, "step", (uint64_t)st->step) ||
	       kv_int(pk, "run_step", st->run_step) || kv_int(pk, "steps", st->steps) ||
	       kv_int(pk, "epoch", st->epoch) || kv_int(pk, "epochs", st->epochs) ||
	       kv_num(pk, "loss", st->loss) || kv_num(pk, "lr", st->lr) ||
	       kv_num(pk, "samples_per_s", st->samples_per_s) || kv_num(pk, "elapsed", st->elapsed);
}

static void client_progress(void *data, const struct train_status *st)
{
	(void)train_pack_progress(&client_of(data)->da.pk, st);
}

static int write_eval(msgpack_packer *pk, const struct train_status *st)
{
	if (kv_num(pk, "loss", st->eval_loss) || tdp_pack_cstr(pk, "metrics") || msgpack_pack_map(pk, st->nmetrics))
		return -1;
	for (unsigned m = 0; m < st->nmetrics; m++)
		if (kv_num(pk, st->metrics[m], st->eval_metrics[m]))
			return -1;
	return 0;
}

int train_pack_eval(msgpack_packer *pk, const struct train_status *st)
{
	return notify_head(pk, "train.eval", 5) || kv_int(pk, "step", (uint64_t)st->step) ||
	       kv_int(pk, "run_step", st->run_step) || kv_int(pk, "epoch", st->epoch) || write_eval(pk, st);
}

static void client_eval(void *data, const struct train_status *st)
{
	(void)train_pack_eval(&client_of(data)->da.pk, st);
}

int train_pack_result(msgpack_packer *pk, const struct train_status *st, const char *stopped)
{
	bool dp = st->ndev > 1;

	if (msgpack_pack_map(pk, 7 + (dp ? 2 : 0) + (st->exchange != NULL) + (st->nranks > 1) + 3 * st->profile +
				 2 * st->scaled) ||
	    (st->scaled && (kv_int(pk, "skipped_steps", st->skipped_steps) ||
			    kv_num(pk, "loss_scale", st->loss_scale))) ||
	    (st->nranks > 1 && kv_int(pk, "ranks", st->nranks)) ||
	    (st->exchange && (tdp_pack_cstr(pk, "exchange") || tdp_pack_cstr(pk, st->exchange))) ||
	    (st->profile && (kv_num(pk, "gpu_ns", st->gpu_ns) || kv_num(pk, "dispatches", st->dispatches) ||
			     kv_int(pk, "peak_bytes", st->peak_bytes))) ||
	    kv_int(pk, "steps", st->run_step) || kv_int(pk, "epochs", st->epochs_done) ||
	    kv_num(pk, "loss", st->loss) || kv_num(pk, "seconds", st->elapsed) ||
	    kv_num(pk, "samples_per_s", st->samples_per_s) ||
	    tdp_pack_cstr(pk, "stopped") || tdp_pack_cstr(pk, stopped) || tdp_pack_cstr(pk, "eval") ||
	    (st->has_eval ? (msgpack_pack_map(pk, 2) || write_eval(pk, st)) : msgpack_pack_nil(pk)))
		return -1;
	if (!dp)
		return 0;
	if (tdp_pack_cstr(pk, "devices") || msgpack_pack_array(pk, st->ndev))
		return -1;
	for (unsigned i = 0; i < st->ndev; i++)
		if (msgpack_pack_uint32(pk, st->devs[i]))
			return -1;
	return kv_num(pk, "replica_max_diff", st->replica_max_diff);
}

static void client_finish(void *data, const struct train_status *st, const char *stopped)
{
	struct run_client *cl = client_of(data);

	(void)(tdp_write_result_head(&cl->da.pk, cl->da.req.msgid) < 0 ||
	       train_pack_result(&cl->da.pk, st, stopped));
}

static void client_fail(void *data, const struct td_error *err)
{
	struct run_client *cl = client_of(data);

	/* The notifications written before it stay. */
	cl->da.req.call.err = *err;
	deferred_answer_fail(&cl->da, deferred_answer_mark(&cl->da));
}

static void client_release(void *data)
{
	struct run_client *cl = client_of(data);

	deferred_answer_done(&cl->da);
	free(cl);
}

/* The client went away (deferred_answer.on_gone): the run stops at its
 * next turn. */
static void client_cancel(struct deferred_answer *da)
{
	struct run_client *cl = (struct run_client *)da;

	train_job_detach(cl->job);
	free(cl);
}

static const struct train_sink client_sink = {
	.ready = client_ready,
	.flush = client_flush,
	.progress = client_progress,
	.eval = client_eval,
	.finish = client_finish,
	.fail = client_fail,
	.release = client_release,
};

/* train.run's own parameters (besides the step's source), as params_parse
 * decoded them. */
struct run_params {
	const msgpack_object *data, *eval, *devices, *cleanup;
	uint64_t batch_size, epochs, steps, seed, start_step, progress_every, accumulate_steps, depth, nice;
	bool shuffle, profile, has_epochs, has_steps, has_start_step, has_progress_every, has_stop_loss, has_depth;
	double stop_loss;
};

/* Parse the run's own parameters (data, sizes, eval...) into `plan`. */
static int plan_setup(struct request *req, struct train_plan *plan, const struct run_params *rp)
{
	const msgpack_object *eval = rp->eval;
	char shown[NAMES_SHOWN_MAX], shown2[NAMES_SHOWN_MAX];
	struct tensor *first;
	uint64_t epochs = rp->has_epochs ? rp->epochs : 1;

	if (feeds_parse(&req->call, rp->data, &plan->train, "data") < 0)
		return -1;
	if (lookup_tensor(&req->call, "data", plan->train.f[0].src, ACCESS_READ, &first) < 0)
		return -1;
	if (first->rank == 0)
		return request_fail(req, TDP_NOT_FOUND, "data: '%s' is no stored tensor with rows",
				    lookup_show(&req->call, plan->train.f[0].src, shown));
	plan->nsamples = first->shape[0];
	plan->device = first->device;
	for (unsigned k = 1; k < plan->train.n; k++) {
		struct tensor *t;

		if (lookup_tensor(&req->call, "data", plan->train.f[k].src, ACCESS_READ, &t) < 0)
			return -1;
		if (t->rank == 0 || t->shape[0] != plan->nsamples)
			return request_fail(req, TDP_SHAPE_MISMATCH,
					    "data: '%s' must be stored with %llu rows like '%s', not %llu",
					    lookup_show(&req->call, plan->train.f[k].src, shown),
					    (unsigned long long)plan->nsamples,
					    lookup_show(&req->call, plan->train.f[0].src, shown2),
					    (unsigned long long)(t->rank ? t->shape[0] : 0));
	}
	plan->batch = rp->batch_size;
	if (plan->batch == 0 || plan->batch > plan->nsamples || plan->nsamples > INT32_MAX)
		return request_fail(req, TDP_INVALID_ARGUMENT, "batch_size must be 1 to %llu (the rows of the data)",
				    (unsigned long long)plan->nsamples);
	plan->accumulate = rp->accumulate_steps;
	plan->profile = rp->profile;
	if (rp->nice > TRAIN_MAX_NICE)
		return request_fail(req, TDP_INVALID_ARGUMENT, "nice is %llu; 0 (default) to %d",
				    (unsigned long long)rp->nice, TRAIN_MAX_NICE);
	plan->nice = (unsigned)rp->nice;
	plan->depth = 0; /* the device's default (train/job.h) */
	if (rp->has_depth && (rp->depth == 0 || rp->depth > TRAIN_MAX_DEPTH))
		return request_fail(req, TDP_INVALID_ARGUMENT, "pipeline_depth must be 1 to %d", TRAIN_MAX_DEPTH);
	if (rp->has_depth)
		plan->depth = (unsigned)rp->depth;
	if (plan->accumulate == 0 || plan->accumulate > plan->nsamples / plan->batch)
		return request_fail(req, TDP_INVALID_ARGUMENT, "accumulate_steps must be 1 to %llu (batches of "
				    "batch_size in the data)", (unsigned long long)(plan->nsamples / plan->batch));
	/* the last partial batch is dropped */
	plan->per_epoch = plan->nsamples / (plan->batch * plan->accumulate);
	if (rp->has_steps) {
		plan->total = rp->steps;
		if (rp->has_epochs)
			return request_fail(req, TDP_INVALID_ARGUMENT, "give epochs or steps, not both");
	} else {
		plan->total = epochs * plan->per_epoch;
	}
	if (plan->total == 0 || plan->total > 100000000)
		return request_fail(req, TDP_INVALID_ARGUMENT, "a run has 1 to 100000000 steps");
	plan->epochs = (plan->total + plan->per_epoch - 1) / plan->per_epoch;
	plan->seed = rp->seed;
	plan->spec.run_seed = rp->seed;
	plan->shuffle = rp->shuffle;
	if (rp->has_start_step)
		plan->start_step = (int64_t)rp->start_step;
	if (plan->start_step < 1 || plan->start_step > INT32_MAX)
		return request_fail(req, TDP_INVALID_ARGUMENT, "start_step must be 1 or more");
	plan->progress_every = rp->has_progress_every ? rp->progress_every
						     : (plan->total >= 100 ? plan->total / 100 : 1);
	if (plan->progress_every == 0)
		return request_fail(req, TDP_INVALID_ARGUMENT, "progress_every must be 1 or more");
	if (rp->has_stop_loss) {
		plan->has_stop = true;
		plan->stop_loss = rp->stop_loss;
	}
	if (eval) {
		const msgpack_object *every = tdp_map_find(eval, "every"), *metrics = tdp_map_find(eval, "metrics");

		for (uint32_t k = 0; k < eval->via.map.size; k++)
			if (!tdp_obj_str_eq(&eval->via.map.ptr[k].key, "data") &&
			    !tdp_obj_str_eq(&eval->via.map.ptr[k].key, "every") &&
			    !tdp_obj_str_eq(&eval->via.map.ptr[k].key, "metrics"))
				return request_fail(req, TDP_INVALID_ARGUMENT, "eval takes data, every and metrics");
		if (feeds_parse(&req->call, tdp_map_find(eval, "data"), &plan->eval, "eval.data") < 0)
			return -1;
		plan->has_eval = true;
		plan->eval_every = plan->per_epoch;
		if (every && (tdp_obj_uint(every, &plan->eval_every) < 0 || plan->eval_every == 0))
			return request_fail(req, TDP_INVALID_ARGUMENT, "eval.every must be 1 or more");
		if (metrics) {
			if (metrics->type != MSGPACK_OBJECT_ARRAY || metrics->via.array.size > TRAIN_MAX_METRICS)
				return request_fail(req, TDP_INVALID_ARGUMENT, "eval.metrics: up to %d node ids",
						    TRAIN_MAX_METRICS);
			plan->nmetrics = metrics->via.array.size;
			for (unsigned m = 0; m < plan->nmetrics; m++)
				if (tdp_obj_strcpy(&metrics->via.array.ptr[m], plan->metrics[m],
						   sizeof(plan->metrics[m])) < 0)
					return request_fail(req, TDP_INVALID_ARGUMENT, "eval.metrics: node ids");
		}
	}
	return 0;
}

/* train.run's `ranks` (docs/cluster.md): "all" runs across the group, each
 * member (`member`, -1 for the member asked) on its shard of the batch. */
static int parse_ranks(struct request *req, struct train_plan *plan, const struct param_str *ranks, bool detach,
		       bool has_devices, int member)
{
	struct daemon *d = req->call.d;
	struct cluster_state cs;
	uint64_t n, base, extra;

	if (!ranks->ptr)
		return 0;
	if (ranks->len != 3 || memcmp(ranks->ptr, "all", 3))
		return request_fail(req, TDP_INVALID_ARGUMENT, "ranks: only \"all\" (every member of the group)");
	if (!d->cluster)
		return cluster_built() ? request_fail(req, TDP_FAILED_PRECONDITION, "ranks: this tensord is not "
						      "part of a group (start it with mpirun; docs/cluster.md)")
				       : request_fail(req, TDP_UNIMPLEMENTED, "ranks: this tensord was built without MPI");
	cs = cluster_state(d->cluster);
	if (cs.broken)
		return request_fail(req, TDP_UNAVAILABLE, "ranks: the group is broken: %s", cs.why);
	if (member < 0 && cs.rank != 0)
		return request_fail(req, TDP_FAILED_PRECONDITION, "ranks: runs across the group are asked of member "
				    "0; this is member %d", cs.rank);
	if (train_group_busy(d))
		return request_fail(req, TDP_UNAVAILABLE, "ranks: a run across the group is already going");
	if (detach || has_devices || plan->accumulate > 1)
		return request_fail(req, TDP_INVALID_ARGUMENT, "ranks does not go with detach, devices or "
				    "accumulate_steps");
	if (plan->batch < (uint64_t)cs.size)
		return request_fail(req, TDP_INVALID_ARGUMENT, "batch_size %llu is smaller than the group's %d "
				    "members", (unsigned long long)plan->batch, cs.size);
	n = (uint64_t)cs.size;
	base = plan->batch / n;
	extra = plan->batch % n;
	plan->nranks = (unsigned)cs.size;
	plan->rank = cs.rank;
	/* The first batch % size members take one row more. */
	plan->shard = base + ((uint64_t)cs.rank < extra);
	plan->offset = (uint64_t)cs.rank * base + ((uint64_t)cs.rank < extra ? (uint64_t)cs.rank : extra);
	return 0;
}

/* train.run's `cleanup`: up to TRAIN_MAX_CLEANUP tensor names, deleted when
 * the run ends (train/job.c) with the caller's rights; one that is gone or
 * that the caller may not delete then is left alone. */
static int parse_cleanup(struct request *req, struct train_plan *plan, const msgpack_object *o)
{
	uint32_t n = o ? o->via.array.size : 0;

	if (n > TRAIN_MAX_CLEANUP)
		return request_fail(req, TDP_INVALID_ARGUMENT, "cleanup: at most %d tensors", TRAIN_MAX_CLEANUP);
	for (uint32_t k = 0; k < n; k++) {
		const msgpack_object *e = &o->via.array.ptr[k];

		if (e->type != MSGPACK_OBJECT_STR)
			return request_fail(req, TDP_INVALID_ARGUMENT, "cleanup: tensor names (strings)");
		if (lookup_key(&req->call, e->via.str.ptr, e->via.str.size, plan->cleanup[k]) < 0)
			return -1;
	}
	plan->ncleanup = n;
	return 0;
}

/* train.run's `devices` (docs/devices.md): none or one device id means one
 * device; two or more, data parallel with the batch split evenly. */
static int parse_devices(struct request *req, struct train_plan *plan, const msgpack_object *o)
{
	uint32_t n = o ? o->via.array.size : 0;

	plan->ndev = 1;
	plan->devs[0] = plan->device;
	plan->shard = plan->batch;
	if (n == 0)
		return 0;
	if (n > req->call.d->ngpus)
		return request_fail(req, TDP_INVALID_ARGUMENT, "devices: %u ids, but tensord uses %u devices",
				    n, req->call.d->ngpus);
	for (uint32_t i = 0; i < n; i++) {
		char what[32];

		snprintf(what, sizeof(what), "devices[%u]", i);
		if (devices_param(req, &o->via.array.ptr[i], what, &plan->devs[i]) < 0)
			return -1;
		for (uint32_t j = 0; j < i; j++)
			if (plan->devs[j] == plan->devs[i])
				return request_fail(req, TDP_INVALID_ARGUMENT, "devices: %u is listed twice",
						    plan->devs[i]);
	}
	if (plan->devs[0] != plan->device)
		return request_fail(req, TDP_FAILED_PRECONDITION, "devices[0] must be the device the data "
				    "and parameters are on (%u), not %u", plan->device, plan->devs[0]);
	if (plan->accumulate > 1 && n > 1)
		return request_fail(req, TDP_INVALID_ARGUMENT, "accumulate_steps needs one device, not %u", n);
	if (plan->batch % n)
		return request_fail(req, TDP_INVALID_ARGUMENT, "batch_size %llu does not split evenly over "
				    "%u devices", (unsigned long long)plan->batch, n);
	plan->ndev = n;
	plan->shard = plan->batch / n;
	return 0;
}

/* A resumed run's plan: the steps its record had committed, and the first
 * step's number of the run as first started (a model's step moved on with
 * the committed steps). */
static int resume_point(struct request *req, struct train_plan *plan, const struct job_record *rec)
{
	if (plan->nranks > 1)
		return request_fail(req, TDP_FAILED_PRECONDITION, "a run across a group does not resume");
	if (rec->run_step >= plan->total || rec->steps != plan->total)
		return request_fail(req, TDP_FAILED_PRECONDITION, "its data or length changed: %llu steps "
				    "of %llu done, the run now has %llu", (unsigned long long)rec->run_step,
				    (unsigned long long)rec->steps, (unsigned long long)plan->total);
	plan->resume_done = rec->run_step;
	plan->start_step = rec->step - (int64_t)rec->run_step + 1;
	return 0;
}

/* train.run for a client (member -1), or on a member of the group for the
 * run rank 0 sent (member: this member's rank; no connection, the job
 * reports to no one), or a detached run resumed after a restart into
 * `resumed` (no connection either). */
static int run_request(struct request *req, int member, struct job_record *resumed)
{
	struct source src;
	struct run_params rp = { .shuffle = true, .accumulate_steps = 1 };
	param_name model;
	struct param_str ranks = { 0 };
	bool has_model, detach = false;
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
		PARAM_OPT("accumulate_steps", PARAM_UINT, rp.accumulate_steps),
		PARAM_OPT("profile", PARAM_BOOL, rp.profile),
		PARAM_OPT("nice", PARAM_UINT, rp.nice),
		PARAM_OPT_GIVEN("pipeline_depth", PARAM_UINT, rp.depth, rp.has_depth),
		PARAM_OPT("detach", PARAM_BOOL, detach),
		PARAM_OPT("ranks", PARAM_STR, ranks),
		PARAM_OPT("cleanup", PARAM_ARRAY, rp.cleanup),
		PARAM_OPT_OBJ("precision", PARAM_STR, src.precision),
		PARAM_OPT_OBJ("loss_scale", PARAM_MAP, src.loss_scale),
	};
	struct train_plan *plan = NULL;
	struct run_client *cl = NULL;
	int r = -1;

	if (req->call.d->draining && !resumed && member < 0)
		return request_fail(req, TDP_UNAVAILABLE, "the daemon is draining (job.drain): no new runs "
				    "until the drain is undone or the daemon restarts");
	if (PARAMS_PARSE(req, p) < 0 || train_resolve_source(req, has_model ? model : NULL, &src) < 0)
		return -1;
	if (!req->conn && member < 0 && !resumed) /* deferred_answer_start must not fail once the job runs */
		return request_fail(req, TDP_INTERNAL, "train.run needs a connection");
	plan = calloc(1, sizeof(*plan));
	cl = calloc(1, sizeof(*cl));
	if (!plan || !cl) {
		request_fail(req, TDP_INTERNAL, "out of memory");
		goto out;
	}
	plan->start_step = src.m ? src.m->step + 1 : 1;
	if (train_spec_parse(&req->call, src.loss, src.params, src.opt, NULL, &plan->spec) < 0 ||
	    plan_setup(req, plan, &rp) < 0 || parse_devices(req, plan, rp.devices) < 0 ||
	    parse_ranks(req, plan, &ranks, detach, rp.devices != NULL, member) < 0 ||
	    parse_cleanup(req, plan, rp.cleanup) < 0)
		goto out;
	if (member >= 0)
		plan->has_eval = false; /* evaluation is the asking member's */
	if (src.m) {
		if (model_check_feeds(req, src.m, &plan->train, true, "data") < 0 ||
		    (plan->has_eval && model_check_feeds(req, src.m, &plan->eval, true, "eval.data") < 0))
			goto out;
		strcpy(plan->model, src.m->name);
		train_spec_model(&plan->spec, src.m);
		plan->model_serial = src.m->serial;
	}
	if (train_spec_precision(&req->call, src.precision, &plan->spec) < 0 ||
	    train_spec_loss_scale(&req->call, src.loss_scale, &plan->spec) < 0)
		goto out;
	if (plan->spec.opt.kind == OPT_NONE)
		plan->spec.opt = (struct optimizer){ .kind = OPT_SGD, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999,
						     .eps = 1e-8, .gamma = 0.1, .step_size = 1 };
	if (!plan->spec.opt.schedule[0])
		strcpy(plan->spec.opt.schedule, "constant");
	if (resumed && (r = resume_point(req, plan, resumed)) < 0)
		goto out;
	if (detach) {
		char shown[NAMES_SHOWN_MAX];

		r = job_start_detached(req, plan, src.m ? &src.m->u.data : NULL,
				       src.m ? lookup_show(&req->call, src.m->name, shown) : "", resumed);
		goto out;
	}
	if (member >= 0) {
		struct train_job *job;

		r = train_job_start(&req->call, plan, req->params, src.m ? &src.m->u.data : NULL, &group_silent_sink,
				    NULL, &job);
		goto out;
	}
	if (train_job_start(&req->call, plan, req->params, src.m ? &src.m->u.data : NULL, &client_sink, cl,
			    &cl->job) < 0)
		goto out;
	deferred_answer_start(&cl->da, req, client_cancel); /* cannot fail: req->conn was checked */
	cl = NULL;
	r = REQUEST_DEFERRED;
out:
	free(cl);
	free(plan);
	return r;
}

int method_train_run(struct request *req)
{
	return run_request(req, -1, NULL);
}

int train_run_resume(struct daemon *d, struct job_record *rec, struct td_error *err)
{
	struct request req = { .call = { .d = d }, .method = "train.run" };
	const msgpack_object *groups;
	msgpack_unpacked u;
	uint64_t v;
	bool ok;
	int r = -1;

	td_error_clear(&req.call.err);
	msgpack_unpacked_init(&u);
	ok = tdp_unpack(&u, rec->resume, rec->resume_len) == 0 && u.data.type == MSGPACK_OBJECT_MAP &&
	     (req.params = tdp_map_find(&u.data, "request")) && req.params->type == MSGPACK_OBJECT_MAP &&
	     tdp_obj_uint(tdp_map_find(&u.data, "gid"), &v) == 0 && v <= UINT32_MAX &&
	     (groups = tdp_map_find(&u.data, "groups")) && groups->type == MSGPACK_OBJECT_ARRAY &&
	     groups->via.array.size <= ACCESS_MAX_GROUPS;
	if (ok) {
		req.call.cred = (struct access_cred){ .uid = (uid_t)rec->owner, .gid = (gid_t)v,
						      .ngroups = groups->via.array.size };
		for (uint32_t i = 0; ok && i < req.call.cred.ngroups; i++) {
			ok = tdp_obj_uint(&groups->via.array.ptr[i], &v) == 0 && v <= UINT32_MAX;
			req.call.cred.groups[i] = (gid_t)v;
		}
	}
	if (!ok)
		td_fail(&req.call.err, TDP_INTERNAL, "its saved request is damaged");
	else if (run_request(&req, -1, rec) == 0)
		r = 0;
	else if (!td_failed(&req.call.err))
		td_fail(&req.call.err, TDP_INTERNAL, "cannot start the run");
	if (r < 0)
		*err = req.call.err;
	msgpack_unpacked_destroy(&u);
	return r;
}

int train_run_member(void *data, int from, const void *msg, size_t len)
{
	struct daemon *d = data;
	struct request req = { .call = { .d = d }, .method = "train.run" };
	msgpack_unpacked u;
	const msgpack_object *a, *groups;
	uint64_t v;
	bool ok;

	/* The run before this one may end on this member a turn after rank 0
	 * saw its end: this one starts after it. */
	if (train_group_busy(d))
		return -EAGAIN;
	td_error_clear(&req.call.err);
	msgpack_unpacked_init(&u);
	ok = tdp_unpack(&u, msg, len) == 0 && u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 4;
	a = ok ? u.data.via.array.ptr : NULL;
	groups = ok ? &a[2] : NULL;
	ok = ok && groups->type == MSGPACK_OBJECT_ARRAY && groups->via.array.size <= ACCESS_MAX_GROUPS &&
	     a[3].type == MSGPACK_OBJECT_MAP && tdp_obj_uint(&a[0], &v) == 0 && v <= UINT32_MAX;
	if (ok) {
		req.call.cred.uid = (uid_t)v;
		ok = tdp_obj_uint(&a[1], &v) == 0 && v <= UINT32_MAX;
		req.call.cred.gid = (gid_t)v;
		req.call.cred.pid = 0;
		req.call.cred.ngroups = ok ? groups->via.array.size : 0;
		for (uint32_t i = 0; ok && i < req.call.cred.ngroups; i++) {
			ok = tdp_obj_uint(&groups->via.array.ptr[i], &v) == 0 && v <= UINT32_MAX;
			req.call.cred.groups[i] = (gid_t)v;
		}
	}
	if (!ok) {
		log_error("cluster: a malformed run from member %d", from);
		td_fail(&req.call.err, TDP_PROTOCOL, "the run's message was malformed");
	} else {
		req.params = &a[3];
		if (run_request(&req, from, NULL) < 0 && !td_failed(&req.call.err))
			td_fail(&req.call.err, TDP_INTERNAL, "cannot start the run");
	}
	if (td_failed(&req.call.err))
		train_group_refuse(d, &req.call.err);
	msgpack_unpacked_destroy(&u);
	return 0;
}
