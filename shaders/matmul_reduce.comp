#version 450
#extension GL_GOOGLE_include_directive : require
// The second half of a split-K matrix product: o[i] = sum over s of
// part[s * count + i], summed in s order (0 first), so a result is the same
// bit for bit on every run. The partial products are f32 (matmul.glsl,
// matmul_v4.comp with MM_PART); the sum is stored in the variant's dtype,
// through the product's epilogue (matmul_epi.glsl: bias and relu, or the mask).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer P { float part[]; };
layout(std430, binding = 1) writeonly buffer O { ELEM o[]; };

// Mirrors struct mm_reduce_push in daemon/ops/matmul.c.
layout(push_constant) uniform MmReducePush {
	uint count;   // elements of the result
	uint splits;
	uint n;       // columns of the result (the bias index is i % n)
	uint flags;   // MM_BIAS, MM_RELU, MM_MASK
} pc;

#define BIAS_BINDING 2
#include "matmul_epi.glsl"

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.count)
		return;
	float acc = part[i];
	for (uint s = 1u; s < pc.splits; s++)
		acc += part[s * pc.count + i];
	o[i] = STORE(mm_epilogue(acc, i % pc.n, i));
}
