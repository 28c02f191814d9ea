#version 450
#extension GL_GOOGLE_include_directive : require
// layout_gather.comp four 32-bit elements at a time, where the inner block
// is whole vec4s (a training batch's rows, [rows, 784] at 784 per row): the
// push block is layout_gather.comp's with n and inner counted in vec4s.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { uvec4 x[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) writeonly buffer O { uvec4 o[]; };
layout(push_constant) uniform P {
	uint n;      // result vec4s
	uint inner;  // vec4s
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
		o[i] = uvec4(0u);
	else
		o[i] = x[(outer * pc.axis_n + uint(v)) * pc.inner + k];
}
