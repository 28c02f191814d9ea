/* train.run on one device, pipelined (docs/training.md, "Pipelined steps"):
 * up to job->depth micro-batches in flight, each one submission. Micro-batch
 * u + 1 is built and submitted while u runs: its graph reads u's results
 * (parameters, optimizer state, batch_norm statistics, .grad) before they
 * are committed, through the caller's lookup overlay (store/caller.h) that
 * names their memory. The GPU runs them one after the other (one queue; each
 * submission's first command, the rows' copy in, sits behind a full
 * barrier), so every micro-batch computes exactly what it would after the
 * one before it was committed. Each is committed in order once its loss was
 * read and is finite; a non-finite loss discards it and every later one. */
#include "train/job.h"
#include "train/job_impl.h"

#include <math.h>
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
#include "mode.h"
#include "status.h"
#include "store/names.h"
#include "store/store.h"

/* Each slot's part of job->xfer: its loss (8 bytes kept), with precision
 * f16 whether its update was skipped and the scale after it (f32 each),
 * then its rows. */
#define XFER_LOSS 0
#define XFER_FOUND 8
#define XFER_SCALE 12
#define XFER_INDEX 16

static uint64_t slot_bytes(const struct train_job *job)
{
	return (XFER_INDEX + job->index.bytes + 255) & ~(uint64_t)255;
}

/* The j-th oldest slot in flight. */
static struct pipe_slot *slot_at(struct train_job *job, unsigned j)
{
	return &job->pipe[(job->head + j) % job->depth];
}

static uint64_t slot_offset(const struct train_job *job, const struct pipe_slot *s)
{
	return (uint64_t)(s - job->pipe) * slot_bytes(job);
}

unsigned job_default_depth(const struct train_job *job, unsigned max)
{
	unsigned depth = TRAIN_DEFAULT_DEPTH;

	/* On a CPU device the steps' work and the host's share the cores: the
	 * overlap gains little, and every step in flight lengthens a shutdown. */
	if (devices_of(job->call.d, &job->index)->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU)
		depth = 1;
	if (job->p.depth)
		depth = job->p.depth;
	return depth < max ? depth : max;
}

int pipe_start(struct caller *call, struct train_job *job)
{
	struct gpu_device *g = devices_of(call->d, &job->index);

	job->depth = job_default_depth(job, TRAIN_MAX_DEPTH);
	for (unsigned k = 0; k < TRAIN_MAX_DEPTH; k++)
		job->pipe[k].job = job;
	if (gpu_host_buffer_create(g, job->depth * slot_bytes(job), &job->xfer) < 0)
		return td_fail(&call->err, TDP_RESOURCE_EXHAUSTED, "out of memory for the run");
	return 0;
}

static void slot_free(struct pipe_slot *s)
{
	graph_free(&s->gr);
	s->gr = (struct graph){ 0 };
	free(s->ov.tensors);
	s->ov = (struct lookup_overlay){ 0 };
	s->landed = false;
}

void pipe_discard(struct train_job *job)
{
	/* The newest first: each reads the memory of those before it. */
	while (job->nfly)
		slot_free(slot_at(job, --job->nfly));
	job->head = 0;
	job->micro = 0;
	job->micro_sum = 0;
}

bool pipe_landed(const struct train_job *job, bool all)
{
	unsigned n = all ? job->nfly : job->nfly > 0;

	for (unsigned j = 0; j < n; j++)
		if (!job->pipe[(job->head + j) % job->depth].landed)
			return false;
	return true;
}

/* The overlay entry of node `i` of `gr`: its result as the tensor that
 * graph_commit will store (the owner, group and mode of the one it replaces,
 * or of a new one). */
static void overlay_entry(struct caller *call, const struct graph *gr, unsigned i, struct tensor *t)
{
	const struct node *nd = &gr->nodes[i];
	struct tensor *old;

	memset(t, 0, sizeof(*t));
	graph_out_meta(gr, i, t);
	t->device = nd->device;
	t->alloc = nd->alloc;
	if (store_lookup(call->d->store, t->name, t->name_len, &access_daemon, 0, &old, NULL) == 0) {
		t->owner = old->owner;
		t->group = old->group;
		t->mode = old->mode;
		return;
	}
	names_new_owner(&call->cred, t->name, &t->owner, &t->group);
	t->mode = TDP_MODE_PRIVATE;
	if (nd->out_like && nd->like_owner != call->cred.uid) {
		t->owner = nd->like_owner;
		t->group = nd->like_group;
		t->mode = nd->like_mode;
	}
}

/* One result of the slots in flight: its name, and the slot and node that
 * make it (ordered so that the newest of a name sorts last). */
struct overlay_src {
	const char *name;
	unsigned slot, node;
};

static int overlay_src_cmp(const void *pa, const void *pb)
{
	const struct overlay_src *a = pa, *b = pb;
	int c = strcmp(a->name, b->name);

	if (c)
		return c;
	return a->slot != b->slot ? (a->slot < b->slot ? -1 : 1) : (a->node > b->node) - (a->node < b->node);
}

int job_overlay(struct caller *call, const struct graph *const *grs, unsigned n, struct lookup_overlay *ov)
{
	struct overlay_src *src;
	unsigned cap = 0, m = 0;

	for (unsigned j = 0; j < n; j++)
		for (unsigned i = 0; i < grs[j]->n; i++)
			cap += grs[j]->nodes[i].has_out;
	if (!cap)
		return 0;
	src = malloc(cap * sizeof(*src));
	ov->tensors = calloc(cap, sizeof(*ov->tensors));
	if (!src || !ov->tensors) {
		free(src);
		return td_fail(&call->err, TDP_INTERNAL, "out of memory");
	}
	for (unsigned j = 0; j < n; j++)
		for (unsigned i = 0; i < grs[j]->n; i++)
			if (grs[j]->nodes[i].has_out)
				src[m++] = (struct overlay_src){ .name = grs[j]->nodes[i].out_name, .slot = j, .node = i };
	/* Sorted by name, as overlay_find searches it; the newest of each. */
	qsort(src, m, sizeof(*src), overlay_src_cmp);
	for (unsigned k = 0; k < m; k++)
		if (k + 1 == m || strcmp(src[k].name, src[k + 1].name))
			overlay_entry(call, grs[src[k].slot], src[k].node, &ov->tensors[ov->n++]);
	free(src);
	return 0;
}

/* Slot `s`'s overlay: what the slots in flight before it store, the newest
 * of each name. Returns 0 or -1 after td_fail. */
static int build_overlay(struct train_job *job, struct pipe_slot *s)
{
	const struct graph *grs[TRAIN_MAX_DEPTH];

	for (unsigned j = 0; j < job->nfly; j++)
		grs[j] = &slot_at(job, j)->gr;
	return job_overlay(&job->call, grs, job->nfly, &s->ov);
}

/* Slot `s`'s submission completed: the loop goes on with the job. */
static void slot_landed(struct graph *gr, void *data)
{
	struct pipe_slot *s = data;

	(void)gr;
	s->landed = true;
	loop_wake_idle(s->job->call.d->loop);
}

/* Build micro-batch s->unit into slot `s` (the caller's lookups seeing what
 * the slots before it store) and submit it. Returns 0, or -1 after td_fail. */
static int slot_build(struct train_job *job, struct pipe_slot *s)
{
	uint64_t n = job->p.accumulate, k = s->unit % n, step_in_run = s->unit / n;
	uint64_t in_epoch = step_in_run % job->p.per_epoch, off = slot_offset(job, s);
	int64_t step = job->p.start_step + (int64_t)step_in_run;
	struct graph *gr = &s->gr;
	struct graph_copy cin, cout[3];
	const struct node *ln;
	struct step_nodes sn;
	int r;

	*gr = (struct graph){ .call = &job->call };
	if (n > 1) {
		job->p.spec.accumulate = true;
		job->p.spec.fresh = k == 0;
		job->p.spec.apply = k == n - 1;
		job->p.spec.grad_scale = 1.0 / (double)n;
		/* Each micro-batch its own random stream (docs/training.md). */
		job->p.spec.run_seed = job->p.seed + (k << 32);
	}
	if (k == 0 && in_epoch == 0)
		job_shuffle_epoch(job, step_in_run / job->p.per_epoch);
	memcpy((uint8_t *)job->xfer.map + off + XFER_INDEX, job->perm + (in_epoch * n + k) * job->p.batch,
	       job->index.bytes);
	if (build_overlay(job, s) < 0)
		return -1;
	if (job->nodes_hint && graph_reserve(gr, job->nodes_hint) < 0)
		return td_fail(&job->call.err, TDP_RESOURCE_EXHAUSTED, "out of memory for the step");
	job->call.overlay = s->ov.n ? &s->ov : NULL;
	r = train_build_step(&job->call, &(struct step_input){ .spec = &job->p.spec, .nodes = job->nodes,
								 .feeds = &job->p.train, .step = step, .train = true },
			     gr, &sn);
	s->loss = sn.loss;
	s->found = r < 0 ? -1 : sn.found;
	s->scale = r < 0 ? -1 : sn.scale;
	s->lr = sn.lr;
	job->call.overlay = NULL;
	gr->arena_cache = &job->arenas;
	/* Outputs, their room and quotas: against the store, as a step's. */
	if (r < 0 || graph_check_outputs(gr) < 0)
		return -1;
	job->nodes_hint = gr->n;
	ln = &gr->nodes[s->loss];
	if (ln->ctx.out.count != 1 || !op_dtype_is_float(ln->ctx.out.dtype))
		return td_fail(&job->call.err, TDP_INVALID_ARGUMENT, "'%s' is no floating scalar node", ln->id);
	/* The rows' copy in is the submission's first command, behind a full
	 * barrier (gpu_rec_host_copy's first): it waits for the submissions
	 * before it on the queue (job->index is theirs until then, and so is
	 * the memory of what this one reads). Pipelining depends on it. */
	cin = (struct graph_copy){ .node = -1, .alloc = &job->index.alloc, .host = job->xfer.buffer,
				   .offset = off + XFER_INDEX };
	cout[0] = (struct graph_copy){ .node = (int)s->loss, .host = job->xfer.buffer, .offset = off + XFER_LOSS };
	gr->ncopies_after = 1;
	if (s->found >= 0)
		cout[gr->ncopies_after++] = (struct graph_copy){ .node = s->found, .host = job->xfer.buffer,
								 .offset = off + XFER_FOUND };
	if (s->scale >= 0)
		cout[gr->ncopies_after++] = (struct graph_copy){ .node = s->scale, .host = job->xfer.buffer,
								 .offset = off + XFER_SCALE };
	gr->copies_before = &cin;
	gr->copies_after = cout;
	gr->ncopies_before = 1;
	if (!job->call.d->cfg.async_graphs) {
		if (graph_execute(gr) < 0)
			return -1;
		s->landed = true;
		return 0;
	}
	/* On a CPU device (lavapipe) the loop's 1 ms poll would take a core
	 * from the step's own threads (docs/performance.md): look once. So
	 * does a pipelined run anywhere: polling, the loop would wait for each
	 * short step (under 1 ms on a real GPU) instead of building the next. */
	if (job->depth > 1 ||
	    devices_of(job->call.d, &job->index)->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU)
		gr->spin_ns = 1;
	r = graph_execute_async(gr, slot_landed, s);
	if (r < 0)
		return -1;
	s->landed = r == 1;
	return 0;
}

/* Submit the next micro-batch into a free slot. Returns 0 or -1 after
 * td_fail (nothing of it left in flight). */
static int pipe_submit(struct train_job *job)
{
	struct pipe_slot *s = slot_at(job, job->nfly);

	s->unit = job->next_unit;
	s->landed = false;
	if (slot_build(job, s) < 0) {
		slot_free(s);
		return -1;
	}
	job->nfly++;
	job->next_unit++;
	return 0;
}


/* How long after a request that uses the GPU jobs keep one step in flight
 * (issue 34: the request then waits behind one step on the device's queue,
 * not pipeline_depth of them; pings and info change nothing). */
#define INTERACTIVE_NS (100 * 1000 * 1000)

unsigned job_depth_now(const struct train_job *job)
{
	return daemon_now_ns(CLOCK_MONOTONIC) - job->call.d->request_ns < INTERACTIVE_NS ? 1 : job->depth;
}

/* The oldest micro-batch landed: its loss (a non-finite one fails the step,
 * nothing stored), then its results into the store. Returns 0 or -1 after
 * td_fail. */
static int pipe_commit_oldest(struct train_job *job, double *ret_loss)
{
	struct pipe_slot *s = slot_at(job, 0);
	struct graph *gr = &s->gr;
	int64_t step = job->p.start_step + (int64_t)(s->unit / job->p.accumulate);
	int r = graph_wait(gr);
	double loss = 0;

	if (r == 0) {
		loss = forward_scalar_value(gr->nodes[s->loss].ctx.out.dtype,
					    (const uint8_t *)job->xfer.map + slot_offset(job, s) + XFER_LOSS);
		if (!isfinite(loss))
			r = td_fail(&job->call.err, TDP_FAILED_PRECONDITION,
				    "the loss is %s at step %lld; parameters and state are unchanged",
				    isnan(loss) ? "NaN" : "infinite", (long long)step);
	}
	job->gpu_ns += gr->gpu_ns;
	job->dispatches += gr->dispatches;
	if (gr->peak_bytes > job->peak_bytes)
		job->peak_bytes = gr->peak_bytes;
	if (r == 0)
		r = graph_commit_all(gr);
	if (r < 0)
		return -1;
	/* Skipped or not, the step is committed: its updates kept the old values. */
	if (s->found >= 0)
		job->skipped_steps += forward_scalar_value(TDP_DTYPE_F32, (const uint8_t *)job->xfer.map +
							   slot_offset(job, s) + XFER_FOUND) != 0;
	if (s->scale >= 0)
		job->loss_scale = forward_scalar_value(TDP_DTYPE_F32, (const uint8_t *)job->xfer.map +
						       slot_offset(job, s) + XFER_SCALE);
	job->lr = s->lr;
	slot_free(s);
	job->head = (job->head + 1) % job->depth;
	job->nfly--;
	*ret_loss = loss;
	return 0;
}

bool pipe_turn(struct train_job *job, bool hold)
{
	uint64_t n = job->p.accumulate, units = job->p.total * n;

	while (job->nfly && pipe_landed(job, false)) {
		double loss;

		td_error_clear(&job->call.err);
		if (pipe_commit_oldest(job, &loss) < 0) {
			/* Not applied: neither it nor anything after it. */
			pipe_discard(job);
			job->sink->fail(job->sink_data, &job->call.err);
			return false;
		}
		job->micro_sum += loss;
		if (++job->micro < n)
			continue;
		job->last_loss = job->micro_sum / (double)n;
		job->micro = 0;
		job->micro_sum = 0;
		/* Reports, evaluation (of what is committed) and the end: later
		 * micro-batches in flight are then freed, not applied. */
		if (!job_after_step(job, job->p.start_step + (int64_t)job->done))
			return false;
	}
	if (job->failing) {
		if (job->nfly)
			return true; /* those before the one that failed land first */
		job->sink->fail(job->sink_data, &job->fail_err);
		return false;
	}
	if (job->cancelled) {
		if (job->nfly)
			return true; /* what was submitted lands and is applied first */
		job_finish(job, job->stop_reason ? job->stop_reason : "cancelled");
		return false;
	}
	if (hold || job->detached || !job->sink->ready(job->sink_data))
		return true;
	while (job->nfly < job_depth_now(job) && job->next_unit < units) {
		td_error_clear(&job->call.err);
		if (pipe_submit(job) < 0) {
			/* As at depth 1, the steps before it are applied first:
			 * the failure is reported once they landed. */
			job->failing = true;
			job->fail_err = job->call.err;
			return pipe_turn(job, true);
		}
		/* Done at once (no completion thread, or within the spin): it
		 * is committed at the next turn, other clients served between. */
		if (slot_at(job, job->nfly - 1)->landed)
			break;
	}
	return true;
}
