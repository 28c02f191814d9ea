#version 450
#extension GL_GOOGLE_include_directive : require
// layer_norm_grad and rms_norm_grad: dx of layer_norm / rms_norm over
// contiguous rows of L elements, the row statistics recomputed from x in f32
// (two-pass, as norm.comp). With gy = g · w (w absent: 1), xc = x − mean
// (rms: x), rstd = 1 / sqrt(mean(xc²) + eps), xhat = xc · rstd:
//   layer: dx = rstd · (gy − mean(gy) − xhat · mean(gy · xhat))
//   rms:   dx = rstd · (gy − xhat · mean(gy · xhat))
// mean(gy · xhat) is taken as rstd · mean(gy · xc), so a row takes three
// loops, as the forward: Σx and Σgy; Σxc² and Σgy·xc; dx. A row of at most
// CACHE elements per invocation keeps its x and gy in registers and reads
// them once; a longer one reads them again in each loop.
// Mirrors struct norm_push in daemon/ops/norm.c.
#include "common.glsl"
#include "reduce_codes.h"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer G { ELEM g[]; };
layout(std430, binding = 1) readonly buffer X { ELEM x[]; };
layout(std430, binding = 2) readonly buffer W { ELEM w[]; };
layout(std430, binding = 3) writeonly buffer O { ELEM o[]; };

layout(push_constant) uniform NormPush {
	uint M;        // rows
	uint L;        // row length
	uint seg_log2; // log2 of invocations per row
	uint flags;    // NORM_RMS, NORM_HAS_W
	float eps;
} pc;

#include "row_common.glsl"

#define CACHE 8

shared vec2 row_sh2[256];

// Sums of both components of `v` over the segment of `lid` (2^lg
// invocations); all invocations of the workgroup must call it.
vec2 row_sum2(vec2 v, uint lid, uint lg)
{
	uint S = 1u << lg;
	uint t = lid & (S - 1u);
	row_sh2[lid] = v;
	barrier();
	for (uint s = S >> 1; s > 0u; s >>= 1) {
		if (t < s)
			row_sh2[lid] += row_sh2[lid + s];
		barrier();
	}
	vec2 r = row_sh2[lid - t];
	barrier();
	return r;
}

float gy_at(uint base, uint j)
{
	float v = LOAD(g[base + j]);
	if ((pc.flags & NORM_HAS_W) != 0u)
		v *= LOAD(w[j]);
	return v;
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
	float inv_l = 1.0 / float(pc.L);

	if (pc.L <= S * CACHE) {
		float xv[CACHE], gv[CACHE];
		vec2 s = vec2(0.0);
		for (uint k = 0u; k < CACHE; k++) {
			uint j = t + k * S;
			bool in_row = live && j < pc.L;
			xv[k] = in_row ? LOAD(x[base + j]) : 0.0;
			gv[k] = in_row ? gy_at(base, j) : 0.0;
			s += vec2(xv[k], gv[k]);
		}
		s = row_sum2(s, lid, lg);
		float mean = rms ? 0.0 : s.x / float(pc.L);
		float mgy = rms ? 0.0 : s.y * inv_l;
		vec2 q = vec2(0.0);
		for (uint k = 0u; k < CACHE; k++) {
			uint j = t + k * S;
			float d = live && j < pc.L ? xv[k] - mean : 0.0;
			xv[k] = d;
			q += vec2(d * d, gv[k] * d);
		}
		q = row_sum2(q, lid, lg);
		float r = 1.0 / sqrt(q.x / float(pc.L) + pc.eps);
		float c = r * q.y * inv_l; // mean(gy · xhat)
		for (uint k = 0u; k < CACHE; k++) {
			uint j = t + k * S;
			if (live && j < pc.L)
				o[base + j] = STORE(r * (gv[k] - mgy - xv[k] * r * c));
		}
		return;
	}

	// Long rows: compensated sums, the row read in each loop.
	float sx = 0.0, cx = 0.0, sg = 0.0, cg = 0.0;
	for (uint j = t; live && !rms && j < pc.L; j += S) {
		kahan_add(sx, cx, LOAD(x[base + j]));
		kahan_add(sg, cg, gy_at(base, j));
	}
	vec2 s = row_sum2(vec2(sx, sg), lid, lg);
	float mean = rms ? 0.0 : s.x / float(pc.L);
	float mgy = rms ? 0.0 : s.y * inv_l;
	float sq = 0.0, cq = 0.0, sgd = 0.0, cgd = 0.0;
	for (uint j = t; live && j < pc.L; j += S) {
		float d = LOAD(x[base + j]) - mean;
		kahan_add(sq, cq, d * d);
		kahan_add(sgd, cgd, gy_at(base, j) * d);
	}
	vec2 q = row_sum2(vec2(sq, sgd), lid, lg);
	float r = 1.0 / sqrt(q.x / float(pc.L) + pc.eps);
	float c = r * q.y * inv_l;
	for (uint j = t; live && j < pc.L; j += S) {
		float xh = (LOAD(x[base + j]) - mean) * r;
		o[base + j] = STORE(r * (gy_at(base, j) - mgy - xh * c));
	}
}
