/* The job namespace (docs/protocol.md, "Jobs"): detached train.run jobs,
 * job.list, job.stat, job.cancel and job.watch. A job's record lives in the
 * table of train/jobs_table.h; this file is its sink (the run reports into
 * the record and to the watchers) and the method handlers. */
#pragma once

#include <msgpack.h>

#include "methods/request.h"
#include "train/job.h"

struct job_record;

/* Start `plan` as a detached job of req's caller and answer {job: id} at
 * once (train.run with detach: true). `model_data` as for train_job_start;
 * `model` is the model's key or "" for none. With `resumed` (a record a
 * shutdown interrupted, restarted by train_run_resume) the job runs in that
 * record and nothing is answered. Refused with RESOURCE_EXHAUSTED beyond
 * user_max_jobs running jobs. Returns 0 or -1 after request_fail. */
int job_start_detached(struct request *req, const struct train_plan *plan, const msgpack_object *model_data,
		       const char *model, struct job_record *resumed);

/* Serve `job.list {all?}`: the caller's jobs, newest first (root: everyone's). */
int method_job_list(struct request *req);

/* Serve `job.stat {job}`. */
int method_job_stat(struct request *req);

/* Serve `job.cancel {job}`: the run stops at its next turn. */
int method_job_cancel(struct request *req);

/* Serve `job.watch {job}`: train.progress and train.eval notifications while
 * it runs, then its job.stat map (deferred). */
int method_job_watch(struct request *req);

/* Serve `job.drain {undo?}` (root): no new train.run, the running runs stop
 * at a step (detached ones to resume after a restart or the undo); with
 * undo, new runs again and the drained ones resume. Answers {draining,
 * running, waiting}. */
int method_job_drain(struct request *req);

/* The same as SIGUSR1 asks it (main.c): drain, logged. */
void jobs_drain(struct daemon *d);

/* The running jobs the caller may see, as an array of job.stat maps (info). */
int job_pack_running(msgpack_packer *pk, const struct caller *call);

/* Read the jobs file into the table (daemon_restore) and start again the
 * jobs the last shutdown interrupted after a final checkpoint that held
 * (docs/durability.md, "Jobs"). Returns 0 or -errno. */
int jobs_restore(struct daemon *d);

/* At shutdown, after the connections closed: running jobs become
 * interrupted, the table is saved and freed. */
void jobs_shutdown(struct daemon *d);

/* train.run's notifications and result (methods_train_run.c), shared with
 * the watchers: return 0 or -1 like msgpack_pack_*. */
int train_pack_progress(msgpack_packer *pk, const struct train_status *st);
int train_pack_eval(msgpack_packer *pk, const struct train_status *st);
int train_pack_result(msgpack_packer *pk, const struct train_status *st, const char *stopped);
