/* The table of detached jobs (daemon/train/jobs_table.c) on the stub
 * daemon, without a socket or a run: ids counted per owner, lookups by
 * owner and id (a uid reaches only its own ids), the listing order,
 * running counts, pruning to the kept records, removal, the jobs file's
 * map form restored, and freeing. Every test holds two daemons side by
 * side: the table is each daemon's own (d->job_records), not the
 * process's. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "stub_daemon.h"
#include "train/jobs_table.h"

/* Two daemons side by side: sd[0] and sd[1]. */
static int setup(void **state)
{
	*state = stub_daemons_new(2);
	return *state ? 0 : -1;
}

static int teardown(void **state)
{
	stub_daemons_free(*state, 2);
	return 0;
}

/* Records in d's table (all owners). */
static unsigned count_all(const struct daemon *d)
{
	unsigned n = 0;

	for (const struct job_record *rec = jobs_table_head(d); rec; rec = rec->next)
		n++;
	return n;
}

/* A finished record of `owner` in d's table. */
static struct job_record *add_done(struct daemon *d, uint32_t owner)
{
	struct job_record *rec = jobs_table_add(d, owner);

	assert_non_null(rec);
	rec->state = JOB_DONE;
	return rec;
}

static void test_add_find(void **state)
{
	struct stub_daemon *sd = *state;
	struct daemon *a = &sd[0].d, *b = &sd[1].d;
	struct job_record *r1, *r2, *o1;

	assert_null(jobs_table_head(a));
	r1 = jobs_table_add(a, 1000);
	r2 = jobs_table_add(a, 1000);
	o1 = jobs_table_add(a, 1001);
	assert_non_null(r1);
	assert_non_null(r2);
	assert_non_null(o1);
	/* Ids count per owner, from 1; a record starts running. */
	assert_int_equal(r1->id, 1);
	assert_int_equal(r2->id, 2);
	assert_int_equal(o1->id, 1);
	assert_int_equal(r1->owner, 1000);
	assert_int_equal(r1->state, JOB_RUNNING);
	assert_ptr_equal(r1->d, a);
	assert_ptr_equal(jobs_table_find(a, 1000, 1), r1);
	assert_ptr_equal(jobs_table_find(a, 1000, 2), r2);
	assert_ptr_equal(jobs_table_find(a, 1001, 1), o1);
	assert_null(jobs_table_find(a, 1000, 3));
	assert_null(jobs_table_find(a, 1000, 0));
	/* The other daemon's table is untouched and counts on its own. */
	assert_null(jobs_table_head(b));
	assert_null(jobs_table_find(b, 1000, 1));
	assert_int_equal(jobs_table_add(b, 1000)->id, 1);
	assert_int_equal(count_all(a), 3);
	assert_int_equal(count_all(b), 1);
}

/* The listing (job.list walks it): newest first, every owner. */
static void test_list_order(void **state)
{
	struct stub_daemon *sd = *state;
	struct daemon *a = &sd[0].d;
	struct job_record *r1 = jobs_table_add(a, 1000), *o1 = jobs_table_add(a, 1001),
			  *r2 = jobs_table_add(a, 1000);
	struct job_record *rec = jobs_table_head(a);

	assert_ptr_equal(rec, r2);
	assert_ptr_equal(rec->next, o1);
	assert_ptr_equal(rec->next->next, r1);
	assert_null(rec->next->next->next);
	assert_null(jobs_table_head(&sd[1].d));
}

/* What a uid reaches: a job is named by its owner and id, so uid 1001's
 * job 1 is not uid 1000's job 1, and a uid's ids tell nothing of another
 * uid's jobs (methods_job.c answers NOT_FOUND for the rest). */
static void test_uid_sees_own(void **state)
{
	struct stub_daemon *sd = *state;
	struct daemon *a = &sd[0].d;
	struct job_record *mine, *theirs;

	for (unsigned i = 0; i < 5; i++)
		add_done(a, 1001);
	mine = jobs_table_add(a, 1000);
	theirs = jobs_table_find(a, 1001, 1);
	assert_int_equal(mine->id, 1);
	assert_non_null(theirs);
	assert_ptr_not_equal(theirs, mine);
	assert_ptr_equal(jobs_table_find(a, 1000, 1), mine);
	assert_null(jobs_table_find(a, 1000, 5));
	assert_non_null(jobs_table_find(a, 1001, 5));
	/* Nor does the other daemon see any of them. */
	assert_null(jobs_table_find(&sd[1].d, 1001, 1));
	assert_int_equal(jobs_table_running(a, 1000), 1);
	assert_int_equal(jobs_table_running(a, 1001), 0);
	assert_int_equal(jobs_table_running(&sd[1].d, 1000), 0);
}

/* user_max_jobs is checked against the running count (methods_job.c). */
static void test_running(void **state)
{
	struct stub_daemon *sd = *state;
	struct daemon *a = &sd[0].d;
	struct job_record *r1 = jobs_table_add(a, 1000);

	jobs_table_add(a, 1000);
	jobs_table_add(a, 1001);
	assert_int_equal(jobs_table_running(a, 1000), 2);
	assert_int_equal(jobs_table_running(a, 1001), 1);
	assert_int_equal(jobs_table_running(a, 1002), 0);
	r1->state = JOB_FAILED;
	assert_int_equal(jobs_table_running(a, 1000), 1);
}

/* JOBS_KEPT_PER_USER: an owner's oldest finished records beyond the kept
 * number go; running ones, watched ones and other owners' stay; ids go on
 * after the largest left. */
static void test_prune(void **state)
{
	struct stub_daemon *sd = *state;
	struct daemon *a = &sd[0].d;
	struct job_record *running, *watched;
	struct job_watcher *w = (struct job_watcher *)&w; /* any non-NULL pointer */

	running = jobs_table_add(a, 1000);                 /* id 1 */
	watched = add_done(a, 1000);                       /* id 2 */
	watched->watchers = w;
	for (unsigned i = 0; i < JOBS_KEPT_PER_USER + 4; i++)
		add_done(a, 1000);                         /* ids 3 .. 22 */
	add_done(a, 1001);
	add_done(&sd[1].d, 1000);
	jobs_table_prune(a, 1000, JOBS_KEPT_PER_USER);
	/* 16 kept (the newest, ids 7 .. 22), the running and the watched. */
	assert_int_equal(count_all(a), JOBS_KEPT_PER_USER + 2 + 1);
	assert_ptr_equal(jobs_table_find(a, 1000, 1), running);
	assert_ptr_equal(jobs_table_find(a, 1000, 2), watched);
	for (uint64_t id = 3; id < 7; id++)
		assert_null(jobs_table_find(a, 1000, id));
	for (uint64_t id = 7; id <= 22; id++)
		assert_non_null(jobs_table_find(a, 1000, id));
	assert_non_null(jobs_table_find(a, 1001, 1));
	assert_int_equal(count_all(&sd[1].d), 1);
	assert_int_equal(jobs_table_add(a, 1000)->id, 23);
	watched->watchers = NULL;
	/* Keep 0: every finished record without watchers goes. */
	jobs_table_prune(a, 1000, 0);
	assert_int_equal(count_all(a), 3); /* running 1, new 23 (running), 1001's */
	assert_ptr_equal(jobs_table_find(a, 1000, 1), running);
	assert_int_equal(jobs_table_running(a, 1000), 2);
}

/* A failed start removes its record: the id is given again. */
static void test_remove(void **state)
{
	struct stub_daemon *sd = *state;
	struct daemon *a = &sd[0].d, *b = &sd[1].d;
	struct job_record *r1 = jobs_table_add(a, 1000), *r2 = jobs_table_add(a, 1000);
	struct job_record *other = jobs_table_add(b, 1000);

	jobs_table_remove(r2);
	assert_null(jobs_table_find(a, 1000, 2));
	assert_ptr_equal(jobs_table_head(a), r1);
	assert_int_equal(jobs_table_add(a, 1000)->id, 2);
	jobs_table_remove(r1);
	assert_null(jobs_table_find(a, 1000, 1));
	assert_int_equal(count_all(a), 1);
	/* The other daemon's record of the same owner and id is its own. */
	assert_ptr_equal(jobs_table_find(b, 1000, 1), other);
	jobs_table_free(a);
	assert_null(jobs_table_head(a));
	assert_int_equal(count_all(b), 1);
	/* Freed and used again: ids start over. */
	assert_int_equal(jobs_table_add(a, 1000)->id, 1);
}

/* Pack `rec` as the jobs file does and restore it into `d`. */
static int round_trip(struct job_record *rec, struct daemon *d)
{
	struct mp m;
	int r;

	mp_begin(&m);
	assert_int_equal(jobs_table_pack_file(&m.pk, rec), 0);
	r = jobs_table_restore(d, mp_obj(&m));
	mp_end(&m);
	return r;
}

/* The jobs file's records come back into the daemon that reads it: a
 * running one as interrupted, a resume entry kept, one already there left
 * out, a malformed map refused. */
static void test_restore(void **state)
{
	struct stub_daemon *sd = *state;
	struct daemon *a = &sd[0].d, *b = &sd[1].d;
	struct job_record *run = jobs_table_add(a, 1000), *done = add_done(a, 1001), *back;
	struct mp m;

	strcpy(run->model, "mlp");
	run->started_ns = 1700000000ll * 1000000000ll;
	run->step = 41;
	run->run_step = 42;
	run->steps = 100;
	run->loss = 0.5;
	strcpy(done->stopped, "done");
	done->ended_ns = run->started_ns + 1000000000ll;
	/* A resume entry (keep_resume's holds the request and groups too). */
	mp_begin(&m);
	mp_kv(&m, STRS("gid=1000"));
	assert_int_equal(jobs_table_set_resume(run, mp_obj(&m)), 0);
	mp_end(&m);
	run->state = JOB_INTERRUPTED;

	assert_int_equal(round_trip(run, b), 0);
	assert_int_equal(round_trip(done, b), 0);
	back = jobs_table_find(b, 1000, 1);
	assert_non_null(back);
	assert_ptr_equal(back->d, b);
	assert_int_equal(back->state, JOB_INTERRUPTED);
	assert_string_equal(back->model, "mlp");
	assert_int_equal(back->step, 41);
	assert_int_equal(back->run_step, 42);
	assert_int_equal(back->steps, 100);
	assert_true(back->loss == 0.5);
	assert_non_null(back->resume);
	assert_int_equal(back->resume_len, run->resume_len);
	assert_null(back->job);
	back = jobs_table_find(b, 1001, 1);
	assert_non_null(back);
	assert_int_equal(back->state, JOB_DONE);
	assert_string_equal(back->stopped, "done");
	assert_null(back->resume);
	/* Already there: left out. */
	assert_int_equal(round_trip(done, b), 0);
	assert_int_equal(count_all(b), 2);
	/* A running record comes back interrupted; ids go on after it. */
	run->state = JOB_RUNNING;
	jobs_table_set_resume(run, NULL);
	run->id = 7;
	assert_int_equal(round_trip(run, b), 0);
	assert_int_equal(jobs_table_find(b, 1000, 7)->state, JOB_INTERRUPTED);
	assert_int_equal(jobs_table_add(b, 1000)->id, 8);
	/* Not a record. */
	mp_begin(&m);
	mp_kv(&m, STRS("job=9"));
	assert_int_equal(jobs_table_restore(b, mp_obj(&m)), -EINVAL);
	mp_end(&m);
	assert_int_equal(jobs_table_restore(b, NULL), -EINVAL);
	assert_null(jobs_table_find(b, 1000, 9));
	/* Restoring into b added nothing to a. */
	assert_int_equal(count_all(a), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_add_find, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_uid_sees_own, setup, teardown),
		cmocka_unit_test_setup_teardown(test_running, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prune, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restore, setup, teardown),
	};

	return cmocka_run_group_tests_name("jobs_table", tests, NULL, NULL);
}
