#version 450
#extension GL_GOOGLE_include_directive : require
// batch_norm_grad: dx of batch_norm in training mode over an (N, C, inner)
// view, the statistics of channel c taken over its M = N · inner elements.
// With gy = g · w[c] (w absent: 1), xc = x − mean, rstd = 1 / sqrt(var + eps)
// (biased), xhat = xc · rstd:
//   dx = rstd · (gy − mean(gy) − xhat · mean(gy · xhat))
// mean(gy) = w · Σg / M and mean(gy · xhat) = w · rstd · Σ g·xc / M, so a
// channel needs count, mean, Σxc², Σg and Σg·xc.
// A workgroup takes chunk k (K elements) of channel c (workgroup c·P + k):
//   phase BNG_PARTIAL: its chunk's (mean, Σ(x − mean_k)², Σg, Σg·(x − mean_k))
//     (two passes over the chunk, the chunk in registers when it is at most
//     256·CACHE long) into part[c·P + k];
//   phase BNG_DX: the channel's statistics, then dx over its chunk;
//   phase BNG_WEIGHT (batch_norm_grad_weight; workgroup c): the channel's
//     statistics, then o[c] = Σ g·xhat = rstd · Σg·(x − mean).
// With BNG_FOLD (P > 1) the channel's statistics come from its P partials
// (Chan's parallel merge: each invocation folds partials t, t+256, ... in
// order, then a fixed tree; every workgroup of a channel folds them alike);
// without it (P = 1) the chunk is the channel and the workgroup takes them
// itself.
// Fixed summation order throughout, no atomics. Chunks keep the loops under
// lavapipe's 65535 iterations (norm.c picks K and P).
// Mirrors struct bng_push in daemon/ops/norm.c.
#include "common.glsl"
#include "reduce_codes.h"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer G { ELEM g[]; };
layout(std430, binding = 1) readonly buffer X { ELEM x[]; };
layout(std430, binding = 2) readonly buffer W { ELEM w[]; };
layout(std430, binding = 3) writeonly buffer O { ELEM o[]; };
layout(std430, binding = 4) buffer P { vec4 part[]; };

layout(push_constant) uniform BngPush {
	uint C;      // channels
	uint inner;  // product of the dims after the channel dim
	uint M;      // elements per channel: N · inner
	uint K;      // chunk length, a multiple of 256
	uint P;      // chunks per channel
	uint phase;  // BNG_* (with BNG_FOLD)
	uint flags;  // NORM_HAS_W
	float eps;
	uint magic;  // j / inner = (t + ((j − t) >> s1)) >> s2, t = mulhi(j, magic),
	uint s1, s2; // (division by an invariant integer; norm.c's bng_divisor)
} pc;

#include "row_common.glsl"

#define CACHE 8

// A set of elements' statistics: count, mean, Σ(x − mean)², Σg, Σg·(x − mean).
struct Stats {
	float n, mean, m2, sg, sgd;
};

shared vec4 sh4[256];
shared float sh1[256];

Stats merge(Stats a, Stats b)
{
	if (b.n == 0.0)
		return a;
	if (a.n == 0.0)
		return b;
	float n = a.n + b.n;
	float d = b.mean - a.mean;
	float mean = a.mean + d * (b.n / n);
	Stats r;
	r.n = n;
	r.mean = mean;
	r.m2 = a.m2 + b.m2 + d * d * (a.n * (b.n / n));
	r.sg = a.sg + b.sg;
	r.sgd = (a.sgd + (a.mean - mean) * a.sg) + (b.sgd + (b.mean - mean) * b.sg);
	return r;
}

// Element j (< M) of channel c (j / inner without a division: lavapipe
// has no vector one).
uint at(uint c, uint j)
{
	uint hi, lo;
	umulExtended(j, pc.magic, hi, lo);
	uint n = (hi + ((j - hi) >> pc.s1)) >> pc.s2;
	return (n * pc.C + c) * pc.inner + (j - n * pc.inner);
}

// Workgroup sums of a vec3 (all invocations call it).
vec3 wg_sum3(vec3 v, uint lid)
{
	sh4[lid] = vec4(v, 0.0);
	barrier();
	for (uint s = 128u; s > 0u; s >>= 1) {
		if (lid < s)
			sh4[lid] += sh4[lid + s];
		barrier();
	}
	vec3 r = sh4[0].xyz;
	barrier();
	return r;
}

// The statistics of elements [j0, j0 + n) of channel c.
Stats chunk_stats(uint c, uint j0, uint n, uint lid)
{
	Stats st;
	st.n = float(n);
	if (n <= 256u * CACHE) {
		float xv[CACHE], gv[CACHE];
		float s = 0.0;
		for (uint k = 0u; k < CACHE; k++) {
			uint j = lid + k * 256u;
			bool inr = j < n;
			uint i = inr ? at(c, j0 + j) : 0u;
			xv[k] = inr ? LOAD(x[i]) : 0.0;
			gv[k] = inr ? LOAD(g[i]) : 0.0;
			s += xv[k];
		}
		st.mean = wg_sum3(vec3(s, 0.0, 0.0), lid).x / float(n);
		vec3 q = vec3(0.0);
		for (uint k = 0u; k < CACHE; k++) {
			float d = lid + k * 256u < n ? xv[k] - st.mean : 0.0;
			q += vec3(d * d, gv[k], gv[k] * d);
		}
		q = wg_sum3(q, lid);
		st.m2 = q.x;
		st.sg = q.y;
		st.sgd = q.z;
		return st;
	}
	float s = 0.0, cs = 0.0;
	for (uint j = lid; j < n; j += 256u)
		kahan_add(s, cs, LOAD(x[at(c, j0 + j)]));
	st.mean = wg_sum3(vec3(s, 0.0, 0.0), lid).x / float(n);
	float q = 0.0, cq = 0.0, sg = 0.0, cg = 0.0, sd = 0.0, cd = 0.0;
	for (uint j = lid; j < n; j += 256u) {
		uint i = at(c, j0 + j);
		float d = LOAD(x[i]) - st.mean, gg = LOAD(g[i]);
		kahan_add(q, cq, d * d);
		kahan_add(sg, cg, gg);
		kahan_add(sd, cd, gg * d);
	}
	vec3 r = wg_sum3(vec3(q, sg, sd), lid);
	st.m2 = r.x;
	st.sg = r.y;
	st.sgd = r.z;
	return st;
}

// Channel c's statistics from its P partials, in a fixed order.
Stats fold(uint c, uint lid)
{
	Stats st = Stats(0.0, 0.0, 0.0, 0.0, 0.0);
	for (uint k = lid; k < pc.P; k += 256u) {
		vec4 p = part[c * pc.P + k];
		uint n = min(pc.K, pc.M - k * pc.K);
		st = merge(st, Stats(float(n), p.x, p.y, p.z, p.w));
	}
	for (uint s = 128u; s > 0u; s >>= 1) {
		if (lid >= s && lid < 2u * s) {
			sh4[lid] = vec4(st.n, st.mean, st.m2, st.sg);
			sh1[lid] = st.sgd;
		}
		barrier();
		if (lid < s) {
			vec4 b = sh4[lid + s];
			st = merge(st, Stats(b.x, b.y, b.z, b.w, sh1[lid + s]));
		}
		barrier();
	}
	if (lid == 0u) {
		sh4[0] = vec4(st.n, st.mean, st.m2, st.sg);
		sh1[0] = st.sgd;
	}
	barrier();
	vec4 b = sh4[0];
	return Stats(b.x, b.y, b.z, b.w, sh1[0]);
}

void main()
{
	uint lid = gl_LocalInvocationID.x;
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	uint phase = pc.phase & 3u;
	uint c = phase == BNG_WEIGHT ? wg : wg / pc.P;
	uint k = phase == BNG_WEIGHT ? 0u : wg - c * pc.P;
	if (c >= pc.C)
		return; // the whole workgroup: no barrier is left waiting
	uint j0 = k * pc.K;
	uint n = min(pc.K, pc.M - j0);
	Stats st;

	if (phase != BNG_PARTIAL && (pc.phase & BNG_FOLD) != 0u) {
		st = fold(c, lid);
	} else {
		st = chunk_stats(c, j0, n, lid);
		if (phase == BNG_PARTIAL) {
			if (lid == 0u)
				part[c * pc.P + k] = vec4(st.mean, st.m2, st.sg, st.sgd);
			return;
		}
	}
	float M = float(pc.M);
	float r = 1.0 / sqrt(st.m2 / M + pc.eps);
	if (phase == BNG_WEIGHT) {
		if (lid == 0u)
			o[c] = STORE(pc.M == 0u ? 0.0 : r * st.sgd); // no elements: 0
		return;
	}
	float wc = (pc.flags & NORM_HAS_W) != 0u ? LOAD(w[c]) : 1.0;
	float mgy = wc * st.sg / M;
	float cr = r * r * wc * st.sgd / M; // rstd · mean(gy · xhat)
	for (uint j = lid; j < n; j += 256u) {
		uint i = at(c, j0 + j);
		o[i] = STORE(r * (LOAD(g[i]) * wc - mgy - (LOAD(x[i]) - st.mean) * cr));
	}
}
