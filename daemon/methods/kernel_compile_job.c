#include "methods/kernel_compile_job.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "daemon.h"
#include "kernels/glsl_compile.h"
#include "methods/deferred_answer.h"
#include "rpc.h"
#include "status.h"

struct compile_job {
	struct deferred_answer da;    /* the connection waits for its answer */
	struct loop_source out_src;   /* the child's answer */
	struct loop_source timer_src; /* the time limit */
	struct glsl_job *gj;          /* NULL once finished or cancelled */
	struct kernel_spec ks;
	struct compile_job *next;     /* on the retired list */
};

/* Jobs done with (d->kernel_compiles_retired) are freed after the batch of
 * loop events they ended in (another event of the batch may still point at
 * them). The compiles running now are d->kernel_compiles (daemon.h,
 * KERNEL_COMPILES_MAX). */
static void free_retired(void *data)
{
	kernel_compile_jobs_free(data);
}

void kernel_compile_jobs_free(struct daemon *d)
{
	while (d->kernel_compiles_retired) {
		struct compile_job *j = d->kernel_compiles_retired;

		d->kernel_compiles_retired = j->next;
		free(j);
	}
}

/* Stop watching the child and its clock; the job stays until the batch
 * ends. */
static void retire(struct compile_job *j)
{
	struct daemon *d = j->da.req.call.d;
	struct loop *l = d->loop;

	for (unsigned i = 0; i < KERNEL_COMPILES_MAX; i++)
		if (d->kernel_compiles[i] == j)
			d->kernel_compiles[i] = NULL;

	if (j->out_src.fd >= 0)
		loop_remove(l, &j->out_src);   /* the fd itself is the glsl_job's */
	if (j->timer_src.fd >= 0) {
		loop_remove(l, &j->timer_src);
		close(j->timer_src.fd);
	}
	j->out_src.fd = j->timer_src.fd = -1;
	j->next = d->kernel_compiles_retired;
	d->kernel_compiles_retired = j;
}

/* Stop watching the child's output before its fd is closed (by
 * glsl_job_finish or glsl_job_cancel): the number may be reused at once
 * (the build job's eventfd), and removing it afterwards would unwatch that. */
static void unwatch(struct compile_job *j)
{
	if (j->out_src.fd >= 0) {
		loop_remove(j->da.req.call.d->loop, &j->out_src);
		j->out_src.fd = -1;
	}
}

/* The answer: the kernel, or the error (whatever was written before it is
 * dropped, as request_dispatch does). */
static void answer(struct compile_job *j, bool timed_out)
{
	char why[TDP_MAX_ERROR_MESSAGE - 64];
	uint32_t *words = NULL;
	size_t nwords = 0, mark;
	int r;

	unwatch(j);
	r = glsl_job_finish(j->gj, timed_out, &words, &nwords, why, sizeof(why));
	j->gj = NULL;
	if (j->da.gone) {
		free(words);
		return;
	}
	mark = deferred_answer_mark(&j->da);
	r = kernel_create_compiled(&j->da.req, &j->ks, r, words, nwords, why);
	if (r == REQUEST_DEFERRED)
		return; /* the build job answers (kernel_build_job.c) */
	if (r < 0)
		deferred_answer_fail(&j->da, mark);
	deferred_answer_done(&j->da);
}

static void on_output(void *data, uint32_t events)
{
	struct compile_job *j = data;
	int r;

	(void)events;
	if (!j->gj)
		return;
	r = glsl_job_read(j->gj);
	if (r == 0)
		return;
	if (r < 0) {            /* out of memory for its answer */
		unwatch(j);
		glsl_job_cancel(j->gj);
		j->gj = NULL;
		if (!j->da.gone) {
			request_fail(&j->da.req, TDP_RESOURCE_EXHAUSTED, "out of memory");
			deferred_answer_fail(&j->da, deferred_answer_mark(&j->da));
			deferred_answer_done(&j->da);
		}
	} else {
		answer(j, false);
	}
	retire(j);
}

static void on_timer(void *data, uint32_t events)
{
	struct compile_job *j = data;

	(void)events;
	if (!j->gj)
		return;
	answer(j, true);
	retire(j);
}

/* The client went away (deferred_answer.on_gone): kill the compiler. */
static void cancel(struct deferred_answer *da)
{
	struct compile_job *j = (struct compile_job *)da;

	if (j->gj) {
		unwatch(j);
		glsl_job_cancel(j->gj);
		j->gj = NULL;
		retire(j);
	}
}

int kernel_compile_defer(struct request *req, const struct kernel_spec *ks, const char *src,
			 const char *preamble)
{
	struct itimerspec at = { .it_value = { .tv_sec = GLSL_CHILD_SECONDS } };
	char why[TDP_MAX_ERROR_MESSAGE - 64];
	struct daemon *d = req->call.d;
	struct loop *l = d->loop;
	unsigned slot = KERNEL_COMPILES_MAX;
	struct compile_job *j;
	int r;

	if (!req->conn) /* deferred_answer_start must not fail once the compiler runs */
		return request_fail(req, TDP_INTERNAL, "kernel.create needs a connection");
	for (unsigned i = 0; i < KERNEL_COMPILES_MAX; i++) {
		if (!d->kernel_compiles[i])
			slot = i;
		else if (d->kernel_compiles[i]->da.req.call.cred.uid == req->call.cred.uid)
			return request_fail(req, TDP_RESOURCE_EXHAUSTED,
					    "uid %u already has a kernel compiling (one at a time)",
					    (unsigned)req->call.cred.uid);
	}
	if (slot == KERNEL_COMPILES_MAX)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED,
				    "the daemon compiles %d kernels at once; retry when one is done",
				    KERNEL_COMPILES_MAX);
	if (!d->kernel_compiles_hook) {
		if (loop_add_after(l, free_retired, d) < 0)
			return request_fail(req, TDP_INTERNAL, "cannot watch the compiler");
		d->kernel_compiles_hook = true;
	}
	j = calloc(1, sizeof(*j));
	if (!j)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of memory");
	j->out_src.fd = j->timer_src.fd = -1;
	r = glsl_job_start(src, preamble, GLSL_CHILD_SECONDS, &j->gj, why, sizeof(why));
	if (r < 0) {
		free(j);
		return kernel_create_compiled(req, ks, r == -ENOMEM ? r : -EIO, NULL, 0, why);
	}
	j->timer_src.fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	j->out_src = (struct loop_source){ .fd = glsl_job_fd(j->gj), .fn = on_output, .data = j };
	if (j->timer_src.fd >= 0) {
		j->timer_src.fn = on_timer;
		j->timer_src.data = j;
	}
	if (j->timer_src.fd < 0 || timerfd_settime(j->timer_src.fd, 0, &at, NULL) < 0 ||
	    loop_add(l, &j->out_src, EPOLLIN) < 0) {
		j->out_src.fd = -1;
		goto fail;
	}
	if (loop_add(l, &j->timer_src, EPOLLIN) < 0) {
		loop_remove(l, &j->out_src);
		j->out_src.fd = -1;
		goto fail;
	}
	j->ks = *ks;
	deferred_answer_start(&j->da, req, cancel);  /* cannot fail: req->conn was checked */
	d->kernel_compiles[slot] = j;
	return REQUEST_DEFERRED;
fail:
	if (j->timer_src.fd >= 0)
		close(j->timer_src.fd);
	glsl_job_cancel(j->gj);
	free(j);
	return request_fail(req, TDP_INTERNAL, "cannot watch the compiler: %s", strerror(errno));
}
