#version 450
#extension GL_GOOGLE_include_directive : require
// one_hot: i32 indices -> [..., num_classes] of 0 and 1 (raw bits of one
// given by the daemon); an index outside [0, num_classes) gives a zero row.
#include "layout.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer I { int idx[]; };
layout(std430, binding = 1) writeonly buffer O { RAW o[]; };
layout(push_constant) uniform P {
	uint n;
	uint classes;
	uint one;
} pc;

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n)
		return;
	int v = idx[i / pc.classes];
	o[i] = (v >= 0 && uint(v) == i % pc.classes) ? RAW(pc.one) : RAW(0u);
}
