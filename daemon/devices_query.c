/* The device set at run time (docs/devices.md): the device a tensor lives
 * on, the default device for a new one, free memory, loss and load, and
 * re-opening a lost device. It reads the store, so it sits at rank 4 with
 * store/ (docs/architecture.md, "Layers"), below every layer that calls it;
 * opening the set at start-up is devices.c's, at the top. */
#include "devices.h"

#include "daemon.h"
#include "store/store.h"

int devices_reopen(struct daemon *d, uint32_t id)
{
	struct gpu_device *old = d->gpus[id], *ng;
	int r = gpu_device_open(&d->gpu_opts[id], &ng);

	if (r < 0)
		return r;
	ng->stats.submissions += old->stats.submissions;
	ng->stats.busy_ns += old->stats.busy_ns;
	ng->stats.wait_ns += old->stats.wait_ns;
	gpu_device_free(old);
	d->gpus[id] = ng;
	return 0;
}

struct gpu_device *devices_of(const struct daemon *d, const struct tensor *t)
{
	return d->gpus[t->device < d->ngpus ? t->device : 0];
}

uint64_t devices_free_bytes(const struct gpu_device *g)
{
	return g->mem.limit > g->mem.used ? g->mem.limit - g->mem.used : 0;
}

_Static_assert(STORE_DEVICES == GPU_MAX_DEVICES, "the store counts usage per device id");

uint32_t devices_default(const struct daemon *d, uint32_t owner, uint64_t bytes)
{
	struct store_usage u;
	uint32_t best = 0;
	int home = -1;

	/* Where the owner's tensors are, so that ops on them work... */
	store_usage_of(d->store, owner, &u);
	for (uint32_t id = 0; id < d->ngpus; id++) {
		if (!u.device_tensors[id] || devices_free_bytes(d->gpus[id]) < bytes)
			continue;
		if (home < 0 || u.device_bytes[id] > u.device_bytes[home] ||
		    (u.device_bytes[id] == u.device_bytes[home] &&
		     u.device_tensors[id] > u.device_tensors[home]))
			home = (int)id;
	}
	if (home >= 0)
		return (uint32_t)home;
	/* ...else the device with the most free memory. */
	for (uint32_t id = 1; id < d->ngpus; id++)
		if (devices_free_bytes(d->gpus[id]) > devices_free_bytes(d->gpus[best]))
			best = id;
	return best;
}

bool devices_any_lost(const struct daemon *d)
{
	for (uint32_t id = 0; id < d->ngpus; id++)
		if (d->gpus[id] && d->gpus[id]->lost)
			return true;
	return false;
}

void devices_sample_load(struct daemon *d, int64_t now_ns)
{
	for (uint32_t id = 0; id < d->ngpus; id++) {
		struct gpu_device *g = d->gpus[id];
		int64_t dt;

		if (!g)
			continue;
		dt = now_ns - g->load_at_ns;
		if (g->load_at_ns && dt > 0) {
			double f = (double)(g->stats.busy_ns - g->load_busy_ns) / (double)dt;

			g->load = f < 0 ? 0 : f > 1 ? 1 : f;
		}
		g->load_busy_ns = g->stats.busy_ns;
		g->load_at_ns = now_ns;
	}
}
