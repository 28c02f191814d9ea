#version 450
#extension GL_GOOGLE_include_directive : require
// The two helpers of conv2d's GEMM path (daemon/ops/conv_gemm.c), f32:
//   mode 0, im2col: col[nl][k][p] = x[n0 + nl][c][oy*sh - ph + ky*dh][ox*sw - pw + kx*dw]
//     (0 outside the image) with k = (c*kh + ky)*kw + kx and p = oy*ow + ox,
//     so that out[n] = weight[oc][k] @ col[n] is the convolution;
//   mode 1, bias: out[i] += bias[(i / (oh*ow)) % oc] over a chunk of out.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer In { float src[]; };
layout(std430, binding = 1) buffer Out { float dst[]; };

// Mirrors struct conv_gemm_push in daemon/ops/conv_gemm.c.
layout(push_constant) uniform ConvGemmPush {
	uint total;            // elements written (mode 0) or updated (mode 1)
	uint c, h, w;          // input channels and size (mode 1: c is the output channels)
	uint oh, ow;
	uint kh, kw;
	uint sh, sw;
	uint ph, pw;
	uint dh, dw;
	uint n0;               // first image of the chunk (mode 0)
	uint mode;
} pc;

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.total)
		return;
	uint hw = pc.oh * pc.ow;
	if (pc.mode == 1u) {
		dst[i] += src[(i / hw) % pc.c];
		return;
	}
	uint K = pc.c * pc.kh * pc.kw;
	uint p = i % hw, t = i / hw;
	uint k = t % K, n = pc.n0 + t / K;
	uint kx = k % pc.kw, r = k / pc.kw;
	uint ky = r % pc.kh, c = r / pc.kh;
	int iy = int((p / pc.ow) * pc.sh) - int(pc.ph) + int(ky * pc.dh);
	int ix = int((p % pc.ow) * pc.sw) - int(pc.pw) + int(kx * pc.dw);
	float v = 0.0;
	if (iy >= 0 && iy < int(pc.h) && ix >= 0 && ix < int(pc.w))
		v = src[((n * pc.c + c) * pc.h + uint(iy)) * pc.w + uint(ix)];
	dst[i] = v;
}
