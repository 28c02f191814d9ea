#version 450
#extension GL_GOOGLE_include_directive : require
// layer_norm and rms_norm over contiguous rows of L elements:
//   layer: y = (x - mean) / sqrt(var + eps) * w + b   (var biased, two-pass)
//   rms:   y = x / sqrt(mean(x^2) + eps) * w
// Mirrors struct norm_push in daemon/ops/norm.c.
#include "common.glsl"
#include "reduce_codes.h"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer W { ELEM w[]; };
layout(std430, binding = 2) readonly buffer B { ELEM b[]; };
layout(std430, binding = 3) writeonly buffer O { ELEM o[]; };

layout(push_constant) uniform NormPush {
	uint M;        // rows
	uint L;        // row length
	uint seg_log2; // log2 of invocations per row
	uint flags;    // NORM_*
	float eps;
} pc;

#include "row_common.glsl"

void main()
{
	uint lid = gl_LocalInvocationID.x;
	uint lg = pc.seg_log2;
	uint S = 1u << lg;
	uint t = lid & (S - 1u);
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	uint row = wg * (256u >> lg) + (lid >> lg);
	bool live = row < pc.M;
	uint base = live ? row * pc.L : 0u;
	bool rms = (pc.flags & NORM_RMS) != 0u;

	float mean = 0.0;
	if (!rms) {
		float s = 0.0, c = 0.0;
		for (uint j = t; live && j < pc.L; j += S)
			kahan_add(s, c, LOAD(x[base + j]));
		mean = row_sum(s, lid, lg) / float(pc.L);
	}
	float q = 0.0, qc = 0.0;
	for (uint j = t; live && j < pc.L; j += S) {
		float d = LOAD(x[base + j]) - mean;
		kahan_add(q, qc, d * d);
	}
	float r = 1.0 / sqrt(row_sum(q, lid, lg) / float(pc.L) + pc.eps);

	for (uint j = t; live && j < pc.L; j += S) {
		float y = (LOAD(x[base + j]) - mean) * r;
		if ((pc.flags & NORM_HAS_W) != 0u)
			y *= LOAD(w[j]);
		if ((pc.flags & NORM_HAS_B) != 0u)
			y += LOAD(b[j]);
		o[base + j] = STORE(y);
	}
}
