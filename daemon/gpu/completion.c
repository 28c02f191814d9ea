#include "gpu/completion.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/loop.h"
#include "gpu/device.h"
#include "gpu/timing.h"

/* Memory freed while a watched submission ran (gpu_completion_defer_free). */
struct deferred_free {
	struct gpu_alloc alloc;
	struct deferred_free *next;
};

struct gpu_completion {
	struct gpu_device *g;
	struct loop *loop;
	struct loop_source src;         /* the eventfd */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;            /* the thread: work or quit */
	pthread_cond_t done_cond;       /* the loop: the thread reported */
	/* Shared with the thread, under `lock`. */
	struct gpu_recorder *cur;       /* the watched submission, until the loop finished it */
	VkFence fence;
	int64_t deadline_ns;            /* CLOCK_MONOTONIC; INT64_MAX: none */
	bool cur_done;                  /* the thread is done waiting... */
	int status;                     /* ...with 0, -ETIMEDOUT or -EIO (the fence's VkResult failed) */
	bool quit;
	/* Loop side only. */
	uint64_t limit_ns;              /* cur's limit, for the log */
	struct gpu_recorder *ready, **ready_tail; /* finished, `done` due, in order */
	struct deferred_free *frees;
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *run(void *arg)
{
	struct gpu_completion *c = arg;
	uint64_t one = 1;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		VkFence fence;
		int64_t deadline;
		int status;
		VkResult r;

		while (!c->quit && !(c->cur && !c->cur_done))
			pthread_cond_wait(&c->wake, &c->lock);
		if (!(c->cur && !c->cur_done))
			break;
		fence = c->fence;
		deadline = c->deadline_ns;
		pthread_mutex_unlock(&c->lock);
		for (;;) {
			int64_t left = deadline == INT64_MAX ? INT64_MAX : deadline - now_ns();

			if (left <= 0) {
				r = vkGetFenceStatus(c->g->dev, fence);
				status = r == VK_SUCCESS ? 0 : r == VK_NOT_READY ? -ETIMEDOUT : -EIO;
				break;
			}
			r = vkWaitForFences(c->g->dev, 1, &fence, VK_TRUE,
					    left == INT64_MAX ? UINT64_MAX : (uint64_t)left);
			if (r != VK_TIMEOUT) {
				status = r == VK_SUCCESS ? 0 : -EIO;
				break;
			}
		}
		pthread_mutex_lock(&c->lock);
		c->cur_done = true;
		c->status = status;
		pthread_cond_broadcast(&c->done_cond);
		/* The loop reads it; a full counter (never, in practice) still wakes it. */
		if (write(c->src.fd, &one, sizeof(one)) < 0)
			(void)0;
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

static void flush_frees(struct gpu_completion *c)
{
	while (c->frees) {
		struct deferred_free *f = c->frees;

		c->frees = f->next;
		gpu_memory_free(c->g, &f->alloc);
		free(f);
	}
}

/* Loop side: the thread reported on `cur`; finish its wait like a
 * synchronous one would, and queue its `done`. */
static void finish(struct gpu_completion *c)
{
	struct gpu_recorder *rec;
	int status, r;

	pthread_mutex_lock(&c->lock);
	rec = c->cur;
	status = c->status;
	c->cur = NULL;
	c->cur_done = false;
	pthread_mutex_unlock(&c->lock);
	if (status == -ETIMEDOUT)
		r = gpu_cmd_expired(c->g, 0, c->limit_ns);
	else
		r = gpu_cmd_wait_for(c->g, 0, UINT64_MAX); /* signalled (or lost): returns at once */
	if (r == 0)
		rec->gpu_ns = c->g->cmd[0].gpu_ns;
	rec->result = r;
	rec->finished = true;
	rec->queued = true;
	rec->next_ready = NULL;
	*c->ready_tail = rec;
	c->ready_tail = &rec->next_ready;
	flush_frees(c);
}

void gpu_completion_drain(struct gpu_device *g)
{
	struct gpu_completion *c = g->completion;
	bool pending;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	pending = c->cur != NULL;
	while (c->cur && !c->cur_done) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 250000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		if (pthread_cond_timedwait(&c->done_cond, &c->lock, &ts) == ETIMEDOUT) {
			pthread_mutex_unlock(&c->lock);
			gpu_wait_tick();
			pthread_mutex_lock(&c->lock);
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (pending)
		finish(c);
}

/* Call the `done` of every finished recording. */
static void run_ready(struct gpu_completion *c)
{
	while (c->ready) {
		struct gpu_recorder *rec = c->ready;

		c->ready = rec->next_ready;
		if (!c->ready)
			c->ready_tail = &c->ready;
		rec->queued = false;
		rec->done(rec->done_data); /* may free rec */
	}
}

static void on_event(void *data, uint32_t events)
{
	struct gpu_completion *c = data;
	uint64_t n;
	bool done;

	(void)events;
	if (read(c->src.fd, &n, sizeof(n)) < 0)
		(void)0; /* EAGAIN: a drain already took it */
	pthread_mutex_lock(&c->lock);
	done = c->cur && c->cur_done;
	pthread_mutex_unlock(&c->lock);
	if (done)
		finish(c);
	run_ready(c);
}

int gpu_completion_start(struct gpu_device *g, struct loop *l)
{
	struct gpu_completion *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	c->g = g;
	c->loop = l;
	c->ready_tail = &c->ready;
	c->src = (struct loop_source){ .fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), .fn = on_event, .data = c };
	if (c->src.fd < 0) {
		r = -errno;
		free(c);
		return r;
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->wake, NULL);
	pthread_cond_init(&c->done_cond, NULL);
	r = -pthread_create(&c->thread, NULL, run, c);
	if (r == 0 && (r = loop_add(l, &c->src, EPOLLIN)) < 0) {
		pthread_mutex_lock(&c->lock);
		c->quit = true;
		pthread_cond_signal(&c->wake);
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->thread, NULL);
	}
	if (r < 0) {
		close(c->src.fd);
		free(c);
		return r;
	}
	g->completion = c;
	return 0;
}

void gpu_completion_stop(struct gpu_device *g)
{
	struct gpu_completion *c = g->completion;

	if (!c)
		return;
	gpu_completion_drain(g);
	run_ready(c);
	flush_frees(c);
	pthread_mutex_lock(&c->lock);
	c->quit = true;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	loop_remove(c->loop, &c->src);
	close(c->src.fd);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->wake);
	pthread_cond_destroy(&c->done_cond);
	g->completion = NULL;
	free(c);
}

bool gpu_completion_on(const struct gpu_device *g)
{
	return g->completion != NULL;
}

bool gpu_completion_busy(const struct gpu_device *g)
{
	/* cur is written only by the loop thread: no lock needed to read it here. */
	return g->completion && g->completion->cur;
}

int gpu_rec_watch(struct gpu_recorder *rec, void (*done)(void *data), void *data)
{
	struct gpu_completion *c = rec->g->completion;
	uint64_t limit;

	if (!c)
		return -EOPNOTSUPP;
	/* Begin on cmd[0] drained any earlier one. */
	if (c->cur)
		gpu_completion_drain(rec->g);
	limit = gpu_wait_limit(rec->timeout_ns ? rec->timeout_ns : UINT64_MAX);
	rec->watched = true;
	rec->finished = false;
	rec->done = done;
	rec->done_data = data;
	c->limit_ns = limit;
	pthread_mutex_lock(&c->lock);
	c->cur = rec;
	c->cur_done = false;
	c->fence = rec->g->cmd[0].fence;
	c->deadline_ns = limit >= (uint64_t)INT64_MAX / 2 ? INT64_MAX : now_ns() + (int64_t)limit;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int gpu_completion_take(struct gpu_recorder *rec)
{
	struct gpu_completion *c = rec->g->completion;

	if (!rec->finished && c)
		gpu_completion_drain(rec->g);
	if (rec->queued && c) {
		struct gpu_recorder **pp;

		for (pp = &c->ready; *pp; pp = &(*pp)->next_ready)
			if (*pp == rec) {
				*pp = rec->next_ready;
				break;
			}
		c->ready_tail = &c->ready;
		while (*c->ready_tail)
			c->ready_tail = &(*c->ready_tail)->next_ready;
		rec->queued = false;
	}
	rec->watched = false;
	return rec->finished ? rec->result : -EIO;
}

void gpu_completion_defer_free(struct gpu_device *g, struct gpu_alloc *a)
{
	struct deferred_free *f = malloc(sizeof(*f));

	if (!f) {
		/* No room to remember it: wait for the submission instead. */
		gpu_completion_drain(g);
		gpu_memory_free(g, a);
		return;
	}
	f->alloc = *a;
	*a = (struct gpu_alloc){ 0 };
	f->next = g->completion->frees;
	g->completion->frees = f;
}
