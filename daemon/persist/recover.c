/* Device loss recovery (docs/durability.md, "Device loss").
 *
 * Everything that lives on the device goes with it: the tensors' memory,
 * training runs' buffers, custom kernels' pipelines. What survives is what
 * the checkpoint files hold, so recovery is the start-up restore again on a
 * new device, after noting which tensors had changed since their files were
 * written (those are lost, or rolled back to their file). */
#include "persist/recover.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/loop.h"
#include "daemon.h"
#include "devices.h"
#include "gpu/completion.h"
#include "gpu/device.h"
#include "kernels/kernel.h"
#include "mode.h"
#include "pack.h"
#include "persist/checkpoint.h"
#include "persist/persist.h"
#include "persist/persist_model.h"
#include "status.h"
#include "store/model.h"
#include "store/store.h"
#include "train/job.h"
#include "wire_limits.h"

/* How long to wait before trying again when the device does not re-open. */
#define RECOVER_RETRY_NS 1000000000ll

static struct recovery *of(const struct daemon *d)
{
	return d->recovery;
}

/* Remember `t`'s name as lost (or about to be rolled back). */
static void note_lost(void *data, struct tensor *t)
{
	struct daemon *d = data;
	struct recovery *rc = of(d);
	struct recover_pending *e;

	if (d->persist && !t->dirty)
		return;
	rc->pending_count++;
	if (rc->npending == rc->cappending) {
		size_t cap = rc->cappending ? 2 * rc->cappending : 16;
		struct recover_pending *n = realloc(rc->pending, cap * sizeof(*n));

		if (!n)
			return;
		rc->pending = n;
		rc->cappending = cap;
	}
	e = &rc->pending[rc->npending];
	*e = (struct recover_pending){ .owner = t->owner, .group = t->group, .mode = t->mode,
				       .version = t->version };
	e->name = strdup(t->name);
	if (e->name)
		rc->npending++;
}

/* The checkpoint of `t` is older than the live tensor `live` was: never give
 * it more access than the live one had (its owner may have revoked access
 * since, docs/security.md). Same data (version): the live metadata as it
 * was; older data: the live group, and only the modes both allowed (group
 * bits only when the group is the same). */
static void apply_live_meta(struct tensor *t, const struct recover_pending *live)
{
	uint32_t mode = live->mode, group = live->group;

	if (t->version != live->version) {
		mode &= t->mode;
		if (t->group != live->group)
			mode &= ~(uint32_t)(TDP_MODE_GROUP_READ | TDP_MODE_GROUP_WRITE);
	}
	t->mode = mode;
	t->group = group;
}

/* Deletions need no device: make them durable now, so that the restore does
 * not bring deleted tensors back. */
static void commit_deletions(struct daemon *d)
{
	char name[TDP_MAX_NAME_LEN + 1];
	size_t len;

	while ((len = store_take_deleted(d->store, name)) > 0)
		if (persist_remove(d->persist, name, len) < 0)
			log_error("device recovery: cannot remove the checkpoint of deleted tensor '%s'", name);
	if (store_take_lost_deletions(d->store) && persist_reconcile(d->persist, d->store) < 0)
		log_error("device recovery: cannot remove the checkpoints of deleted tensors");
	if (persist_commit(d->persist) < 0)
		log_error("device recovery: cannot sync the checkpoint directory");
}

/* Release everything that belongs to the lost device, still open. */
static void drop_device_state(struct daemon *d)
{
	struct recovery *rc = of(d);
	uint64_t count, bytes;

	rc->pending_jobs = train_jobs_abort(d, TDP_DEVICE_LOST,
					    "the device was lost: the training run stopped");
	if (d->persist)
		commit_deletions(d);
	store_foreach(d->store, note_lost, d);
	store_totals(d->store, &count, &bytes);
	log_warning("device recovery: releasing %llu tensors (%llu bytes), %llu training runs "
		    "and every custom kernel of the lost device", (unsigned long long)count,
		    (unsigned long long)bytes, (unsigned long long)rc->pending_jobs);
	kernels_clear(d);
	if (d->persist) {
		struct models *ms = models_new(MODEL_MAX_MODELS);

		checkpoint_free(d->checkpoint);
		d->checkpoint = NULL;
		persist_free(d->persist);
		d->persist = NULL;
		model_persist_free(d->model_persist);
		d->model_persist = NULL;
		/* The models come back from their files too, so that their step
		 * counts match the restored parameters. */
		if (ms) {
			models_free(d->models);
			d->models = ms;
		}
		store_track_dirty(d->store, false);
	}
	store_clear(d->store);
}

/* Log and record, for info, what the reset did. */
static void report(struct daemon *d, bool persisted)
{
	struct recovery *rc = of(d);
	uint64_t count, bytes;

	store_totals(d->store, &count, &bytes);
	rc->nlost = 0;
	for (size_t i = 0; i < rc->npending; i++) {
		const char *name = rc->pending[i].name;
		struct tensor *t;

		if (!persisted) {
			log_warning("device recovery: tensor '%s' lost (no state directory)", name);
		} else if (store_lookup(d->store, name, strlen(name), &access_daemon, 0, &t, NULL) == 0 &&
			   t->owner != rc->pending[i].owner) {
			/* Cannot be (a deletion's file goes first), but never serve one
			 * user's old data as another's. */
			store_delete(d->store, name, strlen(name));
			log_warning("device recovery: tensor '%s' lost: its checkpoint has another owner", name);
		} else if (store_lookup(d->store, name, strlen(name), &access_daemon, 0, &t, NULL) == 0) {
			char mode[TDP_MODE_TEXT_MAX], live[TDP_MODE_TEXT_MAX];

			/* Its metadata may differ from the file now: write it. */
			apply_live_meta(t, &rc->pending[i]);
			store_mark_dirty(d->store, t);
			log_warning("device recovery: tensor '%s' rolled back to its checkpoint (version %llu): "
				    "later changes are lost; owner %u, group %u, mode %s%s%s%s", name,
				    (unsigned long long)t->version, t->owner, t->group,
				    tdp_mode_format(t->mode, mode),
				    t->mode == rc->pending[i].mode ? " as it was live" : " (live: ",
				    t->mode == rc->pending[i].mode ? "" : tdp_mode_format(rc->pending[i].mode, live),
				    t->mode == rc->pending[i].mode ? "" : "; narrowed, the data is older)");
		} else
			log_warning("device recovery: tensor '%s' lost: created or replaced since its "
				    "last checkpoint", name);
		if (rc->nlost < RECOVER_MAX_LOST_NAMES)
			snprintf(rc->lost[rc->nlost++], sizeof(rc->lost[0]), "%s", name);
		free(rc->pending[i].name);
	}
	rc->npending = 0;
	rc->resets++;
	rc->time_ns = daemon_now_ns(CLOCK_REALTIME);
	rc->seconds = (double)(daemon_now_ns(CLOCK_MONOTONIC) - rc->start_ns) / 1e9;
	rc->restored = count;
	rc->lost_count = rc->pending_count;
	rc->jobs_stopped = rc->pending_jobs;
	rc->pending_count = rc->pending_jobs = 0;
	log_notice("device recovery: lost devices re-created in %.3f s; %llu tensors restored, %llu lost "
		   "or rolled back%s, %llu training runs stopped (reset %llu)", rc->seconds, (unsigned long long)count, (unsigned long long)rc->lost_count,
		   persisted ? "" : " (no state directory: everything)",
		   (unsigned long long)rc->jobs_stopped, (unsigned long long)rc->resets);
}

static void recover(struct daemon *d)
{
	struct recovery *rc = of(d);
	bool persisted = config_persist_on(&d->cfg);
	int r = 0;

	if (!rc->dropped) {
		rc->start_ns = daemon_now_ns(CLOCK_MONOTONIC);
		log_error("device recovery: the device was lost; re-creating it%s",
			  persisted ? " and restoring the checkpoints" : "");
		/* Graphs still watched on a lost device are answered now, against
		 * the store as it was, not from inside devices_reopen. */
		for (uint32_t id = 0; id < d->ngpus; id++)
			if (d->gpus[id]->lost)
				gpu_completion_stop(d->gpus[id]);
		drop_device_state(d);
		rc->dropped = true;
	}
	/* Every lost device is opened again (info's gpu counters carry over);
	 * the others stay as they are. */
	for (uint32_t id = 0; r == 0 && id < d->ngpus; id++) {
		if (!d->gpus[id]->lost)
			continue;
		rc->device_resets[id]++;
		if ((r = devices_reopen(d, id)) < 0)
			log_error("device recovery: cannot open device %u again (%s); retrying in 1 s", id,
				  strerror(-r));
	}
	if (r < 0) {
		rc->retry_ns = daemon_now_ns(CLOCK_MONOTONIC) + RECOVER_RETRY_NS;
		return;
	}
	rc->dropped = false;
	if (persisted && daemon_restore(d) < 0)
		log_error("device recovery: restoring the checkpoints failed (see above); the store "
			  "serves what was restored, without persistence");
	report(d, persisted);
}

/* While a runaway kernel's work may still run, freeing the device would
 * wait for it, perhaps for a long time (docs/kernels.md): poll its fence
 * instead, after every batch (the server's one-second timer makes one at
 * least every second), and let the recovery go on once it has ended.
 * Returns whether it has. */
static bool runaway_ended(struct daemon *d)
{
	struct recovery *rc = of(d);

	if (!rc->runaway_logged) {
		log_error("device recovery: waiting for the runaway kernel to end (its fence to "
			  "signal, or the driver to report the device lost); GPU requests fail "
			  "with DEVICE_LOST until then");
		rc->runaway_logged = true;
		rc->runaway_ns = daemon_now_ns(CLOCK_MONOTONIC);
	}
	/* Every device a runaway kernel holds must be done with it. */
	for (uint32_t id = 0; id < d->ngpus; id++)
		if (d->gpus[id]->runaway && !gpu_device_runaway_ended(d->gpus[id]))
			return false;
	log_notice("device recovery: the runaway kernel's work ended %.1f s after its time limit",
		   (double)(daemon_now_ns(CLOCK_MONOTONIC) - rc->runaway_ns) / 1e9);
	rc->runaway_logged = false;
	return true;
}

/* After each batch: a loss seen by any request (or training step) is
 * recovered from here, when nothing of the batch points at the store. */
static void after_batch(void *data)
{
	struct daemon *d = data;
	struct recovery *rc = of(d);
	bool runaway = false;

	if (!devices_any_lost(d))
		return;
	for (uint32_t id = 0; id < d->ngpus; id++)
		runaway |= d->gpus[id]->runaway;
	if (runaway && !runaway_ended(d))
		return;
	if (rc->retry_ns && daemon_now_ns(CLOCK_MONOTONIC) < rc->retry_ns)
		return;
	rc->retry_ns = 0;
	recover(d);
}

int recover_init(struct daemon *d)
{
	int r;

	d->recovery = calloc(1, sizeof(*d->recovery));
	if (!d->recovery)
		return -ENOMEM;
	r = loop_add_after(d->loop, after_batch, d);
	if (r < 0) {
		free(d->recovery);
		d->recovery = NULL;
	}
	return r;
}

void recover_fini(struct daemon *d)
{
	struct recovery *rc = d->recovery;

	if (!rc)
		return;
	loop_remove_after(d->loop, after_batch, d);
	for (size_t i = 0; i < rc->npending; i++)
		free(rc->pending[i].name);
	free(rc->pending);
	free(rc);
	d->recovery = NULL;
}
