/* A data-parallel train.run's steps (docs/devices.md): each device its shard
 * of the batch, forward and backward at once on all, the gradients averaged
 * (train_parallel.h: on the GPU from host memory every device imported, or
 * on the host), then each device's update, at once on all. A step is one
 * submission per device: between the halves the devices wait for each
 * other's gradients through dp_sync.h, without the loop. The shard's row
 * numbers, the gradients and the loss travel through each device's exchange
 * buffer inside the submission. Up to job->depth steps are in flight: the
 * next is built and submitted behind the one running, reading its results
 * before they are committed. Each device's submission wakes the loop when it
 * completes (graph_execute_async), and the loop serves other clients
 * meanwhile. */
#include "train/job_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/loop.h"
#include "daemon.h"
#include "engine/forward.h"
#include "engine/graph_core.h"
#include "gpu/device.h"
#include "train/dp_sync.h"
#include "status.h"

struct dp_step;

/* Device i's part of step `s`: what the exchange after its flat gradient
 * records (graph.after). */
struct dp_part {
	struct dp_step *s;
	unsigned i;
	bool bucketed;
};

/* A data-parallel step in flight: one graph per device, each one
 * submission. Built while the step before it is in flight, it reads that
 * step's results before they are committed: on the first device through
 * the caller's lookup overlay `ov`, on the others through `views`
 * (train_parallel.h); each device's queue runs the two in order. */
struct dp_step {
	struct train_job *job;
	struct graph gr[GPU_MAX_DEVICES];
	struct dp_part part[GPU_MAX_DEVICES];
	unsigned loss[GPU_MAX_DEVICES];
	int flat[GPU_MAX_DEVICES];
	int64_t step;
	unsigned pending;          /* devices whose submission has not completed */
	bool armed;                /* dp_sync_arm'ed: its devices wait for each other */
	struct lookup_overlay ov;
	struct dp_view views[GPU_MAX_DEVICES - 1];
};

/* The j-th oldest step in flight. */
static struct dp_step *step_at(struct train_job *job, unsigned j)
{
	return &job->dps[(job->head + j) % DP_MAX_DEPTH];
}

/* Let steps from `s` on through without their exchange: they fail, and no
 * device may wait for a signal that never comes. */
static void release_from(struct train_job *job, const struct dp_step *s)
{
	if (job->dp->sync && s->armed)
		dp_sync_release_from(job->dp->sync, s->step);
}

/* One device's submission completed. A failed one lets the other devices
 * through at once (they would wait for its signal). */
static void part_landed(struct graph *gr, void *data)
{
	struct dp_step *s = data;

	if (graph_wait(gr) < 0)
		release_from(s->job, s);
	if (s->pending && --s->pending == 0)
		loop_wake_idle(s->job->call.d->loop);
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
	s->armed = false;
}

void dp_discard(struct train_job *job)
{
	if (job->dps && job->nfly)
		release_from(job, step_at(job, 0));
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
	memcpy((uint8_t *)x->map + dp_index_at(job->dp, s->step),
	       job->perm + in_epoch * job->p.batch + i * job->p.shard, job->p.shard * 4);
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
	gr->arena_cache = &job->arenas; /* one queue per device runs the steps in turn */
	if (gr->nodes[s->flat[i]].ctx.out.count != job->dp->flat_count)
		return td_fail(&job->call.err, TDP_INTERNAL, "the gradients changed size during the run");
	return 0;
}

/* graph.after of device part `data`: the exchange right after the flat
 * gradient. */
static int record_exchange(struct graph *gr, struct gpu_recorder *rec, void *data)
{
	struct dp_part *pt = data;
	struct dp_step *s = pt->s;

	return dp_record_exchange(s->job->dp, rec, pt->i, s->step, gr->nodes[s->flat[pt->i]].result,
				  pt->bucketed);
}

/* Submit device i's graph of step `s`, watched: its rows in, the gradients
 * out bucket by bucket where the graph allows, the exchange after the flat
 * gradient, the loss out. The last device's is polled for up to
 * GRAPH_SPIN_NS at depth 1 on a GPU. Returns 0 or -1 after td_fail. */
static int submit_part(struct train_job *job, struct dp_step *s, unsigned i)
{
	struct graph *gr = &s->gr[i];
	struct tensor *ix = i == 0 ? &job->index : job->dp->r[i - 1].index;
	struct gpu_device *g = job->call.d->gpus[job->p.devs[i]];
	struct graph_copy cin, cout, bucket[MAX_PARAMS];
	bool poll = i + 1 == job->p.ndev && job->depth == 1 && g->props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU;
	int r;

	cin = (struct graph_copy){ .node = -1, .alloc = &ix->alloc, .host = dp_xfer(job->dp, i)->buffer,
				   .offset = dp_index_at(job->dp, s->step) };
	cout = (struct graph_copy){ .node = (int)s->loss[i], .host = dp_xfer(job->dp, i)->buffer,
				    .offset = dp_loss_at(job->dp, s->step) };
	gr->copies_before = &cin;
	gr->ncopies_before = 1;
	gr->copies_after = &cout;
	gr->ncopies_after = 1;
	/* Each gradient on its way as soon as it is made, or the whole at the end. */
	gr->copies_at = bucket;
	gr->ncopies_at = dp_grad_buckets(job->dp, gr, i, s->step, s->flat[i], bucket, MAX_PARAMS);
	s->part[i] = (struct dp_part){ .s = s, .i = i, .bucketed = gr->ncopies_at > 0 };
	gr->after = record_exchange;
	gr->after_data = &s->part[i];
	gr->after_node = (unsigned)s->flat[i];
	gr->spin_ns = poll ? 0 : 1;
	s->pending++;
	r = graph_execute_async(gr, part_landed, s);
	if (r < 0) {
		s->pending--;
		return -1;
	}
	if (r == 1)
		s->pending--;
	return 0;
}

/* Build the next step's graph on every device, then arm the exchange and
 * submit them: device by device, so the first ones run while the next are
 * submitted. Behind a step in flight, it reads what that one will store.
 * Returns 0 or -1 after td_fail (the new step freed, its devices let
 * through). */
static int submit_step(struct train_job *job)
{
	uint64_t k = job->done + job->nfly, in_epoch = k % job->p.per_epoch;
	struct dp_step *prev = job->nfly ? step_at(job, job->nfly - 1) : NULL, *s = step_at(job, job->nfly);
	int r;

	if (in_epoch == 0)
		job_shuffle_epoch(job, k / job->p.per_epoch);
	memset(s, 0, sizeof(*s));
	s->job = job;
	s->step = job->p.start_step + (int64_t)k;
	job->nfly++;
	if (step_views(job, s, prev) < 0)
		goto fail;
	for (unsigned i = 0; i < job->p.ndev; i++)
		if (build(job, s, i, in_epoch, prev != NULL) < 0)
			goto fail;
	if (job->dp->sync) {
		if ((r = dp_sync_arm(job->dp->sync, s->step)) < 0) {
			td_fail(&job->call.err, TDP_DEVICE_LOST, "data parallel: %s", strerror(-r));
			goto fail;
		}
		s->armed = true;
	}
	for (unsigned i = 0; i < job->p.ndev; i++)
		if (submit_part(job, s, i) < 0)
			goto fail;
	return 0;
fail:
	release_from(job, s);
	step_free(s);
	job->nfly--;
	return -1;
}

/* Every device's submission of `s` is done: the mean loss, then the results
 * into the store (the first device's) and the replicas. Returns 0 or -1. */
static int finish(struct train_job *job, struct dp_step *s)
{
	unsigned n = job->p.ndev;
	uint64_t gpu_ns = 0;
	double sum = 0;
	int r = 0;

	for (unsigned i = 0; i < n; i++)
		if (graph_wait(&s->gr[i]) < 0)
			r = -1;
	if (r < 0)
		return -1;
	if (job->dp->sync && dp_sync_late(job->dp->sync, s->step))
		return td_fail(&job->call.err, TDP_DEADLINE_EXCEEDED,
			       "data parallel: at step %lld a device's gradients were not out within half of "
			       "request_timeout (its queue held other work); parameters and state are as after "
			       "the step before", (long long)s->step);
	for (unsigned i = 0; i < n; i++) {
		struct graph *gr = &s->gr[i];

		sum += forward_scalar_value(gr->nodes[s->loss[i]].ctx.out.dtype,
					    (uint8_t *)dp_xfer(job->dp, i)->map + dp_loss_at(job->dp, s->step));
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
	if (job->failing && !job->nfly) {
		job->sink->fail(job->sink_data, &job->fail_err);
		return false;
	}
	if (job->cancelled && !job->nfly) {
		job_finish(job, job->stop_reason ? job->stop_reason : "cancelled");
		return false;
	}
	while (may_submit(job, hold)) {
		td_error_clear(&job->call.err);
		if (submit_step(job) == 0)
			continue;
		if (!job->nfly)
			goto failed;
		/* As at depth 1, the steps before it are applied first: the
		 * failure is reported once they landed. */
		job->failing = true;
		job->fail_err = job->call.err;
	}
	return true;
failed:
	dp_discard(job);
	job->sink->fail(job->sink_data, &job->call.err);
	return false;
}
