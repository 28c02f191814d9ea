#version 450
#extension GL_GOOGLE_include_directive : require
// sort, argsort, topk, topk_indices, their gradient (sort_grad) and cumsum,
// along one axis of an [outer, n, inner] view; row r (of outer * inner)
// starts at (r / inner) * n * inner + r % inner, its elements inner apart.
//
// The order: x[j'] precedes x[j] when it is smaller (larger when
// descending), or equal with j' < j: a stable sort, ties in index order. A
// NaN counts as larger than every number and equal to another NaN (where
// torch.sort puts it); -0 equals +0.
//
// Short rows (n <= SO_RANK_MAX, daemon/ops/sort.c) rank each element by
// counting the elements that precede it, one invocation per element:
//   SO_WRITE: the element goes to position rank (when rank < k) of the
//             result [outer, k, inner]: its value (SO_VALUES) or index.
//   SO_GRAD:  out[j] = g[rank(j)] when rank < k, else 0.
// Longer rows are sorted as (key, index) pairs in scratch (keys[], npow2
// per row) by a bitonic network, one dispatch per step: no loops at all.
// The key maps the order above onto unsigned integers, so the pairs are
// distinct and any sorting network gives the stable order:
//   SO_BT_INIT: load keys (padding: (~0, ~0), after everything);
//   SO_BT_STEP: one compare-exchange step (bk, bj) of the network;
//   SO_BT_WRITE: the first k pairs of each row to the result;
//   SO_ZERO then SO_BT_GRAD: the gradient scattered back to the indices.
// cumsum sums in f32 (i32 wrapping), storing each running sum in the dtype:
//   SO_CUMSUM: one invocation per row, in order (n <= SO_CHUNK);
//   SO_CS_SUM, SO_CS_SCAN, SO_CS_APPLY: longer rows in chunks of `chunk`:
//             each chunk's sum into s[], an exclusive scan of a row's chunk
//             sums, then each chunk's running sums from its offset.
//   With SO_REVERSE the scan runs from the end of the row.
// Mirrors struct sort_push in daemon/ops/sort.c.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer G { ELEM g[]; };
layout(std430, binding = 2) writeonly buffer O { ELEM o[]; };
layout(std430, binding = 3) writeonly buffer I { int oi[]; };
layout(std430, binding = 4) buffer S { CT s[]; };
layout(std430, binding = 5) buffer K { uvec2 keys[]; };
layout(push_constant) uniform P {
	uint outer;
	uint n;
	uint inner;
	uint k;
	uint mode;
	uint flags;
	uint chunk;
	uint nch;
	uint npow2;
	uint bk;
	uint bj;
} pc;

#define SO_WRITE 0u
#define SO_GRAD 1u
#define SO_CUMSUM 2u
#define SO_CS_SUM 3u
#define SO_CS_SCAN 4u
#define SO_CS_APPLY 5u
#define SO_BT_INIT 6u
#define SO_BT_STEP 7u
#define SO_BT_WRITE 8u
#define SO_BT_GRAD 9u
#define SO_ZERO 10u
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

// An unsigned key whose order is less_than's (ascending).
uint sort_key(CT v)
{
#if IS_FLOAT
	if (isnan(v))
		return 0xfffffffeu;
	if (v == 0.0)
		return 0x80000000u;
	uint u = floatBitsToUint(v);
	return (u & 0x80000000u) != 0u ? ~u : u | 0x80000000u;
#else
	return uint(v) ^ 0x80000000u;
#endif
}

uint row_base(uint r)
{
	return (r / pc.inner) * pc.n * pc.inner + r % pc.inner;
}

// Position of scan step t of a row (from the end when reversed).
uint scan_pos(uint t)
{
	return (pc.flags & SO_REVERSE) != 0u ? pc.n - 1u - t : t;
}

bool pair_less(uvec2 a, uvec2 b)
{
	return a.x < b.x || (a.x == b.x && a.y < b.y);
}

void main()
{
	uint e = linear_id(256u);
	uint rows = pc.outer * pc.inner;
	if (pc.mode == SO_CUMSUM) {
		if (e >= rows)
			return;
		uint base = row_base(e);
		CT acc = CT(0);
		for (uint t = 0u; t < pc.n; t++) {
			uint j = scan_pos(t);
			acc += LOAD(x[base + j * pc.inner]);
			o[base + j * pc.inner] = STORE(acc);
		}
		return;
	}
	if (pc.mode == SO_CS_SUM || pc.mode == SO_CS_APPLY) {
		if (e >= rows * pc.nch)
			return;
		uint base = row_base(e / pc.nch);
		uint t0 = (e % pc.nch) * pc.chunk;
		uint t1 = min(t0 + pc.chunk, pc.n);
		CT acc = pc.mode == SO_CS_SUM ? CT(0) : s[e];
		for (uint t = t0; t < t1; t++) {
			uint j = scan_pos(t);
			acc += LOAD(x[base + j * pc.inner]);
			if (pc.mode == SO_CS_APPLY)
				o[base + j * pc.inner] = STORE(acc);
		}
		if (pc.mode == SO_CS_SUM)
			s[e] = acc;
		return;
	}
	if (pc.mode == SO_CS_SCAN) {
		if (e >= rows)
			return;
		CT acc = CT(0);
		for (uint c = 0u; c < pc.nch; c++) {
			CT v = s[e * pc.nch + c];
			s[e * pc.nch + c] = acc;
			acc += v;
		}
		return;
	}
	if (pc.mode == SO_ZERO) {
		if (e < rows * pc.n)
			o[e] = STORE(CT(0));
		return;
	}
	if (pc.mode == SO_BT_INIT) {
		if (e >= rows * pc.npow2)
			return;
		uint p = e % pc.npow2;
		uvec2 kv = uvec2(0xffffffffu, 0xffffffffu);
		if (p < pc.n) {
			uint key = sort_key(LOAD(x[row_base(e / pc.npow2) + p * pc.inner]));
			kv = uvec2((pc.flags & SO_DESCENDING) != 0u ? ~key : key, p);
		}
		keys[e] = kv;
		return;
	}
	if (pc.mode == SO_BT_STEP) {
		uint half_ = pc.npow2 / 2u;
		if (e >= rows * half_)
			return;
		uint q = e % half_;
		uint i = 2u * pc.bj * (q / pc.bj) + q % pc.bj;
		uint a = (e / half_) * pc.npow2 + i, b = a + pc.bj;
		bool up = (i & pc.bk) == 0u;
		uvec2 ka = keys[a], kb = keys[b];
		if (pair_less(kb, ka) == up) {
			keys[a] = kb;
			keys[b] = ka;
		}
		return;
	}
	if (pc.mode == SO_BT_WRITE || pc.mode == SO_BT_GRAD) {
		if (e >= rows * pc.k)
			return;
		uint r = e / pc.k, p = e % pc.k;
		uint idx = keys[r * pc.npow2 + p].y;
		uint base = row_base(r);
		uint dst = (r / pc.inner) * pc.k * pc.inner + p * pc.inner + r % pc.inner;
		if (pc.mode == SO_BT_GRAD)
			o[base + idx * pc.inner] = g[dst];
		else if ((pc.flags & SO_VALUES) != 0u)
			o[dst] = x[base + idx * pc.inner];
		else
			oi[dst] = int(idx);
		return;
	}
	if (e >= rows * pc.n)
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
