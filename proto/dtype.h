/* Tensor element types as they appear on the wire ("f32", "f16", ...). */
#pragma once

#include <stddef.h>
#include <stdint.h>

enum tdp_dtype {
	TDP_DTYPE_F32 = 0,
	TDP_DTYPE_F16 = 1,
	TDP_DTYPE_BF16 = 2,
	TDP_DTYPE_I32 = 3,
	TDP_DTYPE_U8 = 4,
	TDP_DTYPE_COUNT
};

/* The wire name of `dtype`, or NULL when it is out of range. */
const char *tdp_dtype_name(int dtype);

/* Bytes per element of `dtype` (0 when it is out of range). */
size_t tdp_dtype_size(int dtype);

/* Parse a wire name of length `len`; returns the dtype or -EINVAL. */
int tdp_dtype_parse(const char *name, size_t len);

/* Element count of a shape: 1 for rank 0. Returns -EOVERFLOW when the count or
 * its size in bytes for an element of `elem_size` overflows 64 bits; otherwise
 * writes the count to *ret_count and returns 0. */
int tdp_shape_count(const uint64_t *shape, unsigned rank, size_t elem_size,
		    uint64_t *ret_count);
