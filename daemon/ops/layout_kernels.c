/* The strided copy and fill kernels shared by layout.c and create.c, and the
 * conversion of attribute numbers into a dtype's bits. */
#include "ops/layout_kernels.h"

#include <math.h>
#include <string.h>

#include "dtype.h"
#include "status.h"

/* Mirrors the push block of shaders/layout_strided.comp. */
struct layout_copy_push {
	uint32_t n, rank, sbase, dbase;
	uint32_t shape[8];
	uint32_t sstride[8];
	uint32_t dstride[8];
};
_Static_assert(sizeof(struct layout_copy_push) == 112, "layout_copy_push must mirror the shader");

/* Mirrors the push block of shaders/create_fill.comp. */
struct layout_fill_push {
	uint32_t n, bits;
};

void layout_strides(const struct op_tensor *t, uint64_t *st)
{
	uint64_t s = 1;

	for (int d = (int)t->rank - 1; d >= 0; d--) {
		st[d] = s;
		s *= t->shape[d];
	}
}

int layout_check_u32(struct op_ctx *ctx, uint64_t n, const char *what)
{
	if (n > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "%s %llu is more than the kernels index (2^32 - 1)",
			       what, (unsigned long long)n);
	return 0;
}

/* A copy of 32-bit elements whose innermost dim is contiguous on both sides
 * and whose sizes, strides and offsets are whole vec4s: `pc` rewritten in
 * vec4s for layout_strided4.comp (on the H100 an attention head permute,
 * [32, 128, 4, 64] -> [32, 4, 128, 64], took 10 us element by element). */
static bool copy_in_vec4s(struct layout_copy_push *pc, int dtype)
{
	unsigned in = pc->rank - 1;

	if (tdp_dtype_size(dtype) != 4 || pc->rank == 0 || pc->sstride[in] != 1 || pc->dstride[in] != 1 ||
	    pc->shape[in] % 4 || pc->sbase % 4 || pc->dbase % 4)
		return false;
	for (unsigned d = 0; d < in; d++)
		if (pc->sstride[d] % 4 || pc->dstride[d] % 4)
			return false;
	for (unsigned d = 0; d < in; d++) {
		pc->sstride[d] /= 4;
		pc->dstride[d] /= 4;
	}
	pc->shape[in] /= 4;
	pc->n /= 4;
	pc->sbase /= 4;
	pc->dbase /= 4;
	return true;
}

int layout_copy_record(struct op_ctx *ctx, struct gpu_recorder *rec, const struct op_tensor *src,
		       const struct op_tensor *dst, const struct layout_copy *c)
{
	struct layout_copy_push pc;
	const struct gpu_pipeline *p;
	struct gpu_binding bind[2];
	uint64_t n = 1, shape[TDP_MAX_RANK], ss[TDP_MAX_RANK], ds[TDP_MAX_RANK];
	unsigned rank = 0;

	for (unsigned d = 0; d < c->rank; d++)
		n *= c->shape[d];
	if (n == 0)
		return 0;
	/* Drop size-1 dims and merge a dim into the previous one when both
	 * sides are contiguous across the pair: fewer divisions per element. */
	for (unsigned d = 0; d < c->rank; d++) {
		if (c->shape[d] == 1)
			continue;
		if (rank > 0 && ss[rank - 1] == c->sstride[d] * c->shape[d] &&
		    ds[rank - 1] == c->dstride[d] * c->shape[d]) {
			shape[rank - 1] *= c->shape[d];
			ss[rank - 1] = c->sstride[d];
			ds[rank - 1] = c->dstride[d];
			continue;
		}
		shape[rank] = c->shape[d];
		ss[rank] = c->sstride[d];
		ds[rank] = c->dstride[d];
		rank++;
	}
	memset(&pc, 0, sizeof(pc));
	if (layout_check_u32(ctx, n, "an index space of") < 0 ||
	    layout_check_u32(ctx, c->sbase, "an offset of") < 0 ||
	    layout_check_u32(ctx, c->dbase, "an offset of") < 0)
		return -1;
	pc.n = (uint32_t)n;
	pc.rank = rank;
	pc.sbase = (uint32_t)c->sbase;
	pc.dbase = (uint32_t)c->dbase;
	for (unsigned d = 0; d < rank; d++) {
		if (layout_check_u32(ctx, ss[d], "a stride of") < 0 ||
		    layout_check_u32(ctx, ds[d], "a stride of") < 0)
			return -1;
		pc.shape[d] = (uint32_t)shape[d];
		pc.sstride[d] = (uint32_t)ss[d];
		pc.dstride[d] = (uint32_t)ds[d];
	}
	if (copy_in_vec4s(&pc, dst->dtype)) {
		if (op_pipeline(ctx, "layout_strided4", "f32", &p) < 0)
			return -1;
	} else if (op_pipeline(ctx, "layout_strided", tdp_dtype_name(dst->dtype), &p) < 0) {
		return -1;
	}
	if (op_bind(ctx, src, false, &bind[0]) < 0 || op_bind(ctx, dst, true, &bind[1]) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, bind, 2, &pc, sizeof(pc), pc.n, 256);
}

int layout_fill_record(struct op_ctx *ctx, struct gpu_recorder *rec, const struct op_tensor *dst,
		       uint32_t bits)
{
	struct layout_fill_push pc = { (uint32_t)dst->count, bits };
	const struct gpu_pipeline *p;
	struct gpu_binding bind;

	if (dst->count == 0)
		return 0;
	if (layout_check_u32(ctx, dst->count, "a result of") < 0 ||
	    op_pipeline(ctx, "create_fill", tdp_dtype_name(dst->dtype), &p) < 0 ||
	    op_bind(ctx, dst, true, &bind) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, &bind, 1, &pc, sizeof(pc), pc.n, 256);
}

/* f32 bits -> binary16 bits, nearest even (the same algorithm as
 * f16_bits_from_float in shaders/layout.glsl). */
static uint32_t f16_bits(uint32_t x)
{
	uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu, h, rem;

	if (ax > 0x7f800000u)
		return sign | 0x7e00u | ((ax >> 13) & 0x3ffu);
	if (ax >= 0x477ff000u)
		return sign | 0x7c00u;
	if (ax < 0x38800000u) {
		uint32_t m = (ax & 0x7fffffu) | 0x800000u, shift, half;

		if (ax <= 0x33000000u)
			return sign;
		shift = 126u - (ax >> 23);
		h = m >> shift;
		rem = m & ((1u << shift) - 1u);
		half = 1u << (shift - 1u);
		if (rem > half || (rem == half && (h & 1u)))
			h++;
		return sign | h;
	}
	h = (ax - 0x38000000u) >> 13;
	rem = ax & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
		h++;
	return sign | h;
}

uint32_t layout_value_bits(int dtype, double v)
{
	float f = (float)v;
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	switch (dtype) {
	case TDP_DTYPE_F32:
		return u;
	case TDP_DTYPE_F16:
		return f16_bits(u);
	case TDP_DTYPE_BF16:
		if (isnan(f))
			return (u >> 16) | 0x40u;
		return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	case TDP_DTYPE_I32:
		if (isnan(v))
			return 0;
		v = trunc(v);
		return (uint32_t)(v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v);
	default:
		if (isnan(v))
			return 0;
		v = trunc(v);
		return v <= 0 ? 0 : v >= 255 ? 255 : (uint32_t)v;
	}
}

int layout_dtype_attr(struct op_ctx *ctx, const char *name, int def, int *ret)
{
	const struct op_attr_value *a = op_attr(ctx, name);
	int dt;

	if (!a->set) {
		*ret = def;
		return 0;
	}
	dt = tdp_dtype_parse(a->s, strlen(a->s));
	if (dt < 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s': unknown dtype '%s' (f32 f16 bf16 i32 u8)",
			       name, a->s);
	*ret = dt;
	return 0;
}

int layout_shape_attr(struct op_ctx *ctx, const char *name)
{
	const struct op_attr_value *a = op_attr(ctx, name);

	ctx->out.rank = a->nints;
	for (unsigned d = 0; d < a->nints; d++) {
		if (a->ints[d] < 0)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "attr '%s'[%u] is %lld; dims must be >= 0",
				       name, d, (long long)a->ints[d]);
		ctx->out.shape[d] = (uint64_t)a->ints[d];
	}
	return 0;
}
