/* The order in which train.run's jobs take their turns on the device
 * (issue 34; docs/architecture.md, "Sharing the GPU"): by their owners'
 * charged GPU time over their weights, owners past their hour's budget
 * last, a user's own jobs by their own GPU time weighed by nice. */
#include "train/job_impl.h"

#include <math.h>
#include <stdint.h>
#include <time.h>

#include "base/clock.h"
#include "base/usage.h"
#include "daemon.h"

/* The owner's weight (user_weights: its own, its primary group's, else 1). */
static uint32_t owner_weight(const struct train_job *job)
{
	return (uint32_t)config_user_value(&job->call.d->cfg.user_weights, (uint32_t)job->call.cred.uid,
					   (uint32_t)job->call.cred.gid, 1);
}

/* The scheduler's clock of `job`'s owner over its weight: the device time
 * it had per unit of share (0 when untracked). */
static double owner_vtime(const struct train_job *job)
{
	const struct usage_user *u = usage_find(&job->call.d->usage, (uint32_t)job->call.cred.uid);

	return u ? (double)u->vtime_ns / owner_weight(job) : 0;
}

/* Among one owner's jobs: the job's own GPU time, weighed by its nice
 * (1.25x a step, as Linux's nice weighs CPU time). */
static double job_vtime(const struct train_job *job)
{
	return (double)job->gpu_ns * pow(1.25, job->p.nice);
}

/* Whether `job`'s owner used up its GPU time of the last hour
 * (user_gpu_hour): its jobs then go behind everyone else's, running on a
 * device no one else waits for, and else one turn a second (no run
 * starves). */
static bool owner_over_budget(const struct train_job *job)
{
	const struct daemon *d = job->call.d;
	uint64_t budget = config_user_value(&d->cfg.user_gpu_hour, (uint32_t)job->call.cred.uid,
					    (uint32_t)job->call.cred.gid, 0);
	const struct usage_user *u = budget ? usage_find(&d->usage, (uint32_t)job->call.cred.uid) : NULL;

	return u && usage_last_hour(u) >= budget * 1000000000ull &&
	       daemon_now_ns(CLOCK_MONOTONIC) - job->slice_start_ns < 1000000000ll;
}

/* Whether `a` goes after `b`: its owner is over its hour's budget and
 * b's not, or further ahead, or (the same owner's clock) the job itself is. */
static bool job_after(const struct train_job *a, const struct train_job *b)
{
	bool oa = owner_over_budget(a), ob = owner_over_budget(b);
	double va = owner_vtime(a), vb = owner_vtime(b);

	if (oa != ob)
		return oa;
	return va != vb ? va > vb : job_vtime(a) > job_vtime(b);
}

/* Order the jobs by their owners' GPU time, least first, then a user's own
 * jobs by theirs (stable): at the end of a turn the next goes to the user
 * furthest behind its share of the device, whatever the lengths of the
 * users' steps (issue 34; docs/architecture.md, "Sharing the GPU"). */
void jobs_by_share(struct daemon *d)
{
	struct train_job *sorted = NULL, **tail;

	while (d->jobs) {
		struct train_job *job = d->jobs;

		d->jobs = job->next;
		for (tail = &sorted; *tail && !job_after(*tail, job); tail = &(*tail)->next)
			;
		job->next = *tail;
		*tail = job;
	}
	d->jobs = sorted;
}

/* A user's first job starts its clock at the least of those running, if
 * behind: its past idleness is no credit against the others. */
void jobs_share_join(struct train_job *job)
{
	struct usage_user *u = usage_of(&job->call.d->usage, (uint32_t)job->call.cred.uid);
	double least = -1;

	if (!u)
		return;
	for (const struct train_job *o = job->call.d->jobs; o; o = o->next) {
		if (o->call.cred.uid == job->call.cred.uid)
			return;
		if (least < 0 || owner_vtime(o) < least)
			least = owner_vtime(o);
	}
	if (least >= 0 && (double)u->vtime_ns < least * owner_weight(job))
		u->vtime_ns = (uint64_t)(least * owner_weight(job));
}

