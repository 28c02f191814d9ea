/* The event loop: epoll over file descriptors, each with a callback. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct loop;

/* Called with the epoll events that fired for a source. */
typedef void (*loop_fn)(void *data, uint32_t events);

/* One watched descriptor. The owner keeps it alive while it is registered. */
struct loop_source {
	int fd;
	loop_fn fn;
	void *data;
	uint32_t events;        /* the interest currently registered */
};

/* A new loop; NULL on failure (errno set). */
struct loop *loop_new(void);

/* Free the loop; sources must have been removed. NULL is accepted. */
void loop_free(struct loop *l);

/* Watch src->fd for `events` (EPOLLIN, EPOLLOUT...). Returns 0 or -errno. */
int loop_add(struct loop *l, struct loop_source *src, uint32_t events);

/* Change the watched events (no system call when unchanged). Returns 0 or -errno. */
int loop_modify(struct loop *l, struct loop_source *src, uint32_t events);

/* Stop watching src->fd (before closing it). */
void loop_remove(struct loop *l, struct loop_source *src);

/* Subscribers each hook list (after, idle, before) holds at most: a
 * subscription past it fails with -ENOSPC. A hook may subscribe or
 * unsubscribe others, just not in the list that is running it (a removal
 * there would skip a hook once). */
#define LOOP_MAX_HOOKS 6

/* Run `after` once after each batch of events: the place to free what the
 * callbacks of the batch retired, since later events of the same batch may
 * still point at it, or to report state the batch changed. Hooks run in
 * the order added. Returns 0 or -ENOSPC. */
int loop_add_after(struct loop *l, void (*after)(void *data), void *data);

/* Remove a hook added with the same `after` and `data`. */
void loop_remove_after(struct loop *l, void (*after)(void *data), void *data);

/* Call `idle` after each batch while there is idle work (loop_wake_idle,
 * or an idle function returned true: more work queued); while there is,
 * the loop polls without blocking. Used for background work (training
 * runs) that proceeds step by step between client requests. Idle functions
 * run in the order added, each once per batch; the work is pending while
 * any of them returned true. Returns 0 or -ENOSPC. */
int loop_add_idle(struct loop *l, bool (*idle)(void *data), void *data);

/* Remove an idle function added with the same `idle` and `data`. */
void loop_remove_idle(struct loop *l, bool (*idle)(void *data), void *data);

/* Call `before(data, src)` before each event's callback (src: its source)
 * and once before the idle functions (src NULL), in the order added: the
 * op.run batcher closes its batch there before anything else can change
 * what the batch reads (docs/architecture.md, "Batching"). Returns 0 or
 * -ENOSPC. */
int loop_add_before(struct loop *l, void (*before)(void *data, const struct loop_source *src),
		    void *data);

/* Remove a hook added with the same `before` and `data`. */
void loop_remove_before(struct loop *l, void (*before)(void *data, const struct loop_source *src),
			void *data);

/* Tell the loop the idle functions have work again (after they returned
 * false). */
void loop_wake_idle(struct loop *l);

/* Dispatch events until loop_quit(). Returns 0 or -errno on an epoll failure. */
int loop_run(struct loop *l);

/* Whether the loop has other work now: an event of the current batch not
 * dispatched yet, or a source ready (epoll_wait without waiting; sources
 * are level-triggered, so nothing is lost), that the filter set with
 * loop_set_counts counts (all without one). A caller about to busy-wait
 * for the device asks this first: waiting in another thread frees the
 * loop for that work (methods/op_batch.c). */
bool loop_busy(struct loop *l);

/* Which ready sources loop_busy counts as work (the server: not a
 * connection that waits for its batched requests). NULL: all. */
void loop_set_counts(struct loop *l, bool (*counts)(const struct loop_source *src));

/* Make loop_run() return after the current batch. */
void loop_quit(struct loop *l);
