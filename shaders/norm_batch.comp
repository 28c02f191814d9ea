#version 450
#extension GL_GOOGLE_include_directive : require
// batch_norm, elementwise once the statistics are known: element i of an
// (N, C, inner) view has channel (i / inner) % C and
//   y = (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c]
// with mean/var the running statistics (x's dtype) or, with NORM_STATS_F32,
// the batch's own (f32, from reduce.comp). Mirrors struct bn_push in norm.c.
#include "common.glsl"
#include "reduce_codes.h"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer RM { ELEM rmean[]; };
layout(std430, binding = 2) readonly buffer RV { ELEM rvar[]; };
layout(std430, binding = 3) readonly buffer W { ELEM w[]; };
layout(std430, binding = 4) readonly buffer B { ELEM b[]; };
layout(std430, binding = 5) writeonly buffer O { ELEM o[]; };
layout(std430, binding = 6) readonly buffer MF { float fmean[]; };
layout(std430, binding = 7) readonly buffer VF { float fvar[]; };

layout(push_constant) uniform BnPush {
	uint n;      // elements
	uint C;      // channels
	uint inner;  // product of the dims after the channel dim
	uint flags;  // NORM_*
	float eps;
} pc;

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.n)
		return;
	uint c = (i / pc.inner) % pc.C;
	bool f = (pc.flags & NORM_STATS_F32) != 0u;
	float m = f ? fmean[c] : LOAD(rmean[c]);
	float v = f ? fvar[c] : LOAD(rvar[c]);
	float y = (LOAD(x[i]) - m) / sqrt(v + pc.eps);
	if ((pc.flags & NORM_HAS_W) != 0u)
		y *= LOAD(w[c]);
	if ((pc.flags & NORM_HAS_B) != 0u)
		y += LOAD(b[c]);
	o[i] = STORE(y);
}
