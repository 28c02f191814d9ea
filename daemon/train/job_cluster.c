/* A train.run across the group of daemons (docs/cluster.md): every member
 * runs the same job on its own store, on its shard of each global batch.
 * The member asked (rank 0) sends the request to the others; then, all in
 * the same order on every member, through the cluster's MPI thread
 * (cluster.h): the members' reports (Iallgather: each one's checks passed,
 * rows and sizes agree), the parameters from rank 0 (Ibcast), and at each
 * step the row-weighted gradients, loss and flags (Iallreduce). The job
 * waits for each in a phase of its own, never blocking the loop. Members
 * that all share one host put their gradients in shared memory instead
 * (group_shm.h): the step's allreduce then carries only loss and flags. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/loop.h"
#include "daemon.h"
#include "devices.h"
#include "engine/forward.h"
#include "engine/graph_core.h"
#include "gpu/transfer.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/store.h"
#include "train/cluster.h"
#include "train/dp_sync.h"
#include "train/group_shm.h"
#include "train/job_impl.h"

enum gphase { G_SYNC, G_BCAST, G_SHM, G_READY, G_LOCAL, G_EXCHANGE, G_APPLY, G_REPORT, G_FINAL };

/* What every member tells the others: at the start, and after a step that
 * failed somewhere. */
struct report {
	int32_t code;              /* 0: fine, else a tdp_status */
	uint32_t pad;
	uint64_t nsamples, flat_count, param_bytes;
	uint64_t data_sig;         /* the data tensors' dtypes and shapes (data_sig) */
	uint64_t shm_token;        /* rank 0: the shared exchange region's name, 0: none */
	char msg[TDP_MAX_ERROR_MESSAGE - 40];
};

struct group_run {
	enum gphase phase;
	struct cluster *c;
	struct cluster_op *op;     /* the operation the phase waits for */
	struct cluster_op *xop;    /* the steps' exchange, reused (op while it runs) */
	struct dp *x;              /* the exchange buffer (train_parallel.h), no replicas */
	struct graph gr;           /* the step between its two halves */
	unsigned loss;
	int flat;
	uint64_t flat_count, param_bytes;
	int64_t step;
	struct td_error local;     /* this member's failure in the step, for the report */
	bool gpu_busy;             /* a half of the step runs on the device (G_LOCAL, G_APPLY) */
	struct group_shm *shm;     /* the members' shared gradients, once all agreed */
	struct dp_sync *sync;      /* with shm: the word between a step's halves */
	bool bucketed;             /* the step's gradients go out bucket by bucket */
	uint64_t shm_token;        /* rank 0: the region it created, to unlink */
	bool shm_agreed;
};

/* Done with g->op (the exchange stays for the next step). */
static void drop_op(struct group_run *g)
{
	if (g->op != g->xop)
		cluster_op_free(g->c, g->op);
	g->op = NULL;
}

static int fail_broken(struct train_job *job)
{
	struct cluster_state cs = cluster_state(job->g->c);

	return td_fail(&job->call.err, TDP_UNAVAILABLE, "the group is broken: %s", cs.why);
}

/* Find the run's parameters in the store, with their total size. */
static int params_of(struct train_job *job, struct tensor **ts, uint64_t *ret_bytes)
{
	uint64_t bytes = 0;

	for (unsigned k = 0; k < job->p.spec.np; k++) {
		if (store_lookup(job->call.d->store, job->p.spec.names[k], strlen(job->p.spec.names[k]),
				 &access_daemon, 0, &ts[k], NULL) < 0)
			return td_fail(&job->call.err, TDP_NOT_FOUND, "parameter '%s' is gone", job->p.spec.names[k]);
		bytes += ts[k]->bytes;
	}
	*ret_bytes = bytes;
	return 0;
}

/* A hash of the dtype and shape of every data tensor of the run: members
 * must hold the same data set. */
static uint64_t data_sig(struct train_job *job)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (unsigned k = 0; k < job->p.train.n; k++) {
		struct tensor *t = feeds_source(&job->call, &job->p.train, k);
		uint64_t v[2 + 8] = { t ? (uint64_t)t->dtype : ~0ull, t ? t->rank : 0 };

		for (unsigned i = 0; t && i < t->rank && i < 8; i++)
			v[2 + i] = t->shape[i];
		for (size_t i = 0; i < sizeof(v); i++)
			h = (h ^ ((const uint8_t *)v)[i]) * 0x100000001b3ull;
	}
	td_error_clear(&job->call.err);
	return h;
}

static struct cluster_op *report_op(struct cluster *c, const struct report *mine)
{
	struct cluster_state cs = cluster_state(c);
	struct cluster_op *op = cluster_op_new((size_t)cs.size * sizeof(*mine));

	if (op)
		memcpy(cluster_op_data(op), mine, sizeof(*mine));
	return op;
}

void train_group_refuse(struct daemon *d, const struct td_error *err)
{
	struct report mine = { .code = err->code ? err->code : TDP_INTERNAL };
	struct cluster_op *op;

	memcpy(mine.msg, err->message, sizeof(mine.msg) - 1);
	op = report_op(d->cluster, &mine);
	if (!op) {
		cluster_break(d->cluster, "out of memory for a member's report");
		return;
	}
	/* The others wait for this member's report; nothing waits here. */
	cluster_allgather(d->cluster, op, sizeof(mine));
	cluster_op_free(d->cluster, op);
}

bool train_group_busy(const struct daemon *d)
{
	return d->group_busy;
}

/* Whether this member offers the shared-memory exchange: every member on
 * this host, the batch split evenly (the mean kernel weighs the members
 * alike) and not turned off (TENSORD_GROUP_EXCHANGE=mpi, to compare). */
static bool shm_wanted(const struct train_job *job, int size)
{
	const char *env = getenv("TENSORD_GROUP_EXCHANGE");

	return size >= 2 && cluster_env_local_size() == size && job->p.batch % (uint64_t)size == 0 &&
	       !(env && !strcmp(env, "mpi"));
}

const char *group_exchange_name(const struct train_job *job)
{
	return job->g && job->g->shm ? "shared" : "mpi";
}

/* The request for the other members: [uid, gid, [groups], params] with the
 * params less what only the asking member does (eval). */
static int send_run(struct train_job *job)
{
	const msgpack_object *params = &job->params.data.via.array.ptr[0];
	const struct access_cred *cr = &job->call.cred;
	struct cluster_op *op = NULL;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint32_t keep = 0;
	int fail;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	for (uint32_t i = 0; i < params->via.map.size; i++)
		if (!tdp_obj_str_eq(&params->via.map.ptr[i].key, "eval"))
			keep++;
	fail = msgpack_pack_array(&pk, 4) || msgpack_pack_uint32(&pk, cr->uid) || msgpack_pack_uint32(&pk, cr->gid) ||
	       msgpack_pack_array(&pk, cr->ngroups);
	for (uint32_t i = 0; !fail && i < cr->ngroups; i++)
		fail = msgpack_pack_uint32(&pk, cr->groups[i]);
	fail = fail || msgpack_pack_map(&pk, keep);
	for (uint32_t i = 0; !fail && i < params->via.map.size; i++)
		if (!tdp_obj_str_eq(&params->via.map.ptr[i].key, "eval"))
			fail = msgpack_pack_object(&pk, params->via.map.ptr[i].key) ||
			       msgpack_pack_object(&pk, params->via.map.ptr[i].val);
	if (!fail && (op = cluster_op_new(sb.size)))
		memcpy(cluster_op_data(op), sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	if (!op)
		return td_fail(&job->call.err, TDP_INTERNAL, "out of memory");
	cluster_send_ctrl(job->g->c, op);
	cluster_op_free(job->g->c, op);
	return 0;
}

int group_begin(struct caller *call, struct train_job *job)
{
	struct group_run *g = calloc(1, sizeof(*g));
	struct tensor *ts[MAX_PARAMS];
	struct graph gr = { .call = call };
	struct report mine = { 0 };
	struct step_nodes sn;
	int r;

	if (!g)
		return td_fail(&call->err, TDP_INTERNAL, "out of memory");
	job->g = g;
	g->c = call->d->cluster;
	g->phase = G_SYNC;
	r = train_build_step(call, &(struct step_input){ .spec = &job->p.spec, .nodes = job->nodes,
							   .feeds = &job->p.train, .step = job->p.start_step,
							   .train = true, .flat = true }, &gr, &sn);
	if (r == 0)
		g->flat_count = gr.nodes[sn.flat].ctx.out.count;
	graph_free(&gr);
	if (r < 0 || params_of(job, ts, &g->param_bytes) < 0)
		return -1;
	r = dp_start(call->d, &job->p.device, 1, NULL, 0, job->p.shard, g->flat_count, 1, &g->x);
	if (r < 0)
		return td_fail(&call->err, TDP_RESOURCE_EXHAUSTED, "no memory for the exchange buffer (%s)",
			       strerror(-r));
	mine = (struct report){ .nsamples = job->p.nsamples, .flat_count = g->flat_count,
				.param_bytes = g->param_bytes, .data_sig = data_sig(job) };
	if (job->p.rank == 0 && shm_wanted(job, cluster_state(g->c).size)) {
		uint64_t token = group_shm_token();

		if (group_shm_open(call->d->gpus[job->p.device], token, true, (unsigned)cluster_state(g->c).size, 0,
				   g->flat_count, &g->shm) == 0)
			g->shm_token = mine.shm_token = token;
	}
	if (!(g->op = report_op(g->c, &mine)))
		return td_fail(&call->err, TDP_INTERNAL, "out of memory");
	/* Last: once the others have the run, this member's report follows. */
	if (job->p.rank == 0 && send_run(job) < 0)
		return -1;
	cluster_allgather(g->c, g->op, sizeof(mine));
	call->d->group_busy = true;
	return 0;
}

void group_end(struct train_job *job)
{
	struct group_run *g = job->g;

	if (!g)
		return;
	/* A step in flight waits for the others' signals: let it through. */
	if (g->sync)
		dp_sync_release_from(g->sync, g->step);
	graph_free(&g->gr);
	g->gr = (struct graph){ 0 };
	dp_sync_free(g->sync);
	drop_op(g);
	cluster_op_free(g->c, g->xop);
	dp_free(g->x);
	group_shm_free(g->shm);
	if (g->shm_token)
		group_shm_unlink(g->shm_token);
	cluster_kick(g->c); /* a run sent meanwhile waits for this one's end */
	free(g);
	job->g = NULL;
	job->call.d->group_busy = false;
}

bool group_waiting(const struct train_job *job)
{
	return (job->g->op && cluster_op_poll(job->g->op) == 1) || job->g->gpu_busy;
}

/* The start's reports: every member's checks passed, rows and sizes agree;
 * then rank 0's parameters to everyone. */
static int sync_done(struct train_job *job)
{
	struct group_run *g = job->g;
	const struct report *all = cluster_op_data(g->op);
	struct cluster_state cs = cluster_state(g->c);
	struct tensor *ts[MAX_PARAMS];
	uint64_t bytes = 0, off = 0;
	uint8_t *data;

	for (int i = 0; i < cs.size; i++)
		if (all[i].code)
			return td_fail(&job->call.err, all[i].code, "member %d: %.*s", i, (int)sizeof(all[i].msg),
				       all[i].msg);
	for (int i = 1; i < cs.size; i++) {
		if (all[i].nsamples != all[0].nsamples)
			return td_fail(&job->call.err, TDP_SHAPE_MISMATCH, "member %d holds %llu rows of data, "
				       "member 0 %llu: every member needs the same data set", i,
				       (unsigned long long)all[i].nsamples, (unsigned long long)all[0].nsamples);
		if (all[i].data_sig != all[0].data_sig)
			return td_fail(&job->call.err, TDP_SHAPE_MISMATCH, "member %d's data tensors differ in "
				       "dtype or shape from member 0's: every member needs the same data set", i);
		if (all[i].flat_count != all[0].flat_count || all[i].param_bytes != all[0].param_bytes)
			return td_fail(&job->call.err, TDP_SHAPE_MISMATCH, "member %d's parameters differ in "
				       "size from member 0's", i);
	}
	if (job->p.rank != 0 && all[0].shm_token && shm_wanted(job, cs.size))
		(void)group_shm_open(job->call.d->gpus[job->p.device], all[0].shm_token, false, (unsigned)cs.size,
				     (unsigned)job->p.rank, g->flat_count, &g->shm);
	drop_op(g); /* `all` goes with it */
	if (params_of(job, ts, &bytes) < 0)
		return -1;
	if (!(g->op = cluster_op_new(bytes)))
		return td_fail(&job->call.err, TDP_INTERNAL, "out of memory");
	data = cluster_op_data(g->op);
	for (unsigned k = 0; job->p.rank == 0 && k < job->p.spec.np; k++) {
		if (gpu_download(devices_of(job->call.d, ts[k]), &ts[k]->alloc, data + off) < 0)
			return td_fail(&job->call.err, TDP_DEVICE_LOST, "reading parameter '%s' failed",
				       job->p.spec.names[k]);
		off += ts[k]->bytes;
	}
	cluster_bcast(g->c, g->op, 0);
	g->phase = G_BCAST;
	return 0;
}

/* Rank 0's parameters arrived: they are every member's from now on. */
static int bcast_done(struct train_job *job)
{
	struct group_run *g = job->g;
	struct tensor *ts[MAX_PARAMS];
	const uint8_t *data = cluster_op_data(g->op);
	uint64_t bytes, off = 0;

	if (job->p.rank != 0 && params_of(job, ts, &bytes) == 0)
		for (unsigned k = 0; k < job->p.spec.np; k++) {
			if (gpu_upload(devices_of(job->call.d, ts[k]), &ts[k]->alloc, data + off) < 0)
				return td_fail(&job->call.err, TDP_DEVICE_LOST, "writing parameter '%s' failed",
					       job->p.spec.names[k]);
			off += ts[k]->bytes;
		}
	drop_op(g);
	g->phase = G_READY;
	return td_failed(&job->call.err) ? -1 : 0;
}

/* After the parameters: whether every member has the shared region (the
 * sum of those that have not). */
static int shm_agree(struct train_job *job)
{
	struct group_run *g = job->g;

	if (!(g->op = cluster_op_new(sizeof(float))))
		return td_fail(&job->call.err, TDP_INTERNAL, "out of memory");
	*(float *)cluster_op_data(g->op) = g->shm ? 0.0f : 1.0f;
	cluster_allreduce_f32(g->c, g->op, 1);
	g->phase = G_SHM;
	return 0;
}

/* The members' signals in the region, this member's device waiting. */
static int shm_sync_start(struct train_job *job)
{
	struct group_run *g = job->g;
	struct gpu_device *dev = job->call.d->gpus[job->p.device];
	const volatile uint32_t **sig = calloc(g->shm->n, sizeof(*sig));
	int r;

	if (!sig)
		return -ENOMEM;
	for (unsigned k = 0; k < g->shm->n; k++)
		sig[k] = group_shm_signal(g->shm, k);
	r = dp_sync_start(&(struct dp_sync_spec){ .nsignals = g->shm->n, .signals = sig, .ndev = 1, .g = &dev,
						  .limit_ns = dp_sync_limit_ns(job->call.d) },
			  &g->sync);
	free(sig);
	return r;
}

/* The agreement came back: all use the region, or none (and rank 0's name
 * goes: every member has opened it or given up); with it, the signals'
 * thread. Returns 0 or -1 after td_fail (the group broken). */
static int shm_done(struct train_job *job)
{
	struct group_run *g = job->g;

	if (*(const float *)cluster_op_data(g->op) != 0.0f) {
		group_shm_free(g->shm);
		g->shm = NULL;
	}
	if (g->shm_token)
		group_shm_unlink(g->shm_token);
	g->shm_token = 0;
	drop_op(g);
	g->phase = G_READY;
	if (g->shm && shm_sync_start(job) < 0) {
		/* The others signal and wait as this member would: the group
		 * cannot go on without it. */
		cluster_break(g->c, "a member could not start its exchange thread");
		fail_broken(job);
		return -1;
	}
	return 0;
}

/* A half of the step landed on this member's device: the loop goes on. */
static void half_landed(struct graph *gr, void *data)
{
	struct train_job *job = data;

	(void)gr;
	job->g->gpu_busy = false;
	loop_wake_idle(job->call.d->loop);
}

/* Submit nodes [first, last) of the step, not waited for on the loop (its
 * completion wakes the loop). Returns 0 or -1 after td_fail. */
static int submit_half(struct train_job *job, unsigned first, unsigned last)
{
	struct group_run *g = job->g;
	int r;

	g->gpu_busy = true;
	g->gr.spin_ns = 1;
	r = graph_submit_part_async(&g->gr, first, last, half_landed, job);
	if (r != 0)
		g->gpu_busy = false;
	return r < 0 ? -1 : 0;
}

/* graph.after with shm: the exchange right after the flat gradient. */
static int record_exchange(struct graph *gr, struct gpu_recorder *rec, void *data)
{
	struct train_job *job = data;
	struct group_run *g = job->g;

	return group_shm_record_exchange(g->shm, rec, g->step, gr->nodes[g->flat].result, g->bucketed,
					 dp_sync_tag(g->step), dp_sync_event(g->sync, g->step, 0));
}

/* With shm, the whole step is one submission (dp_sync.h): the gradients
 * into this member's slot (bucket by bucket when the graph allows, into
 * `bucket`), the signal, the wait for every member's, the mean, the
 * update, the loss out. Returns 0 or -1 after td_fail. */
static int shm_step(struct train_job *job, struct graph_copy *bucket)
{
	struct group_run *g = job->g;
	struct graph_copy whole;
	int r;

	g->gr.ncopies_at = group_shm_out(g->shm, g->step, &g->gr, g->flat, bucket, MAX_PARAMS, &whole);
	g->gr.ncopies_after = 1;
	g->bucketed = g->gr.ncopies_at > 0;
	g->gr.after = record_exchange;
	g->gr.after_data = job;
	g->gr.after_node = (unsigned)g->flat;
	if ((r = dp_sync_arm(g->sync, g->step)) < 0)
		return td_fail(&job->call.err, TDP_DEVICE_LOST, "the group exchange: %s", strerror(-r));
	return submit_half(job, 0, g->gr.n);
}

/* Forward and backward on this member's shard: the loss lands in the
 * exchange buffer, the gradients there too or in this member's slot of the
 * shared region (bucket by bucket when the graph allows). */
static int local_half(struct train_job *job, uint64_t in_epoch, double *ret_lr)
{
	struct group_run *g = job->g;
	struct gpu_host_buffer *x = dp_xfer(g->x, 0);
	const struct dp_layout *at = &g->x->at;
	struct graph_copy cin, cout[2], bucket[MAX_PARAMS];
	struct step_nodes sn;
	int r;

	memcpy((uint8_t *)x->map + at->index, job->perm + in_epoch * job->p.batch + job->p.offset, job->p.shard * 4);
	graph_free(&g->gr);
	g->gr = (struct graph){ .call = &job->call };
	r = train_build_step(&job->call, &(struct step_input){ .spec = &job->p.spec, .nodes = job->nodes,
								 .feeds = &job->p.train, .step = g->step,
								 .train = true, .flat = true }, &g->gr, &sn);
	if (r < 0)
		return -1;
	g->loss = sn.loss;
	g->flat = sn.flat;
	*ret_lr = sn.lr;
	g->gr.fuse = false;
	g->gr.arena_cache = &job->arenas; /* each step waited for: the next reuses them */
	if (graph_check_outputs(&g->gr) < 0)
		return -1;
	if (g->gr.nodes[g->flat].ctx.out.count != g->flat_count)
		return td_fail(&job->call.err, TDP_INTERNAL, "the gradients changed size during the run");
	cin = (struct graph_copy){ .node = -1, .alloc = &job->index.alloc, .host = x->buffer, .offset = at->index };
	cout[0] = (struct graph_copy){ .node = (int)g->loss, .host = x->buffer, .offset = at->loss };
	cout[1] = (struct graph_copy){ .node = g->flat, .host = x->buffer, .offset = 0 };
	g->gr.copies_before = &cin;
	g->gr.copies_after = cout;
	g->gr.copies_at = bucket;
	g->gr.ncopies_before = 1;
	if (g->shm)
		return shm_step(job, bucket);
	g->gr.ncopies_at = 0;
	g->gr.ncopies_after = 2;
	return submit_half(job, 0, (unsigned)g->flat + 1);
}

/* This member's half landed (`ok`) or failed: its row-weighted gradients
 * (unless shared) and loss, and the flags, to the exchange. */
static int send_sums(struct train_job *job, bool ok)
{
	struct group_run *g = job->g;
	uint64_t n = g->shm ? 0 : g->flat_count;
	float *buf, w = (float)((double)job->p.shard / (double)job->p.batch);
	const float *grad = dp_xfer(g->x, 0)->map;

	if (ok && graph_wait(&g->gr) < 0)
		ok = false;
	if (ok && g->sync && dp_sync_late(g->sync, g->step)) {
		td_fail(&job->call.err, TDP_DEADLINE_EXCEEDED, "at step %lld a member's gradients were not out "
			"within half of request_timeout", (long long)g->step);
		ok = false;
	}
	if (!ok)
		g->local = job->call.err;
	/* The others' devices wait for this member's signal. */
	if (!ok && g->shm)
		group_shm_signal_host(g->shm, dp_sync_tag(g->step));
	if (!g->xop && !(g->xop = cluster_op_new((n + 3) * sizeof(float)))) {
		cluster_break(g->c, "out of memory for the gradient exchange");
		return td_fail(&job->call.err, TDP_INTERNAL, "out of memory for the gradient exchange");
	}
	g->op = g->xop;
	buf = cluster_op_data(g->op);
	if (ok) {
		const uint8_t *lp = (const uint8_t *)dp_xfer(g->x, 0)->map + g->x->at.loss;

		/* Weighted by rows: the sum over the members is the whole batch's
		 * mean, however unevenly the batch split. */
		for (uint64_t i = 0; i < n; i++)
			buf[i] = grad[i] * w;
		buf[n] = (float)(forward_scalar_value(g->gr.nodes[g->loss].ctx.out.dtype, lp) * w);
	}
	buf[n + 1] = ok ? 0.0f : 1.0f;
	buf[n + 2] = job->cancelled ? 1.0f : 0.0f;
	cluster_allreduce_f32(g->c, g->op, n + 3);
	g->phase = G_EXCHANGE;
	return 0;
}

/* Submit this member's half of a step (its exchange follows once it
 * landed, send_sums). */
static int submit_step(struct train_job *job)
{
	struct group_run *g = job->g;
	uint64_t in_epoch = job->done % job->p.per_epoch;

	if (in_epoch == 0)
		job_shuffle_epoch(job, job->done / job->p.per_epoch);
	g->step = job->p.start_step + (int64_t)job->done;
	td_error_clear(&job->call.err);
	job->lr = 0;
	if (local_half(job, in_epoch, &job->lr) < 0)
		return send_sums(job, false);
	g->phase = G_LOCAL;
	return 0;
}

/* The update landed: its results into the store. Returns 1, or -1 (the
 * group is broken: the others applied theirs). */
static int apply_done(struct train_job *job)
{
	struct group_run *g = job->g;

	g->phase = G_READY;
	if (graph_wait(&g->gr) < 0 || graph_commit_all(&g->gr) < 0) {
		cluster_break(g->c, "a member failed to apply an update");
		return -1;
	}
	graph_free(&g->gr);
	g->gr = (struct graph){ 0 };
	return 1;
}

/* The sums came back: submit the update (or stop as the group decided).
 * Returns 3 when the update runs, 4 when it ran and is committed (shared
 * memory: the step was one submission), 2 when the members' reports
 * follow, 0 when the job ends now (reported), -1 on failure. */
static int exchange_done(struct train_job *job)
{
	struct group_run *g = job->g;
	struct gpu_host_buffer *x = dp_xfer(g->x, 0);
	const float *sum = cluster_op_data(g->op);
	uint64_t n = g->shm ? 0 : g->flat_count;
	struct graph_copy cin;

	if (sum[n + 1] > 0) {
		struct report mine = { .code = g->local.code };

		memcpy(mine.msg, g->local.message, sizeof(mine.msg) - 1);
		drop_op(g);
		if (!(g->op = report_op(g->c, &mine))) {
			cluster_break(g->c, "out of memory for a member's report");
			return td_fail(&job->call.err, TDP_INTERNAL, "out of memory");
		}
		cluster_allgather(g->c, g->op, sizeof(mine));
		g->phase = G_REPORT;
		return 2;
	}
	if (sum[n + 2] > 0) {
		job_finish(job, "cancelled");
		return 0;
	}
	if (!g->shm)
		memcpy(x->map, sum, n * sizeof(float));
	job->last_loss = sum[n];
	drop_op(g);
	g->phase = G_READY;
	if (!isfinite(job->last_loss))
		return td_fail(&job->call.err, TDP_FAILED_PRECONDITION,
			       "the loss is %s at step %lld; parameters and state are unchanged",
			       isnan(job->last_loss) ? "NaN" : "infinite", (long long)g->step);
	/* Shared memory: the update ran in the step's one submission. */
	if (g->shm)
		return apply_done(job) < 0 ? -1 : 4;
	cin = (struct graph_copy){ .node = g->flat, .host = x->buffer, .offset = 0 };
	g->gr.copies_before = &cin;
	g->gr.copies_after = NULL;
	g->gr.ncopies_before = 1;
	g->gr.ncopies_after = 0;
	if (submit_half(job, (unsigned)g->flat + 1, g->gr.n) < 0) {
		/* The others apply theirs: this member's parameters would be
		 * out of step. */
		cluster_break(g->c, "a member failed to apply an update");
		return -1;
	}
	g->phase = G_APPLY;
	return 3;
}

/* The failure reports after a step: the first failed member's reason. */
static int report_done(struct train_job *job)
{
	const struct report *all = cluster_op_data(job->g->op);
	struct cluster_state cs = cluster_state(job->g->c);

	for (int i = 0; i < cs.size; i++)
		if (all[i].code)
			return td_fail(&job->call.err, all[i].code, "member %d: %.*s", i, (int)sizeof(all[i].msg),
				       all[i].msg);
	return td_fail(&job->call.err, TDP_INTERNAL, "a member failed without a reason");
}

/* Whether the step just applied ends the run (as job_after_step will
 * decide, the same on every member: the loss is the group's). */
static bool last_step(const struct train_job *job)
{
	return job->done + 1 == job->p.total || (job->p.has_stop && job->last_loss <= job->p.stop_loss);
}

/* The step's update is committed: one more exchange after the last step,
 * else the step's reports, evaluation and end (job_after_step). Returns 1
 * while the job goes on, 0 when it ended (reported), -1 after td_fail. */
static int after_apply(struct train_job *job)
{
	struct group_run *g = job->g;
	bool more;

	if (last_step(job)) {
		/* One more exchange before the end: when member 0 answers,
		 * every member has applied the last update. */
		if (!(g->op = cluster_op_new(sizeof(float)))) {
			cluster_break(g->c, "out of memory for the last exchange");
			return td_fail(&job->call.err, TDP_INTERNAL, "out of memory");
		}
		*(float *)cluster_op_data(g->op) = 1.0f;
		cluster_allreduce_f32(g->c, g->op, 1);
		g->phase = G_FINAL;
		return 1;
	}
	more = job_after_step(job, g->step);
	/* Evaluation, member 0's alone, failed: the others wait for an
	 * exchange that will not come. */
	if (!more && td_failed(&job->call.err))
		cluster_break(g->c, "member 0's evaluation failed during a group run");
	return more ? 1 : 0;
}

bool group_step(struct train_job *job)
{
	struct group_run *g = job->g;
	int s = g->op ? cluster_op_poll(g->op) : 0, r = 0;

	if (s == 1)
		return true;
	if (s < 0) {
		fail_broken(job);
		goto failed;
	}
	switch (g->phase) {
	case G_SYNC:
		r = sync_done(job);
		break;
	case G_BCAST:
		if ((r = bcast_done(job)) == 0)
			r = shm_agree(job);
		break;
	case G_SHM:
		if (shm_done(job) < 0)
			goto failed;
		/* The run's pace (samples_per_s) counts from its first step, as
		 * a data-parallel run's does from after its replicas. */
		job->start_ns = daemon_now_ns(CLOCK_MONOTONIC);
		r = submit_step(job);
		break;
	case G_READY:
		r = submit_step(job);
		break;
	case G_LOCAL:
		/* A member gone: this one's device may wait for its signal. */
		if (g->gpu_busy && g->sync && cluster_state(g->c).broken)
			dp_sync_release_from(g->sync, g->step);
		if (g->gpu_busy)
			return true;
		r = send_sums(job, true);
		break;
	case G_EXCHANGE:
		r = exchange_done(job);
		if (r == 3)
			return true;
		if (r == 0)
			return false;
		if (r == 2)
			r = 0;
		if (r == 4 && (r = after_apply(job)) >= 0)
			return r == 1;
		break;
	case G_APPLY:
		if (g->gpu_busy)
			return true;
		if ((r = apply_done(job)) == 1 && (r = after_apply(job)) >= 0)
			return r == 1;
		break;
	case G_REPORT:
		r = report_done(job);
		break;
	case G_FINAL:
		drop_op(g);
		g->phase = G_READY;
		return job_after_step(job, g->step);
	}
	if (r == 0)
		return true;
failed:
	job->sink->fail(job->sink_data, &job->call.err);
	return false;
}

static bool silent_ready(void *data)
{
	(void)data;
	return true;
}

static void silent_flush(void *data)
{
	(void)data;
}

static void silent_status(void *data, const struct train_status *st)
{
	(void)data;
	(void)st;
}

static void silent_finish(void *data, const struct train_status *st, const char *stopped)
{
	(void)data;
	(void)st;
	(void)stopped;
}

static void silent_fail(void *data, const struct td_error *err)
{
	(void)data;
	log_info("group run failed: %s", err->message);
}

const struct train_sink group_silent_sink = {
	.ready = silent_ready,
	.flush = silent_flush,
	.progress = silent_status,
	.eval = silent_status,
	.finish = silent_finish,
	.fail = silent_fail,
	.release = silent_flush,
};
