/* train.run's jobs (docs/protocol.md, "train.run"): a run of many steps, one
 * per event-loop turn, so other clients are served between them. The
 * handler (methods/methods_train_run.c) decodes the request into a
 * `struct train_plan`; train_job_start checks it by building and running
 * the first step without applying it, copies the replicas of a
 * data-parallel run and queues the job; train_jobs_run, the loop's idle
 * work, steps every job. A job reports through its sink (progress, eval, the
 * end, a failure) and never sees the connection its client is on. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/forward.h"
#include "gpu/device.h"
#include "store/caller.h"
#include "train/step.h"

#define TRAIN_MAX_METRICS 8
/* The most tensors a run deletes when it ends (train.run's `cleanup`). */
#define TRAIN_MAX_CLEANUP 16
/* train.run's pipeline_depth (docs/training.md, "Pipelined steps"): steps
 * in flight on one device at most, and by default (on a CPU device such as
 * lavapipe, whose "device" work runs on the host's cores, 1). */
#define TRAIN_MAX_DEPTH 4
#define TRAIN_DEFAULT_DEPTH 2

/* What a run does: decoded and checked against the store by the handler. */
struct train_plan {
	struct train_spec spec;
	struct feeds train, eval;  /* train.index is set by the job */
	bool has_eval;
	uint64_t nsamples;         /* rows of the data */
	uint32_t device;           /* the data's device */
	uint64_t batch, per_epoch, total, epochs;
	uint64_t accumulate;       /* micro-batches (of `batch` rows) per step, >= 1 */
	uint32_t devs[GPU_MAX_DEVICES]; /* data parallel: devs[0] = device, then the replicas' */
	unsigned ndev;             /* 1: one device */
	uint64_t shard;            /* rows per device per step */
	/* A run across the group (docs/cluster.md): this member's place, its
	 * shard is `shard` rows from row `offset` of each global batch. */
	unsigned nranks;           /* 0 or 1: this daemon alone */
	int rank;
	uint64_t offset;
	int64_t start_step;
	uint64_t seed, progress_every, eval_every;
	bool shuffle, has_stop;
	double stop_loss;
	char metrics[TRAIN_MAX_METRICS][TDP_MAX_NAME_LEN + 1];
	unsigned nmetrics;
	char model[TDP_MAX_NAME_LEN + 1]; /* the model trained, "" for none */
	/* Store keys deleted (with the caller's rights) when the run ends,
	 * however it ends, but not when it stops to be resumed: a client's
	 * staged data (docs/protocol.md, train.run `cleanup`). */
	char cleanup[TRAIN_MAX_CLEANUP][TDP_MAX_NAME_LEN + 1];
	unsigned ncleanup;
	uint64_t model_serial;     /* its definition: a replaced model is left alone */
	bool profile;              /* the result gives gpu_ns and dispatches per step */
	unsigned depth;            /* micro-batches in flight at most (one device), 1..TRAIN_MAX_DEPTH;
				      0: the device's default */
	/* Steps of this run committed before a restart (0: a new run): the job
	 * goes on from there, its steps, shuffles and seeds as if uninterrupted. */
	uint64_t resume_done;
	/* Among its owner's jobs, how far behind the others it stays (0..
	 * TRAIN_MAX_NICE; each step of nice weighs its GPU time 1.25x more). */
	unsigned nice;
};

#define TRAIN_MAX_NICE 19

/* Where a run stands, for its reports. */
struct train_status {
	int64_t step;              /* the last step's number */
	uint64_t run_step, steps, epoch, epochs;
	uint64_t epochs_done;      /* whole epochs run */
	double loss, lr, samples_per_s, elapsed;
	bool has_eval;             /* eval_loss and eval_metrics are set */
	double eval_loss, eval_metrics[TRAIN_MAX_METRICS];
	const char (*metrics)[TDP_MAX_NAME_LEN + 1]; /* nmetrics names */
	unsigned nmetrics;
	const uint32_t *devs;      /* the run's devices */
	unsigned ndev;
	double replica_max_diff;   /* data parallel, at the end: -1 when unreadable */
	const char *exchange;      /* data parallel: "gpu", "host" or "none"; a group: "shared" or "mpi" */
	unsigned nranks;           /* a group run's members, else 0 */
	/* With plan.profile on one device: the mean per step of the device time
	 * of its submissions and of the kernels they ran. */
	bool profile;
	double gpu_ns, dispatches;
	uint64_t peak_bytes;
	/* precision f16 (docs/training.md, "Mixed precision"): the steps whose
	 * update was skipped (a non-finite gradient) and the scale after the
	 * last one */
	bool scaled;
	uint64_t skipped_steps;
	double loss_scale;
};

/* How a job reports; `data` is the sink's own. After finish or fail comes
 * release, then nothing. */
struct train_sink {
	bool (*ready)(void *data);      /* whether the client keeps up: step now */
	void (*flush)(void *data);      /* after each turn */
	void (*progress)(void *data, const struct train_status *st);
	void (*eval)(void *data, const struct train_status *st);
	void (*finish)(void *data, const struct train_status *st, const char *stopped);
	void (*fail)(void *data, const struct td_error *err);
	void (*release)(void *data);
};

struct train_job;

/* Start a run of `plan` for `call`'s client. `params` and `model_data` (the
 * request's params, the model's definition or NULL) are copied: the steps
 * build their graphs from the nodes in them. Returns 0 with *ret set (the
 * job reports to `sink` from the next loop turn on), or -1 with call->err
 * set. */
int train_job_start(struct caller *call, const struct train_plan *plan, const msgpack_object *params,
		    const msgpack_object *model_data, const struct train_sink *sink, void *data,
		    struct train_job **ret);

/* The client went away: the run stops at its next turn, without reports
 * but release. */
void train_job_detach(struct train_job *job);

/* job.cancel: the run stops at its next turn and reports its end through
 * the sink's finish with `stopped` "cancelled". */
void train_job_cancel(struct train_job *job);

/* job.drain: every run of the daemon (but a group's) stops as a cancel
 * would, after its steps in flight land, and reports "drained". */
void train_jobs_drain(struct daemon *d);

/* The job after `job` in its daemon's list (d->jobs), or NULL. */
const struct train_job *train_job_next(const struct train_job *job);

/* Where `job` stands now: its steps, loss, rate and elapsed time as of the
 * last step it committed (job.stat between progress notes). */
struct train_status train_job_status(const struct train_job *job);

/* The request `job` was started from (train.run's params, packed) and who
 * asked: what a restart needs to start it again (methods_job.c). */
const msgpack_object *train_job_request(const struct train_job *job);
const struct access_cred *train_job_cred(const struct train_job *job);

/* The event loop's idle work: one step of every running job. Returns whether
 * jobs remain. */
bool train_jobs_run(void *data);

/* Free every job (at shutdown, after the connections closed). */
void train_jobs_free(struct daemon *d);

/* Fail every running job with `code` and `message` (its client gets the
 * error response) and free it: device recovery, before the device its
 * buffers live on goes (recover.c). Returns how many jobs there were. */
unsigned train_jobs_abort(struct daemon *d, int code, const char *message);

/* A member of the group that cannot take part in a run rank 0 sent
 * (docs/cluster.md): tell the others why, so that the run fails everywhere
 * with `err` named after this member. */
void train_group_refuse(struct daemon *d, const struct td_error *err);

/* Whether a run across the group involves this member (d) now. */
bool train_group_busy(const struct daemon *d);

/* A sink that reports nothing: a member's part of a group run, or a group
 * run whose client went away. */
extern const struct train_sink group_silent_sink;
