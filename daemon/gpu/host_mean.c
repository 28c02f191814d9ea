/* The mean kernel of data-parallel training's gradient exchange over host
 * pages imported into every device (host_import.h). */
#include "gpu/host_import.h"

#include <errno.h>

#include "gpu/device.h"
#include "gpu/pipeline.h"
#include "gpu/recorder.h"

int gpu_rec_host_mean(struct gpu_recorder *rec, VkBuffer host, uint64_t base, uint64_t stride, unsigned n,
		      unsigned self, const struct gpu_alloc *out)
{
	struct gpu_device *g = rec->g;
	struct gpu_binding b[GPU_MAX_BINDINGS];
	const struct gpu_pipeline *p;
	uint32_t push[2];
	uint64_t count = out->size / 4;
	int r;

	if (n < 1 || n > GPU_MAX_BINDINGS - 1 || self >= n || out->size % 4 || stride < out->size ||
	    stride % g->props.limits.minStorageBufferOffsetAlignment ||
	    base % g->props.limits.minStorageBufferOffsetAlignment)
		return -EINVAL;
	if (count == 0)
		return 0;
	if (out->size > g->props.limits.maxStorageBufferRange || count > UINT32_MAX)
		return -E2BIG;
	r = gpu_pipeline_get(g, "dp_mean.f32", &p);
	if (r < 0)
		return r;
	for (unsigned k = 0; k < GPU_MAX_BINDINGS - 1; k++)
		b[k] = (struct gpu_binding){ host, base + (k < n ? k : 0) * stride, out->size, false };
	b[self] = gpu_rec_bind(g, out, 0, out->size, false);
	b[GPU_MAX_BINDINGS - 1] = gpu_rec_bind(g, out, 0, out->size, true);
	push[0] = (uint32_t)count;
	push[1] = n;
	gpu_rec_barrier(rec);
	r = gpu_rec_dispatch(rec, p, b, GPU_MAX_BINDINGS, push, sizeof(push), count, 256);
	gpu_rec_barrier(rec);
	return r;
}

void gpu_rec_host_signal(struct gpu_recorder *rec, VkBuffer host, uint64_t offset, uint32_t value)
{
	gpu_rec_barrier(rec);
	vkCmdFillBuffer(rec->cb, host, offset, 4, value);
	gpu_rec_barrier(rec);
}

void gpu_rec_wait_host_event(struct gpu_recorder *rec, VkEvent event)
{
	VkMemoryBarrier mb = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = VK_ACCESS_HOST_WRITE_BIT,
		.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
				 VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
	};

	vkCmdWaitEvents(rec->cb, 1, &event, VK_PIPELINE_STAGE_HOST_BIT,
			VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 1, &mb, 0, NULL, 0,
			NULL);
	gpu_rec_barrier(rec);
}

int gpu_event_create(struct gpu_device *g, VkEvent *ret)
{
	VkEventCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_EVENT_CREATE_INFO };
	VkResult vr = vkCreateEvent(g->dev, &ci, NULL, ret);

	return vr == VK_SUCCESS ? 0 : vr == VK_ERROR_DEVICE_LOST ? gpu_result_errno(g, vr) : -ENOMEM;
}

void gpu_event_destroy(struct gpu_device *g, VkEvent event)
{
	if (event != VK_NULL_HANDLE)
		vkDestroyEvent(g->dev, event, NULL);
}

int gpu_event_set(struct gpu_device *g, VkEvent event, bool set)
{
	VkResult vr = set ? vkSetEvent(g->dev, event) : vkResetEvent(g->dev, event);

	return vr == VK_SUCCESS ? 0 : gpu_result_errno(g, vr);
}
