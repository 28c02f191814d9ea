#version 450
#extension GL_GOOGLE_include_directive : require
// Gradients of conv2d (NCHW, stride, zero padding, dilation, groups), in
// three modes (CONVG_*):
//   INPUT:  dX, one invocation per input element, summing grad_out times the
//           weight over every (output channel of its group, tap) that reads it;
//   WPART:  dW, one invocation per (chunk, weight element), summing x times
//           grad_out over `chunk` consecutive (n, oy, ox) positions into f32
//           partials, or straight into dW when there is one chunk;
//   WSUM:   dW, one invocation per weight element, summing the partials.
// Every sum runs in f32 in a fixed order, with no atomics: deterministic.
// Chunks keep each invocation's loops short (Mesa 22.3's lavapipe ends an
// invocation's loops after 65535 iterations in all).
#include "common.glsl"
#include "conv_codes.h"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };   // INPUT: grad_out; WPART: x
layout(std430, binding = 1) readonly buffer B { ELEM b[]; };   // INPUT: weight; WPART: grad_out
layout(std430, binding = 2) buffer P { float part[]; };        // WPART/WSUM partials
layout(std430, binding = 3) writeonly buffer O { ELEM o[]; };

// Mirrors struct convg_push in daemon/ops/conv_grad.c.
layout(push_constant) uniform ConvGradPush {
	uint total;            // invocations that work
	uint n, c, h, w;       // input batch, channels and size
	uint oc, oh, ow;       // output channels and size
	uint kh, kw;
	uint sh, sw;
	uint ph, pw;
	uint dh, dw;
	uint cpg, opg;         // input and output channels per group
	uint mode;             // CONVG_*
	uint chunk;            // WPART: positions per partial
	uint nchunks;          // WPART/WSUM: partials per weight element
} pc;

void grad_input(uint i)
{
	uint ix = i % pc.w;
	uint t = i / pc.w;
	uint iy = t % pc.h;
	t /= pc.h;
	uint ci = t % pc.c;
	uint nn = t / pc.c;
	uint g = ci / pc.cpg, cl = ci % pc.cpg;
	// Output row oy reads input row iy through tap ky when
	// oy * sh - ph + ky * dh == iy.
	int by = int(iy) + int(pc.ph), bx = int(ix) + int(pc.pw);
	float acc = 0.0;
	for (uint col = 0u; col < pc.opg; col++) {
		uint co = g * pc.opg + col;
		uint wplane = (co * pc.cpg + cl) * pc.kh * pc.kw;
		uint gplane = (nn * pc.oc + co) * pc.oh;
		for (uint ky = 0u; ky < pc.kh; ky++) {
			int ty = by - int(ky * pc.dh);
			if (ty < 0 || ty % int(pc.sh) != 0 || uint(ty) / pc.sh >= pc.oh)
				continue;
			uint grow = (gplane + uint(ty) / pc.sh) * pc.ow;
			uint wrow = wplane + ky * pc.kw;
			for (uint kx = 0u; kx < pc.kw; kx++) {
				int tx = bx - int(kx * pc.dw);
				if (tx < 0 || tx % int(pc.sw) != 0 || uint(tx) / pc.sw >= pc.ow)
					continue;
				acc += float(LOAD(a[grow + uint(tx) / pc.sw])) * float(LOAD(b[wrow + kx]));
			}
		}
	}
	o[i] = STORE(acc);
}

void grad_weight_part(uint i)
{
	uint wcount = pc.oc * pc.cpg * pc.kh * pc.kw;
	uint k = i / wcount, wi = i % wcount;
	uint kx = wi % pc.kw;
	uint t = wi / pc.kw;
	uint ky = t % pc.kh;
	t /= pc.kh;
	uint cl = t % pc.cpg;
	uint co = t / pc.cpg;
	uint ci = (co / pc.opg) * pc.cpg + cl;
	uint npos = pc.n * pc.oh * pc.ow;
	uint p0 = k * pc.chunk, p1 = min(p0 + pc.chunk, npos);
	int offy = int(ky * pc.dh) - int(pc.ph), offx = int(kx * pc.dw) - int(pc.pw);
	float acc = 0.0;
	for (uint p = p0; p < p1; p++) {
		uint ox = p % pc.ow;
		uint q = p / pc.ow;
		uint oy = q % pc.oh;
		uint nn = q / pc.oh;
		int iy = int(oy * pc.sh) + offy, ix = int(ox * pc.sw) + offx;
		if (iy < 0 || iy >= int(pc.h) || ix < 0 || ix >= int(pc.w))
			continue;
		float xv = float(LOAD(a[((nn * pc.c + ci) * pc.h + uint(iy)) * pc.w + uint(ix)]));
		acc += xv * float(LOAD(b[((nn * pc.oc + co) * pc.oh + oy) * pc.ow + ox]));
	}
	if (pc.nchunks == 1u)
		o[wi] = STORE(acc);
	else
		part[i] = acc;
}

void grad_weight_sum(uint i)
{
	uint wcount = pc.total;
	float acc = 0.0;
	for (uint k = 0u; k < pc.nchunks; k++)
		acc += part[k * wcount + i];
	o[i] = STORE(acc);
}

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.total)
		return;
	if (pc.mode == CONVG_INPUT)
		grad_input(i);
	else if (pc.mode == CONVG_WPART)
		grad_weight_part(i);
	else
		grad_weight_sum(i);
}
