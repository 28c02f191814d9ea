#version 450
#extension GL_GOOGLE_include_directive : require
// An autocast product's f32 operands rounded to bf16 (nearest even, a NaN
// kept quiet: common.glsl's bf16_from_float), four per invocation: variant
// "f32_bf16" (-DOUT_BF16) stores the bf16 bits, two to a uint, for the
// tensor cores; "f32_bf16_f32" (-DOUT_F32) widens them back to f32 for the
// scalar kernels (daemon/ops/matmul.c, mm_round_operand). The same bits as
// cast.comp's f32_bf16 and f32_bf16_f32, in whole 16-byte loads and 8- or
// 16-byte stores; for element counts that are a multiple of 4.
#include "common.glsl"
layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer A { uvec4 a[]; };
#if defined(OUT_BF16)
layout(std430, binding = 1) writeonly buffer O { uvec2 o[]; };
#elif defined(OUT_F32)
layout(std430, binding = 1) writeonly buffer O { uvec4 o[]; };
#else
#error "build with OUT_BF16 or OUT_F32"
#endif
layout(push_constant) uniform P { uint n4; } pc;   // elements / 4

uint bits(uint f)
{
	return uint(bf16_from_float(uintBitsToFloat(f)));
}

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n4)
		return;
	uvec4 v = a[i];
#if defined(OUT_BF16)
	o[i] = uvec2(bits(v.x) | (bits(v.y) << 16), bits(v.z) | (bits(v.w) << 16));
#else
	o[i] = uvec4(bits(v.x) << 16, bits(v.y) << 16, bits(v.z) << 16, bits(v.w) << 16);
#endif
}
