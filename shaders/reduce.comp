#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Row reductions: out[r] = combine over j < L of in(r, j). A row is reduced
// by a segment of 2^seg_log2 invocations: each folds a few elements (at most
// `chunk` / segment), then the segment combines them as a tree in shared
// memory. Long rows are split into `nchunks` chunks whose partials a further
// pass (RED_IN_PARTIAL) reduces the same way, so sums are pairwise.
// RED_COLUMNS (the first pass, when the rows' kept block is the innermost,
// contiguous one: a sum over axis 0 of [R, C]): invocation i takes row
// i % M and chunk i / M, and folds the row's elements chunk, chunk + nchunks,
// ... serially, so consecutive invocations read consecutive addresses.
// Mirrors struct red_push in daemon/ops/reduce_engine.c.
#include "common.glsl"
#include "reduce_codes.h"
layout(local_size_x = 256) in;

#if IS_FLOAT
#define ACC float
#else
#define ACC int
#endif

layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer PIV { ACC piv[]; };
layout(std430, binding = 2) readonly buffer PII { uint pii[]; };
layout(std430, binding = 3) writeonly buffer POV { ACC pov[]; };
layout(std430, binding = 4) writeonly buffer POI { uint poi[]; };
layout(std430, binding = 5) writeonly buffer O { ELEM o[]; };
layout(std430, binding = 6) readonly buffer MEAN { float mean[]; };
// The input in 4-element vectors, for RED_COLUMNS4 (not for bf16).
#if defined(DT_F32)
#define VEC4 vec4
#elif defined(DT_F16)
#define VEC4 f16vec4
#elif defined(DT_I32)
#define VEC4 ivec4
#endif
#ifdef VEC4
layout(std430, binding = 0) readonly buffer X4 { VEC4 x4[]; };
#endif

layout(push_constant) uniform RedPush {
	uint M;         // rows (results)
	uint L;         // row length in this pass
	uint chunk;     // row elements one segment covers
	uint nchunks;   // chunks per row (partials written per row)
	uint seg_log2;  // log2 of invocations per row
	uint op;        // RED_*
	uint flags;     // RED_* flags
	uint post;      // RED_POST_*
	uint nk;        // kept dims (first nk of shape/stride)
	uint nr;        // reduced dims (the next nr)
	float div;      // RED_POST_DIV divisor
	uint pad;
	uint shape[8];
	uint stride[8]; // element strides in the input tensor
} pc;

shared ACC sv[256];
shared uint si[256];

ACC identity(uint op)
{
#if IS_FLOAT
	if (op == RED_SUM) return 0.0;
	if (op == RED_PROD) return 1.0;
	if (op == RED_MAX || op == RED_ARGMAX) return uintBitsToFloat(0xff800000u);
	return uintBitsToFloat(0x7f800000u);
#else
	if (op == RED_SUM) return 0;
	if (op == RED_PROD) return 1;
	if (op == RED_MAX || op == RED_ARGMAX) return int(0x80000000u);
	return 0x7fffffff;
#endif
}

bool nan_(ACC v)
{
#if IS_FLOAT
	return isnan(v);
#else
	return false;
#endif
}

// Whether (bv, bi) beats (av, ai) for argmax/argmin: NaN wins (as NumPy),
// then the larger (smaller) value, then the smaller index.
bool beats(uint op, ACC av, uint ai, ACC bv, uint bi)
{
	if (nan_(bv) || nan_(av))
		return nan_(bv) && (!nan_(av) || bi < ai);
	if (bv == av)
		return bi < ai;
	return op == RED_ARGMAX ? bv > av : bv < av;
}

ACC combine(uint op, ACC a, ACC b)
{
	switch (op) {
	case RED_SUM: return a + b;
	case RED_PROD: return a * b;
#if IS_FLOAT
	case RED_MAX: return (isnan(a) || isnan(b)) ? a + b : max(a, b);
	default: return (isnan(a) || isnan(b)) ? a + b : min(a, b);
#else
	case RED_MAX: return max(a, b);
	default: return min(a, b);
#endif
	}
}

// Input offset of kept index r (dims 0..nk-1).
uint kept_offset(uint r)
{
	uint off = 0u;
	for (int d = int(pc.nk) - 1; d >= 0; d--) {
		off += (r % pc.shape[d]) * pc.stride[d];
		r /= pc.shape[d];
	}
	return off;
}

// Input offset of row element j (dims nk..nk+nr-1).
uint row_offset(uint j)
{
	if (pc.nr == 1u)
		return j * pc.stride[pc.nk];
	uint off = 0u;
	for (int d = int(pc.nk + pc.nr) - 1; d >= int(pc.nk); d--) {
		off += (j % pc.shape[d]) * pc.stride[d];
		j /= pc.shape[d];
	}
	return off;
}

ACC finish(ACC v)
{
#if IS_FLOAT
	if (pc.post != RED_POST_NONE) {
		if (pc.div <= 0.0)
			v = (v == 0.0 || isnan(v)) ? uintBitsToFloat(0x7fc00000u) : uintBitsToFloat(0x7f800000u);
		else
			v = v / pc.div;
		if (pc.post == RED_POST_SQRT_DIV)
			v = sqrt(v);
	}
#endif
	return v;
}

#ifdef VEC4
// Fold vector e into the accumulators of four rows.
void fold4(inout ACC v[4], VEC4 e, vec4 m, bool sqdev)
{
#if IS_FLOAT
	vec4 f = vec4(e);
	if (sqdev)
		f = (f - m) * (f - m);
#else
	ivec4 f = e;
#endif
	[[unroll]] for (uint k = 0u; k < 4u; k++)
		v[k] = combine(pc.op, v[k], f[k]);
}

// RED_COLUMNS4: RED_COLUMNS with four adjacent rows (M % 4 == 0) per
// invocation, read as one vector: invocation i takes rows 4 (i % (M / 4))
// to + 3 and chunk i / (M / 4). Not for argmax/argmin.
void columns4()
{
	uint G = pc.M / 4u;
	uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + gl_LocalInvocationID.x;
	uint g = i % G, chunk = i / G, step = pc.nchunks, j = chunk;
	bool sqdev = (pc.flags & RED_SQDEV) != 0u;
	ACC v[4];
	if (chunk >= pc.nchunks)
		return;
	[[unroll]] for (uint k = 0u; k < 4u; k++)
		v[k] = identity(pc.op);
	vec4 m = vec4(0.0);
#if IS_FLOAT
	if (sqdev)
		m = vec4(mean[4u * g], mean[4u * g + 1u], mean[4u * g + 2u], mean[4u * g + 3u]);
#endif
	// Eight vectors in flight per iteration, then one at a time: rows in
	// increasing order either way.
	for (; j + 7u * step < pc.L; j += 8u * step) {
		VEC4 e[8];
		[[unroll]] for (uint u = 0u; u < 8u; u++)
			e[u] = x4[(j + u * step) * G + g];
		[[unroll]] for (uint u = 0u; u < 8u; u++)
			fold4(v, e[u], m, sqdev);
	}
	for (; j < pc.L; j += step)
		fold4(v, x4[j * G + g], m, sqdev);
	[[unroll]] for (uint k = 0u; k < 4u; k++) {
		uint row = 4u * g + k;
		if ((pc.flags & RED_OUT_PARTIAL) != 0u)
			pov[row * pc.nchunks + chunk] = v[k];
		else if ((pc.flags & RED_OUT_F32) != 0u)
			pov[row] = finish(v[k]);
		else
			o[row] = STORE(finish(v[k]));
	}
}

// RED_ROWS4: fold the row's vectors j4, j4 + S, ... below j14 (from vector
// `base4` of the input) into v (less m, squared, for RED_SQDEV): each lane
// serially, eight vectors in flight, then the lanes pairwise.
void rows4(inout ACC v, uint base4, uint j4, uint j14, uint S, vec4 m)
{
	ACC l[4] = ACC[4](v, identity(pc.op), identity(pc.op), identity(pc.op));
	bool sqdev = (pc.flags & RED_SQDEV) != 0u;
	for (; j4 + 7u * S < j14; j4 += 8u * S) {
		VEC4 e[8];
		[[unroll]] for (uint u = 0u; u < 8u; u++)
			e[u] = x4[base4 + j4 + u * S];
		[[unroll]] for (uint u = 0u; u < 8u; u++)
			fold4(l, e[u], m, sqdev);
	}
	for (; j4 < j14; j4 += S)
		fold4(l, x4[base4 + j4], m, sqdev);
	v = combine(pc.op, combine(pc.op, l[0], l[1]), combine(pc.op, l[2], l[3]));
}
#endif

void main()
{
#ifdef VEC4
	// Uniform: every invocation of the dispatch returns here, none reaches
	// the barriers below.
	if ((pc.flags & RED_COLUMNS4) != 0u) {
		columns4();
		return;
	}
#endif
	uint lid = gl_LocalInvocationID.x;
	uint S = 1u << pc.seg_log2;
	uint t = lid & (S - 1u);
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	bool cols = (pc.flags & RED_COLUMNS) != 0u;
	uint chunk, row;
	bool valid;
	if (cols) {
		// seg_log2 is 0 (no tree): one invocation per (row, chunk).
		uint i = wg * 256u + lid;
		row = i % pc.M;
		chunk = i / pc.M;
		valid = chunk < pc.nchunks;
	} else {
		chunk = wg % pc.nchunks;
		row = (wg / pc.nchunks) * (256u >> pc.seg_log2) + (lid >> pc.seg_log2);
		valid = row < pc.M;
	}
	bool arg = pc.op == RED_ARGMAX || pc.op == RED_ARGMIN;
	ACC v = identity(pc.op);
	uint vi = 0xffffffffu;

	if (valid) {
		uint j0 = chunk * pc.chunk;
		uint j1 = pc.L - j0 < pc.chunk ? pc.L : j0 + pc.chunk;
		bool partial = (pc.flags & RED_IN_PARTIAL) != 0u;
		uint base = partial ? row * pc.L : kept_offset(row);
#if IS_FLOAT
		float m = (pc.flags & RED_SQDEV) != 0u ? mean[row] : 0.0;
#endif
		uint j = j0 + t;
		uint step = S;
		if (cols) {
			j = chunk;
			j1 = pc.L;
			step = pc.nchunks;
		}
#ifdef VEC4
		if ((pc.flags & RED_ROWS4) != 0u) {
			vec4 m4 = vec4(0.0);
#if IS_FLOAT
			m4 = vec4(m);
#endif
			rows4(v, base / 4u, j0 / 4u + t, j1 / 4u, S, m4);
			j = j1;
		}
#endif
		// Plain folds over one strided dim or of partials: eight loads in
		// flight per iteration, folded in the same order as the loop below
		// (same bits), so the kernel is not bound by one load's latency at
		// a time.
		if (partial && !arg) {
			for (; j + 7u * step < j1; j += 8u * step) {
				ACC e[8];
				[[unroll]] for (uint u = 0u; u < 8u; u++)
					e[u] = piv[base + j + u * step];
				[[unroll]] for (uint u = 0u; u < 8u; u++)
					v = combine(pc.op, v, e[u]);
			}
		}
		if (!partial && !arg && pc.nr == 1u && (pc.flags & RED_SQDEV) == 0u) {
			uint st = pc.stride[pc.nk];
			for (; j + 7u * step < j1; j += 8u * step) {
				ACC e[8];
				[[unroll]] for (uint u = 0u; u < 8u; u++)
					e[u] = LOAD(x[base + (j + u * step) * st]);
				[[unroll]] for (uint u = 0u; u < 8u; u++)
					v = combine(pc.op, v, e[u]);
			}
		}
		for (; j < j1; j += step) {
			ACC e;
			uint ei = j;
			if (partial) {
				e = piv[base + j];
				if (arg)
					ei = pii[base + j];
			} else {
				e = LOAD(x[base + row_offset(j)]);
#if IS_FLOAT
				if ((pc.flags & RED_SQDEV) != 0u)
					e = (e - m) * (e - m);
#endif
			}
			if (arg) {
				if (beats(pc.op, v, vi, e, ei)) {
					v = e;
					vi = ei;
				}
			} else {
				v = combine(pc.op, v, e);
			}
		}
	}

	sv[lid] = v;
	si[lid] = vi;
	barrier();
	for (uint s = S >> 1; s > 0u; s >>= 1) {
		if (t < s) {
			ACC bv = sv[lid + s];
			if (arg) {
				uint bi = si[lid + s];
				if (beats(pc.op, sv[lid], si[lid], bv, bi)) {
					sv[lid] = bv;
					si[lid] = bi;
				}
			} else {
				sv[lid] = combine(pc.op, sv[lid], bv);
			}
		}
		barrier();
	}

	if (t != 0u || !valid)
		return;
	v = sv[lid];
	vi = si[lid];
	if ((pc.flags & RED_OUT_PARTIAL) != 0u) {
		uint k = row * pc.nchunks + chunk;
		pov[k] = v;
		if (arg)
			poi[k] = vi;
	} else if ((pc.flags & RED_OUT_IDX) != 0u) {
		poi[row] = vi;
	} else if ((pc.flags & RED_OUT_F32) != 0u) {
		pov[row] = finish(v);
	} else {
		o[row] = STORE(finish(v));
	}
}
