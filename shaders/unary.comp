#version 450
#extension GL_GOOGLE_include_directive : require
// Elementwise unary functions; also the broadcasting copy (UN_COPY) that
// expands an operand to an output shape. alpha and beta carry attributes
// (clamp's min and max).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
layout(std430, binding = 1) writeonly buffer O { ELEM o[]; };
#include "elementwise.glsl"

#if IS_FLOAT
#include "ew_math.glsl"

float apply(uint op, float x)
{
	return ew_unary(op, x, pc.alpha, pc.beta);
}
#else
int apply(uint op, int x)
{
	switch (op) {
	case UN_NEG: return -x;
	case UN_ABS: return abs(x);
	case UN_RELU: return max(x, 0);
	case UN_CLAMP: return min(max(x, pc.alpha), pc.beta);
	default: return x;
	}
}
#endif

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n)
		return;
	uint ai, bi;
	ew_offsets(i, ai, bi);
	if (pc.op == UN_COPY)
		o[i] = a[ai];
	else
		o[i] = STORE(apply(pc.op, LOAD(a[ai])));
}
