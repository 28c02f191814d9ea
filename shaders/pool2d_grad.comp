#version 450
#extension GL_GOOGLE_include_directive : require
// Gradients of max_pool2d and avg_pool2d (NCHW, stride, padding), one
// invocation per INPUT element: it visits the windows that contain it (a
// fixed order, no atomics, deterministic) and adds
//   max: the window's gradient when it holds the window's first maximum in
//        row-major order (a NaN counts as the maximum, as in the forward);
//   avg: the window's gradient over the number of window elements inside the
//        input (count_include_pad=False, as the forward).
#include "common.glsl"
#include "conv_codes.h"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };   // max: the forward input
layout(std430, binding = 1) readonly buffer G { ELEM go[]; };  // grad_out
layout(std430, binding = 2) writeonly buffer O { ELEM o[]; };

// Mirrors struct poolg_push in daemon/ops/conv_grad.c.
layout(push_constant) uniform PoolGradPush {
	uint total;        // input elements
	uint h, w;         // input size
	uint oh, ow;       // output size
	uint kh, kw;
	uint sh, sw;
	uint ph, pw;
	uint op;           // POOL_*
} pc;

// The first output index whose window (starting at o * s - p, k long)
// reaches position `i`; the last is the last one starting at or before it.
uint first_window(uint i, uint k, uint s, uint p)
{
	int num = int(i) + int(p) - int(k) + 1;
	return num <= 0 ? 0u : (uint(num) + s - 1u) / s;
}

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.total)
		return;
	uint ix = i % pc.w;
	uint t = i / pc.w;
	uint iy = t % pc.h;
	uint plane = t / pc.h;          // n * C + c
	uint oy0 = first_window(iy, pc.kh, pc.sh, pc.ph);
	uint oy1 = min((iy + pc.ph) / pc.sh + 1u, pc.oh);
	uint ox0 = first_window(ix, pc.kw, pc.sw, pc.pw);
	uint ox1 = min((ix + pc.pw) / pc.sw + 1u, pc.ow);
	float acc = 0.0;
	for (uint oy = oy0; oy < oy1; oy++) {
		int wy = int(oy * pc.sh) - int(pc.ph);
		uint y0 = uint(max(wy, 0)), y1 = uint(min(wy + int(pc.kh), int(pc.h)));
		for (uint ox = ox0; ox < ox1; ox++) {
			int wx = int(ox * pc.sw) - int(pc.pw);
			uint x0 = uint(max(wx, 0)), x1 = uint(min(wx + int(pc.kw), int(pc.w)));
			float g = float(LOAD(go[(plane * pc.oh + oy) * pc.ow + ox]));
			if (pc.op == POOL_AVG) {
				acc += g / float((y1 - y0) * (x1 - x0));
				continue;
			}
			float best = uintBitsToFloat(0xff800000u);  // -inf
			uint by = y0, bx = x0;
			for (uint y = y0; y < y1; y++) {
				uint row = (plane * pc.h + y) * pc.w;
				for (uint xx = x0; xx < x1; xx++) {
					float v = float(LOAD(x[row + xx]));
					if (v > best || (isnan(v) && !isnan(best))) {
						best = v;
						by = y;
						bx = xx;
					}
				}
			}
			if (by == iy && bx == ix)
				acc += g;
		}
	}
	o[i] = STORE(acc);
}
