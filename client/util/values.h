/* tensorctl helpers: half-precision conversions, strict parsing of
 * `--values` and `--shape`, and reading elements back as doubles. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "wire_limits.h"

/* float → IEEE binary16, round to nearest even; overflow gives ±inf, NaN stays
 * a quiet NaN with its sign. */
uint16_t ctl_f32_to_f16(float f);

/* IEEE binary16 → float (exact). */
float ctl_f16_to_f32(uint16_t h);

/* float → bfloat16, round to nearest even; NaN stays a quiet NaN. */
uint16_t ctl_f32_to_bf16(float f);

/* bfloat16 → float (exact). */
float ctl_bf16_to_f32(uint16_t h);

/* Element `i` of `data` (elements of wire dtype `dtype`) as a double. */
double ctl_elem_double(int dtype, const void *data, size_t i);

/* Store `v` as element `i` of `data`, rounding to nearest even for the float
 * dtypes; integer dtypes take v as it is (the caller range-checks). */
void ctl_elem_store(int dtype, void *data, size_t i, double v);

/* Parse a shape: comma-separated non-negative integers ("2,3"); "" and
 * "scalar" mean rank 0. Returns 0, or -EINVAL with a message in `err`. */
int ctl_parse_shape(const char *s, uint64_t shape[TDP_MAX_RANK], uint32_t *ret_rank,
		    char *err, size_t err_len);

/* Parse comma-separated numbers (blanks around each allowed; "" is none) into
 * a malloc'd array of `dtype` elements. Integers must be decimal and in range
 * for i32/u8; floats may be nan/inf but finite values must not overflow the
 * dtype. Returns 0 with *ret_data (NULL when empty) and *ret_count, -EINVAL or
 * -ERANGE with a message in `err`, or -ENOMEM. */
int ctl_parse_values(const char *s, int dtype, void **ret_data, size_t *ret_count,
		     char *err, size_t err_len);
