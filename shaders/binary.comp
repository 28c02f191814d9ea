#version 450
#extension GL_GOOGLE_include_directive : require
// Elementwise binary arithmetic with NumPy broadcasting: out = a OP b.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
layout(std430, binding = 1) readonly buffer B { ELEM b[]; };
layout(std430, binding = 2) writeonly buffer O { ELEM o[]; };
#include "elementwise.glsl"

#if IS_FLOAT
#include "ew_math.glsl"

float apply(uint op, float x, float y)
{
	return ew_binary(op, x, y);
}
#else
int apply(uint op, int x, int y)
{
	switch (op) {
	case BIN_ADD: return x + y;
	case BIN_SUB: return x - y;
	case BIN_MUL: return x * y;
	case BIN_DIV: {
		// Floor division, as Python's //; division by zero gives 0.
		if (y == 0) return 0;
		int q = x / y;
		return (q * y != x && ((x < 0) != (y < 0))) ? q - 1 : q;
	}
	case BIN_POW: {
		if (y < 0) return (x == 1) ? 1 : (x == -1 ? ((y & 1) != 0 ? -1 : 1) : 0);
		int r = 1, base = x, e = y;
		while (e > 0) {
			if ((e & 1) != 0) r *= base;
			base *= base;
			e >>= 1;
		}
		return r;
	}
	case BIN_MAXIMUM: return max(x, y);
	case BIN_RELU_GRAD: return y > 0 ? x : 0;
	default: return min(x, y);
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
	CT x = (pc.flags & EW_A_SCALAR) != 0u ? CT(pc.alpha) : LOAD(a[ai]);
	CT y = (pc.flags & EW_B_SCALAR) != 0u ? CT(pc.alpha) : LOAD(b[bi]);
	o[i] = STORE(apply(pc.op, x, y));
}
