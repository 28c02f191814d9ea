#include "persist/checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/loop.h"
#include "daemon.h"
#include "errorf.h"
#include "pack.h"
#include "persist/persist.h"
#include "persist/persist_model.h"
#include "rpc.h"
#include "status.h"
#include "store/names.h"
#include "store/store.h"

/* One tick of the periodic checkpoint writes at most this much, then yields
 * to the event loop for CHECKPOINT_YIELD_NS, so requests keep flowing while
 * a large dirty set drains. */
#define CHECKPOINT_TICK_TENSORS 8
#define CHECKPOINT_TICK_BYTES ((uint64_t)32 << 20)
#define CHECKPOINT_YIELD_NS 5000000

struct checkpoint {
	struct loop_source src;
	struct daemon *d;
};

static void arm(struct checkpoint *c, uint64_t ns)
{
	struct itimerspec its = { 0 };

	its.it_value.tv_sec = (time_t)(ns / 1000000000u);
	its.it_value.tv_nsec = (long)(ns % 1000000000u);
	if (timerfd_settime(c->src.fd, 0, &its, NULL) < 0)
		log_error("cannot arm the checkpoint timer: %s", strerror(errno));
}

static void arm_interval(struct checkpoint *c)
{
	arm(c, c->d->cfg.checkpoint_interval * 1000000000u);
}

/* The longest wait before the timer retries a tensor whose write failed. */
#define CHECKPOINT_BACKOFF_MAX_NS (3600 * 1000000000ll)

void checkpoint_note_failure(struct checkpoint_result *acc, int64_t who, uint32_t owner,
			     const char *what, const char *name, const char *why)
{
	size_t n = strlen(acc->mine);
	char shown[NAMES_SHOWN_MAX];

	acc->failed++;
	if (who < 0 || (who != 0 && (uint32_t)who != owner))
		return;
	acc->failed_mine++;
	if (n + 8 < sizeof(acc->mine))
		snprintf(acc->mine + n, sizeof(acc->mine) - n, "%s%s '%s' (%s)", n ? ", " : "", what,
			 names_show((uint32_t)who, name, shown), why);
}

/* After a failed write of `t`: to the back of the line, not retried by the
 * timer for a while (the interval, doubling, at most an hour). */
static void backoff(struct daemon *d, struct tensor *t)
{
	uint64_t base = (d->cfg.checkpoint_interval ? d->cfg.checkpoint_interval : 1) * 1000000000ull;
	unsigned k = t->ckpt_failures < 12 ? t->ckpt_failures : 12;
	int64_t wait = (int64_t)(base << k);

	if (wait <= 0 || wait > CHECKPOINT_BACKOFF_MAX_NS)
		wait = CHECKPOINT_BACKOFF_MAX_NS;
	t->ckpt_failures++;
	t->ckpt_retry_ns = daemon_now_ns(CLOCK_MONOTONIC) + wait;
	store_mark_clean(d->store, t);
	store_mark_dirty(d->store, t);
}

/* Remove the files of deleted tensors (before any write: a name deleted
 * and created again must not lose its new file to the old deletion). */
static void remove_deleted(struct daemon *d, struct checkpoint_result *out)
{
	char name[TDP_MAX_NAME_LEN + 1];
	size_t len;
	int c;

	if (store_take_lost_deletions(d->store) && (c = persist_reconcile(d->persist, d->store)) < 0)
		log_error("checkpoint: cannot remove the files of deleted tensors: %s", strerror(-c));
	while ((len = store_take_deleted(d->store, name)) > 0) {
		c = persist_remove(d->persist, name, len);
		if (c < 0)
			log_error("checkpoint: cannot remove the file of '%s': %s", name, strerror(-c));
		else
			out->removed++;
	}
}

int checkpoint_tensor_now(struct daemon *d, struct tensor *t)
{
	struct checkpoint_result out = { 0 };
	char why[TDP_MAX_ERROR_MESSAGE];
	int r;

	if (!d->persist || !t->dirty)
		return 0;
	remove_deleted(d, &out);
	r = persist_write(d->persist, d, t, why, sizeof(why));
	if (r == 0 && (r = persist_commit(d->persist)) < 0)
		snprintf(why, sizeof(why), "fsync of the checkpoint directory: %s", strerror(-r));
	if (r < 0) {
		log_error("checkpoint: cannot write '%s' now (it stays dirty): %s", t->name, why);
		return r;
	}
	t->ckpt_failures = 0;
	store_mark_clean(d->store, t);
	return 0;
}

/* Count a checkpoint pass that began at `t0` (info's "persistence"). */
static void note_pass(struct daemon *d, int64_t t0, bool completed, uint64_t failed)
{
	struct metrics *m = &d->metrics;

	m->checkpoints += completed;
	m->checkpoints_failed += !completed;
	m->checkpoint_failed_writes += failed;
	m->last_checkpoint_unix_ns = daemon_now_ns(CLOCK_REALTIME);
	m->last_checkpoint_ns = (uint64_t)(daemon_now_ns(CLOCK_MONOTONIC) - t0);
	m->last_checkpoint_ok = completed && !failed;
}

/* The flush; `periodic` skips tensors waiting out a backoff, `who` (-1: no
 * one) is the uid whose failed names go to out->mine (0: every name). */
static int flush(struct daemon *d, uint64_t max_tensors, uint64_t max_bytes, bool periodic,
		 int64_t who, struct checkpoint_result *ret, char *err, size_t err_len)
{
	struct checkpoint_result out = { 0 };
	int64_t t0 = daemon_now_ns(CLOCK_MONOTONIC);
	uint64_t ndirty, dirty_bytes, ndeleted;
	struct tensor *t;
	int c;

	if (!d->persist)
		return tdp_errorf(err, err_len, -ENOTCONN, "persistence is off");
	remove_deleted(d, &out);
	/* Each dirty tensor is tried at most once: a failed one goes to the
	 * back, so one that cannot be written never holds up the others. */
	store_dirty_totals(d->store, &ndirty, &dirty_bytes, &ndeleted);
	for (uint64_t i = 0; i < ndirty && (t = store_first_dirty(d->store)); i++) {
		char why[TDP_MAX_ERROR_MESSAGE];

		if ((max_tensors && out.written >= max_tensors) || (max_bytes && out.bytes >= max_bytes)) {
			out.more = true;
			break;
		}
		if (periodic && t->ckpt_failures && t->ckpt_retry_ns > t0) {
			store_mark_clean(d->store, t);
			store_mark_dirty(d->store, t);
			continue;
		}
		c = persist_write(d->persist, d, t, why, sizeof(why));
		if (c < 0) {
			log_error("checkpoint: cannot write '%s' (it stays dirty and is retried; the "
				  "other tensors are written): %s", t->name, why);
			checkpoint_note_failure(&out, who, t->owner, "tensor", t->name, why);
			backoff(d, t);
			continue;
		}
		t->ckpt_failures = 0;
		store_mark_clean(d->store, t);
		out.written++;
		out.bytes += t->bytes;
	}
	c = persist_commit(d->persist);
	if (c < 0) {
		note_pass(d, t0, false, out.failed);
		return tdp_errorf(err, err_len, c, "fsync of the checkpoint directory: %s", strerror(-c));
	}
	if (d->model_persist && (c = model_persist_flush(d->model_persist, d, who, &out, err, err_len)) < 0) {
		note_pass(d, t0, false, out.failed);
		return c;
	}
	note_pass(d, t0, true, out.failed);
	out.seconds = (double)(daemon_now_ns(CLOCK_MONOTONIC) - t0) / 1e9;
	*ret = out;
	return 0;
}

int checkpoint_flush(struct daemon *d, uint64_t max_tensors, uint64_t max_bytes,
		     struct checkpoint_result *ret, char *err, size_t err_len)
{
	return flush(d, max_tensors, max_bytes, max_tensors || max_bytes, -1, ret, err, err_len);
}

static void on_timer(void *data, uint32_t events)
{
	struct checkpoint *c = data;
	struct checkpoint_result res;
	uint64_t expirations;
	char err[TDP_MAX_ERROR_MESSAGE];

	(void)events;
	if (read(c->src.fd, &expirations, sizeof(expirations)) < 0)
		return;
	if (checkpoint_flush(c->d, CHECKPOINT_TICK_TENSORS, CHECKPOINT_TICK_BYTES, &res, err,
			     sizeof(err)) < 0) {
		log_error("checkpoint failed, retrying in %" PRIu64 " s: %s",
			  c->d->cfg.checkpoint_interval, err);
		arm_interval(c);
		return;
	}
	if (res.written || res.removed || res.models)
		log_debug("checkpoint: %" PRIu64 " tensors (%" PRIu64 " bytes) written, %" PRIu64
			  " removed in %.3f s", res.written, res.bytes, res.removed, res.seconds);
	if (res.failed)
		log_warning("checkpoint: %" PRIu64 " tensors or models could not be written (see above)",
			    res.failed);
	if (res.more && c->d->cfg.checkpoint_interval)
		arm(c, CHECKPOINT_YIELD_NS);
	else
		arm_interval(c);
}

int checkpoint_start(struct daemon *d, struct checkpoint **ret)
{
	struct checkpoint *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	c->d = d;
	c->src.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (c->src.fd < 0) {
		r = -errno;
		free(c);
		return r;
	}
	c->src.fn = on_timer;
	c->src.data = c;
	r = loop_add(d->loop, &c->src, EPOLLIN);
	if (r < 0) {
		close(c->src.fd);
		free(c);
		return r;
	}
	arm_interval(c);
	*ret = c;
	return 0;
}

void checkpoint_rearm(struct checkpoint *c)
{
	if (c)
		arm_interval(c);
}

void checkpoint_free(struct checkpoint *c)
{
	if (!c)
		return;
	loop_remove(c->d->loop, &c->src);
	close(c->src.fd);
	free(c);
}

int checkpoint_sync(struct daemon *d, uid_t who, struct checkpoint_result *ret, char *err, size_t err_len)
{
	return flush(d, 0, 0, false, who, ret, err, err_len);
}
