#version 450
#extension GL_GOOGLE_include_directive : require
// An autocast product's f32 operands rounded to IEEE binary16 (nearest even,
// overflow to inf, subnormals kept: layout.glsl's f16_bits_from_float), four
// per invocation, for precision "f16": variant "f32_f16" (-DOUT_F16) stores
// the f16 bits, two to a uint, for the tensor cores; "f32_f16_f32"
// (-DOUT_F32) widens them back to f32 for the scalar kernels
// (daemon/ops/matmul.c, mm_round_operand). The same bits as cast.comp's
// f32_f16 and f32_f16_f32 (cast_bf16_vec4.comp's twin), in whole 16-byte
// loads and 8- or 16-byte stores; for element counts that are a multiple
// of 4. Built with -DDT_F32 (layout.glsl's RAW is unused).
#include "layout.glsl"
layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer A { uvec4 a[]; };
#if defined(OUT_F16)
layout(std430, binding = 1) writeonly buffer O { uvec2 o[]; };
#elif defined(OUT_F32)
layout(std430, binding = 1) writeonly buffer O { uvec4 o[]; };
#else
#error "build with OUT_F16 or OUT_F32"
#endif
layout(push_constant) uniform P { uint n4; } pc;   // elements / 4

uint bits(uint f)
{
	return f16_bits_from_float(uintBitsToFloat(f));
}

uint wide(uint f)
{
	return floatBitsToUint(float_from_f16_bits(bits(f)));
}

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n4)
		return;
	uvec4 v = a[i];
#if defined(OUT_F16)
	o[i] = uvec2(bits(v.x) | (bits(v.y) << 16), bits(v.z) | (bits(v.w) << 16));
#else
	o[i] = uvec4(wide(v.x), wide(v.y), wide(v.z), wide(v.w));
#endif
}
