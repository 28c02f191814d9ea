#version 450
#extension GL_GOOGLE_include_directive : require
// cast: built once per (source, result) dtype pair with -DSRC_<S> -DDT_<R>
// (variant "s_r"). Floats round to nearest even, float -> int truncates toward
// zero and saturates (NaN -> 0), int -> int saturates, int -> float goes
// through f32 (exact up to 2^24). Built once more with -DSRC_F32 -DDT_F32
// -DROUND_BF16 as variant "f32_bf16_f32": f32 rounded to bf16 (nearest even)
// and widened back, the operands of an autocast product on the scalar
// kernels (daemon/ops/matmul.c); and with -DROUND_F16 as "f32_f16_f32", the
// same through IEEE binary16 (nearest even, overflow to inf, subnormals
// kept), for precision "f16".
#include "layout.glsl"
layout(local_size_x = 256) in;

#if defined(SRC_F32) || defined(SRC_I32)
#define SRAW uint
#elif defined(SRC_F16) || defined(SRC_BF16)
#define SRAW uint16_t
#elif defined(SRC_U8)
#define SRAW uint8_t
#else
#error "build with one of SRC_F32 SRC_F16 SRC_BF16 SRC_I32 SRC_U8"
#endif

layout(std430, binding = 0) readonly buffer A { SRAW a[]; };
layout(std430, binding = 1) writeonly buffer O { RAW o[]; };
layout(push_constant) uniform P { uint n; } pc;

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n)
		return;
#if defined(ROUND_BF16)
	o[i] = raw_from_float(uintBitsToFloat(uint(bf16_from_float(uintBitsToFloat(a[i]))) << 16));
#elif defined(ROUND_F16)
	o[i] = raw_from_float(float_from_f16_bits(f16_bits_from_float(uintBitsToFloat(a[i]))));
#elif defined(SRC_F32)
	o[i] = raw_from_float(uintBitsToFloat(a[i]));
#elif defined(SRC_F16)
	o[i] = raw_from_float(float_from_f16_bits(uint(a[i])));
#elif defined(SRC_BF16)
	o[i] = raw_from_float(uintBitsToFloat(uint(a[i]) << 16));
#elif defined(SRC_I32)
	o[i] = raw_from_int(int(a[i]));
#else
	o[i] = raw_from_int(int(uint(a[i])));
#endif
}
