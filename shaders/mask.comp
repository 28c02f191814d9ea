#version 450
#extension GL_GOOGLE_include_directive : require
// tril / triu, masked_fill, dropout and multinomial (daemon/ops/mask.c).
//   MK_TRIL/MK_TRIU: x's last two dims [rows, cols]; element (r, c) is kept
//     when c - r <= k (tril) or >= k (triu), else 0.
//   MK_FILL: value where the (broadcast) u8 mask is non-zero, else x; the
//     mask's element of x's element e: sum over dims of e's index times
//     mstride (0 on broadcast dims).
//   MK_DROPOUT: invocation j does elements 4j..4j+3 with the four words of
//     Philox block j (rand's stream): kept, times scale, when the word's
//     unit value is >= p, else 0.
//   multinomial, over probs [rows, cols] (negative and NaN weights count
//     as 0), in chunks of `chunk` classes so that no loop is long:
//     MK_MN_SUM: each chunk's f32 sum (in order) into s[row * nch + c];
//     MK_MN_SCAN: per row, their exclusive scan in place, and the row's
//       total into s[rows * nch + row];
//     MK_MN_APPLY: each chunk's running sums from its offset into cum[];
//     MK_MULTINOMIAL: invocation q = row * k + s draws sample s of row from
//       word q of the stream: with t = u · total (f32), the first class
//       whose running sum exceeds t, or when t >= total (rounding) the
//       first that reaches total (a binary search); -1 when the total is
//       not positive.
// Mirrors struct mask_push in daemon/ops/mask.c.
#include "common.glsl"
#include "philox.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer M { uint8_t m[]; };
layout(std430, binding = 2) writeonly buffer O { ELEM o[]; };
layout(std430, binding = 3) writeonly buffer I { int oi[]; };
layout(std430, binding = 4) buffer S { float s[]; };
layout(std430, binding = 5) buffer C { float cum[]; };
layout(push_constant) uniform P {
	uint n;       // elements of the result (multinomial: samples in all)
	uint mode;
	uint rows;
	uint cols;
	int k;        // tril/triu diagonal; multinomial: samples per row
	int ival;     // fill value, integer dtypes
	float fval;   // fill value, float dtypes
	uint key0;
	uint key1;
	float p;
	float scale;
	uint rank;
	uint shape[8];
	uint mstride[8];
	uint chunk;
	uint nch;
} pc;

#define MK_TRIL 0u
#define MK_TRIU 1u
#define MK_FILL 2u
#define MK_DROPOUT 3u
#define MK_MULTINOMIAL 4u
#define MK_MN_SUM 5u
#define MK_MN_SCAN 6u
#define MK_MN_APPLY 7u

float weight(uint i)
{
	float v = float(LOAD(x[i]));
	return v > 0.0 ? v : 0.0; // NaN too
}

// The first class of `row` whose running sum is > t (strict) or >= t.
uint first_above(uint row, float t, bool strict)
{
	uint lo = 0u, hi = pc.cols - 1u;
	while (lo < hi) {
		uint mid = (lo + hi) / 2u;
		float v = cum[row * pc.cols + mid];
		if (strict ? v > t : v >= t)
			hi = mid;
		else
			lo = mid + 1u;
	}
	return lo;
}

#if IS_FLOAT
#define FILL_VALUE pc.fval
#else
#define FILL_VALUE pc.ival
#endif

void main()
{
	uint e = linear_id(256u);
	if (pc.mode == MK_DROPOUT) {
		if (e >= (pc.n + 3u) / 4u)
			return;
		uvec4 w = philox4x32_10(uvec4(e, 0u, 0u, 0u), uvec2(pc.key0, pc.key1));
		for (uint q = 0u; q < 4u; q++) {
			uint i = 4u * e + q;
			if (i < pc.n)
				o[i] = philox_unit(w[q]) >= pc.p ? STORE(CT(float(LOAD(x[i])) * pc.scale)) : STORE(CT(0));
		}
		return;
	}
	if (pc.mode == MK_MN_SUM || pc.mode == MK_MN_APPLY) {
		if (e >= pc.rows * pc.nch)
			return;
		uint row = e / pc.nch;
		uint c0 = (e % pc.nch) * pc.chunk, c1 = min(c0 + pc.chunk, pc.cols);
		float acc = pc.mode == MK_MN_SUM ? 0.0 : s[e];
		for (uint c = c0; c < c1; c++) {
			acc += weight(row * pc.cols + c);
			if (pc.mode == MK_MN_APPLY)
				cum[row * pc.cols + c] = acc;
		}
		if (pc.mode == MK_MN_SUM)
			s[e] = acc;
		return;
	}
	if (pc.mode == MK_MN_SCAN) {
		if (e >= pc.rows)
			return;
		float acc = 0.0;
		for (uint c = 0u; c < pc.nch; c++) {
			float v = s[e * pc.nch + c];
			s[e * pc.nch + c] = acc;
			acc += v;
		}
		s[pc.rows * pc.nch + e] = acc;
		return;
	}
	if (e >= pc.n)
		return;
	if (pc.mode == MK_TRIL || pc.mode == MK_TRIU) {
		int c = int(e % pc.cols);
		int r = int((e / pc.cols) % pc.rows);
		bool keep = pc.mode == MK_TRIL ? c - r <= pc.k : c - r >= pc.k;
		o[e] = keep ? x[e] : STORE(CT(0));
	} else if (pc.mode == MK_FILL) {
		uint mi = 0u, rest = e;
		for (uint d = pc.rank; d > 0u; d--) {
			mi += (rest % pc.shape[d - 1u]) * pc.mstride[d - 1u];
			rest /= pc.shape[d - 1u];
		}
		o[e] = m[mi] != uint8_t(0) ? STORE(FILL_VALUE) : x[e];
	} else {
		uint row = e / uint(pc.k);
		uvec4 w = philox4x32_10(uvec4(e / 4u, 0u, 0u, 0u), uvec2(pc.key0, pc.key1));
		float u = philox_unit(w[e % 4u]);
		float total = s[pc.rows * pc.nch + row];
		float t = u * total;
		int pick = -1;
		if (total > 0.0)
			pick = int(t < total ? first_above(row, t, true) : first_above(row, total, false));
		oi[e] = pick;
	}
}
