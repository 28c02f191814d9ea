#version 450
#extension GL_GOOGLE_include_directive : require
// 2-D max and average pooling, NCHW, with stride and padding. One invocation
// per output element. Max propagates NaN; average divides by the number of
// window elements inside the input (padding is not counted, like PyTorch's
// count_include_pad=False).
#include "common.glsl"
#include "conv_codes.h"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) writeonly buffer O { ELEM o[]; };

// Mirrors struct pool_push in daemon/ops/conv.c.
layout(push_constant) uniform PoolPush {
	uint total;        // output elements
	uint h, w;         // input size
	uint oh, ow;       // output size
	uint kh, kw;
	uint sh, sw;
	uint ph, pw;
	uint op;           // POOL_*
} pc;

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.total)
		return;
	uint ox = i % pc.ow;
	uint t = i / pc.ow;
	uint oy = t % pc.oh;
	uint plane = t / pc.oh;         // n * C + c
	int iy0 = int(oy * pc.sh) - int(pc.ph);
	int ix0 = int(ox * pc.sw) - int(pc.pw);
	// Clip the window to the input; the C side guarantees it is not empty.
	uint y0 = uint(max(iy0, 0)), y1 = uint(min(iy0 + int(pc.kh), int(pc.h)));
	uint x0 = uint(max(ix0, 0)), x1 = uint(min(ix0 + int(pc.kw), int(pc.w)));
	float acc = pc.op == POOL_MAX ? uintBitsToFloat(0xff800000u) : 0.0;  // -inf
	bool nan = false;
	for (uint y = y0; y < y1; y++) {
		uint row = (plane * pc.h + y) * pc.w;
		for (uint xx = x0; xx < x1; xx++) {
			float v = float(LOAD(x[row + xx]));
			if (pc.op == POOL_MAX) {
				nan = nan || isnan(v);
				acc = max(acc, v);
			} else {
				acc += v;
			}
		}
	}
	if (pc.op == POOL_MAX) {
		if (nan)
			acc = uintBitsToFloat(0x7fc00000u);
	} else {
		acc /= float((y1 - y0) * (x1 - x0));
	}
	o[i] = STORE(acc);
}
