#version 450
#extension GL_GOOGLE_include_directive : require
// Direct 2-D convolution (cross-correlation, as PyTorch), NCHW, with stride,
// zero padding, dilation, groups and an optional bias. One invocation per
// output element; f32 accumulation in a fixed order, so results are
// deterministic.
#include "common.glsl"
#include "conv_codes.h"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer W { ELEM w[]; };
layout(std430, binding = 2) readonly buffer Bias { ELEM bias[]; };
layout(std430, binding = 3) writeonly buffer O { ELEM o[]; };

// Mirrors struct conv_push in daemon/ops/conv.c.
layout(push_constant) uniform ConvPush {
	uint total;            // output elements
	uint c, h, w;          // input channels and size
	uint oc, oh, ow;       // output channels and size
	uint kh, kw;
	uint sh, sw;
	uint ph, pw;
	uint dh, dw;
	uint cpg, opg;         // input and output channels per group
	uint flags;            // CONV_*
} pc;

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.total)
		return;
	uint ox = i % pc.ow;
	uint t = i / pc.ow;
	uint oy = t % pc.oh;
	t /= pc.oh;
	uint co = t % pc.oc;
	uint n = t / pc.oc;
	uint g = co / pc.opg;

	// Signed input origin of the window (padding may put it below zero).
	int iy0 = int(oy * pc.sh) - int(pc.ph);
	int ix0 = int(ox * pc.sw) - int(pc.pw);
	float acc = 0.0;
	uint wbase = co * pc.cpg * pc.kh * pc.kw;
	for (uint ci = 0u; ci < pc.cpg; ci++) {
		uint xplane = (n * pc.c + g * pc.cpg + ci) * pc.h;
		uint wplane = wbase + ci * pc.kh * pc.kw;
		for (uint ky = 0u; ky < pc.kh; ky++) {
			int iy = iy0 + int(ky * pc.dh);
			if (iy < 0 || iy >= int(pc.h))
				continue;
			uint xrow = (xplane + uint(iy)) * pc.w;
			uint wrow = wplane + ky * pc.kw;
			for (uint kx = 0u; kx < pc.kw; kx++) {
				int ix = ix0 + int(kx * pc.dw);
				if (ix < 0 || ix >= int(pc.w))
					continue;
				acc += float(LOAD(x[xrow + uint(ix)])) * float(LOAD(w[wrow + kx]));
			}
		}
	}
	if ((pc.flags & CONV_HAS_BIAS) != 0u)
		acc += float(LOAD(bias[co]));
	o[i] = STORE(acc);
}
