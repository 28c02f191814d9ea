/* Device memory for tensors: large VkDeviceMemory blocks, each with one
 * VkBuffer over all of it, carved into tensor-sized ranges by a free-list
 * allocator. A tensor larger than half a block gets a dedicated block of its
 * own. Shared blocks start at 16 MiB and double as use grows, up to the block
 * size; blocks are given back to Vulkan when they empty out. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#include "gpu/range_alloc.h"

struct gpu_device;

struct gpu_block {
	VkDeviceMemory memory;
	VkBuffer buffer;        /* covers the whole block */
	void *map;              /* host pointer when mapped directly, else NULL */
	uint64_t size;
	bool dedicated;         /* holds exactly one allocation */
	struct range_alloc ranges;
	struct gpu_block *next;
};

/* A range of device memory: what a tensor's bytes occupy. A zero-size range
 * has no block. */
struct gpu_alloc {
	struct gpu_block *block;
	uint64_t offset;
	uint64_t size;          /* the bytes asked for */
	uint64_t reserved;      /* the bytes taken from the block (aligned) */
};

/* Emptied blocks kept for reuse (struct gpu_memory). */
#define GPU_SPARE_BLOCKS 8

struct gpu_memory {
	uint32_t type_index;    /* memory type for tensors */
	uint32_t heap_index;
	bool host_mapped;       /* tensor memory is mapped: put/get copy directly */
	uint32_t staging_type;  /* host-visible coherent type for staging */
	uint64_t align;         /* offset alignment inside blocks */
	uint64_t block_size;
	uint64_t max_allocation; /* largest single VkDeviceMemory */
	uint64_t heap_size;
	uint64_t limit;         /* most VkDeviceMemory tensord takes: the heap, or less by config */
	bool has_budget;        /* VK_EXT_memory_budget: ask the driver what is left */
	uint64_t used;          /* bytes of tensor data */
	uint64_t reserved;      /* bytes of VkDeviceMemory held */
	struct gpu_block *blocks;
	/* Blocks whose tensors were all freed (dedicated or shared), kept for
	 * a moment: a request that replaces a big tensor (op.run with `out`, a
	 * graph's big intermediates, a training step) frees some and allocates
	 * the same sizes again, and vkAllocateMemory of a few hundred MiB costs
	 * milliseconds. gpu_memory_trim releases them. */
	struct gpu_block *spare[GPU_SPARE_BLOCKS];
	struct gpu_block *retired; /* emptied while a runaway submission ran (device.h) */
	int64_t spare_since_ns[GPU_SPARE_BLOCKS];
	/* Small host buffers given back (gpu_host_buffer_put), kept for the
	 * next gpu_host_buffer_get. */
	struct gpu_host_buffer_slot {
		VkBuffer buffer;
		VkDeviceMemory memory;
		void *map;
		uint64_t size;
	} host_spare[GPU_SPARE_BLOCKS];
	unsigned nhost_spare;
	struct gpu_host_lease *leases; /* held host buffers (gpu_host_lease_new) */
	/* staging buffer for devices whose tensor memory the host cannot map */
	VkBuffer staging_buffer;
	VkDeviceMemory staging_memory;
	void *staging_map;
	uint64_t staging_size;
};

/* Choose memory types and sizes for `g` (called by gpu_device_open).
 * `host_mapped` allows mapping tensor memory directly; `block_size` 0 picks a
 * default; `max_bytes` caps the device memory taken (0: the whole heap).
 * Returns 0 or -ENODEV when the device has no suitable memory. */
int gpu_memory_init(struct gpu_device *g, bool host_mapped, uint64_t block_size, uint64_t max_bytes);

/* Release the spare dedicated blocks parked since before `older_than_ns`
 * (CLOCK_MONOTONIC; INT64_MAX releases them all). */
void gpu_memory_trim(struct gpu_device *g, int64_t older_than_ns);

/* Release every block and the staging buffer. */
void gpu_memory_fini(struct gpu_device *g);

/* Allocate `size` bytes of tensor memory. Returns 0, -EFBIG when `size` is over
 * the device's largest allocation or the memory limit (it could never fit),
 * or -ENOMEM when device memory runs out (the limit, the heap, or the
 * driver's budget under VK_EXT_memory_budget). */
int gpu_memory_alloc(struct gpu_device *g, uint64_t size, struct gpu_alloc *ret);

/* Free what gpu_memory_alloc gave; a zero-size or already freed alloc is ignored. */
void gpu_memory_free(struct gpu_device *g, struct gpu_alloc *a);

/* gpu_memory_free for memory that the caller knows no submission still uses
 * (its own work waited for, and no one else's ever bound it): freed at once,
 * not after the device's watched work, so that an emptied block is a spare
 * for the next allocation of its size right away. */
void gpu_memory_free_unused(struct gpu_device *g, struct gpu_alloc *a);

/* Get the staging buffer, creating it on first use. Returns 0 or -ENOMEM. */
int gpu_memory_staging(struct gpu_device *g);

/* A host-visible, mapped buffer the device copies to and from inside its own
 * submissions (data-parallel training's gradient exchange). */
struct gpu_host_buffer {
	VkBuffer buffer;
	VkDeviceMemory memory;
	void *map;
	uint64_t size;
};

/* Create `ret` with `size` bytes in the staging memory type. Returns 0 or
 * -errno (-ENOMEM). */
int gpu_host_buffer_create(struct gpu_device *g, uint64_t size, struct gpu_host_buffer *ret);

/* Release `b` (zeroed); an empty one is accepted. */
void gpu_host_buffer_free(struct gpu_device *g, struct gpu_host_buffer *b);

/* A host buffer of at least `size` bytes (a small one given back before
 * when one is big enough, else gpu_host_buffer_create with the size rounded
 * up to 4 KiB), for a request's copies in its own submission (train.step's
 * loss and outputs). Returns 0 or -errno (-ENOMEM). */
int gpu_host_buffer_get(struct gpu_device *g, uint64_t size, struct gpu_host_buffer *ret);

/* Give `b` back (zeroed) once no submission uses it: kept for the next
 * gpu_host_buffer_get when it is small (at most 1 MiB) and room is left,
 * else released. An empty one is accepted. */
void gpu_host_buffer_put(struct gpu_device *g, struct gpu_host_buffer *b);

/* A host buffer whose holder may outlive the device: a streamed
 * tensor.get's chunks (methods/tensor_stream.c). gpu_memory_fini releases
 * those still held, as it releases the blocks their snapshot lies in, so a
 * holder that finds its device re-created after a loss drops the pointer
 * instead of freeing it. */
struct gpu_host_lease {
	struct gpu_host_buffer b;
	struct gpu_host_lease *next, **prev;
};

/* A lease of `size` bytes (gpu_host_buffer_create). Returns 0 with *ret set,
 * or -errno (-ENOMEM). */
int gpu_host_lease_new(struct gpu_device *g, uint64_t size, struct gpu_host_lease **ret);

/* Release lease `l` of `g` (NULL is accepted) once no submission writes
 * into it any more. */
void gpu_host_lease_free(struct gpu_device *g, struct gpu_host_lease *l);

/* The largest single allocation gpu_memory_alloc could ever grant. */
static inline uint64_t gpu_memory_largest(const struct gpu_memory *m)
{
	return m->max_allocation < m->limit ? m->max_allocation : m->limit;
}
