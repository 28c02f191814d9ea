/* systemd service notification (sd_notify(3)): READY, STATUS, WATCHDOG,
 * RELOADING and STOPPING. Without NOTIFY_SOCKET every call is a no-op. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "base/loop.h"

struct daemon;

/* STATUS= is sent at most this often; a change in between is sent when the
 * interval is over. */
#define NOTIFY_STATUS_INTERVAL_NS ((int64_t)1000000000)

struct notify {
	struct daemon *d;
	struct loop_source watchdog;    /* timerfd at half the watchdog interval */
	struct loop_source status_timer;/* one-shot: a held-back STATUS= update */
	bool enabled;                   /* NOTIFY_SOCKET is set */
	bool ready;                     /* READY=1 sent: STATUS= follows the state */
	bool status_pending;            /* a change waits for status_timer */
	uint64_t watchdog_usec;         /* 0: no watchdog */
	int64_t status_sent_ns;
	char note[192];                 /* why the last reload failed, or "" */
	char status[320];               /* the STATUS= text last sent */
};

/* Prepare notification for daemon `d` (its loop must exist): start the
 * watchdog timer when sd_watchdog_enabled() says so, and watch for state
 * changes after each loop batch. Returns 0 or -errno. */
int notify_init(struct notify *n, struct daemon *d);

/* Stop the timers and hooks; safe on a zeroed or failed notify. */
void notify_fini(struct notify *n);

/* READY=1 with the current STATUS=: only once the daemon serves requests. */
void notify_ready(struct notify *n);

/* RELOADING=1 (with MONOTONIC_USEC=) before a configuration reload; the
 * reload ends with notify_reloaded(). */
void notify_reloading(struct notify *n);

/* READY=1 again after a reload; `failure` (NULL on success) is appended to
 * STATUS= until a reload succeeds. */
void notify_reloaded(struct notify *n, const char *failure);

/* STOPPING=1 and a final STATUS= as shutdown begins. */
void notify_stopping(struct notify *n);

/* Called while the loop waits for the GPU (gpu_set_wait_policy's hook, with
 * the struct notify): WATCHDOG=1 when the watchdog timer has ticked since the
 * last ping. A wait is bounded by request_timeout, so a stuck daemon still
 * misses its pings. */
void notify_keepalive(void *data);
