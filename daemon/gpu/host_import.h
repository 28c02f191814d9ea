/* Host memory the device reads or writes itself (VK_EXT_external_memory_host):
 * a memfd mapping imported as VkDeviceMemory with a VkBuffer over it, so a
 * tensor.put or tensor.get through a memfd is one device copy (vkCmdCopyBuffer)
 * with no staging buffer and no host memcpy (docs/architecture.md, "Transfers");
 * and the same host pages imported into several devices, read in place by the
 * mean kernel of data-parallel training's gradient exchange (host_mean.c,
 * docs/devices.md). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#include "gpu/memory.h"

struct gpu_device;
struct gpu_recorder;

/* An imported host range. */
struct gpu_host_import {
	VkBuffer buffer;        /* covers [ptr, ptr + size) */
	VkDeviceMemory memory;
	uint64_t size;
};

/* The alignment gpu_host_import needs of both the pointer and the size (a
 * power of two, at least a page), or 0 when `g` cannot import host memory. */
uint64_t gpu_host_import_align(const struct gpu_device *g);

/* Whether `g` imports read-only pages (a put from a sealed memfd). */
bool gpu_host_import_read_only(const struct gpu_device *g);

/* Import the `size` bytes at `ptr` (both aligned to gpu_host_import_align;
 * mapped by the caller, who keeps them mapped until gpu_host_import_free) for
 * transfers in both directions; `read_only` says the pages are mapped without
 * write access. Returns 0 with *ret set; -EOPNOTSUPP when the device cannot
 * import, cannot import read-only pages, the range is unaligned or the driver
 * refuses this memory (the caller copies another way; after a refusal the
 * device imports nothing more); -ENODEV when the device is lost. */
int gpu_host_import(struct gpu_device *g, void *ptr, uint64_t size, bool read_only,
		    struct gpu_host_import *ret);

/* Release what gpu_host_import made, once no submission uses it; an empty one
 * is accepted. On a device lost to a runaway submission (which may still
 * read or write it) the import is left alone and 1 returned: the caller must
 * then keep the host range mapped for good. Otherwise 0. */
int gpu_host_import_free(struct gpu_device *g, struct gpu_host_import *h);

/* Record, with a barrier on either side, a kernel that writes into `out`
 * (count = out->size / 4 f32) the mean of the `n` (1..GPU_MAX_BINDINGS-1)
 * slots of `host` at offsets base + k * stride: ((s0 + s1) + ...) / n, in slot
 * order, so that every device computes the same bits. Slot `self` (< n) is
 * read from `out` itself, which holds the same numbers (the device's own
 * gradient): a device reads only the others' slots over the bus. Returns 0,
 * -EINVAL for a bad shape, -E2BIG past the device's binding range, or -errno. */
int gpu_rec_host_mean(struct gpu_recorder *rec, VkBuffer host, uint64_t base, uint64_t stride, unsigned n,
		      unsigned self, const struct gpu_alloc *out);

/* Record writing `value` into the 4 bytes at `offset` of the host-visible
 * buffer `host`, after everything recorded before it (a barrier on either
 * side): a submission's signal to the host that what it wrote before is
 * out, read while the submission runs on (data parallel: the gradients). */
void gpu_rec_host_signal(struct gpu_recorder *rec, VkBuffer host, uint64_t offset, uint32_t value);

/* Record a wait until the host sets `event` (gpu_event_set), the writes the
 * host saw complete made visible to what follows (a barrier after it): the
 * rest of the submission waits for the host's word. */
void gpu_rec_wait_host_event(struct gpu_recorder *rec, VkEvent event);

/* Create an event (unset) on `g` for gpu_rec_wait_host_event. Returns 0,
 * -ENOMEM or -ENODEV. */
int gpu_event_create(struct gpu_device *g, VkEvent *ret);

/* Destroy an event no submission waits on any more; VK_NULL_HANDLE is
 * accepted. */
void gpu_event_destroy(struct gpu_device *g, VkEvent event);

/* Set (`set`) or reset `event` from the host. Reset only an event no
 * submission in flight waits on. Returns 0 or -errno (-ENODEV). */
int gpu_event_set(struct gpu_device *g, VkEvent event, bool set);
