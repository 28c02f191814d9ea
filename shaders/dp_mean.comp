#version 450
#extension GL_GOOGLE_include_directive : require
// dp_mean: out[i] = (((s0[i] + s1[i]) + s2[i]) + ...) / n over the n (1..7)
// gradient slots of data-parallel training's shared host buffer, in slot
// order, so every device computes the same bits (daemon/gpu/host_import.c).
// The device's own slot is bound to its gradient in device memory (the same
// numbers; it is read before o[i] is written, by the same invocation).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S0 { float s0[]; };
layout(std430, binding = 1) readonly buffer S1 { float s1[]; };
layout(std430, binding = 2) readonly buffer S2 { float s2[]; };
layout(std430, binding = 3) readonly buffer S3 { float s3[]; };
layout(std430, binding = 4) readonly buffer S4 { float s4[]; };
layout(std430, binding = 5) readonly buffer S5 { float s5[]; };
layout(std430, binding = 6) readonly buffer S6 { float s6[]; };
layout(std430, binding = 7) writeonly buffer O { float o[]; };
layout(push_constant) uniform P {
	uint count;
	uint n;
} pc;

void main()
{
	uint i = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x + gl_GlobalInvocationID.x;
	if (i >= pc.count)
		return;
	precise float s = s0[i];
	if (pc.n > 1u) s += s1[i];
	if (pc.n > 2u) s += s2[i];
	if (pc.n > 3u) s += s3[i];
	if (pc.n > 4u) s += s4[i];
	if (pc.n > 5u) s += s5[i];
	if (pc.n > 6u) s += s6[i];
	o[i] = s / float(pc.n);
}
