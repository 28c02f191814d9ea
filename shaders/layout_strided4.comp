#version 450
#extension GL_GOOGLE_include_directive : require
// layout_strided.comp four 32-bit elements at a time: the strided copy when
// the innermost dim is contiguous on both sides and every size, stride and
// offset the host passes is in whole vec4s (a permute that keeps the last
// dim: an attention head split [B, T, H, D] -> [B, H, T, D]). The push
// block is layout_strided.comp's, counted in vec4s.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { uvec4 a[]; };
layout(std430, binding = 1) writeonly buffer O { uvec4 o[]; };
layout(push_constant) uniform P {
	uint n;          // vec4s of the index space
	uint rank;
	uint sbase;      // vec4 offsets
	uint dbase;
	uint shape[8];   // the innermost in vec4s
	uint sstride[8]; // vec4 strides
	uint dstride[8];
} pc;

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n)
		return;
	uint s = pc.sbase, d = pc.dbase;
	for (int k = int(pc.rank) - 1; k >= 0; k--) {
		uint c = i % pc.shape[k];
		i /= pc.shape[k];
		s += c * pc.sstride[k];
		d += c * pc.dstride[k];
	}
	o[d] = a[s];
}
