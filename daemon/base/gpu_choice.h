/* Which devices the daemon opens (--device, the `device` key): a setting of
 * base/config.h that gpu/device.h's gpu_choose reads, so config needs no
 * Vulkan. */
#pragma once

#include <stdint.h>

/* The most devices tensord opens at once. */
#define GPU_MAX_DEVICES 16

/* Which devices the daemon opens: --device auto|all|cpu|I,J,... */
enum gpu_pick {
	GPU_PICK_AUTO = 0,      /* every usable device of the best kind present */
	GPU_PICK_ALL,           /* every usable device */
	GPU_PICK_CPU,           /* the first CPU device (lavapipe) */
	GPU_PICK_LIST,          /* the listed Vulkan indexes (repeats allowed) */
	GPU_PICK_LOCAL,         /* one of AUTO's: the group member's local rank, modulo */
};

struct gpu_choice {
	enum gpu_pick pick;
	uint32_t n;             /* with GPU_PICK_LIST */
	uint32_t index[GPU_MAX_DEVICES];
	uint32_t local_rank;    /* with GPU_PICK_LOCAL: the member's rank on its host */
};
