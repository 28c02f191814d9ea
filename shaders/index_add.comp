#version 450
#extension GL_GOOGLE_include_directive : require
// index_add: out = x with the slices of src added at the indices, along one
// axis. x and out are viewed as [pre, n, post], src as [pre, nidx, post],
// the i32 indices flattened to nidx; an index in [-n, 0) counts from the
// end, any other index outside [0, n) adds nothing (as gather reads zeros).
//
// Deterministic, no atomics: one workgroup per (p, v, block of 256 q) scans
// the indices [kbeg, kend) 256 at a time, compacts the matches of v in index
// order (a shared-memory prefix sum) and adds those src elements in that
// order. Long index lists are split over several dispatches (the host keeps
// each under lavapipe's loop limit) that carry the running sums in the f32
// (i32) scratch buffer s: the first reads x, the last writes out.
// Mirrors struct ia_push in daemon/ops/index_add.c.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) readonly buffer S { ELEM src[]; };
layout(std430, binding = 3) buffer T { CT s[]; };
layout(std430, binding = 4) writeonly buffer O { ELEM o[]; };
layout(push_constant) uniform P {
	uint pre;
	uint n;      // the indexed dim of x
	uint post;
	uint nidx;   // indices in all
	uint kbeg;   // this dispatch's indices
	uint kend;
	uint qblocks;
	uint flags;  // IA_FIRST: start from x; IA_LAST: write out (else s)
} pc;

#define IA_FIRST 1u
#define IA_LAST 2u

shared uint scan[256];
shared uint list[256];

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	uint t = gl_LocalInvocationID.x;
	uint qb = wg % pc.qblocks;
	uint rest = wg / pc.qblocks;
	uint v = rest % pc.n;
	uint p = rest / pc.n;
	if (p >= pc.pre)
		return; // a whole workgroup past the end of a spilled grid
	uint q = qb * 256u + t;
	bool live = q < pc.post;
	CT acc = CT(0);
	for (uint k0 = pc.kbeg; k0 < pc.kend; k0 += 256u) {
		uint k = k0 + t;
		uint f = 0u;
		if (k < pc.kend) {
			int iv = idx[k];
			if (iv < 0)
				iv += int(pc.n);
			f = iv >= 0 && uint(iv) == v ? 1u : 0u;
		}
		scan[t] = f;
		barrier();
		for (uint off = 1u; off < 256u; off <<= 1u) {
			uint add = t >= off ? scan[t - off] : 0u;
			barrier();
			scan[t] += add;
			barrier();
		}
		uint total = scan[255];
		if (f != 0u)
			list[scan[t] - 1u] = k;
		barrier();
		if (live)
			for (uint m = 0u; m < total; m++)
				acc += LOAD(src[(p * pc.nidx + list[m]) * pc.post + q]);
		barrier();
	}
	if (!live)
		return;
	uint i = (p * pc.n + v) * pc.post + q;
	CT r = ((pc.flags & IA_FIRST) != 0u ? LOAD(x[i]) : s[i]) + acc;
	if ((pc.flags & IA_LAST) != 0u)
		o[i] = STORE(r);
	else
		s[i] = r;
}
