/* A first-fit free-list allocator of offsets within one fixed-size range.
 *
 * It knows nothing of Vulkan: the memory layer uses one per VkDeviceMemory
 * block to place tensors inside it. Free ranges are kept sorted by offset and
 * merged with their neighbours on release, so a block that empties out is one
 * free range again. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct range_free {
	uint64_t offset;
	uint64_t size;
};

struct range_alloc {
	uint64_t size;         /* the whole range */
	uint64_t used;         /* bytes handed out */
	struct range_free *free;
	size_t nfree;
	size_t cap;
};

/* Start managing [0, size), all free. Returns 0 or -ENOMEM. */
int range_alloc_init(struct range_alloc *ra, uint64_t size);

/* Release the bookkeeping. */
void range_alloc_fini(struct range_alloc *ra);

/* Take `size` bytes (size > 0) at an offset that is a multiple of `align` (a
 * power of two). Returns 0 and the offset, -ENOSPC when no free range fits, or
 * -ENOMEM. */
int range_alloc_take(struct range_alloc *ra, uint64_t size, uint64_t align, uint64_t *ret_offset);

/* Give back [offset, offset + size), which must have come from range_alloc_take
 * with the same size. Returns 0, or -ENOMEM when the free list cannot grow (the
 * range is then lost until the block is freed, never handed out twice). */
int range_alloc_give(struct range_alloc *ra, uint64_t offset, uint64_t size);

/* Whether nothing is handed out. */
static inline bool range_alloc_empty(const struct range_alloc *ra)
{
	return ra->used == 0;
}
