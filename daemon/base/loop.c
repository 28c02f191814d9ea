#include "base/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

struct loop {
	int epfd;
	bool quit;
	struct {
		void (*fn)(void *data);
		void *data;
	} after[LOOP_MAX_AFTER];
	bool (*idle)(void *data);
	void *idle_data;
	bool idle_pending;
	void (*before)(void *data, const struct loop_source *src);
	void *before_data;
	struct epoll_event *evs; /* the current batch: evs[next..n) not dispatched yet */
	int next, n;
	bool (*counts)(const struct loop_source *src);
};

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
	for (unsigned i = 0; i < LOOP_MAX_AFTER; i++) {
		if (!l->after[i].fn) {
			l->after[i].fn = after;
			l->after[i].data = data;
			return 0;
		}
	}
	return -ENOSPC;
}

void loop_remove_after(struct loop *l, void (*after)(void *data), void *data)
{
	for (unsigned i = 0; i < LOOP_MAX_AFTER; i++)
		if (l->after[i].fn == after && l->after[i].data == data)
			l->after[i].fn = NULL;
}

void loop_set_idle(struct loop *l, bool (*idle)(void *data), void *data)
{
	l->idle = idle;
	l->idle_data = data;
}

void loop_set_before(struct loop *l, void (*before)(void *data, const struct loop_source *src),
		     void *data)
{
	l->before = before;
	l->before_data = data;
}

void loop_wake_idle(struct loop *l)
{
	l->idle_pending = true;
}

int loop_run(struct loop *l)
{
	struct epoll_event evs[64];

	l->quit = false;
	while (!l->quit) {
		int n = epoll_wait(l->epfd, evs, 64, l->idle && l->idle_pending ? 0 : -1);

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
			if (l->before)
				l->before(l->before_data, src);
			src->fn(src->data, evs[i].events);
		}
		l->next = l->n = 0;
		if (l->idle && l->idle_pending) {
			if (l->before)
				l->before(l->before_data, NULL);
			l->idle_pending = l->idle(l->idle_data);
		}
		for (unsigned i = 0; i < LOOP_MAX_AFTER; i++)
			if (l->after[i].fn)
				l->after[i].fn(l->after[i].data);
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
