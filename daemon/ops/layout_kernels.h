/* Kernels the layout and creation families share: the strided copy
 * (shaders/layout_strided.comp), the fill (shaders/create_fill.comp), the
 * conversion of a number into a dtype's bits, and attribute helpers. */
#pragma once

#include <stdint.h>

#include "ops/op.h"

/* One strided copy: for every index c of `shape` (rank dims),
 * dst[dbase + sum(c * dstride)] = src[sbase + sum(c * sstride)], in elements. */
struct layout_copy {
	unsigned rank;
	uint64_t shape[TDP_MAX_RANK];
	uint64_t sstride[TDP_MAX_RANK];
	uint64_t dstride[TDP_MAX_RANK];
	uint64_t sbase, dbase;
};

/* C-contiguous element strides of `t` into `st` (rank entries). */
void layout_strides(const struct op_tensor *t, uint64_t *st);

/* Record the copy `c` from `src` into `dst` (same element size). Dimensions
 * are coalesced first; an empty index space records nothing. Returns 0 or
 * op_fail(). */
int layout_copy_record(struct op_ctx *ctx, struct gpu_recorder *rec, const struct op_tensor *src,
		       const struct op_tensor *dst, const struct layout_copy *c);

/* Record filling all of `dst` with the raw element bits `bits`. Returns 0 or
 * op_fail(). */
int layout_fill_record(struct op_ctx *ctx, struct gpu_recorder *rec, const struct op_tensor *dst,
		       uint32_t bits);

/* The bits of `v` stored as `dtype`: floats go through f32 and round to
 * nearest even; integers truncate toward zero and saturate (NaN gives 0). */
uint32_t layout_value_bits(int dtype, double v);

/* Attribute `name` (ATTR_STR) as a dtype, `def` when unset. Returns 0 or
 * op_fail(INVALID_ARGUMENT) for an unknown name. */
int layout_dtype_attr(struct op_ctx *ctx, const char *name, int def, int *ret);

/* Attribute `name` (ATTR_INTS) as the shape of ctx->out: every entry >= 0.
 * Returns 0 or op_fail(INVALID_ARGUMENT). */
int layout_shape_attr(struct op_ctx *ctx, const char *name);

/* Fails with RESOURCE_EXHAUSTED when `n` does not fit the shaders' 32-bit
 * indices. Returns 0 or op_fail(). */
int layout_check_u32(struct op_ctx *ctx, uint64_t n, const char *what);
