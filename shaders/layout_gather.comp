#version 450
#extension GL_GOOGLE_include_directive : require
// gather / index_select: x viewed as [outer, axis_n, inner], i32 indices
// (any shape, flattened to nidx), result [outer, nidx, inner]. An index in
// [-axis_n, 0) counts from the end; any other index outside [0, axis_n)
// yields zeros. Mirrors struct lk_gather_push in daemon/ops/layout.c.
#include "layout.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { RAW x[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) writeonly buffer O { RAW o[]; };
layout(push_constant) uniform P {
	uint n;      // result elements
	uint inner;
	uint nidx;
	uint axis_n;
} pc;

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n)
		return;
	uint k = i % pc.inner;
	uint t = i / pc.inner;
	uint j = t % pc.nidx;
	uint outer = t / pc.nidx;
	int v = idx[j];
	if (v < 0)
		v += int(pc.axis_n);
	if (v < 0 || uint(v) >= pc.axis_n)
		o[i] = RAW(0u);
	else
		o[i] = x[(outer * pc.axis_n + uint(v)) * pc.inner + k];
}
