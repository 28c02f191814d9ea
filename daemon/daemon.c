/* The daemon's state across its layers: restoring it from the state
 * directory (at start-up, and after a device loss: persist/recover.c). */
#include "daemon.h"

#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "methods/methods_job.h"
#include "persist/checkpoint.h"
#include "persist/persist.h"
#include "persist/persist_model.h"
#include "store/names_migrate.h"
#include "store/store.h"

int daemon_restore(struct daemon *d)
{
	struct persist_restored res;
	uint64_t models, models_skipped;
	char err[512];
	int64_t t0 = daemon_now_ns(CLOCK_MONOTONIC);
	int r;

	r = persist_open(d->cfg.state_dir, &d->persist, err, sizeof(err));
	if (r < 0) {
		log_error("cannot keep tensors in the state directory: %s (persist = no turns this off)", err);
		return r;
	}
	r = persist_restore(d->persist, d, &res);
	if (r < 0) {
		log_error("cannot read the checkpoints in %s/tensors: %s", d->cfg.state_dir, strerror(-r));
		return r;
	}
	r = model_persist_open(d->cfg.state_dir, &d->model_persist, err, sizeof(err));
	if (r < 0) {
		log_error("cannot keep models in the state directory: %s", err);
		return r;
	}
	r = model_persist_restore(d->model_persist, d, &models, &models_skipped);
	if (r < 0) {
		log_error("cannot read the model checkpoints in %s/models: %s", d->cfg.state_dir, strerror(-r));
		return r;
	}
	res.skipped += models_skipped;
	if (models)
		log_notice("restored %llu models from %s/models", (unsigned long long)models, d->cfg.state_dir);
	if (res.skipped)
		log_warning("skipped %llu damaged or unusable checkpoint files (see above)",
			    (unsigned long long)res.skipped);
	log_notice("restored %llu tensors (%llu bytes) from %s/tensors in %.3f s",
		   (unsigned long long)res.tensors, (unsigned long long)res.bytes, d->cfg.state_dir,
		   (double)(daemon_now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
	if (jobs_restore(d) < 0)
		log_warning("cannot read the jobs in %s/jobs; job.list starts empty", d->cfg.state_dir);
	store_track_dirty(d->store, true);
	names_migrate(d->store, d->models);
	r = checkpoint_start(d, &d->checkpoint);
	if (r < 0)
		log_error("cannot start the periodic checkpoint: %s", strerror(-r));
	return r;
}
