/* Detached jobs (methods_job.h): the sink a detached train.run reports
 * through (into its record in train/jobs_table.h, to the jobs file and to
 * its watchers) and the job.* handlers. Another user's job is answered
 * NOT_FOUND like a job that does not exist (docs/security.md, "Jobs"): its
 * existence is not shown. */
#include "methods/methods_job.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "daemon.h"
#include "methods/deferred_answer.h"
#include "methods/methods_train_run.h"
#include "methods/params.h"
#include "pack.h"
#include "persist/persist_jobs.h"
#include "rpc.h"
#include "status.h"
#include "train/jobs_table.h"

/* Progress is written to the jobs file at most this often. */
#define SAVE_EVERY_NS ((int64_t)1000000000)

/* A job.watch waiting for the end of its job. */
struct job_watcher {
	struct deferred_answer da;
	struct job_record *rec;
	struct job_watcher *next;
};

static bool may_see(const struct caller *call, const struct job_record *rec)
{
	return call->cred.uid == 0 || rec->owner == (uint32_t)call->cred.uid;
}

/* Answer every watcher of `rec` with its stat map and let them go. */
static void answer_watchers(struct job_record *rec)
{
	while (rec->watchers) {
		struct job_watcher *w = rec->watchers;

		rec->watchers = w->next;
		(void)(tdp_write_result_head(&w->da.pk, w->da.req.msgid) < 0 ||
		       jobs_table_pack(&w->da.pk, rec));
		deferred_answer_done(&w->da);
		free(w);
	}
}

static void save(struct job_record *rec, bool progress)
{
	int64_t now = daemon_now_ns(CLOCK_MONOTONIC);

	if (progress && now - rec->saved_ns < SAVE_EVERY_NS)
		return;
	rec->saved_ns = now;
	persist_jobs_save(rec->d);
}

static bool sink_ready(void *data)
{
	(void)data;
	return true; /* a slow watcher misses progress notes, it does not hold the run */
}

static void sink_flush(void *data)
{
	struct job_watcher *next;

	/* A connection whose output fails is closed here: its watcher goes
	 * (watcher_cancel), so the next one is taken first. */
	for (struct job_watcher *w = ((struct job_record *)data)->watchers; w; w = next) {
		next = w->next;
		request_flush(&w->da.req);
	}
}

static void sink_progress(void *data, const struct train_status *st)
{
	struct job_record *rec = data;

	jobs_table_note(rec, st);
	for (struct job_watcher *w = rec->watchers; w; w = w->next)
		if (!request_backlogged(&w->da.req))
			(void)train_pack_progress(&w->da.pk, st);
	save(rec, true);
}

static void sink_eval(void *data, const struct train_status *st)
{
	struct job_record *rec = data;

	jobs_table_note(rec, st);
	for (struct job_watcher *w = rec->watchers; w; w = w->next)
		if (!request_backlogged(&w->da.req))
			(void)train_pack_eval(&w->da.pk, st);
}

static void keep_resume(struct job_record *rec);

static void sink_finish(void *data, const struct train_status *st, const char *stopped)
{
	struct job_record *rec = data;
	msgpack_sbuffer sb;
	msgpack_packer pk;

	jobs_table_note(rec, st);
	rec->state = strcmp(stopped, "cancelled") == 0 ? JOB_CANCELLED : JOB_DONE;
	/* Drained (job.drain): it waits, resumable, for a restart or the undo. */
	if (!strcmp(stopped, "drained")) {
		rec->state = JOB_INTERRUPTED;
		keep_resume(rec);
	}
	snprintf(rec->stopped, sizeof(rec->stopped), "%s", stopped);
	rec->ended_ns = daemon_now_ns(CLOCK_REALTIME);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (rec->state != JOB_INTERRUPTED && train_pack_result(&pk, st, stopped) == 0 &&
	    (rec->result = malloc(sb.size))) {
		memcpy(rec->result, sb.data, sb.size);
		rec->result_len = sb.size;
	}
	msgpack_sbuffer_destroy(&sb);
	answer_watchers(rec);
	save(rec, false);
}

static void sink_fail(void *data, const struct td_error *err)
{
	struct job_record *rec = data;

	rec->state = JOB_FAILED;
	rec->err_code = err->code ? err->code : TDP_INTERNAL;
	snprintf(rec->err_message, sizeof(rec->err_message), "%s", err->message);
	rec->ended_ns = daemon_now_ns(CLOCK_REALTIME);
	answer_watchers(rec);
	save(rec, false);
}

static void sink_release(void *data)
{
	struct job_record *rec = data;

	rec->job = NULL;
	jobs_table_prune(rec->d, rec->owner, JOBS_KEPT_PER_USER);
}

static const struct train_sink job_sink = {
	.ready = sink_ready,
	.flush = sink_flush,
	.progress = sink_progress,
	.eval = sink_eval,
	.finish = sink_finish,
	.fail = sink_fail,
	.release = sink_release,
};

int job_start_detached(struct request *req, const struct train_plan *plan, const msgpack_object *model_data,
		       const char *model, struct job_record *resumed)
{
	struct daemon *d = req->call.d;
	uint32_t uid = (uint32_t)req->call.cred.uid;
	uint64_t most = config_user_value(&d->cfg.user_quota_jobs, uid, (uint32_t)req->call.cred.gid,
					  d->cfg.user_max_jobs);
	struct job_record *rec = resumed;

	if (jobs_table_running(d, uid) >= most)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "uid %u already has %llu jobs running (%s)",
				    (unsigned)uid, (unsigned long long)most,
				    most == d->cfg.user_max_jobs ? "user_max_jobs" : "user_quota_jobs");
	if (!rec && !(rec = jobs_table_add(d, uid)))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	if (!resumed) {
		snprintf(rec->model, sizeof(rec->model), "%s", model);
		rec->started_ns = daemon_now_ns(CLOCK_REALTIME);
		rec->step = plan->start_step - 1;
	}
	rec->steps = plan->total;
	rec->epochs = plan->epochs;
	rec->ndev = plan->ndev;
	memcpy(rec->devs, plan->devs, plan->ndev * sizeof(plan->devs[0]));
	if (train_job_start(&req->call, plan, req->params, model_data, &job_sink, rec, &rec->job) < 0) {
		if (!resumed)
			jobs_table_remove(rec);
		return -1;
	}
	if (resumed) {
		rec->state = JOB_RUNNING;
		rec->ended_ns = 0;
		rec->stopped[0] = 0;
		jobs_table_set_resume(rec, NULL);
		return 0;
	}
	save(rec, false);
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 1) ||
	    tdp_pack_cstr(req->pk, "job") || msgpack_pack_uint64(req->pk, rec->id))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

/* The job named by the request's `job` (ids are per owner: `owner`,
 * default the caller, names another's), if the caller may see it. */
static struct job_record *find_job(struct request *req)
{
	uint64_t id, owner = (uint32_t)req->call.cred.uid;
	const struct param p[] = {
		PARAM_REQ("job", PARAM_UINT, id),
		PARAM_OPT("owner", PARAM_UINT, owner),
	};
	struct job_record *rec = NULL;

	if (PARAMS_PARSE(req, p) < 0)
		return NULL;
	if (owner <= UINT32_MAX)
		rec = jobs_table_find(req->call.d, (uint32_t)owner, id);
	if (!rec || !may_see(&req->call, rec)) {
		request_fail(req, TDP_NOT_FOUND, "no job %llu", (unsigned long long)id);
		return NULL;
	}
	return rec;
}

int method_job_list(struct request *req)
{
	uint32_t n = 0;
	int fail;

	if (params_none(req) < 0)
		return -1;
	for (struct job_record *rec = jobs_table_head(req->call.d); rec; rec = rec->next)
		n += may_see(&req->call, rec);
	fail = tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 1) ||
	       tdp_pack_cstr(req->pk, "jobs") || msgpack_pack_array(req->pk, n);
	for (struct job_record *rec = jobs_table_head(req->call.d); !fail && rec; rec = rec->next)
		if (may_see(&req->call, rec))
			fail = jobs_table_pack(req->pk, rec) != 0;
	return fail ? request_fail(req, TDP_INTERNAL, "out of memory") : 0;
}

int method_job_stat(struct request *req)
{
	struct job_record *rec = find_job(req);

	if (!rec)
		return -1;
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || jobs_table_pack(req->pk, rec))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

int method_job_cancel(struct request *req)
{
	struct job_record *rec = find_job(req);

	if (!rec)
		return -1;
	if (rec->state != JOB_RUNNING || !rec->job)
		return request_fail(req, TDP_FAILED_PRECONDITION, "job %llu is %s, not running",
				    (unsigned long long)rec->id, job_state_name(rec->state));
	train_job_cancel(rec->job);
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 2) ||
	    tdp_pack_cstr(req->pk, "job") || msgpack_pack_uint64(req->pk, rec->id) ||
	    tdp_pack_cstr(req->pk, "cancelling") || msgpack_pack_true(req->pk))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

/* The watcher's client went away. */
static void watcher_cancel(struct deferred_answer *da)
{
	struct job_watcher *w = (struct job_watcher *)da;

	for (struct job_watcher **pp = &w->rec->watchers; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	free(w);
}

int method_job_watch(struct request *req)
{
	struct job_record *rec = find_job(req);
	struct job_watcher *w;

	if (!rec)
		return -1;
	if (rec->state != JOB_RUNNING || !rec->job) {
		if (tdp_write_result_head(req->pk, req->msgid) < 0 || jobs_table_pack(req->pk, rec))
			return request_fail(req, TDP_INTERNAL, "out of memory");
		return 0;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	if (deferred_answer_start(&w->da, req, watcher_cancel) < 0) {
		free(w);
		return -1;
	}
	w->rec = rec;
	w->next = rec->watchers;
	rec->watchers = w;
	return REQUEST_DEFERRED;
}

int job_pack_running(msgpack_packer *pk, const struct caller *call)
{
	uint32_t n = 0;

	for (struct job_record *rec = jobs_table_head(call->d); rec; rec = rec->next)
		n += rec->state == JOB_RUNNING && may_see(call, rec);
	if (msgpack_pack_array(pk, n))
		return -1;
	for (struct job_record *rec = jobs_table_head(call->d); rec; rec = rec->next)
		if (rec->state == JOB_RUNNING && may_see(call, rec) && jobs_table_pack(pk, rec))
			return -1;
	return 0;
}

/* Start again every job the last shutdown interrupted with a resume entry;
 * one that cannot start stays interrupted and says why. */
static void resume_jobs(struct daemon *d)
{
	for (struct job_record *rec = jobs_table_head(d); rec; rec = rec->next) {
		struct td_error err;

		if (rec->state != JOB_INTERRUPTED || !rec->resume)
			continue;
		td_error_clear(&err);
		if (train_run_resume(d, rec, &err) == 0) {
			log_notice("job %llu of uid %u resumed at step %llu of %llu",
				   (unsigned long long)rec->id, (unsigned)rec->owner,
				   (unsigned long long)rec->run_step, (unsigned long long)rec->steps);
			continue;
		}
		jobs_table_set_resume(rec, NULL);
		rec->err_code = err.code ? err.code : TDP_INTERNAL;
		snprintf(rec->err_message, sizeof(rec->err_message), "not resumed after the restart: %.*s",
			 (int)(sizeof(rec->err_message) - 40), err.message);
		log_warning("job %llu of uid %u stays interrupted: %s", (unsigned long long)rec->id,
			    (unsigned)rec->owner, err.message);
	}
}

int jobs_restore(struct daemon *d)
{
	uint64_t n = 0;
	int r;

	r = persist_jobs_restore(d, &n);
	if (r == 0 && n) {
		resume_jobs(d);
		persist_jobs_save(d); /* the running ones are interrupted now, or resumed */
	}
	return r;
}

/* What starting `rec`'s job again after a restart needs: its request and
 * who asked (jobs_table.h, resume). */
static void keep_resume(struct job_record *rec)
{
	const struct access_cred *cred = train_job_cred(rec->job);
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacked u;
	bool fail;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	fail = msgpack_pack_map(&pk, 3) || tdp_pack_cstr(&pk, "request") ||
	       msgpack_pack_object(&pk, *train_job_request(rec->job)) || tdp_pack_cstr(&pk, "gid") ||
	       msgpack_pack_uint32(&pk, (uint32_t)cred->gid) || tdp_pack_cstr(&pk, "groups") ||
	       msgpack_pack_array(&pk, cred->ngroups);
	for (uint32_t i = 0; !fail && i < cred->ngroups; i++)
		fail = msgpack_pack_uint32(&pk, (uint32_t)cred->groups[i]);
	msgpack_unpacked_init(&u);
	if (!fail && tdp_unpack(&u, (const uint8_t *)sb.data, sb.size) == 0 && jobs_table_set_resume(rec, &u.data) == 0)
		log_notice("job %llu of uid %u will resume after the restart", (unsigned long long)rec->id,
			   (unsigned)rec->owner);
	msgpack_unpacked_destroy(&u);
	msgpack_sbuffer_destroy(&sb);
}

void jobs_shutdown(struct daemon *d)
{
	bool any = false;

	for (struct job_record *rec = jobs_table_head(d); rec; rec = rec->next) {
		if (rec->job) {
			struct train_status st = train_job_status(rec->job);

			jobs_table_note(rec, &st);
		}
		if (rec->state == JOB_RUNNING) {
			rec->state = JOB_INTERRUPTED;
			rec->ended_ns = daemon_now_ns(CLOCK_REALTIME);
			/* The shutdown names what it stops (issue 34). */
			log_notice("job %llu of uid %u stopped at step %llu of %llu: interrupted",
				   (unsigned long long)rec->id, (unsigned)rec->owner,
				   (unsigned long long)rec->run_step, (unsigned long long)rec->steps);
			/* The final checkpoint holds its committed steps: it can go on. */
			if (rec->job && d->final_checkpoint_ok && rec->run_step < rec->steps)
				keep_resume(rec);
			any = true;
		}
		/* A drained job resumes only from a final checkpoint that held. */
		if (rec->state == JOB_INTERRUPTED && rec->resume && !d->final_checkpoint_ok)
			jobs_table_set_resume(rec, NULL);
		rec->job = NULL; /* freed by train_jobs_free, after this */
	}
	if (any)
		persist_jobs_save(d);
	jobs_table_free(d);
}

/* The counts job.drain answers: runs still running, drained ones waiting. */
static void drain_counts(const struct daemon *d, uint64_t *ret_running, uint64_t *ret_waiting)
{
	uint64_t running = 0, waiting = 0;

	for (const struct train_job *j = d->jobs; j; j = train_job_next(j))
		running++;
	for (struct job_record *rec = jobs_table_head(d); rec; rec = rec->next)
		waiting += rec->state == JOB_INTERRUPTED && rec->resume != NULL;
	*ret_running = running;
	*ret_waiting = waiting;
}

void jobs_drain(struct daemon *d)
{
	uint64_t running, waiting;

	d->draining = true;
	train_jobs_drain(d);
	drain_counts(d, &running, &waiting);
	log_notice("draining: no new train.run; %llu runs stop at their next step and wait to resume",
		   (unsigned long long)running);
}

int method_job_drain(struct request *req)
{
	struct daemon *d = req->call.d;
	bool undo = false;
	const struct param p[] = {
		PARAM_OPT("undo", PARAM_BOOL, undo),
	};
	uint64_t running, waiting;

	if (PARAMS_PARSE(req, p) < 0)
		return -1;
	if (req->call.cred.uid != 0)
		return request_fail(req, TDP_PERMISSION_DENIED, "only root drains the daemon");
	if (undo) {
		d->draining = false;
		resume_jobs(d);
		persist_jobs_save(d);
		log_notice("drain undone: train.run accepted again; the drained runs resume");
	} else if (!d->draining) {
		jobs_drain(d);
	} else {
		train_jobs_drain(d); /* a run that started meanwhile (resumed) */
	}
	drain_counts(d, &running, &waiting);
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 3) ||
	    tdp_pack_cstr(req->pk, "draining") || (d->draining ? msgpack_pack_true(req->pk) : msgpack_pack_false(req->pk)) ||
	    tdp_pack_cstr(req->pk, "running") || msgpack_pack_uint64(req->pk, running) ||
	    tdp_pack_cstr(req->pk, "waiting") || msgpack_pack_uint64(req->pk, waiting))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}
