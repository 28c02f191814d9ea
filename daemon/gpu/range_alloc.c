#include "gpu/range_alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int range_alloc_init(struct range_alloc *ra, uint64_t size)
{
	memset(ra, 0, sizeof(*ra));
	ra->free = malloc(4 * sizeof(*ra->free));
	if (!ra->free)
		return -ENOMEM;
	ra->cap = 4;
	ra->size = size;
	if (size > 0) {
		ra->free[0] = (struct range_free){ 0, size };
		ra->nfree = 1;
	}
	return 0;
}

void range_alloc_fini(struct range_alloc *ra)
{
	free(ra->free);
	memset(ra, 0, sizeof(*ra));
}

static int insert_at(struct range_alloc *ra, size_t i, struct range_free r)
{
	if (ra->nfree == ra->cap) {
		struct range_free *p = realloc(ra->free, 2 * ra->cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		ra->free = p;
		ra->cap *= 2;
	}
	memmove(&ra->free[i + 1], &ra->free[i], (ra->nfree - i) * sizeof(*ra->free));
	ra->free[i] = r;
	ra->nfree++;
	return 0;
}

static void remove_at(struct range_alloc *ra, size_t i)
{
	memmove(&ra->free[i], &ra->free[i + 1], (ra->nfree - i - 1) * sizeof(*ra->free));
	ra->nfree--;
}

int range_alloc_take(struct range_alloc *ra, uint64_t size, uint64_t align, uint64_t *ret_offset)
{
	for (size_t i = 0; i < ra->nfree; i++) {
		struct range_free f = ra->free[i];
		uint64_t start = (f.offset + align - 1) & ~(align - 1);
		uint64_t pad = start - f.offset;

		if (pad > f.size || f.size - pad < size)
			continue;
		/* Split into [f.offset, start) and [start + size, end) as needed. */
		uint64_t tail = f.size - pad - size;

		if (pad > 0 && tail > 0) {
			if (insert_at(ra, i + 1, (struct range_free){ start + size, tail }) < 0)
				return -ENOMEM;
			ra->free[i].size = pad;
		} else if (pad > 0) {
			ra->free[i].size = pad;
		} else if (tail > 0) {
			ra->free[i] = (struct range_free){ start + size, tail };
		} else {
			remove_at(ra, i);
		}
		ra->used += size;
		*ret_offset = start;
		return 0;
	}
	return -ENOSPC;
}

int range_alloc_give(struct range_alloc *ra, uint64_t offset, uint64_t size)
{
	size_t i = 0;
	bool merge_prev, merge_next;

	while (i < ra->nfree && ra->free[i].offset < offset)
		i++;
	merge_prev = i > 0 && ra->free[i - 1].offset + ra->free[i - 1].size == offset;
	merge_next = i < ra->nfree && offset + size == ra->free[i].offset;
	if (merge_prev && merge_next) {
		ra->free[i - 1].size += size + ra->free[i].size;
		remove_at(ra, i);
	} else if (merge_prev) {
		ra->free[i - 1].size += size;
	} else if (merge_next) {
		ra->free[i].offset = offset;
		ra->free[i].size += size;
	} else if (insert_at(ra, i, (struct range_free){ offset, size }) < 0) {
		ra->used -= size;
		return -ENOMEM;
	}
	ra->used -= size;
	return 0;
}
