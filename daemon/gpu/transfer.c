#include "gpu/transfer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/copy_pool.h"
#include "gpu/device.h"

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
				copy_pool_memcpy(stage, host + done, n);
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
			copy_pool_memcpy(host + pending_done,
					 (uint8_t *)g->mem.staging_map + (slot ^ 1) * half, pending_n);
		pending_done = done;
		pending_n = n;
		done += n;
		slot ^= 1;
		if (!n)
			break;
	}
	return 0;
}

/* The plain path goes through the staging buffer. Importing the caller's
 * pages instead (gpu/host_import.h, as memfd transfers do) measured slower
 * on an H100: plain put of 1 GiB 2.32-2.42 against 2.57-2.62 GB/s staged,
 * a streamed get (imported 4 MiB a chunk) 0.73 against 0.89-0.94 GB/s
 * (docs/performance.md): pinning fresh pages costs more than the memcpy. */
static int transfer(struct gpu_device *g, enum direction dir, const struct gpu_alloc *a, uint8_t *host)
{
	return staged(g, dir, a, host);
}

int gpu_upload(struct gpu_device *g, const struct gpu_alloc *a, const void *src)
{
	if (a->size == 0)
		return 0;
	if (g->lost)
		return -ENODEV;
	if (a->block->map) {
		copy_pool_memcpy((uint8_t *)a->block->map + a->offset, src, a->size);
		return 0;
	}
	return transfer(g, UPLOAD, a, (uint8_t *)src);
}

int gpu_download(struct gpu_device *g, const struct gpu_alloc *a, void *dst)
{
	if (a->size == 0)
		return 0;
	if (g->lost)
		return -ENODEV;
	if (a->block->map) {
		copy_pool_memcpy(dst, (uint8_t *)a->block->map + a->offset, a->size);
		return 0;
	}
	return transfer(g, DOWNLOAD, a, dst);
}

/* Device-side copy of src into dst on one device. */
static int copy_on_device(struct gpu_device *g, const struct gpu_alloc *src, const struct gpu_alloc *dst)
{
	VkBufferCopy region = { .srcOffset = src->offset, .dstOffset = dst->offset, .size = src->size };
	int r = gpu_cmd_begin(g, 0);

	if (r < 0)
		return r;
	vkCmdCopyBuffer(g->cmd[0].cb, src->block->buffer, dst->block->buffer, 1, &region);
	r = gpu_cmd_submit(g, 0);
	return r < 0 ? r : gpu_cmd_wait(g, 0);
}

/* The window [off, off + n) of `a`. */
static struct gpu_alloc window(const struct gpu_alloc *a, uint64_t off, uint64_t n)
{
	struct gpu_alloc w = *a;

	w.offset += off;
	w.size = n;
	return w;
}

int gpu_copy(struct gpu_device *sg, const struct gpu_alloc *src, struct gpu_device *dg,
	     const struct gpu_alloc *dst)
{
	uint64_t chunk = (uint64_t)64 << 20;
	uint8_t *buf;
	int r = 0;

	if (src->size != dst->size)
		return -EINVAL;
	if (src->size == 0)
		return 0;
	if (sg->lost || dg->lost)
		return -ENODEV;
	if (sg == dg)
		return copy_on_device(sg, src, dst);
	if (dst->block->map)
		return gpu_download(sg, src, (uint8_t *)dst->block->map + dst->offset);
	if (src->block->map)
		return gpu_upload(dg, dst, (uint8_t *)src->block->map + src->offset);
	if (chunk > src->size)
		chunk = src->size;
	buf = malloc(chunk);
	if (!buf)
		return -ENOMEM;
	for (uint64_t off = 0; r == 0 && off < src->size; off += chunk) {
		uint64_t n = src->size - off < chunk ? src->size - off : chunk;
		struct gpu_alloc s = window(src, off, n), d = window(dst, off, n);

		r = gpu_download(sg, &s, buf);
		if (r == 0)
			r = gpu_upload(dg, &d, buf);
	}
	free(buf);
	return r;
}
