#include "gpu/recorder.h"

#include <errno.h>
#include <string.h>

#include "gpu/completion.h"
#include "gpu/device.h"
#include "gpu/trace.h"

static int begin_slot(struct gpu_recorder *rec, struct gpu_device *g, unsigned slot)
{
	int r;

	memset(rec, 0, sizeof(*rec));
	rec->g = g;
	rec->slot = slot;
	r = gpu_cmd_begin(g, slot);
	if (r < 0)
		return r;
	rec->cb = g->cmd[slot].cb;
	return 0;
}

int gpu_rec_begin(struct gpu_recorder *rec, struct gpu_device *g)
{
	return begin_slot(rec, g, 0);
}

int gpu_rec_begin_async(struct gpu_recorder *rec, struct gpu_device *g)
{
	int slot;

	if (!gpu_completion_on(g))
		return gpu_rec_begin(rec, g);
	if (g->lost)
		return -ENODEV;
	slot = gpu_completion_free_slot(g);
	return slot < 0 ? slot : begin_slot(rec, g, (unsigned)slot);
}

struct gpu_binding gpu_rec_bind(struct gpu_device *g, const struct gpu_alloc *a, uint64_t offset,
				uint64_t size, bool write)
{
	if (!a->block || size == 0)
		return (struct gpu_binding){ g->dummy.block->buffer, g->dummy.offset, 16, false };
	return (struct gpu_binding){ a->block->buffer, a->offset + offset, size, write };
}

static bool overlaps(const struct gpu_binding *a, const struct gpu_binding *b)
{
	return a->buffer == b->buffer && a->offset < b->offset + b->range &&
	       b->offset < a->offset + a->range;
}

void gpu_rec_barrier(struct gpu_recorder *rec)
{
	VkMemoryBarrier mb = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
		.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
				 VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
				 VK_ACCESS_HOST_READ_BIT,
	};

	vkCmdPipelineBarrier(rec->cb,
			     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
			     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
			     VK_PIPELINE_STAGE_HOST_BIT,
			     0, 1, &mb, 0, NULL, 0, NULL);
	rec->nwritten = 0;
	rec->barriers++;
}

/* A barrier is needed when this dispatch touches a range that a dispatch since
 * the last barrier wrote (read-after-write, write-after-write) or read while
 * this one writes it (write-after-read: the earlier one may still be running). */
static void order(struct gpu_recorder *rec, const struct gpu_binding *b, unsigned n)
{
	bool need = rec->nwritten + n > sizeof(rec->written) / sizeof(rec->written[0]);

	for (unsigned i = 0; i < n && !need; i++)
		for (unsigned j = 0; j < rec->nwritten && !need; j++)
			need = (b[i].write || rec->written[j].write) && overlaps(&b[i], &rec->written[j]);
	if (need)
		gpu_rec_barrier(rec);
}

static void record(struct gpu_recorder *rec, const struct gpu_pipeline *p,
		   const struct gpu_binding *bindings, unsigned nbindings, const void *push,
		   uint32_t push_size, uint32_t gx, uint32_t gy, uint32_t gz);

void gpu_rec_copy(struct gpu_recorder *rec, const struct gpu_binding *src,
		  const struct gpu_binding *dst)
{
	struct gpu_binding b[2] = { *src, *dst };
	VkBufferCopy region = {
		.srcOffset = src->offset,
		.dstOffset = dst->offset,
		.size = src->range < dst->range ? src->range : dst->range,
	};

	b[0].write = false;
	b[1].write = true;
	if (region.size == 0)
		return;
	gpu_trace_before(rec);
	order(rec, b, 2);
	vkCmdCopyBuffer(rec->cb, src->buffer, dst->buffer, 1, &region);
	gpu_trace_after(rec, "copy", region.size);
	rec->written[rec->nwritten++] = b[0];
	rec->written[rec->nwritten++] = b[1];
}

int gpu_rec_dispatch(struct gpu_recorder *rec, const struct gpu_pipeline *p,
		     const struct gpu_binding *bindings, unsigned nbindings,
		     const void *push, uint32_t push_size, uint64_t invocations,
		     uint32_t local_size)
{
	struct gpu_device *g = rec->g;
	uint64_t groups = (invocations + local_size - 1) / local_size, gx, gy;
	uint32_t maxx = g->props.limits.maxComputeWorkGroupCount[0];
	uint32_t maxy = g->props.limits.maxComputeWorkGroupCount[1];

	if (nbindings > GPU_MAX_BINDINGS || push_size > GPU_PUSH_BYTES)
		return -EINVAL;
	if (groups == 0)
		return 0;
	gx = groups < maxx ? groups : maxx;
	gy = (groups + gx - 1) / gx;
	if (gy > maxy)
		return -E2BIG;
	record(rec, p, bindings, nbindings, push, push_size, (uint32_t)gx, (uint32_t)gy, 1);
	return 0;
}

int gpu_rec_dispatch_groups(struct gpu_recorder *rec, const struct gpu_pipeline *p,
			    const struct gpu_binding *bindings, unsigned nbindings,
			    const void *push, uint32_t push_size, const uint32_t groups[3])
{
	const uint32_t *max = rec->g->props.limits.maxComputeWorkGroupCount;

	if (nbindings > GPU_MAX_BINDINGS || push_size > GPU_PUSH_BYTES)
		return -EINVAL;
	for (unsigned k = 0; k < 3; k++)
		if (groups[k] > max[k])
			return -E2BIG;
	if (!groups[0] || !groups[1] || !groups[2])
		return 0;
	record(rec, p, bindings, nbindings, push, push_size, groups[0], groups[1], groups[2]);
	return 0;
}

static void record(struct gpu_recorder *rec, const struct gpu_pipeline *p,
		   const struct gpu_binding *bindings, unsigned nbindings, const void *push,
		   uint32_t push_size, uint32_t gx, uint32_t gy, uint32_t gz)
{
	struct gpu_device *g = rec->g;
	VkDescriptorBufferInfo info[GPU_MAX_BINDINGS];
	VkWriteDescriptorSet w[GPU_MAX_BINDINGS];
	uint8_t pushbuf[GPU_PUSH_BYTES] = { 0 };

	gpu_trace_before(rec);
	order(rec, bindings, nbindings);
	for (unsigned i = 0; i < nbindings; i++) {
		info[i] = (VkDescriptorBufferInfo){ bindings[i].buffer, bindings[i].offset,
						    bindings[i].range };
		w[i] = (VkWriteDescriptorSet){
			.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
			.dstBinding = i,
			.descriptorCount = 1,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			.pBufferInfo = &info[i],
		};
		rec->written[rec->nwritten++] = bindings[i];
	}
	/* Binding state lasts through barriers and dispatches: a batch of one
	 * op binds its pipeline once. */
	if (rec->bound != p->pipeline) {
		vkCmdBindPipeline(rec->cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipeline);
		rec->bound = p->pipeline;
	}
	g->push_descriptor(rec->cb, VK_PIPELINE_BIND_POINT_COMPUTE, gpu_pipeline_layout(g), 0,
			   nbindings, w);
	if (push_size)
		memcpy(pushbuf, push, push_size);
	vkCmdPushConstants(rec->cb, gpu_pipeline_layout(g), VK_SHADER_STAGE_COMPUTE_BIT, 0,
			   GPU_PUSH_BYTES, pushbuf);
	vkCmdDispatch(rec->cb, gx, gy, gz);
	gpu_trace_after(rec, p->shader, (uint64_t)gx * gy * gz);
	rec->dispatches++;
}

void gpu_rec_update(struct gpu_recorder *rec, const struct gpu_binding *dst, const void *data)
{
	struct gpu_binding b = *dst;

	b.write = true;
	order(rec, &b, 1);
	vkCmdUpdateBuffer(rec->cb, dst->buffer, dst->offset, dst->range, data);
	rec->written[rec->nwritten++] = b;
}

void gpu_rec_host_copy(struct gpu_recorder *rec, const struct gpu_alloc *a, VkBuffer host, uint64_t offset,
		       bool to_device)
{
	VkBufferCopy region = { .size = a->size };

	if (!a->size)
		return;
	gpu_rec_barrier(rec);
	if (to_device) {
		region.srcOffset = offset;
		region.dstOffset = a->offset;
		vkCmdCopyBuffer(rec->cb, host, a->block->buffer, 1, &region);
	} else {
		region.srcOffset = a->offset;
		region.dstOffset = offset;
		vkCmdCopyBuffer(rec->cb, a->block->buffer, host, 1, &region);
	}
	gpu_rec_barrier(rec);
}

int gpu_rec_submit(struct gpu_recorder *rec)
{
	gpu_rec_barrier(rec);
	return gpu_cmd_submit(rec->g, rec->slot);
}

int gpu_rec_wait(struct gpu_recorder *rec)
{
	int r;

	if (rec->watched)
		return gpu_completion_take(rec);
	r = gpu_cmd_wait_for(rec->g, rec->slot, rec->timeout_ns ? rec->timeout_ns : UINT64_MAX);
	if (r == 0)
		rec->gpu_ns = rec->g->cmd[rec->slot].gpu_ns;
	return r;
}

int gpu_rec_submit_wait(struct gpu_recorder *rec)
{
	int r = gpu_rec_submit(rec);

	return r < 0 ? r : gpu_rec_wait(rec);
}

void gpu_rec_abort(struct gpu_recorder *rec)
{
	/* Ending the buffer lets the next gpu_cmd_begin reset it. */
	vkEndCommandBuffer(rec->cb);
}
