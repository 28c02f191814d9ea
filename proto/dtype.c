#include "dtype.h"

#include <errno.h>
#include <string.h>

static const struct {
	const char *name;
	size_t size;
} dtypes[TDP_DTYPE_COUNT] = {
	[TDP_DTYPE_F32] = { "f32", 4 },
	[TDP_DTYPE_F16] = { "f16", 2 },
	[TDP_DTYPE_BF16] = { "bf16", 2 },
	[TDP_DTYPE_I32] = { "i32", 4 },
	[TDP_DTYPE_U8] = { "u8", 1 },
};

const char *tdp_dtype_name(int dtype)
{
	if (dtype < 0 || dtype >= TDP_DTYPE_COUNT)
		return NULL;
	return dtypes[dtype].name;
}

size_t tdp_dtype_size(int dtype)
{
	if (dtype < 0 || dtype >= TDP_DTYPE_COUNT)
		return 0;
	return dtypes[dtype].size;
}

int tdp_dtype_parse(const char *name, size_t len)
{
	for (int i = 0; i < TDP_DTYPE_COUNT; i++)
		if (strlen(dtypes[i].name) == len && memcmp(dtypes[i].name, name, len) == 0)
			return i;
	return -EINVAL;
}

int tdp_shape_count(const uint64_t *shape, unsigned rank, size_t elem_size,
		    uint64_t *ret_count)
{
	uint64_t count = 1, bytes;

	for (unsigned i = 0; i < rank; i++)
		if (__builtin_mul_overflow(count, shape[i], &count))
			return -EOVERFLOW;
	if (__builtin_mul_overflow(count, (uint64_t)elem_size, &bytes))
		return -EOVERFLOW;
	*ret_count = count;
	return 0;
}
