#version 450
#extension GL_GOOGLE_include_directive : require
// The strided copy behind transpose, permute, reshape, slice, concat, stack
// and pad: walk an index space of up to 8 dims and copy element
// src[sbase + sum(c * sstride)] to dst[dbase + sum(c * dstride)].
// Mirrors struct lk_copy_push in daemon/ops/layout_kernels.c.
#include "layout.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { RAW a[]; };
layout(std430, binding = 1) writeonly buffer O { RAW o[]; };
layout(push_constant) uniform P {
	uint n;          // elements of the index space
	uint rank;
	uint sbase;      // element offsets
	uint dbase;
	uint shape[8];
	uint sstride[8]; // element strides
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
