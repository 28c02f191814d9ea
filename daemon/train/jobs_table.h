/* Detached train.run jobs (docs/protocol.md, "Jobs"): the daemon's table of
 * job records (d->job_records, a list, newest first). A record outlives its run: it holds the job's owner, state,
 * last progress and end (result or error) and is what job.list, job.stat and
 * the jobs file in the state directory (persist/persist_jobs.c) show. The
 * run itself is a train_job (job.h) reporting into the record through the
 * sink methods/methods_job.c gives it. Ids are counted per owner (1, 2, ...
 * for each uid), so a user's ids tell nothing of other users' jobs; a job
 * is named by its owner and id. An owner's count goes on after the largest
 * id the owner has in the table, restored records included, so ids are
 * unique for the life of the state directory. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/device.h"
#include "store/names.h"
#include "train/job.h"

/* Finished jobs kept per owner: the oldest beyond this are forgotten. */
#define JOBS_KEPT_PER_USER 16
/* Records restored from the jobs file at most. */
#define JOBS_MAX_RESTORED 4096

enum job_state {
	JOB_RUNNING = 0,
	JOB_DONE = 1,
	JOB_FAILED = 2,
	JOB_CANCELLED = 3,
	JOB_INTERRUPTED = 4, /* the daemon stopped while it ran */
	JOB_STATE_COUNT
};

struct daemon;
struct job_watcher;     /* methods/methods_job.c's */

struct job_record {
	uint64_t id;
	uint32_t owner;
	enum job_state state;
	char model[NAMES_SHOWN_MAX];   /* as the owner names it, "" for none */
	int64_t started_ns, ended_ns;  /* CLOCK_REALTIME; ended 0 while running */
	int64_t step;
	uint64_t run_step, steps, epoch, epochs;
	double loss, lr, samples_per_s, elapsed;
	bool has_eval;
	double eval_loss, eval_metrics[TRAIN_MAX_METRICS];
	char metrics[TRAIN_MAX_METRICS][TDP_MAX_NAME_LEN + 1];
	unsigned nmetrics;
	uint32_t devs[GPU_MAX_DEVICES];
	unsigned ndev;
	char stopped[16];              /* how it ended: done, stop_loss, cancelled */
	int err_code;                  /* failed: a tdp_status and message */
	char err_message[TDP_MAX_ERROR_MESSAGE];
	uint8_t *result;               /* train.run's result map, packed; NULL until done */
	size_t result_len;
	/* Interrupted by a shutdown whose final checkpoint held: what starting
	 * it again needs, packed ({"request", "gid", "groups"}); NULL: none. */
	uint8_t *resume;
	size_t resume_len;
	struct daemon *d;              /* the daemon whose table holds it */
	/* Only while it runs in this daemon: */
	struct train_job *job;
	struct job_watcher *watchers;
	int64_t saved_ns;              /* CLOCK_MONOTONIC of the last save with progress */
	struct job_record *next;
};

/* The name of `s` ("running", "done", ...). */
const char *job_state_name(enum job_state s);

/* A new running record of `owner` with the owner's next id, first in d's
 * table. Returns NULL for ENOMEM. */
struct job_record *jobs_table_add(struct daemon *d, uint32_t owner);

/* Remove `rec` from its daemon's table and free it (no watchers may
 * remain). */
void jobs_table_remove(struct job_record *rec);

/* The record `id` of `owner` in d's table, or NULL. */
struct job_record *jobs_table_find(const struct daemon *d, uint32_t owner, uint64_t id);

/* d's first record (the newest), for walking `next`. */
struct job_record *jobs_table_head(const struct daemon *d);

/* Running records of `owner` in d's table. */
unsigned jobs_table_running(const struct daemon *d, uint32_t owner);

/* Forget `owner`'s oldest finished records beyond `keep` (those without
 * watchers). */
void jobs_table_prune(struct daemon *d, uint32_t owner, unsigned keep);

/* Copy progress (and evaluation, when st->has_eval) from `st` into `rec`. */
void jobs_table_note(struct job_record *rec, const struct train_status *st);

/* Pack `rec` as a job.stat map (docs/protocol.md), a running job's figures
 * taken from the job itself first (not as of its last progress note).
 * Returns 0 or -1. */
int jobs_table_pack(msgpack_packer *pk, struct job_record *rec);

/* jobs_table_pack for the jobs file: with the "resume" entry where the
 * record has one. */
int jobs_table_pack_file(msgpack_packer *pk, struct job_record *rec);

/* Set or clear (NULL) rec->resume from `map`, copied. Returns 0 or -ENOMEM. */
int jobs_table_set_resume(struct job_record *rec, const msgpack_object *map);

/* Restore a record into d's table from a map jobs_table_pack wrote (the
 * jobs file): a running one becomes interrupted. A record whose owner and id
 * are already in the table is left out. Returns 0 (added or left out), or
 * -EINVAL for a malformed map, -ENOMEM. */
int jobs_table_restore(struct daemon *d, const msgpack_object *map);

/* Free every record of d's table (at shutdown); the table is empty after. */
void jobs_table_free(struct daemon *d);
