#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
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

// Element j of the row at `base`: normalised y, then times w and plus b.
void put(uint base, uint j, float y)
{
	if ((pc.flags & NORM_HAS_W) != 0u)
		y *= LOAD(w[j]);
	if ((pc.flags & NORM_HAS_B) != 0u)
		y += LOAD(b[j]);
	o[base + j] = STORE(y);
}

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

	// Invocation t's elements j = t + u·S, in registers when they fit.
	bool cached = pc.L <= ROW_CACHE * S;
	float xr[ROW_CACHE];
	if (cached) {
		[[unroll]] for (uint u = 0u; u < ROW_CACHE; u++) {
			uint j = t + u * S;
			xr[u] = live && j < pc.L ? LOAD(x[base + j]) : 0.0;
		}
	}

	float mean = 0.0;
	if (!rms) {
		float s = 0.0, c = 0.0;
		if (cached) {
			[[unroll]] for (uint u = 0u; u < ROW_CACHE; u++)
				if (t + u * S < pc.L)
					kahan_add(s, c, xr[u]);
		} else {
			for (uint j = t; live && j < pc.L; j += S)
				kahan_add(s, c, LOAD(x[base + j]));
		}
		mean = row_sum(s, lid, lg) / float(pc.L);
	}
	float q = 0.0, qc = 0.0;
	if (cached) {
		[[unroll]] for (uint u = 0u; u < ROW_CACHE; u++)
			if (t + u * S < pc.L)
				kahan_add(q, qc, (xr[u] - mean) * (xr[u] - mean));
	} else {
		for (uint j = t; live && j < pc.L; j += S) {
			float d = LOAD(x[base + j]) - mean;
			kahan_add(q, qc, d * d);
		}
	}
	float r = 1.0 / sqrt(row_sum(q, lid, lg) / float(pc.L) + pc.eps);

	if (cached) {
		[[unroll]] for (uint u = 0u; u < ROW_CACHE; u++)
			if (live && t + u * S < pc.L)
				put(base, t + u * S, (xr[u] - mean) * r);
	} else {
		for (uint j = t; live && j < pc.L; j += S)
			put(base, j, (LOAD(x[base + j]) - mean) * r);
	}
}
