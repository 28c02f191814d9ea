// Every optimizer update of a training step in one dispatch (issue 16, the
// multi-tensor optimizer; daemon/ops/optim_multi.c records it). Each
// workgroup runs one segment of the table: its first workgroup is found by
// binary search, one element per invocation. A segment is either one op of
// optim.comp (sgd_param, sgd_buf, ...: tensors a, b, c -> o) or Adam's three
// (adam_m, adam_v, adam_param) in one pass, adam_param reading the new
// moments as rounded to the dtype, as it would read them back from memory.
// The formulas are optim_math.glsl's, as in optim.comp: the results are
// bit-identical to one dispatch per op. Included by optim_multi.comp (up to
// OPTM_SLOTS windows: each access picks its window with a switch) and
// optim_multi1.comp (OPTM_ONE_WINDOW: every tensor in window 0, as in a small
// model whose tensors share one memory block; CPU devices run every case of
// a switch for every element). A gated segment (OPT_F_GATE, precision f16)
// stores the old values when its skip flag (tensor OPTM_SKIP) is non-zero;
// an OPTM_CHECK segment is found_inf's: no update, a flag set.
#include "common.glsl"
#include "optim_codes.h"
#include "optim_math.glsl"
layout(local_size_x = OPT_WG) in;
layout(std430, binding = 0) buffer S0 { ELEM s0[]; };
layout(std430, binding = 1) buffer S1 { ELEM s1[]; };
layout(std430, binding = 2) buffer S2 { ELEM s2[]; };
layout(std430, binding = 3) buffer S3 { ELEM s3[]; };
layout(std430, binding = 4) buffer S4 { ELEM s4[]; };
layout(std430, binding = 5) buffer S5 { ELEM s5[]; };
layout(std430, binding = 6) buffer S6 { ELEM s6[]; };
layout(std430, binding = 7) readonly buffer Table { uint tab[]; };

layout(push_constant) uniform MultiPush {
	uint nseg;       // segments in the table
} pc;

// Element i of tensor r of the segment at word s.
#ifdef OPTM_ONE_WINDOW
float ld(uint s, uint r, uint i)
{
	return LOAD(s0[tab[s + OPTM_REF + 2u * r + 1u] + i]);
}

void st(uint s, uint r, uint i, float v)
{
	s0[tab[s + OPTM_REF + 2u * r + 1u] + i] = STORE(v);
}
#else
float ld(uint s, uint r, uint i)
{
	uint k = tab[s + OPTM_REF + 2u * r + 1u] + i;
	switch (tab[s + OPTM_REF + 2u * r]) {
	case 0u: return LOAD(s0[k]);
	case 1u: return LOAD(s1[k]);
	case 2u: return LOAD(s2[k]);
	case 3u: return LOAD(s3[k]);
	case 4u: return LOAD(s4[k]);
	case 5u: return LOAD(s5[k]);
	default: return LOAD(s6[k]);
	}
}

void st(uint s, uint r, uint i, float v)
{
	uint k = tab[s + OPTM_REF + 2u * r + 1u] + i;
	switch (tab[s + OPTM_REF + 2u * r]) {
	case 0u: s0[k] = STORE(v); break;
	case 1u: s1[k] = STORE(v); break;
	case 2u: s2[k] = STORE(v); break;
	case 3u: s3[k] = STORE(v); break;
	case 4u: s4[k] = STORE(v); break;
	case 5u: s5[k] = STORE(v); break;
	default: s6[k] = STORE(v); break;
	}
}
#endif

// The coefficients of op j of the segment at word s.
OptimArgs args(uint s, uint j)
{
	uint w = s + OPTM_ARGS + j * OPTM_ARG_WORDS;
	return OptimArgs(tab[w], tab[w + 1u], uintBitsToFloat(tab[w + 2u]), uintBitsToFloat(tab[w + 3u]),
			 uintBitsToFloat(tab[w + 4u]), uintBitsToFloat(tab[w + 5u]),
			 uintBitsToFloat(tab[w + 6u]), uintBitsToFloat(tab[w + 7u]),
			 uintBitsToFloat(tab[w + 8u]));
}

// What reading back a stored value gives.
float rounded(float v)
{
	return LOAD(STORE(v));
}

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	uint lo = 0u, hi = pc.nseg;
	// The last segment whose first workgroup is <= wg (the first starts at 0).
	while (hi - lo > 1u) {
		uint mid = (lo + hi) / 2u;
		if (tab[mid * OPTM_SEG_WORDS + OPTM_WG0] <= wg)
			lo = mid;
		else
			hi = mid;
	}
	uint s = lo * OPTM_SEG_WORDS;
	uint i = (wg - tab[s + OPTM_WG0]) * OPT_WG + gl_LocalInvocationID.x;
	if (i >= tab[s + OPTM_N])
		return;
	uint kind = tab[s + OPTM_KIND];
	if (kind == OPTM_CHECK) {
		// found_inf: any store is of 1.0 (the flag was zeroed before the
		// dispatch), so the result does not depend on their order.
		float x = ld(s, 0u, i);
		// As the optimizer will read it: times 1 / scale (tensor 2).
		if ((args(s, 0u).flags & OPT_F_UNSCALE) != 0u) {
			precise float u = x * ld(s, 2u, 0u);
			x = u;
		}
		bool found = (args(s, 0u).flags & OPT_F_FLAG) != 0u ? x != 0.0 :
			     (floatBitsToUint(x) & 0x7f800000u) == 0x7f800000u;
		if (found)
			st(s, 1u, 0u, 1.0);
		return;
	}
	// A gated update whose flag is set stores the old values (f32 only).
	bool skip = (args(s, 0u).flags & OPT_F_GATE) != 0u && ld(s, OPTM_SKIP, 0u) != 0.0;
	if (kind == OPTM_ADAM) {
		float g = ld(s, 0u, i), w = ld(s, 3u, i), unused = 0.0;
		if ((args(s, 0u).flags & OPT_F_UNSCALE) != 0u)
			opt_unscale(args(s, 0u), g, unused, ld(s, OPTM_SKIP, 1u));
		if (skip) {
			st(s, 4u, i, ld(s, 1u, i));
			st(s, 5u, i, ld(s, 2u, i));
			st(s, 6u, i, w);
			return;
		}
		float m = opt_update(args(s, 0u), g, ld(s, 1u, i), w);
		float v = opt_update(args(s, 1u), g, ld(s, 2u, i), w);
		st(s, 4u, i, m);
		st(s, 5u, i, v);
		st(s, 6u, i, opt_update(args(s, 2u), w, rounded(m), rounded(v)));
	} else {
		float a = ld(s, 0u, i), b = ld(s, 1u, i), c = ld(s, 2u, i);
		if (skip) {
			st(s, 3u, i, opt_old(args(s, 0u), a, b, c));
			return;
		}
		if ((args(s, 0u).flags & OPT_F_UNSCALE) != 0u)
			opt_unscale(args(s, 0u), a, b, ld(s, OPTM_SKIP, 1u));
		st(s, 3u, i, opt_update(args(s, 0u), a, b, c));
	}
}
