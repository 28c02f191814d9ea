/* The set of devices tensord computes on (docs/devices.md). */
#include "devices.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "daemon.h"
#include "persist/persist_file.h"
#include "methods/request.h"
#include "status.h"
#include "store/store.h"

/* <state-dir>/pipeline-cache.bin for device 0, pipeline-cache.ID.bin after;
 * NULL (no cache) when the state directory is not safe: another user could
 * plant a cache for the driver, a FIFO, or a link the daemon would write
 * through (docs/durability.md, "The state directory must be safe"). */
static char *cache_path(const struct daemon *d, uint32_t id)
{
	char *p = NULL, err[512];
	int n, fd = open(d->cfg.state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	n = persist_dir_check(fd, d->cfg.state_dir, err, sizeof(err));
	close(fd);
	if (n < 0) {
		log_warning("no pipeline cache: %s", err);
		return NULL;
	}
	n = id == 0 ? asprintf(&p, "%s/pipeline-cache.bin", d->cfg.state_dir) :
		      asprintf(&p, "%s/pipeline-cache.%u.bin", d->cfg.state_dir, id);
	return n < 0 ? NULL : p;
}

int devices_open(struct daemon *d)
{
	uint32_t index[GPU_MAX_DEVICES], n;
	int r;

	r = gpu_enumerate(&d->devices, &d->ndevices);
	if (r < 0) {
		log_error("no Vulkan device found (install a Vulkan driver; without a GPU, "
			  "Mesa's lavapipe from mesa-vulkan-drivers)");
		return r;
	}
	r = gpu_choose(d->devices, d->ndevices, &d->cfg.device, index, &n);
	if (r < 0)
		return r;
	for (uint32_t id = 0; id < n; id++) {
		struct gpu_open_options *o = &d->gpu_opts[id];

		d->pipeline_cache[id] = cache_path(d, id);
		*o = (struct gpu_open_options){
			.index = index[id], .id = id, .host_mapped = d->cfg.host_mapped,
			.block_size = d->cfg.block_size, .max_bytes = d->cfg.max_device_bytes,
			.pipeline_cache = d->pipeline_cache[id], .loop = d->loop,
		};
		r = gpu_device_open(o, &d->gpus[id]);
		if (r < 0)
			return r;
		d->ngpus = id + 1;
		log_notice("device %u: Vulkan device %u, %s (%s, %s), %llu MiB", id, d->gpus[id]->desc.index,
			   d->gpus[id]->desc.name, d->gpus[id]->desc.type, d->gpus[id]->desc.driver,
			   (unsigned long long)(d->gpus[id]->mem.heap_size >> 20));
	}
	return 0;
}

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

void devices_close(struct daemon *d)
{
	for (uint32_t id = 0; id < GPU_MAX_DEVICES; id++) {
		gpu_device_free(d->gpus[id]);
		d->gpus[id] = NULL;
		free(d->pipeline_cache[id]);
		d->pipeline_cache[id] = NULL;
	}
	d->ngpus = 0;
	free(d->devices);
	d->devices = NULL;
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

int devices_param(struct request *req, const msgpack_object *v, const char *what, uint32_t *ret)
{
	uint32_t n = req->call.d->ngpus;

	if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 >= n)
		return request_fail(req, TDP_INVALID_ARGUMENT, "%s must be a device id, 0 to %u (tensord uses "
				    "%u device%s; see info)", what, n - 1, n, n == 1 ? "" : "s");
	*ret = (uint32_t)v->via.u64;
	return 0;
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
