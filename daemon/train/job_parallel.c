/* A data-parallel train.run's steps (docs/devices.md): each device its shard
 * of the batch, forward and backward at once on all, the gradients averaged
 * (train_parallel.h: on the GPU from host memory every device imported, or
 * on the host), then each device's update, at once on all. The shard's row
 * numbers, the gradients and the loss travel through each device's exchange
 * buffer inside the step's two submissions (no round trips of their own).
 * Neither half is waited for on the loop: each device's submission wakes the
 * loop when it completes (graph_submit_part_async), and the loop serves
 * other clients meanwhile. */
#include "train/job_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/loop.h"
#include "daemon.h"
#include "engine/forward.h"
#include "engine/graph_core.h"
#include "gpu/device.h"
#include "status.h"

/* A data-parallel step in flight: one graph per device, its two halves
 * submitted in turn. Pipelined (job->depth 2), a step is built and its
 * first half submitted right behind the updates of the step before it,
 * reading that step's results before they are committed: on the first
 * device through the caller's lookup overlay `ov`, on the others through
 * `views` (train_parallel.h); each device's queue runs the two in order. */
struct dp_step {
	struct train_job *job;
	struct graph gr[GPU_MAX_DEVICES];
	unsigned loss[GPU_MAX_DEVICES];
	int flat[GPU_MAX_DEVICES];
	int64_t step;
	unsigned half;             /* 1: forward and backward in flight, 2: the update */
	unsigned pending;          /* devices whose half has not completed */
	struct lookup_overlay ov;
	struct dp_view views[GPU_MAX_DEVICES - 1];
};

/* The j-th oldest step in flight. */
static struct dp_step *step_at(struct train_job *job, unsigned j)
{
	return &job->dps[(job->head + j) % DP_MAX_DEPTH];
}

/* One device's half completed. */
static void half_landed(struct graph *gr, void *data)
{
	struct dp_step *s = data;

	(void)gr;
	if (s->pending && --s->pending == 0)
		loop_wake_idle(s->job->call.d->loop);
}

/* Submit nodes [first, last) of device i's graph, watched; a submission that
 * finished at once counts as landed. The last device's first half is polled
 * for up to GRAPH_SPIN_NS first (a short half is then answered without the
 * completion thread's hand-off), unless it is a CPU device (polling would
 * take a core from its own threads); so is its update, unless the next step
 * goes behind it. The others not at all (the next device's half is built
 * meanwhile). Returns 0 or -1 after td_fail. */
static int submit_half(struct dp_step *s, unsigned i, unsigned first, unsigned last)
{
	struct train_job *job = s->job;
	struct gpu_device *g = job->call.d->gpus[job->p.devs[i]];
	bool poll = i + 1 == job->p.ndev && g->props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU &&
		    (s->half == 1 || job->depth == 1);
	int r;

	s->pending++;
	s->gr[i].spin_ns = poll ? 0 : 1;
	r = graph_submit_part_async(&s->gr[i], first, last, half_landed, s);
	if (r < 0) {
		s->pending--;
		return -1;
	}
	if (r == 1)
		s->pending--;
	return 0;
}

/* Free step `s`'s graphs (waiting for their work), nothing applied. */
static void step_free(struct dp_step *s)
{
	for (unsigned i = 0; i < GPU_MAX_DEVICES; i++)
		graph_free(&s->gr[i]);
	memset(s->gr, 0, sizeof(s->gr));
	for (unsigned i = 0; i < GPU_MAX_DEVICES - 1; i++)
		dp_view_free(&s->views[i]);
	free(s->ov.tensors);
	s->ov = (struct lookup_overlay){ 0 };
	s->pending = 0;
}

void dp_discard(struct train_job *job)
{
	/* The newest first: it reads the memory of the one before it. */
	while (job->dps && job->nfly)
		step_free(step_at(job, --job->nfly));
	job->head = 0;
	free(job->dps);
	job->dps = NULL;
}

bool dp_landed(const struct train_job *job, bool all)
{
	unsigned n = all ? job->nfly : job->nfly > 0;

	for (unsigned j = 0; job->dps && j < n; j++)
		if (job->dps[(job->head + j) % DP_MAX_DEPTH].pending)
			return false;
	return true;
}

/* Step `s`'s lookups: built behind step `prev` (NULL: none in flight), it
 * reads what prev will store. Returns 0 or -1 after td_fail. */
static int step_views(struct train_job *job, struct dp_step *s, const struct dp_step *prev)
{
	const struct graph *g0;

	if (!prev)
		return 0;
	g0 = &prev->gr[0];
	if (job_overlay(&job->call, &g0, 1, &s->ov) < 0)
		return -1;
	for (unsigned i = 1; i < job->p.ndev; i++)
		if (dp_view_after(&job->dp->r[i - 1], &prev->gr[i], &s->views[i - 1]) < 0)
			return td_fail(&job->call.err, TDP_INTERNAL, "out of memory");
	return 0;
}

/* Build device i's graph of step `s` reading its shard's rows.
 * Returns 0 or -1 after td_fail. */
static int build(struct train_job *job, struct dp_step *s, unsigned i, uint64_t in_epoch, bool behind)
{
	struct gpu_host_buffer *x = dp_xfer(job->dp, i);
	struct graph *gr = &s->gr[i];
	struct step_nodes sn;
	int r;

	*gr = (struct graph){ .call = &job->call };
	if (i > 0)
		gr->replica = behind ? &s->views[i - 1].view : &job->dp->r[i - 1].view;
	memcpy((uint8_t *)x->map + job->dp->at.index, job->perm + in_epoch * job->p.batch + i * job->p.shard,
	       job->p.shard * 4);
	job->call.overlay = s->ov.n ? &s->ov : NULL;
	r = train_build_step(&job->call, &(struct step_input){ .spec = &job->p.spec, .nodes = job->nodes,
							     .feeds = &job->p.train, .step = s->step,
							     .train = true, .flat = true },
			     gr, &sn);
	job->call.overlay = NULL;
	if (r < 0 || (i == 0 && graph_check_outputs(gr) < 0))
		return -1;
	s->loss[i] = sn.loss;
	s->flat[i] = sn.flat;
	job->lr = sn.lr;
	gr->fuse = false; /* a fused kernel could span the two halves */
	gr->arena_cache = &job->arenas; /* one queue per device runs the steps in turn */
	if (gr->nodes[s->flat[i]].ctx.out.count != job->dp->flat_count)
		return td_fail(&job->call.err, TDP_INTERNAL, "the gradients changed size during the run");
	return 0;
}

/* Build every device's graph of the next step and submit its forward and
 * backward, the gradients leaving bucket by bucket (or at the end): device
 * by device, so the first ones run while the next are built. Behind a step
 * in flight (its updates submitted), it reads what that one will store.
 * Returns 0 or -1 after td_fail (the new step freed). */
static int first_half(struct train_job *job)
{
	uint64_t in_epoch = (job->done + job->nfly) % job->p.per_epoch;
	struct dp_step *prev = job->nfly ? step_at(job, job->nfly - 1) : NULL, *s = step_at(job, job->nfly);
	struct graph_copy cin, cout, bucket[MAX_PARAMS];

	if (in_epoch == 0)
		job_shuffle_epoch(job, (job->done + job->nfly) / job->p.per_epoch);
	s->job = job;
	s->step = job->p.start_step + (int64_t)(job->done + job->nfly);
	s->half = 1;
	s->pending = 0;
	job->nfly++;
	if (step_views(job, s, prev) < 0)
		goto fail;
	for (unsigned i = 0; i < job->p.ndev; i++) {
		struct graph *gr = &s->gr[i];
		struct tensor *ix = i == 0 ? &job->index : job->dp->r[i - 1].index;

		if (build(job, s, i, in_epoch, prev != NULL) < 0)
			goto fail;
		cin = (struct graph_copy){ .node = -1, .alloc = &ix->alloc, .host = dp_xfer(job->dp, i)->buffer,
					   .offset = job->dp->at.index };
		gr->copies_before = &cin;
		gr->ncopies_before = 1;
		/* Each gradient on its way as soon as it is made, or the whole at the end. */
		gr->copies_at = bucket;
		gr->ncopies_at = dp_grad_buckets(job->dp, gr, i, s->step, s->flat[i], bucket, MAX_PARAMS);
		gr->copies_after = &cout;
		gr->ncopies_after = gr->ncopies_at ? 0 : dp_grad_out(job->dp, i, s->step, s->flat[i], &cout);
		if (submit_half(s, i, 0, (unsigned)s->flat[i] + 1) < 0)
			goto fail;
	}
	return 0;
fail:
	step_free(s);
	job->nfly--;
	return -1;
}

/* The outcome of every device's half of `s` (landed: graph_wait returns at
 * once). Returns 0 or -1 after td_fail. */
static int wait_all(struct train_job *job, struct dp_step *s)
{
	int r = 0;

	for (unsigned i = 0; i < job->p.ndev; i++)
		if (graph_wait(&s->gr[i]) < 0)
			r = -1;
	return r;
}

/* Every device's gradients of `s` are out: the mean (on the host, or each
 * device's update starts with it), then every device's update (mean in,
 * loss out). */
static int second_half(struct train_job *job, struct dp_step *s)
{
	struct graph_copy cin[GPU_MAX_DEVICES], cout[GPU_MAX_DEVICES];
	unsigned n = job->p.ndev;

	if (wait_all(job, s) < 0)
		return -1;
	dp_exchange(job->dp);
	s->half = 2;
	for (unsigned i = 0; i < n; i++) {
		struct graph *gr = &s->gr[i];

		cout[i] = (struct graph_copy){ .node = (int)s->loss[i], .host = dp_xfer(job->dp, i)->buffer,
					       .offset = job->dp->at.loss };
		gr->copies_before = &cin[i];
		gr->ncopies_before = dp_grad_in(job->dp, i, s->step, s->flat[i], &cin[i]);
		gr->copies_after = &cout[i];
		gr->ncopies_after = 1;
		if (submit_half(s, i, (unsigned)s->flat[i] + 1, gr->n) < 0)
			return -1;
	}
	return 0;
}

/* Every update of `s` is done: the mean loss, then the results into the
 * store (the first device's) and the replicas. Returns 0 or -1. */
static int finish(struct train_job *job, struct dp_step *s)
{
	unsigned n = job->p.ndev;
	uint64_t gpu_ns = 0;
	double sum = 0;

	if (wait_all(job, s) < 0)
		return -1;
	for (unsigned i = 0; i < n; i++) {
		struct graph *gr = &s->gr[i];

		sum += forward_scalar_value(gr->nodes[s->loss[i]].ctx.out.dtype,
					    (uint8_t *)dp_xfer(job->dp, i)->map + job->dp->at.loss);
		gpu_ns = gr->gpu_ns > gpu_ns ? gr->gpu_ns : gpu_ns;
	}
	/* profile: the slowest device's time, the first device's kernels and peak */
	job->gpu_ns += gpu_ns;
	job->dispatches += s->gr[0].dispatches;
	if (s->gr[0].peak_bytes > job->peak_bytes)
		job->peak_bytes = s->gr[0].peak_bytes;
	job->last_loss = sum / n;
	if (!isfinite(job->last_loss))
		return td_fail(&job->call.err, TDP_FAILED_PRECONDITION,
			       "the loss is %s at step %lld; parameters and state are unchanged",
			       isnan(job->last_loss) ? "NaN" : "infinite", (long long)s->step);
	if (graph_commit_all(&s->gr[0]) < 0)
		return -1;
	for (unsigned i = 1; i < n; i++)
		if (dp_commit(job->dp, &job->dp->r[i - 1], &s->gr[i]) < 0)
			return td_fail(&job->call.err, TDP_INTERNAL, "out of memory");
	return 0;
}

/* Whether the job may submit another step now. */
static bool may_submit(struct train_job *job, bool hold)
{
	return !hold && !job->cancelled && !job->failing && job->nfly < job_depth_now(job) &&
	       job->done + job->nfly < job->p.total && job->sink->ready(job->sink_data);
}

/* The next step's first half behind the updates just submitted; a failure
 * is reported once the steps before it landed and were applied (as at
 * depth 1). */
static void submit_behind(struct train_job *job, bool hold)
{
	td_error_clear(&job->call.err);
	if (!may_submit(job, hold) || first_half(job) == 0)
		return;
	job->failing = true;
	job->fail_err = job->call.err;
}

bool dp_turn(struct train_job *job, bool hold)
{
	if (!job->dps && !(job->dps = calloc(DP_MAX_DEPTH, sizeof(*job->dps)))) {
		td_fail(&job->call.err, TDP_INTERNAL, "out of memory");
		goto failed;
	}
	td_error_clear(&job->call.err);
	while (job->nfly && !step_at(job, 0)->pending) {
		struct dp_step *s = step_at(job, 0);
		int64_t step = s->step;

		if (s->half == 1) {
			if (second_half(job, s) < 0)
				goto failed;
			submit_behind(job, hold);
			return true;
		}
		if (finish(job, s) < 0)
			goto failed;
		step_free(s);
		job->head = (job->head + 1) % DP_MAX_DEPTH;
		job->nfly--;
		/* Reports, evaluation (of what is committed) and the end: a
		 * step in flight behind it is then freed, not applied. */
		if (!job_after_step(job, step))
			return false;
	}
	if (job->nfly)
		return true;
	if (job->failing) {
		job->sink->fail(job->sink_data, &job->fail_err);
		return false;
	}
	if (job->cancelled) {
		job_finish(job, job->stop_reason ? job->stop_reason : "cancelled");
		return false;
	}
	if (!may_submit(job, hold) || first_half(job) == 0)
		return true;
failed:
	dp_discard(job);
	job->sink->fail(job->sink_data, &job->call.err);
	return false;
}
