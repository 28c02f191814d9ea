#version 450
#extension GL_GOOGLE_include_directive : require
// The epilogue of a 16-bit matrix product, applied in place after it
// (daemon/ops/matmul.c, mm_epilogue_after): the product was made by the very
// kernel the plain matmul node takes and stored rounded to the dtype, so the
// bias, relu or mask here give the unfused chain's bits (matmul -> add ->
// relu, matmul -> relu_grad) on every device and kernel (issue 29; in the
// 16-bit kernels' stores the epilogue made them many times slower:
// matmul_epi_store.glsl).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer O { ELEM o[]; };

// Mirrors struct mm_reduce_push in daemon/ops/matmul.c (splits unused).
layout(push_constant) uniform MmEpiPush {
	uint count;   // elements of the result
	uint splits;
	uint n;       // columns of the result (the bias index is i % n)
	uint flags;   // MM_BIAS, MM_RELU, MM_MASK
} pc;

#define BIAS_BINDING 1
#include "matmul_epi.glsl"

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.count)
		return;
	o[i] = STORE(mm_epilogue(LOAD(o[i]), i % pc.n, i));
}
