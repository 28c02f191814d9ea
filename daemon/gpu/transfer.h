/* Moving tensor bytes between host memory and device memory. */
#pragma once

#include <stdint.h>

#include "gpu/memory.h"

struct gpu_device;

/* Copy `a->size` bytes from `src` into the device range `a`. A memcpy when
 * the device memory is mapped; else, from 1 MiB on and where the device
 * imports host memory (gpu/host_import.h), one device copy straight from the
 * pages of `src`; otherwise through the staging buffer in chunks, with the
 * host copy of one chunk overlapping the device copy of the previous one.
 * Returns 0, -ENOMEM, -EIO, or -ENODEV when the device is lost. */
int gpu_upload(struct gpu_device *g, const struct gpu_alloc *a, const void *src);

/* Copy `a->size` bytes of the device range `a` into `dst`. Same returns. */
int gpu_download(struct gpu_device *g, const struct gpu_alloc *a, void *dst);

/* Copy the device range `src` on device `sg` into the range `dst` (the same
 * size) on device `dg`: a device-side copy when they are one device, else
 * through host memory (directly where either side is mapped, else in 64 MiB
 * chunks). Returns 0, -EINVAL on a size mismatch, -ENOMEM, -EIO, or -ENODEV
 * when a device is lost. */
int gpu_copy(struct gpu_device *sg, const struct gpu_alloc *src, struct gpu_device *dg,
	     const struct gpu_alloc *dst);
