#version 450
#extension GL_GOOGLE_include_directive : require
// Fill a tensor with one value, given as the raw bits of the dtype (the
// daemon converts the number on the CPU). zeros, ones, full and pad's border.
#include "layout.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer O { RAW o[]; };
layout(push_constant) uniform P {
	uint n;
	uint bits;
} pc;

void main()
{
	uint i = linear_id(256u);
	if (i < pc.n)
		o[i] = RAW(pc.bits);
}
