#include "gpu/transfer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device.h"
#include "gpu/host_import.h"

/* Host ranges at least this long are imported (gpu/host_import.h) rather
 * than copied through the staging buffer. */
#define DIRECT_MIN ((uint64_t)1 << 20)

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

/* The device copies between `a` and the caller's memory itself: the pages
 * holding [host, host + a->size) are imported (every byte of a page that
 * holds a valid byte is mapped; the copy touches only the range) and one
 * vkCmdCopyBuffer moves the bytes, waited for. No staging buffer, no host
 * copy. Returns -EOPNOTSUPP when the device cannot import this memory (the
 * caller stages), else as gpu_upload. */
static int direct(struct gpu_device *g, enum direction dir, const struct gpu_alloc *a, uint8_t *host)
{
	uint64_t align = gpu_host_import_align(g);
	uintptr_t p = (uintptr_t)host, base, end;
	struct gpu_host_import h;
	VkBufferCopy region = { .size = a->size };
	int r;

	if (!align || a->size < DIRECT_MIN || p > UINTPTR_MAX - a->size - align)
		return -EOPNOTSUPP;
	base = p & ~(uintptr_t)(align - 1);
	end = (p + a->size + align - 1) & ~(uintptr_t)(align - 1);
	r = gpu_host_import(g, (void *)base, end - base, &h);
	if (r < 0)
		return r;
	r = gpu_cmd_begin(g, 0);
	if (r < 0)
		goto out;
	if (dir == UPLOAD) {
		region.srcOffset = p - base;
		region.dstOffset = a->offset;
		vkCmdCopyBuffer(g->cmd[0].cb, h.buffer, a->block->buffer, 1, &region);
	} else {
		VkMemoryBarrier mb = {
			.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
			.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
			.dstAccessMask = VK_ACCESS_HOST_READ_BIT,
		};

		region.srcOffset = a->offset;
		region.dstOffset = p - base;
		vkCmdCopyBuffer(g->cmd[0].cb, a->block->buffer, h.buffer, 1, &region);
		vkCmdPipelineBarrier(g->cmd[0].cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
				     VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
	}
	r = gpu_cmd_submit(g, 0);
	if (r == 0)
		r = gpu_cmd_wait(g, 0);
out:
	/* A runaway copy keeps its import (and the caller's pages pinned). */
	gpu_host_import_free(g, &h);
	return r;
}

/* direct() where it can, else through the staging buffer. */
static int transfer(struct gpu_device *g, enum direction dir, const struct gpu_alloc *a, uint8_t *host)
{
	int r = direct(g, dir, a, host);

	return r == -EOPNOTSUPP ? staged(g, dir, a, host) : r;
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
	return transfer(g, UPLOAD, a, (uint8_t *)src);
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
