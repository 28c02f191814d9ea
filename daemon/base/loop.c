#include "base/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* A hook list: dense, in subscription order, so that running an empty one
 * costs one comparison. Callbacks are kept as `void (*)(void)` and called
 * through their list's own type (loop_add_after, _idle, _before). */
typedef void (*hook_fn)(void);

struct hooks {
	unsigned n;
	struct {
		hook_fn fn;
		void *data;
	} h[LOOP_MAX_HOOKS];
};

typedef void (*after_fn)(void *data);
typedef bool (*idle_fn)(void *data);
typedef void (*before_fn)(void *data, const struct loop_source *src);

struct loop {
	int epfd;
	bool quit;
	struct hooks after, before, idle;
	bool idle_pending;
	struct epoll_event *evs; /* the current batch: evs[next..n) not dispatched yet */
	int next, n;
	bool (*counts)(const struct loop_source *src);
};

static int hooks_add(struct hooks *hs, hook_fn fn, void *data)
{
	if (hs->n == LOOP_MAX_HOOKS)
		return -ENOSPC;
	hs->h[hs->n].fn = fn;
	hs->h[hs->n].data = data;
	hs->n++;
	return 0;
}

/* Drop the entry of `fn` and `data`, keeping the others' order. */
static void hooks_remove(struct hooks *hs, hook_fn fn, void *data)
{
	for (unsigned i = 0; i < hs->n; i++) {
		if (hs->h[i].fn == fn && hs->h[i].data == data) {
			memmove(&hs->h[i], &hs->h[i + 1], (hs->n - i - 1) * sizeof(hs->h[0]));
			hs->n--;
			return;
		}
	}
}

struct loop *loop_new(void)
{
	struct loop *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		free(l);
		return NULL;
	}
	return l;
}

void loop_free(struct loop *l)
{
	if (!l)
		return;
	close(l->epfd);
	free(l);
}

int loop_add(struct loop *l, struct loop_source *src, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, src->fd, &ev) < 0)
		return -errno;
	src->events = events;
	return 0;
}

int loop_modify(struct loop *l, struct loop_source *src, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = src };

	if (src->events == events)
		return 0;
	if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, src->fd, &ev) < 0)
		return -errno;
	src->events = events;
	return 0;
}

void loop_remove(struct loop *l, struct loop_source *src)
{
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, src->fd, NULL);
}

int loop_add_after(struct loop *l, void (*after)(void *data), void *data)
{
	return hooks_add(&l->after, (hook_fn)after, data);
}

void loop_remove_after(struct loop *l, void (*after)(void *data), void *data)
{
	hooks_remove(&l->after, (hook_fn)after, data);
}

int loop_add_idle(struct loop *l, bool (*idle)(void *data), void *data)
{
	return hooks_add(&l->idle, (hook_fn)idle, data);
}

void loop_remove_idle(struct loop *l, bool (*idle)(void *data), void *data)
{
	hooks_remove(&l->idle, (hook_fn)idle, data);
}

int loop_add_before(struct loop *l, void (*before)(void *data, const struct loop_source *src),
		    void *data)
{
	return hooks_add(&l->before, (hook_fn)before, data);
}

void loop_remove_before(struct loop *l, void (*before)(void *data, const struct loop_source *src),
			void *data)
{
	hooks_remove(&l->before, (hook_fn)before, data);
}

void loop_wake_idle(struct loop *l)
{
	l->idle_pending = true;
}

/* Run the before hooks for `src` (NULL: the idle work). */
static void run_before(struct loop *l, const struct loop_source *src)
{
	for (unsigned i = 0; i < l->before.n; i++)
		((before_fn)l->before.h[i].fn)(l->before.h[i].data, src);
}

/* Run the idle functions once; returns whether any has more work. */
static bool run_idle(struct loop *l)
{
	bool more = false;

	run_before(l, NULL);
	for (unsigned i = 0; i < l->idle.n; i++)
		more |= ((idle_fn)l->idle.h[i].fn)(l->idle.h[i].data);
	return more;
}

int loop_run(struct loop *l)
{
	struct epoll_event evs[64];

	l->quit = false;
	while (!l->quit) {
		int n = epoll_wait(l->epfd, evs, 64, l->idle.n && l->idle_pending ? 0 : -1);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		l->evs = evs;
		l->n = n;
		for (int i = 0; i < n; i++) {
			struct loop_source *src = evs[i].data.ptr;

			l->next = i + 1;
			if (l->before.n)
				run_before(l, src);
			src->fn(src->data, evs[i].events);
		}
		l->next = l->n = 0;
		if (l->idle.n && l->idle_pending)
			l->idle_pending = run_idle(l);
		for (unsigned i = 0; i < l->after.n; i++)
			((after_fn)l->after.h[i].fn)(l->after.h[i].data);
	}
	return 0;
}

void loop_set_counts(struct loop *l, bool (*counts)(const struct loop_source *src))
{
	l->counts = counts;
}

static bool counts(const struct loop *l, const struct epoll_event *ev)
{
	return !l->counts || l->counts(ev->data.ptr);
}

bool loop_busy(struct loop *l)
{
	struct epoll_event evs[64];
	int n;

	for (int i = l->next; i < l->n; i++)
		if (counts(l, &l->evs[i]))
			return true;
	/* Every source is level-triggered: what this reports stays ready and
	 * is reported again by loop_run's next epoll_wait. */
	n = epoll_wait(l->epfd, evs, 64, 0);
	for (int i = 0; i < n; i++)
		if (counts(l, &evs[i]))
			return true;
	return false;
}

void loop_quit(struct loop *l)
{
	l->quit = true;
}
