#version 450
#extension GL_GOOGLE_include_directive : require
// index_add: out = x with the slices of src added at the indices, along one
// axis. x and out are viewed as [pre, n, post], src as [pre, nidx, post],
// the i32 indices flattened to nidx; an index in [-n, 0) counts from the
// end, any other index outside [0, n) adds nothing (as gather reads zeros).
//
// The second half (index_sort.comp sorted the indices first, as keys
// (row, position)): an invocation per element of out finds its row's
// segment of keys (two binary searches) and adds those src elements in
// index order, from 0, then x: deterministic, no atomics, and the work is
// proportional to the output plus the indices. A segment longer than the
// host's pass (lavapipe's loop limit) is summed over several dispatches,
// each taking segment positions [kbeg, kend), that carry the running sums
// in the f32 (i32) scratch buffer s: the first reads x, the last writes out.
// Mirrors struct ia_push in daemon/ops/index_add.c.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer K { uvec2 keys[]; };
layout(std430, binding = 2) readonly buffer S { ELEM src[]; };
layout(std430, binding = 3) buffer T { CT s[]; };
layout(std430, binding = 4) writeonly buffer O { ELEM o[]; };
layout(push_constant) uniform P {
	uint pre;
	uint n;      // the indexed dim of x
	uint post;
	uint nidx;   // indices in all
	uint kbeg;   // this dispatch's segment positions
	uint kend;
	uint nkeys;  // sorted keys (padding included)
	uint flags;  // IA_FIRST: start from x; IA_LAST: write out (else s)
} pc;

#define IA_FIRST 1u
#define IA_LAST 2u

// The first key whose row is >= v.
uint lower_bound(uint v)
{
	uint lo = 0u, hi = pc.nkeys;
	while (lo < hi) {
		uint mid = (lo + hi) >> 1u;
		if (keys[mid].x < v)
			lo = mid + 1u;
		else
			hi = mid;
	}
	return lo;
}

void main()
{
	uint i = linear_id(256u);
	if (i >= pc.pre * pc.n * pc.post)
		return;
	uint q = i % pc.post;
	uint rest = i / pc.post;
	uint v = rest % pc.n;
	uint p = rest / pc.n;
	CT acc = CT(0);
	if (pc.nkeys > 0u) {
		uint b = lower_bound(v), e = lower_bound(v + 1u);
		uint from = b + pc.kbeg, to = min(e, b + pc.kend);
		for (uint m = from; m < to; m++)
			acc += LOAD(src[(p * pc.nidx + keys[m].y) * pc.post + q]);
	}
	CT r = ((pc.flags & IA_FIRST) != 0u ? LOAD(x[i]) : s[i]) + acc;
	if ((pc.flags & IA_LAST) != 0u)
		o[i] = STORE(r);
	else
		s[i] = r;
}
