#version 450
#extension GL_GOOGLE_include_directive : require
// An autocast product's f32 operand rounded to bf16 ("f32_bf16", -DOUT_BF16)
// or f16 ("f32_f16", -DOUT_F16) for the tensor cores into a larger matrix
// padded with zeros: the operand as stored, `rows` x `cols`, becomes
// `rows_p` x `cols_p` (cols_p even), element (r, c) where r < rows and
// c < cols, zero elsewhere. The tensor-core tiles need M a multiple of 128
// and K of 32; zeros past K add nothing and rows past M are not stored
// (daemon/ops/matmul.c, mm_cm_padded). The same roundings, so the same
// bits, as cast_bf16_vec4.comp and cast_f16_vec4.comp. One invocation per
// two output elements (one uint). Built with -DDT_F32 (layout.glsl's RAW is
// unused).
#include "layout.glsl"
layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
layout(push_constant) uniform P {
	uint rows, cols;        // the operand as stored
	uint cols_p, pairs;     // the padded row, and rows_p * cols_p / 2
} pc;

uint bits(uint r, uint c)
{
	float v = r < pc.rows && c < pc.cols ? a[r * pc.cols + c] : 0.0;
#if defined(OUT_BF16)
	return uint(bf16_from_float(v));
#elif defined(OUT_F16)
	return f16_bits_from_float(v);
#else
#error "build with OUT_BF16 or OUT_F16"
#endif
}

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.pairs)
		return;
	uint r = (2u * i) / pc.cols_p, c = (2u * i) % pc.cols_p;
	o[i] = bits(r, c) | (bits(r, c + 1u) << 16);
}
