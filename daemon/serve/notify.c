#include "serve/notify.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "daemon.h"
#include "serve/server.h"
#include "store/store.h"

static void format_bytes(char *buf, size_t len, uint64_t b)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)b;
	unsigned u = 0;

	while (v >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", b);
	else
		snprintf(buf, len, "%.1f %s", v, unit[u]);
}

/* "serving: 3 tensors, 12.0 KiB, 1 client", plus the note of a failed reload. */
static void format_status(const struct notify *n, char *buf, size_t len)
{
	const struct daemon *d = n->d;
	uint64_t count = 0, bytes = 0, clients = d->metrics.connections_open;
	char size[32];

	if (d->store)
		store_totals(d->store, &count, &bytes);
	format_bytes(size, sizeof(size), bytes);
	snprintf(buf, len, "serving: %" PRIu64 " tensor%s, %s, %" PRIu64 " client%s%s%s", count,
		 count == 1 ? "" : "s", size, clients, clients == 1 ? "" : "s",
		 n->note[0] ? "; " : "", n->note);
}

static void send_status(struct notify *n, const char *status)
{
	char msg[sizeof(n->status) + 16];

	snprintf(n->status, sizeof(n->status), "%s", status);
	snprintf(msg, sizeof(msg), "STATUS=%s", n->status);
	sd_notify(0, msg);
	n->status_sent_ns = daemon_now_ns(CLOCK_MONOTONIC);
	n->status_pending = false;
}

static void arm_status_timer(struct notify *n, int64_t delay_ns)
{
	struct itimerspec its = { 0 };

	if (delay_ns < 1)
		delay_ns = 1;
	its.it_value.tv_sec = (time_t)(delay_ns / 1000000000);
	its.it_value.tv_nsec = (long)(delay_ns % 1000000000);
	if (n->status_timer.fd >= 0 && timerfd_settime(n->status_timer.fd, 0, &its, NULL) == 0)
		n->status_pending = true;
}

/* After each loop batch: report a changed state, at most once per interval. */
static void check_status(void *data)
{
	struct notify *n = data;
	char now_status[sizeof(n->status)];
	int64_t since;

	if (!n->ready || n->status_pending)
		return;
	format_status(n, now_status, sizeof(now_status));
	if (strcmp(now_status, n->status) == 0)
		return;
	since = daemon_now_ns(CLOCK_MONOTONIC) - n->status_sent_ns;
	if (since >= NOTIFY_STATUS_INTERVAL_NS)
		send_status(n, now_status);
	else
		arm_status_timer(n, NOTIFY_STATUS_INTERVAL_NS - since);
}

static void on_status_timer(void *data, uint32_t events)
{
	struct notify *n = data;
	char now_status[sizeof(n->status)];
	uint64_t ticks;

	if (read(n->status_timer.fd, &ticks, sizeof(ticks)) < 0)
		return;
	n->status_pending = false;
	format_status(n, now_status, sizeof(now_status));
	if (strcmp(now_status, n->status) != 0)
		send_status(n, now_status);
}

/* Driven by the loop, so a loop stuck in a request misses its pings and
 * systemd restarts the daemon. */
static void on_watchdog(void *data, uint32_t events)
{
	struct notify *n = data;
	uint64_t ticks;

	if (read(n->watchdog.fd, &ticks, sizeof(ticks)) > 0)
		sd_notify(0, "WATCHDOG=1");
}

void notify_keepalive(void *data)
{
	struct notify *n = data;
	uint64_t ticks;

	/* The timer is non-blocking: it has ticked when it is time to ping. */
	if (n->watchdog.fd >= 0 && read(n->watchdog.fd, &ticks, sizeof(ticks)) > 0)
		sd_notify(0, "WATCHDOG=1");
}

static int start_watchdog(struct notify *n)
{
	struct itimerspec its = { 0 };
	uint64_t usec = 0, half;
	int r;

	r = sd_watchdog_enabled(0, &usec);
	if (r < 0)
		log_warning("ignoring a malformed WATCHDOG_USEC or WATCHDOG_PID: %s", strerror(-r));
	if (r <= 0 || usec == 0)
		return 0;
	half = usec / 2 ? usec / 2 : 1;
	n->watchdog.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (n->watchdog.fd < 0)
		return -errno;
	its.it_interval.tv_sec = (time_t)(half / 1000000);
	its.it_interval.tv_nsec = (long)(half % 1000000) * 1000;
	its.it_value = its.it_interval;
	if (timerfd_settime(n->watchdog.fd, 0, &its, NULL) < 0)
		return -errno;
	n->watchdog.fn = on_watchdog;
	n->watchdog.data = n;
	r = loop_add(n->d->loop, &n->watchdog, EPOLLIN);
	if (r < 0)
		return r;
	n->watchdog_usec = usec;
	log_info("watchdog: pinging every %" PRIu64 " ms", half / 1000);
	return 0;
}

int notify_init(struct notify *n, struct daemon *d)
{
	int r;

	memset(n, 0, sizeof(*n));
	n->d = d;
	n->watchdog.fd = -1;
	n->status_timer.fd = -1;
	n->enabled = getenv("NOTIFY_SOCKET") != NULL;
	r = start_watchdog(n);
	if (r < 0)
		goto fail;
	if (!n->enabled)
		return 0;
	n->status_timer.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (n->status_timer.fd < 0) {
		r = -errno;
		goto fail;
	}
	n->status_timer.fn = on_status_timer;
	n->status_timer.data = n;
	r = loop_add(d->loop, &n->status_timer, EPOLLIN);
	if (r < 0)
		goto fail;
	r = loop_add_after(d->loop, check_status, n);
	if (r < 0) {
		loop_remove(d->loop, &n->status_timer);
		goto fail;
	}
	return 0;
fail:
	notify_fini(n);
	return r;
}

void notify_fini(struct notify *n)
{
	if (!n->d)
		return;
	loop_remove_after(n->d->loop, check_status, n);
	if (n->watchdog.fd >= 0) {
		loop_remove(n->d->loop, &n->watchdog);
		close(n->watchdog.fd);
		n->watchdog.fd = -1;
	}
	if (n->status_timer.fd >= 0) {
		loop_remove(n->d->loop, &n->status_timer);
		close(n->status_timer.fd);
		n->status_timer.fd = -1;
	}
}

void notify_ready(struct notify *n)
{
	char msg[sizeof(n->status) + 32];

	format_status(n, n->status, sizeof(n->status));
	snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", n->status);
	sd_notify(0, msg);
	n->status_sent_ns = daemon_now_ns(CLOCK_MONOTONIC);
	n->ready = true;
}

void notify_reloading(struct notify *n)
{
	char msg[96];

	snprintf(msg, sizeof(msg), "RELOADING=1\nSTATUS=reloading the configuration\n"
		 "MONOTONIC_USEC=%" PRIu64, (uint64_t)(daemon_now_ns(CLOCK_MONOTONIC) / 1000));
	sd_notify(0, msg);
	snprintf(n->status, sizeof(n->status), "reloading the configuration");
}

void notify_reloaded(struct notify *n, const char *failure)
{
	char msg[sizeof(n->status) + 32];

	snprintf(n->note, sizeof(n->note), "%s", failure ? failure : "");
	format_status(n, n->status, sizeof(n->status));
	snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", n->status);
	sd_notify(0, msg);
	n->status_sent_ns = daemon_now_ns(CLOCK_MONOTONIC);
}

void notify_stopping(struct notify *n)
{
	n->ready = false;
	sd_notify(0, "STOPPING=1\nSTATUS=shutting down");
}
