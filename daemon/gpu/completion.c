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

#include "base/clock.h"
#include "base/log.h"
#include "base/loop.h"
#include "gpu/device.h"
#include "gpu/timing.h"

/* Memory freed while watched submissions ran (gpu_completion_defer_free). */
struct deferred_free {
	struct gpu_alloc alloc;
	VkPipeline pipeline;            /* or a pipeline to destroy (a client kernel's) */
	uint64_t seq;                   /* released once watched submission `seq` finished */
	struct deferred_free *next;
};

/* One watched submission. */
struct watch {
	struct gpu_recorder *rec;
	unsigned slot;
	VkFence fence;
	uint64_t limit_ns;              /* UINT64_MAX: none */
	int64_t submit_ns;
	uint64_t seq;
	bool done;                      /* the thread reported... */
	int status;                     /* ...0, -ETIMEDOUT, -ENODEV (behind a runaway) or -EIO */
};

struct gpu_completion {
	struct gpu_device *g;
	struct loop *loop;
	struct loop_source src;         /* the eventfd */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;            /* the thread: work or quit */
	pthread_cond_t done_cond;       /* the loop: the thread reported */
	/* The watched submissions in order, w[head..head+n) (mod GPU_CMD_ASYNC):
	 * the loop appends and removes (so it reads `n` without the lock), the
	 * thread marks the first `reported` of them done; under `lock`. */
	struct watch w[GPU_CMD_ASYNC];
	unsigned head, n, reported;
	int64_t last_done_ns;           /* when the thread saw the last one end */
	bool runaway;                   /* one ran past its limit: the rest are lost */
	bool quit;
	/* Loop side only. */
	bool flushing;                  /* flush_frees: gpu_memory_free releases at once */
	uint64_t seq, finished_seq;     /* watched so far; the last one finished */
	struct gpu_recorder *ready, **ready_tail; /* finished, `done` due, in order */
	struct deferred_free *frees;
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Wait for `fence` until `deadline` (INT64_MAX: none). */
static int wait_fence(struct gpu_completion *c, VkFence fence, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline == INT64_MAX ? INT64_MAX : deadline - now_ns();
		VkResult r;

		if (left <= 0) {
			r = vkGetFenceStatus(c->g->dev, fence);
			return r == VK_SUCCESS ? 0 : r == VK_NOT_READY ? -ETIMEDOUT : -EIO;
		}
		r = vkWaitForFences(c->g->dev, 1, &fence, VK_TRUE, left == INT64_MAX ? UINT64_MAX : (uint64_t)left);
		if (r != VK_TIMEOUT)
			return r == VK_SUCCESS ? 0 : -EIO;
	}
}

static void *run(void *arg)
{
	struct gpu_completion *c = arg;
	uint64_t one = 1;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct watch *w;
		int64_t start, deadline;
		VkFence fence;
		int status;

		while (!c->quit && c->reported == c->n)
			pthread_cond_wait(&c->wake, &c->lock);
		if (c->reported == c->n)
			break;
		w = &c->w[(c->head + c->reported) % GPU_CMD_ASYNC];
		fence = w->fence;
		/* The queue runs submissions in order: the clock of one starts
		 * when the one before it ended, or at its submission if later. */
		start = w->submit_ns > c->last_done_ns ? w->submit_ns : c->last_done_ns;
		deadline = w->limit_ns >= (uint64_t)INT64_MAX / 2 ? INT64_MAX : start + (int64_t)w->limit_ns;
		if (c->runaway) {
			status = -ENODEV;
		} else {
			pthread_mutex_unlock(&c->lock);
			status = wait_fence(c, fence, deadline);
			pthread_mutex_lock(&c->lock);
		}
		w = &c->w[(c->head + c->reported) % GPU_CMD_ASYNC];
		w->done = true;
		w->status = status;
		c->reported++;
		c->last_done_ns = now_ns();
		c->runaway |= status == -ETIMEDOUT;
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
	struct deferred_free **pp = &c->frees;

	c->flushing = true;
	while (*pp) {
		struct deferred_free *f = *pp;

		if (c->n && f->seq > c->finished_seq) {
			pp = &f->next;
			continue;
		}
		*pp = f->next;
		if (f->pipeline != VK_NULL_HANDLE)
			vkDestroyPipeline(c->g->dev, f->pipeline, NULL);
		gpu_memory_free(c->g, &f->alloc);
		free(f);
	}
	c->flushing = false;
}

/* Loop side: finish the waits the thread reported (at most `max`), in
 * order, as synchronous waits would, and queue their `done`. Returns how
 * many it finished. */
static unsigned finish_some(struct gpu_completion *c, unsigned max)
{
	unsigned done = 0;

	for (; done < max; done++) {
		struct watch w;
		struct gpu_recorder *rec;
		int r;

		pthread_mutex_lock(&c->lock);
		if (!c->n || !c->w[c->head].done) {
			pthread_mutex_unlock(&c->lock);
			break;
		}
		w = c->w[c->head];
		c->head = (c->head + 1) % GPU_CMD_ASYNC;
		c->n--;
		c->reported--;
		if (!c->n)
			c->runaway = false;
		pthread_mutex_unlock(&c->lock);
		rec = w.rec;
		if (w.status == -ETIMEDOUT)
			r = gpu_cmd_expired(c->g, w.slot, w.limit_ns);
		else
			r = gpu_cmd_reap(c->g, w.slot); /* signalled (or lost): returns at once */
		if (r == 0)
			rec->gpu_ns = c->g->cmd[w.slot].gpu_ns;
		c->finished_seq = w.seq;
		rec->result = r;
		rec->finished = true;
		rec->queued = true;
		rec->next_ready = NULL;
		*c->ready_tail = rec;
		c->ready_tail = &rec->next_ready;
	}
	flush_frees(c);
	return done;
}

static void finish(struct gpu_completion *c)
{
	finish_some(c, GPU_CMD_ASYNC);
}

/* Wait until all watched submissions (`all`), or the oldest, were reported,
 * feeding the watchdog, then finish them. */
static void drain(struct gpu_completion *c, bool all)
{
	pthread_mutex_lock(&c->lock);
	while (c->n && (all ? c->reported < c->n : !c->w[c->head].done)) {
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
	finish(c);
}

void gpu_completion_drain(struct gpu_device *g)
{
	if (g->completion)
		drain(g->completion, true);
}

int gpu_completion_free_slot(struct gpu_device *g)
{
	struct gpu_completion *c = g->completion;

	for (unsigned tries = 0; tries <= GPU_CMD_ASYNC; tries++) {
		for (unsigned s = GPU_CMD_SYNC; s < GPU_CMD_SLOTS; s++)
			if (!g->cmd[s].pending)
				return (int)s;
		if (!c || !c->n || g->lost)
			break;
		drain(c, false);
	}
	return -ENODEV;
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

	(void)events;
	if (read(c->src.fd, &n, sizeof(n)) < 0)
		(void)0; /* EAGAIN: a drain already took it */
	/* One at a time, each answered before the next is finished: one that
	 * ran past its limit marks the device lost, which must not fail the
	 * answers (downloads) of those that completed before it. */
	do
		run_ready(c);
	while (finish_some(c, 1));
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
	/* A `done` may submit more (model.evaluate's next batch): until none
	 * is left. */
	for (;;) {
		unsigned n;

		gpu_completion_drain(g);
		run_ready(c);
		pthread_mutex_lock(&c->lock);
		n = c->n;
		pthread_mutex_unlock(&c->lock);
		if (!n && !c->ready)
			break;
	}
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
	/* n is written only by the loop thread: no lock needed to read it here. */
	return g->completion && g->completion->n && !g->completion->flushing;
}

bool gpu_recs_finished_within(struct gpu_recorder *recs, uint32_t n, uint64_t spin_ns)
{
	int64_t until = daemon_now_ns(CLOCK_MONOTONIC) + (int64_t)spin_ns;

	for (uint32_t i = 0; i < n; i++)
		if (recs[i].g && gpu_completion_busy(recs[i].g))
			return false;
	for (;;) {
		bool all = true;

		for (uint32_t i = 0; all && i < n; i++)
			if (recs[i].g)
				all = gpu_cmd_finished(recs[i].g, recs[i].slot);
		if (all)
			return true;
		if (daemon_now_ns(CLOCK_MONOTONIC) >= until)
			return false;
	}
}

int gpu_rec_watch(struct gpu_recorder *rec, void (*done)(void *data), void *data)
{
	struct gpu_completion *c = rec->g->completion;
	struct watch *w;

	if (!c || rec->slot < GPU_CMD_SYNC)
		return -EOPNOTSUPP;
	/* gpu_rec_begin_async took a free slot: there is room. */
	rec->watched = true;
	rec->finished = false;
	rec->done = done;
	rec->done_data = data;
	pthread_mutex_lock(&c->lock);
	w = &c->w[(c->head + c->n) % GPU_CMD_ASYNC];
	*w = (struct watch){
		.rec = rec, .slot = rec->slot, .fence = rec->g->cmd[rec->slot].fence,
		.limit_ns = gpu_wait_limit(rec->timeout_ns ? rec->timeout_ns : UINT64_MAX),
		.submit_ns = now_ns(), .seq = ++c->seq,
	};
	c->n++;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int gpu_completion_take(struct gpu_recorder *rec)
{
	struct gpu_completion *c = rec->g->completion;

	if (!rec->finished && c)
		drain(c, true);
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
		/* No room to remember it: wait for the submissions instead. */
		gpu_completion_drain(g);
		gpu_memory_free(g, a);
		return;
	}
	f->alloc = *a;
	f->pipeline = VK_NULL_HANDLE;
	f->seq = g->completion->seq;
	*a = (struct gpu_alloc){ 0 };
	f->next = g->completion->frees;
	g->completion->frees = f;
}

int gpu_completion_defer_pipeline(struct gpu_device *g, VkPipeline p)
{
	struct deferred_free *f;

	if (!gpu_completion_busy(g))
		return -EAGAIN;
	f = calloc(1, sizeof(*f));
	if (!f) {
		gpu_completion_drain(g);
		return -EAGAIN;
	}
	f->pipeline = p;
	f->seq = g->completion->seq;
	f->next = g->completion->frees;
	g->completion->frees = f;
	return 0;
}
