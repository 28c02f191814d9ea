/* The daemon's shared state, handed to every method. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "base/config.h"
#include "base/metrics.h"
#include "base/usage.h"
#include "gpu/device.h"

/* Requests served per connection per turn before other clients get theirs
 * (serve/conn.c; shown by info). */
#define DAEMON_TURN_BUDGET 32

struct loop;
struct server;
struct store;
struct models;
struct persist;
struct checkpoint;
struct model_persist;
struct recovery;
struct op_batch;
struct cluster;
struct kernel_build;
struct train_job;
struct kernel_table;
struct job_record;
struct step_waiter;
struct compile_job;

/* kernel.create's pipeline builds at once (methods/kernel_build_job.c). */
#define KERNEL_BUILDS_MAX 2
/* kernel.create's GLSL compiles at once (methods/kernel_compile_job.c): each
 * is a process of up to GLSL_CHILD_MEMORY, so a user gets one at a time and
 * the daemon this many (a user with many connections could otherwise fill
 * the host's memory). */
#define KERNEL_COMPILES_MAX 4

struct daemon {
	struct config cfg;
	struct loop *loop;
	struct server *server;
	struct gpu_device *gpus[GPU_MAX_DEVICES]; /* the devices opened, by id (devices.h) */
	uint32_t ngpus;
	struct gpu_open_options gpu_opts[GPU_MAX_DEVICES]; /* how each was opened, to re-open it */
	char *pipeline_cache[GPU_MAX_DEVICES]; /* each one's pipeline cache file */
	struct gpu_device_desc *devices; /* every device found, for info */
	uint32_t ndevices;
	struct store *store;
	struct models *models;           /* model.define's registry (model.h) */
	struct persist *persist;         /* checkpoint files (persist.h), NULL when off */
	struct checkpoint *checkpoint;   /* the periodic checkpoint (checkpoint.h) */
	struct model_persist *model_persist; /* model files (persist_model.h), NULL when off */
	int64_t start_ns;                /* CLOCK_MONOTONIC at start-up */
	uint64_t requests;               /* requests answered (errors too), for info */
	uint64_t requests_failed;        /* of which with an error response */
	struct metrics metrics;          /* counters for info and tensorctl metrics */
	struct usage usage;              /* per uid: GPU time, requests, connections (base/usage.h) */
	struct recovery *recovery;       /* device loss recovery (recover.h) */
	struct op_batch *batch;          /* small op.runs batched (methods/op_batch.h) */
	struct cluster *cluster;         /* the group joined by mpirun (train/cluster.h), or NULL */
	struct kernel_build *kernel_builds[KERNEL_BUILDS_MAX]; /* running (kernel_build_job.c) */
	struct train_job *jobs;          /* train.run's jobs, oldest first (train/job.c) */
	struct job_record *job_records;  /* detached jobs' records, newest first (train/jobs_table.h) */
	struct kernel_table *kernel_table; /* clients' kernels (kernels/kernel.h: kernels_init) */
	struct compile_job *kernel_compiles[KERNEL_COMPILES_MAX]; /* running (kernel_compile_job.c) */
	/* Compiles done with, freed after the loop's batch of events they
	 * ended in; the loop's hook that frees them is added once. */
	struct compile_job *kernel_compiles_retired;
	bool kernel_compiles_hook;
	struct step_waiter *step_waiters; /* train.steps waiting for a model's step (methods_train.c) */
	bool group_busy;                 /* a run across the group involves this member (job_cluster.c) */
	/* The shutdown's final checkpoint wrote every tensor and model: the
	 * jobs it stopped may resume after the restart (methods_job.c). */
	bool final_checkpoint_ok;
	/* job.drain: no new train.run; the running ones stop at a step and wait
	 * to resume (methods_job.c). */
	bool draining;
	/* CLOCK_MONOTONIC of the last request dispatched that waits for the
	 * GPU (op.run, graph.run, predict, a transfer...): jobs keep one step in
	 * flight, not pipeline_depth, for a while after it (job_pipe.c), so
	 * that such a request waits for one step on the device at most. */
	int64_t request_ns;
};

/* Open the checkpoint directories, load tensors and models into d->store and
 * d->models (clean), start dirty tracking and the periodic checkpoint: at
 * start-up, and again after a device loss (recover.c). Returns 0 or -errno
 * (logged). */
int daemon_restore(struct daemon *d);

