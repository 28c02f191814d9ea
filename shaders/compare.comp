#version 450
#extension GL_GOOGLE_include_directive : require
// Elementwise comparison with NumPy broadcasting; the result is u8 (0 or 1).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
layout(std430, binding = 1) readonly buffer B { ELEM b[]; };
layout(std430, binding = 2) writeonly buffer O { uint8_t o[]; };
#include "elementwise.glsl"

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n)
		return;
	uint ai, bi;
	ew_offsets(i, ai, bi);
	CT x = (pc.flags & EW_A_SCALAR) != 0u ? CT(pc.alpha) : LOAD(a[ai]);
	CT y = (pc.flags & EW_B_SCALAR) != 0u ? CT(pc.alpha) : LOAD(b[bi]);
	bool r;
	switch (pc.op) {
	case CMP_EQ: r = x == y; break;
	case CMP_NE: r = x != y; break;
	case CMP_LT: r = x < y; break;
	case CMP_LE: r = x <= y; break;
	case CMP_GT: r = x > y; break;
	default: r = x >= y; break;
	}
	o[i] = uint8_t(r ? 1u : 0u);
}
