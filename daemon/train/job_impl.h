/* Inside train.run's jobs: what job.c and job_cluster.c (a run across a
 * group of daemons, docs/cluster.md) share. Not for other files. */
#pragma once

#include "train/job.h"
#include "engine/graph_plan.h"
#include "train/train_parallel.h"

struct dp_step;
struct group_run;
struct train_job;

/* A micro-batch in flight (job_pipe.c). */
struct pipe_slot {
	struct train_job *job;
	struct graph gr;
	unsigned loss;             /* its loss node */
	int found, scale;          /* precision f16: step_nodes' found and scale, else -1 */
	double lr;
	uint64_t unit;             /* which micro-batch of the run */
	bool landed;               /* its submission completed */
	/* The results of the slots before it that it read, uncommitted when it
	 * was built (their memory: theirs, or the store's once committed). */
	struct lookup_overlay ov;
};

struct train_job {
	struct train_plan p;       /* what the run does */
	struct caller call;        /* the client's identity; the step's error */
	const struct train_sink *sink;
	void *sink_data;
	bool detached;             /* the client went away */
	bool cancelled;            /* job.cancel: stop at the next turn, reported */
	bool keep_data;            /* stopped to resume: its `cleanup` tensors stay */
	const char *stop_reason;   /* how the cancel is reported: NULL "cancelled", "drained" */
	/* Another job waits for this one's steps in flight: it submits no
	 * more once its slice is used, and goes to the back when drained
	 * (train_jobs_run). */
	bool yield;
	int64_t slice_start_ns;    /* when it last began submitting after a wait */
	struct train_job *next;
	struct tdp_buf raw;        /* a copy of the request's params and the model */
	msgpack_unpacked params;   /* decoded from raw */
	const msgpack_object *nodes;
	struct tensor index;       /* the minibatch's row numbers, not in the store */
	struct dp *dp;             /* the replicas (train_parallel.h), NULL on one device */
	struct dp_step *dps;       /* data parallel: DP_MAX_DEPTH steps' room (job_parallel.c) */
	uint32_t *perm;
	uint64_t done;
	double last_loss, lr;
	uint64_t skipped_steps;    /* precision f16: updates skipped (non-finite gradients) */
	double loss_scale;         /* ... and the scale after the last step committed */
	bool have_eval_result;
	double eval_loss, eval_metrics[TRAIN_MAX_METRICS];
	int64_t start_ns;
	struct group_run *g;        /* a run across the group (job_cluster.c), else NULL */
	/* One device (job_pipe.c): each micro-batch is one submission, its
	 * rows copied in from and its loss out to its slot of `xfer`. Up to
	 * `depth` of them are in flight (pipe[], oldest at `head`): each built
	 * from the results of those before it, committed in order once its
	 * loss is read and finite. While they run the loop serves others. */
	struct gpu_host_buffer xfer;
	struct pipe_slot pipe[TRAIN_MAX_DEPTH];
	/* Data parallel uses depth (1 or 2), head and nfly too, for dps[]. */
	unsigned depth, head, nfly;
	unsigned nodes_hint;            /* the last step's graph size (graph_reserve) */
	uint64_t next_unit;        /* the next micro-batch to submit, of the run */
	bool failing;              /* a submission failed with fail_err: reported */
	struct td_error fail_err;  /* once those before it landed */
	uint64_t micro;            /* micro-batches of the step committed */
	double micro_sum;          /* their losses */
	/* profile: device time and kernels of every step so far */
	uint64_t gpu_ns, dispatches;
	uint64_t peak_bytes;          /* device memory in use at a step's recording, at most */
	struct graph_arena_cache arenas; /* the steps' planned memory, shared by those in flight */
};


/* One device: the job's turn (job_pipe.c): commit the micro-batches that
 * landed, in order (job_after_step at each step's end), then, unless
 * `hold` (other jobs wait for this one to drain) or the job stops, submit
 * more up to its depth. Returns whether the job goes on (false: it
 * reported its end or failure). */
bool pipe_turn(struct train_job *job, bool hold);

/* Whether the oldest micro-batch in flight landed (all: every one). */
bool pipe_landed(const struct train_job *job, bool all);

/* Data parallel keeps at most this many steps in flight: one step's
 * updates and the next one's forward and backward, behind them on each
 * device's queue. */
#define DP_MAX_DEPTH 2

/* The steps a job keeps in flight, at most `max`: train.run's
 * pipeline_depth, else TRAIN_DEFAULT_DEPTH on a GPU and 1 on a CPU device. */
unsigned job_default_depth(const struct train_job *job, unsigned max);

/* Data parallel: the job's turn (job_parallel.c), as pipe_turn: go on with
 * the oldest step in flight once its half landed (the exchange and the
 * updates, then, pipelined, the next step's first half behind them; or
 * commit it, job_after_step), else unless `hold` submit the next step's
 * first half. job->nfly counts the steps in flight. */
bool dp_turn(struct train_job *job, bool hold);

/* Whether the oldest data-parallel step in flight (all: every one) has
 * nothing running. */
bool dp_landed(const struct train_job *job, bool all);

/* Free the data-parallel step in flight (waiting for its work), not
 * applied. */
void dp_discard(struct train_job *job);

/* The steps `job` may have in flight now: job->depth, or one while clients
 * are sending requests that use the GPU (job_pipe.c). */
unsigned job_depth_now(const struct train_job *job);

/* *ov (zeroed) := the results graphs grs[0..n) will store, in flight and
 * not committed yet, the newest of each name, as the tensors graph_commit
 * will store, sorted by name (a step built now reads them through
 * call->overlay). Returns 0 or -1 after td_fail; ov->tensors is the
 * caller's to free. */
int job_overlay(struct caller *call, const struct graph *const *grs, unsigned n, struct lookup_overlay *ov);

/* Create job->xfer for job->depth slots. Returns 0 or -1 after td_fail. */
int pipe_start(struct caller *call, struct train_job *job);

/* Free every micro-batch in flight (waiting for its work), not applied. */
void pipe_discard(struct train_job *job);

/* The order of samples in `epoch` (job->perm). */
void job_shuffle_epoch(struct train_job *job, uint64_t epoch);

/* After a step applied: count it, report progress, evaluate, stop at the
 * end. Returns whether the job goes on. */
bool job_after_step(struct train_job *job, int64_t step);

/* The run's end: sink's finish with `stopped`. */
void job_finish(struct train_job *job, const char *stopped);

/* A group run's part (job_cluster.c). group_begin sets job->g up after the
 * local checks of train_job_start (the exchange buffer; on the asking member
 * the run goes to the others); group_step is job_step for it; group_end
 * frees what it holds. */
int group_begin(struct caller *call, struct train_job *job);
bool group_step(struct train_job *job);
void group_end(struct train_job *job);

/* Whether the group run waits for an MPI operation (nothing to do until
 * the cluster wakes the loop). */
bool group_waiting(const struct train_job *job);

/* "shared" (members on one host average through shared memory, group_shm.h)
 * or "mpi": the group run's exchange, for its result. */
const char *group_exchange_name(const struct train_job *job);

/* job_share.c: order d->jobs for the next turn (the user furthest behind
 * its share first), at the end of a turn (train_jobs_run). */
void jobs_by_share(struct daemon *d);

/* job_share.c: a new job's owner with no other job running starts its
 * clock at the least of the running ones' (before the job joins d->jobs). */
void jobs_share_join(struct train_job *job);
