#include "transfer.h"

#include <errno.h>
#include <string.h>

#include "device.h"

enum direction { UPLOAD, DOWNLOAD };

static void record_copy(struct gpu_device *g, unsigned slot, enum direction dir,
			const struct gpu_alloc *a, uint64_t done, uint64_t staging_offset,
			uint64_t n)
{
	VkBufferCopy region = { .size = n };
	VkBuffer staging = g->mem.staging_buffer;

	if (dir == UPLOAD) {
		region.srcOffset = staging_offset;
		region.dstOffset = a->offset + done;
		vkCmdCopyBuffer(g->cmd[slot].cb, staging, a->block->buffer, 1, &region);
	} else {
		region.srcOffset = a->offset + done;
		region.dstOffset = staging_offset;
		vkCmdCopyBuffer(g->cmd[slot].cb, a->block->buffer, staging, 1, &region);
		/* A fence alone does not make device writes visible to the host. */
		VkMemoryBarrier mb = {
			.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
			.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
			.dstAccessMask = VK_ACCESS_HOST_READ_BIT,
		};
		vkCmdPipelineBarrier(g->cmd[slot].cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
				     VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
	}
}

/* Chunked copy through the two halves of the staging buffer: while the device
 * copies one half, the host fills (upload) or drains (download) the other. */
static int staged(struct gpu_device *g, enum direction dir, const struct gpu_alloc *a,
		  uint8_t *host)
{
	uint64_t half, done = 0, pending_done = 0, pending_n = 0;
	unsigned slot = 0;
	int r;

	r = gpu_memory_staging(g);
	if (r < 0)
		return r;
	half = g->mem.staging_size / 2;
	while (done < a->size || pending_n) {
		uint64_t n = a->size - done < half ? a->size - done : half;
		uint8_t *stage = (uint8_t *)g->mem.staging_map + slot * half;

		if (n) {
			/* Waits for this slot's previous chunk, whose download
			 * was already drained below. */
			r = gpu_cmd_begin(g, slot);
			if (r < 0)
				return r;
			if (dir == UPLOAD)
				memcpy(stage, host + done, n);
			record_copy(g, slot, dir, a, done, slot * half, n);
			r = gpu_cmd_submit(g, slot);
			if (r < 0)
				return r;
		}
		/* Finish the other slot's chunk while this one runs. */
		r = gpu_cmd_wait(g, slot ^ 1);
		if (r < 0)
			return r;
		if (dir == DOWNLOAD && pending_n)
			memcpy(host + pending_done, (uint8_t *)g->mem.staging_map + (slot ^ 1) * half,
			       pending_n);
		pending_done = done;
		pending_n = n;
		done += n;
		slot ^= 1;
		if (!n)
			break;
	}
	return 0;
}

int gpu_upload(struct gpu_device *g, const struct gpu_alloc *a, const void *src)
{
	if (a->size == 0)
		return 0;
	if (g->lost)
		return -ENODEV;
	if (a->block->map) {
		memcpy((uint8_t *)a->block->map + a->offset, src, a->size);
		return 0;
	}
	return staged(g, UPLOAD, a, (uint8_t *)src);
}

int gpu_download(struct gpu_device *g, const struct gpu_alloc *a, void *dst)
{
	if (a->size == 0)
		return 0;
	if (g->lost)
		return -ENODEV;
	if (a->block->map) {
		memcpy(dst, (uint8_t *)a->block->map + a->offset, a->size);
		return 0;
	}
	return staged(g, DOWNLOAD, a, dst);
}
