/* Inside train.run's jobs: what job.c and job_cluster.c (a run across a
 * group of daemons, docs/cluster.md) share. Not for other files. */
#pragma once

#include "train/job.h"
#include "train/train_parallel.h"

struct group_run;

struct train_job {
	struct train_plan p;       /* what the run does */
	struct caller call;        /* the client's identity; the step's error */
	const struct train_sink *sink;
	void *sink_data;
	bool detached;             /* the client went away */
	bool cancelled;            /* job.cancel: stop at the next turn, reported */
	struct train_job *next;
	struct tdp_buf raw;        /* a copy of the request's params and the model */
	msgpack_unpacked params;   /* decoded from raw */
	const msgpack_object *nodes;
	struct tensor index;       /* the minibatch's row numbers, not in the store */
	struct dp *dp;             /* the replicas (train_parallel.h), NULL on one device */
	uint32_t *perm;
	uint64_t done;
	double last_loss, lr;
	bool have_eval_result;
	double eval_loss, eval_metrics[TRAIN_MAX_METRICS];
	int64_t start_ns;
	struct group_run *g;        /* a run across the group (job_cluster.c), else NULL */
	/* One device (job.c's step_one): each micro-batch is one submission,
	 * its rows copied in from and its loss out to `xfer`; while it runs
	 * (`inflight`) the loop serves others, and the completion sets `landed`. */
	struct gpu_host_buffer xfer;
	struct graph gr;           /* the micro-batch in flight */
	unsigned loss;             /* its loss node */
	bool inflight, landed;
	uint64_t micro;            /* micro-batches of the step done */
	double micro_sum;          /* their losses */
	/* profile: device time and kernels of every step so far */
	uint64_t gpu_ns, dispatches;
};


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
