/* The set of devices tensord computes on (docs/devices.md): opening and
 * closing it at start-up and shut-down, and reading a request's `device`
 * parameter. At the top of the layers (docs/architecture.md, "Layers"); what
 * the layers below call on a running set is in devices_query.c. */
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

int devices_param(struct request *req, const msgpack_object *v, const char *what, uint32_t *ret)
{
	uint32_t n = req->call.d->ngpus;

	if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 >= n)
		return request_fail(req, TDP_INVALID_ARGUMENT, "%s must be a device id, 0 to %u (tensord uses "
				    "%u device%s; see info)", what, n - 1, n, n == 1 ? "" : "s");
	*ret = (uint32_t)v->via.u64;
	return 0;
}
