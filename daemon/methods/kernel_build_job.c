#include "methods/kernel_build_job.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/log.h"
#include "base/loop.h"
#include "base/metrics.h"
#include "daemon.h"
#include "gpu/pipeline.h"
#include "kernels/kernel.h"
#include "methods/deferred_answer.h"
#include "persist/recover.h"
#include "rpc.h"
#include "status.h"

/* At most KERNEL_BUILDS_MAX builds at once (daemon.h): each is a driver
 * compile of up to about a second and its memory; a user gets one at a
 * time. */
struct kernel_build {
	struct deferred_answer da;    /* the connection waits for its answer */
	struct kernel_spec ks;
	struct kernel *k;
	uint32_t *words;
	size_t nwords;
	struct gpu_device *g[GPU_MAX_DEVICES]; /* held (gpu_build_begin) while it builds */
	uint64_t resets[GPU_MAX_DEVICES];      /* each device's resets when it started */
	uint32_t ngpus;
	int r;                        /* the build's outcome (the thread's) */
	pthread_t thread;
	struct loop_source src;       /* an eventfd the thread writes when done */
};

static void *build_main(void *data)
{
	struct kernel_build *j = data;
	uint64_t one = 1;
	int r = 0;

	for (uint32_t id = 0; r >= 0 && id < j->ngpus; id++)
		r = gpu_pipeline_build(j->g[id], j->words, j->nwords * 4, j->k->info.entry, &j->k->pipe[id].pipeline);
	j->r = r;
	for (uint32_t id = 0; id < j->ngpus; id++)
		gpu_build_end(j->g[id]);
	if (write(j->src.fd, &one, sizeof(one)) < 0)
		log_error("kernel build: cannot tell the loop (%s)", strerror(errno));
	return NULL;
}

static uint64_t device_resets(const struct daemon *d, uint32_t id)
{
	return d->recovery ? d->recovery->device_resets[id] : 0;
}

/* The thread is done: join it, forget what a device reset took (those
 * pipelines went with their device), store and answer unless the client
 * left, free the rest. */
static void built(struct kernel_build *j)
{
	struct daemon *d = j->da.req.call.d;
	bool reset = false;
	size_t mark;
	int r;

	pthread_join(j->thread, NULL);
	for (unsigned i = 0; i < KERNEL_BUILDS_MAX; i++)
		if (d->kernel_builds[i] == j)
			d->kernel_builds[i] = NULL;
	loop_remove(d->loop, &j->src);
	close(j->src.fd);
	free(j->words);
	for (uint32_t id = 0; id < j->ngpus; id++)
		if (d->gpus[id] != j->g[id] || device_resets(d, id) != j->resets[id]) {
			j->k->pipe[id].pipeline = VK_NULL_HANDLE;
			reset = true;
		}
	if (j->da.gone) {
		kernel_free(d, j->k);
		free(j);
		return;
	}
	mark = deferred_answer_mark(&j->da);
	r = reset ? -ENODEV : j->r;
	if (kernel_create_store(&j->da.req, &j->ks, j->k, r, j->nwords) < 0)
		deferred_answer_fail(&j->da, mark);
	deferred_answer_done(&j->da);
	free(j);
}

static void on_built(void *data, uint32_t events)
{
	struct kernel_build *j = data;
	uint64_t v;

	(void)events;
	if (read(j->src.fd, &v, sizeof(v)) != sizeof(v))
		return; /* spurious: the thread writes once it is done */
	built(j);
}

/* A free slot for `uid`'s build: its index, or -1 with request_fail(). */
static int take_slot(struct request *req)
{
	int slot = -1;

	for (unsigned i = 0; i < KERNEL_BUILDS_MAX; i++) {
		const struct kernel_build *b = req->call.d->kernel_builds[i];

		if (!b)
			slot = (int)i;
		else if (b->da.req.call.cred.uid == req->call.cred.uid)
			return request_fail(req, TDP_RESOURCE_EXHAUSTED,
					    "uid %u already has a kernel being built (one at a time)",
					    (unsigned)req->call.cred.uid);
	}
	if (slot < 0)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED,
				    "the daemon builds %d kernels at once; retry when one is done", KERNEL_BUILDS_MAX);
	return slot;
}

/* Build on the loop (no thread can be watched here). */
static int build_here(struct request *req, const struct kernel_spec *ks, struct kernel *k, uint32_t *words,
		      size_t nwords)
{
	int r = 0;

	for (uint32_t id = 0; r >= 0 && id < req->call.d->ngpus; id++)
		r = gpu_pipeline_build(req->call.d->gpus[id], words, nwords * 4, k->info.entry, &k->pipe[id].pipeline);
	free(words);
	return kernel_create_store(req, ks, k, r, nwords);
}

int kernel_build(struct request *req, const struct kernel_spec *ks, struct kernel *k, uint32_t *words,
		 size_t nwords)
{
	struct daemon *d = req->call.d;
	struct kernel_build *j;
	int slot;

	if (!req->conn || !d->loop)
		return build_here(req, ks, k, words, nwords);
	if ((slot = take_slot(req)) < 0 || !(j = calloc(1, sizeof(*j)))) {
		if (slot >= 0)
			request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of memory");
		kernel_free(d, k);
		free(words);
		return -1;
	}
	j->src = (struct loop_source){ .fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), .fn = on_built, .data = j };
	if (j->src.fd < 0 || loop_add(d->loop, &j->src, EPOLLIN) < 0) {
		if (j->src.fd >= 0)
			close(j->src.fd);
		free(j);
		return build_here(req, ks, k, words, nwords); /* no loop to watch it (fuzzers) */
	}
	j->ks = *ks;
	j->k = k;
	j->words = words;
	j->nwords = nwords;
	j->ngpus = d->ngpus;
	for (uint32_t id = 0; id < j->ngpus; id++) {
		j->g[id] = d->gpus[id];
		j->resets[id] = device_resets(d, id);
		gpu_build_begin(j->g[id]);
	}
	if (pthread_create(&j->thread, NULL, build_main, j) != 0) {
		for (uint32_t id = 0; id < j->ngpus; id++)
			gpu_build_end(j->g[id]);
		loop_remove(d->loop, &j->src);
		close(j->src.fd);
		free(j);
		return build_here(req, ks, k, words, nwords);
	}
	/* Its client going away (da.gone) changes nothing: the build ends on
	 * its own, then the job is freed. */
	deferred_answer_start(&j->da, req, NULL); /* cannot fail: req->conn is set */
	d->kernel_builds[slot] = j;
	return REQUEST_DEFERRED;
}

void kernel_build_jobs_free(struct daemon *d)
{
	for (unsigned i = 0; i < KERNEL_BUILDS_MAX; i++) {
		struct kernel_build *j = d->kernel_builds[i];

		if (!j)
			continue;
		j->da.gone = true;
		built(j);
	}
}
