#version 450
#extension GL_GOOGLE_include_directive : require
// sort, argsort, topk, topk_indices, their gradient (sort_grad) and cumsum,
// along one axis of an [outer, n, inner] view.
//
// The sorting modes rank every element of a row by counting the elements
// that come before it: x[j'] precedes x[j] when it is smaller (larger when
// descending), or equal with j' < j: a stable sort, ties in index order. A
// NaN counts as larger than every number and equal to another NaN (where
// torch.sort puts it). One invocation per element, each looping n times:
// n is at most the loop budget (daemon/ops/sort.c checks).
//   SO_WRITE: the element goes to position rank (when rank < k) of the
//             result [outer, k, inner]: its value (SO_VALUES) or index.
//   SO_GRAD:  out[j] = g[rank(j)] when rank < k, else 0 (g is [outer, k,
//             inner]): the gradient of the sorted values.
//   SO_CUMSUM: one invocation per row sums it in order (from the end when
//             reversed), in f32 (i32 wrapping) with every partial sum
//             stored in the dtype.
// Mirrors struct sort_push in daemon/ops/sort.c.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer G { ELEM g[]; };
layout(std430, binding = 2) writeonly buffer O { ELEM o[]; };
layout(std430, binding = 3) writeonly buffer I { int oi[]; };
layout(push_constant) uniform P {
	uint outer;
	uint n;
	uint inner;
	uint k;
	uint mode;
	uint flags;
} pc;

#define SO_WRITE 0u
#define SO_GRAD 1u
#define SO_CUMSUM 2u
#define SO_DESCENDING 1u
#define SO_VALUES 2u
#define SO_REVERSE 4u

// a < b with NaN the largest (floats).
bool less_than(CT a, CT b)
{
#if IS_FLOAT
	if (isnan(a))
		return false;
	if (isnan(b))
		return true;
#endif
	return a < b;
}

void main()
{
	uint e = linear_id(256u);
	if (pc.mode == SO_CUMSUM) {
		if (e >= pc.outer * pc.inner)
			return;
		uint base = (e / pc.inner) * pc.n * pc.inner + e % pc.inner;
		bool rev = (pc.flags & SO_REVERSE) != 0u;
		CT acc = CT(0);
		for (uint t = 0u; t < pc.n; t++) {
			uint j = rev ? pc.n - 1u - t : t;
			acc += LOAD(x[base + j * pc.inner]);
			o[base + j * pc.inner] = STORE(acc);
		}
		return;
	}
	if (e >= pc.outer * pc.n * pc.inner)
		return;
	uint i = e % pc.inner;
	uint j = (e / pc.inner) % pc.n;
	uint ob = e / (pc.inner * pc.n);
	uint base = ob * pc.n * pc.inner + i;
	bool desc = (pc.flags & SO_DESCENDING) != 0u;
	CT v = LOAD(x[e]);
	uint rank = 0u;
	for (uint t = 0u; t < pc.n; t++) {
		CT w = LOAD(x[base + t * pc.inner]);
		bool before = desc ? less_than(v, w) : less_than(w, v);
		bool tie = !less_than(v, w) && !less_than(w, v);
		if (before || (tie && t < j))
			rank++;
	}
	uint dst = ob * pc.k * pc.inner + rank * pc.inner + i;
	if (pc.mode == SO_GRAD) {
		o[e] = rank < pc.k ? g[dst] : STORE(CT(0));
		return;
	}
	if (rank >= pc.k)
		return;
	if ((pc.flags & SO_VALUES) != 0u)
		o[dst] = x[e];
	else
		oi[dst] = int(j);
}
