#version 450
#extension GL_GOOGLE_include_directive : require
// out = cond ? a : b, with a and b broadcast to the output; cond (u8) is laid
// out like the output (the op broadcasts it first when it is not).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer C { uint8_t c[]; };
layout(std430, binding = 1) readonly buffer A { ELEM a[]; };
layout(std430, binding = 2) readonly buffer B { ELEM b[]; };
layout(std430, binding = 3) writeonly buffer O { ELEM o[]; };
#include "elementwise.glsl"

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n)
		return;
	uint ai, bi;
	ew_offsets(i, ai, bi);
	o[i] = c[i] != uint8_t(0) ? a[ai] : b[bi];
}
