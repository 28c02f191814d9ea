/* tensorctl helpers: half floats, strict number and shape parsing. */
#include "errorf.h"
#include "values.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

uint16_t ctl_f32_to_f16(float f)
{
	uint32_t x, sign, exp, mant, h, rem;
	int e;

	memcpy(&x, &f, sizeof(x));
	sign = (x >> 16) & 0x8000;
	exp = (x >> 23) & 0xff;
	mant = x & 0x7fffff;
	if (exp == 0xff) /* inf, or NaN made quiet so it cannot turn into inf */
		return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 | (mant >> 13) : 0));
	e = (int)exp - 127 + 15;
	if (e >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (e <= 0) {
		/* A subnormal half: m × 2^-24, from the 24-bit significand. */
		uint32_t m, shift, half;

		if (e < -10)
			return (uint16_t)sign;
		mant |= 0x800000;
		shift = (uint32_t)(14 - e);
		m = mant >> shift;
		rem = mant & ((1u << shift) - 1);
		half = 1u << (shift - 1);
		if (rem > half || (rem == half && (m & 1)))
			m++; /* may carry into the smallest normal: still right */
		return (uint16_t)(sign | m);
	}
	h = ((uint32_t)e << 10) | (mant >> 13);
	rem = mant & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
		h++; /* a carry into the exponent is right, up to inf */
	return (uint16_t)(sign | h);
}

float ctl_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	uint32_t x;
	float f;

	if (exp == 0x1f) {
		x = sign | 0x7f800000 | (mant << 13);
	} else if (exp == 0) {
		f = ldexpf((float)mant, -24);
		return sign ? -f : f;
	} else {
		x = sign | ((exp + 112) << 23) | (mant << 13);
	}
	memcpy(&f, &x, sizeof(f));
	return f;
}

uint16_t ctl_f32_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof(x));
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 0x40);
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

float ctl_bf16_to_f32(uint16_t h)
{
	uint32_t x = (uint32_t)h << 16;
	float f;

	memcpy(&f, &x, sizeof(f));
	return f;
}

double ctl_elem_double(int dtype, const void *data, size_t i)
{
	const uint8_t *p = data;
	uint16_t h;
	int32_t v;
	float f;

	switch (dtype) {
	case TDP_DTYPE_F32:
		memcpy(&f, p + 4 * i, 4);
		return f;
	case TDP_DTYPE_F16:
		memcpy(&h, p + 2 * i, 2);
		return ctl_f16_to_f32(h);
	case TDP_DTYPE_BF16:
		memcpy(&h, p + 2 * i, 2);
		return ctl_bf16_to_f32(h);
	case TDP_DTYPE_I32:
		memcpy(&v, p + 4 * i, 4);
		return v;
	case TDP_DTYPE_U8:
		return p[i];
	default:
		return NAN;
	}
}

/* double → float rounding to nearest even, ±inf past the largest float (a plain
 * cast of an out-of-range value is undefined). */
static float to_float(double v)
{
	if (isfinite(v) && fabs(v) >= 0x1.ffffffp127)
		return v < 0 ? -INFINITY : INFINITY;
	return (float)v;
}

void ctl_elem_store(int dtype, void *data, size_t i, double v)
{
	uint8_t *p = data;
	uint16_t h;
	int32_t iv;
	float f;

	switch (dtype) {
	case TDP_DTYPE_F32:
		f = to_float(v);
		memcpy(p + 4 * i, &f, 4);
		break;
	case TDP_DTYPE_F16:
		h = ctl_f32_to_f16(to_float(v));
		memcpy(p + 2 * i, &h, 2);
		break;
	case TDP_DTYPE_BF16:
		h = ctl_f32_to_bf16(to_float(v));
		memcpy(p + 2 * i, &h, 2);
		break;
	case TDP_DTYPE_I32:
		iv = (int32_t)v;
		memcpy(p + 4 * i, &iv, 4);
		break;
	case TDP_DTYPE_U8:
		p[i] = (uint8_t)v;
		break;
	default:
		break;
	}
}

static bool blank(char c)
{
	return c == ' ' || c == '\t';
}

/* The next comma-separated token of [*pos, end) with blanks trimmed. */
static void next_token(const char **pos, const char *end, const char **ret_b, const char **ret_e)
{
	const char *b = *pos, *e;

	e = memchr(b, ',', (size_t)(end - b));
	*pos = e ? e + 1 : end;
	if (!e)
		e = end;
	while (b < e && blank(*b))
		b++;
	while (e > b && blank(e[-1]))
		e--;
	*ret_b = b;
	*ret_e = e;
}

/* A decimal integer [+-]?[0-9]+ with magnitude below 2^62; -EINVAL otherwise. */
static int parse_int(const char *b, const char *e, int64_t *ret)
{
	bool neg = false;
	int64_t v = 0;

	if (b < e && (*b == '+' || *b == '-'))
		neg = *b++ == '-';
	if (b == e)
		return -EINVAL;
	for (; b < e; b++) {
		if (*b < '0' || *b > '9')
			return -EINVAL;
		if (v > (INT64_MAX / 2) / 10)
			return -ERANGE;
		v = v * 10 + (*b - '0');
	}
	*ret = neg ? -v : v;
	return 0;
}

int ctl_parse_shape(const char *s, uint64_t shape[TDP_MAX_RANK], uint32_t *ret_rank,
		    char *err, size_t err_len)
{
	const char *pos = s, *end = s + strlen(s), *b, *e;
	uint64_t dims[TDP_MAX_RANK];
	uint32_t rank = 1;
	int64_t v;

	while (pos < end && blank(*pos))
		pos++;
	if (pos == end || strcmp(pos, "scalar") == 0) {
		*ret_rank = 0;
		return 0;
	}
	for (const char *c = pos; c < end; c++)
		rank += *c == ',';
	if (rank > TDP_MAX_RANK)
		return tdp_errorf(err, err_len, -EINVAL, "shape has more than %d dimensions",
			    TDP_MAX_RANK);
	for (uint32_t i = 0; i < rank; i++) {
		next_token(&pos, end, &b, &e);
		if (parse_int(b, e, &v) < 0 || v < 0 || *b == '+')
			return tdp_errorf(err, err_len, -EINVAL,
				    "bad dimension '%.*s' in shape (want non-negative integers, "
				    "e.g. 2,3)", (int)(e - b > 32 ? 32 : e - b), b);
		dims[i] = (uint64_t)v;
	}
	memcpy(shape, dims, rank * sizeof(dims[0]));
	*ret_rank = rank;
	return 0;
}

static int parse_one(const char *b, const char *e, int dtype, void *data, size_t i,
		     char *err, size_t err_len)
{
	int w = (int)(e - b > 40 ? 40 : e - b);
	char tmp[512];
	int64_t iv;
	double v;
	char *endp;
	int r;

	if (b == e)
		return tdp_errorf(err, err_len, -EINVAL, "value %zu is empty", i + 1);
	if (dtype == TDP_DTYPE_I32 || dtype == TDP_DTYPE_U8) {
		int64_t lo = dtype == TDP_DTYPE_I32 ? INT32_MIN : 0;
		int64_t hi = dtype == TDP_DTYPE_I32 ? INT32_MAX : UINT8_MAX;

		r = parse_int(b, e, &iv);
		if (r == -EINVAL)
			return tdp_errorf(err, err_len, -EINVAL, "'%.*s' is not an integer (dtype %s)", w,
				    b, tdp_dtype_name(dtype));
		if (r < 0 || iv < lo || iv > hi)
			return tdp_errorf(err, err_len, -ERANGE, "%.*s is out of range for %s (%lld..%lld)",
				    w, b, tdp_dtype_name(dtype), (long long)lo, (long long)hi);
		ctl_elem_store(dtype, data, i, (double)iv);
		return 0;
	}
	/* strtod needs a terminated string; a number longer than tmp is no number. */
	if ((size_t)(e - b) >= sizeof(tmp))
		return tdp_errorf(err, err_len, -EINVAL, "'%.*s...' is not a number", w, b);
	memcpy(tmp, b, (size_t)(e - b));
	tmp[e - b] = '\0';
	errno = 0;
	if (dtype == TDP_DTYPE_F32) {
		float f = strtof(tmp, &endp);

		v = f;
	} else {
		v = strtod(tmp, &endp);
	}
	if (endp == tmp || *endp != '\0' || blank(tmp[0]))
		return tdp_errorf(err, err_len, -EINVAL, "'%.*s' is not a number", w, b);
	if ((errno == ERANGE && isinf(v)) || (isfinite(v) && fabs(v) > FLT_MAX))
		return tdp_errorf(err, err_len, -ERANGE, "%.*s is out of range for %s", w, b,
			    tdp_dtype_name(dtype));
	ctl_elem_store(dtype, data, i, v);
	if (isfinite(v) && !isfinite(ctl_elem_double(dtype, data, i)))
		return tdp_errorf(err, err_len, -ERANGE, "%.*s is out of range for %s (max %g)", w, b,
			    tdp_dtype_name(dtype), dtype == TDP_DTYPE_F16 ? 65504.0 : 3.3895314e38);
	return 0;
}

int ctl_parse_values(const char *s, int dtype, void **ret_data, size_t *ret_count, char *err,
		     size_t err_len)
{
	const char *pos = s, *end = s + strlen(s), *b, *e;
	size_t size = tdp_dtype_size(dtype), count = 1, i = 0;
	uint8_t *data;
	int r;

	if (size == 0)
		return tdp_errorf(err, err_len, -EINVAL, "unknown dtype");
	while (pos < end && blank(*pos))
		pos++;
	if (pos == end) {
		*ret_data = NULL;
		*ret_count = 0;
		return 0;
	}
	for (const char *c = pos; c < end; c++)
		count += *c == ',';
	data = calloc(count, size);
	if (!data)
		return tdp_errorf(err, err_len, -ENOMEM, "out of memory for %zu values", count);
	for (i = 0; i < count; i++) {
		next_token(&pos, end, &b, &e);
		if ((r = parse_one(b, e, dtype, data, i, err, err_len)) < 0)
			goto fail;
	}
	*ret_data = data;
	*ret_count = count;
	return 0;

fail:
	free(data);
	return r;
}
