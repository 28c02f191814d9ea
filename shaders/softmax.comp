#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// softmax / log_softmax along one axis, numerically stable: each row's max is
// subtracted before exp. Row r of an (outer, L, inner) view starts at
// (r / inner) * L * inner + r % inner, its elements `inner` apart.
// logsumexp writes m + log(sum) of row r at o[r] (m itself when infinite).
// Mirrors struct sm_push in daemon/ops/norm.c.
#include "common.glsl"
#include "reduce_codes.h"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) writeonly buffer O { ELEM o[]; };

layout(push_constant) uniform SmPush {
	uint M;        // rows
	uint L;        // row length (the axis)
	uint inner;    // product of the dims after the axis
	uint seg_log2; // log2 of invocations per row
	uint op;       // SM_*
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
	uint base = live ? (row / pc.inner) * pc.L * pc.inner + row % pc.inner : 0u;

	// Invocation t's elements j = t + u·S, in registers when they fit.
	bool cached = pc.L <= ROW_CACHE * S;
	float xr[ROW_CACHE];
	if (cached) {
		[[unroll]] for (uint u = 0u; u < ROW_CACHE; u++) {
			uint j = t + u * S;
			xr[u] = live && j < pc.L ? LOAD(x[base + j * pc.inner]) : 0.0;
		}
	}

	float m = uintBitsToFloat(0xff800000u);
	if (cached) {
		[[unroll]] for (uint u = 0u; u < ROW_CACHE; u++)
			if (live && t + u * S < pc.L)
				m = (isnan(m) || isnan(xr[u])) ? m + xr[u] : max(m, xr[u]);
	} else {
		for (uint j = t; live && j < pc.L; j += S) {
			float v = LOAD(x[base + j * pc.inner]);
			m = (isnan(m) || isnan(v)) ? m + v : max(m, v);
		}
	}
	m = row_max(m, lid, lg);

	float s = 0.0, c = 0.0;
	if (cached) {
		[[unroll]] for (uint u = 0u; u < ROW_CACHE; u++)
			if (live && t + u * S < pc.L)
				kahan_add(s, c, exp(xr[u] - m));
	} else {
		for (uint j = t; live && j < pc.L; j += S)
			kahan_add(s, c, exp(LOAD(x[base + j * pc.inner]) - m));
	}
	s = row_sum(s, lid, lg);

	if (pc.op == SM_LOGSUMEXP) {
		// one result per row, at the row's index (the reduced layout)
		if (live && t == 0u)
			o[row] = STORE(isinf(m) ? m : m + log(s));
		return;
	}
	float ls = log(s);
	if (cached) {
		[[unroll]] for (uint u = 0u; u < ROW_CACHE; u++) {
			float d = xr[u] - m;
			if (live && t + u * S < pc.L)
				o[base + (t + u * S) * pc.inner] = STORE(pc.op == SM_LOG_SOFTMAX ? d - ls : exp(d) / s);
		}
	} else {
		for (uint j = t; live && j < pc.L; j += S) {
			float d = LOAD(x[base + j * pc.inner]) - m;
			o[base + j * pc.inner] = STORE(pc.op == SM_LOG_SOFTMAX ? d - ls : exp(d) / s);
		}
	}
}
