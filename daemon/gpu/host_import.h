/* Host memory that several devices read and write (VK_EXT_external_memory_host):
 * the same host pages imported into each device as a storage and transfer
 * buffer, and the one kernel that reads them in place, the mean of `n` f32
 * slots (data-parallel training's gradient exchange, docs/devices.md). */
#pragma once

#include <stdint.h>
#include <vulkan/vulkan.h>

#include "gpu/memory.h"

struct gpu_device;
struct gpu_recorder;

/* Host pages imported into one device. */
struct gpu_host_import {
	VkBuffer buffer;
	VkDeviceMemory memory;
	uint64_t size;
};

/* The alignment (a power of two, at least the page size) that a host
 * pointer and size imported into `g` need; 0 when `g` cannot import. */
uint64_t gpu_host_import_align(struct gpu_device *g);

/* Import `size` bytes at `ptr` (aligned to gpu_host_import_align, mapped
 * read-write, outliving the import) into `g` as a buffer for storage and
 * transfers, in a host-coherent memory type. Returns 0, -EOPNOTSUPP when the
 * device cannot import them, or -ENOMEM. */
int gpu_host_import(struct gpu_device *g, void *ptr, uint64_t size, struct gpu_host_import *ret);

/* Release an import (zeroed); an empty one is accepted. The pages stay. */
void gpu_host_import_free(struct gpu_device *g, struct gpu_host_import *b);

/* Record, with a barrier on either side, a kernel that writes into `out`
 * (count = out->size / 4 f32) the mean of the `n` (1..GPU_MAX_BINDINGS-1)
 * slots of `host` at offsets k * stride: ((s0 + s1) + ...) / n, in slot
 * order, so that every device computes the same bits. Slot `self` (< n) is
 * read from `out` itself, which holds the same numbers (the device's own
 * gradient): a device reads only the others' slots over the bus. Returns 0,
 * -EINVAL for a bad shape, -E2BIG past the device's binding range, or -errno. */
int gpu_rec_host_mean(struct gpu_recorder *rec, VkBuffer host, uint64_t stride, unsigned n,
		      unsigned self, const struct gpu_alloc *out);
