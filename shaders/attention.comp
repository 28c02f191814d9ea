#version 450
#extension GL_GOOGLE_include_directive : require
// Fused attention (daemon/ops/attention.c, docs/ops.md "Attention"), f32,
// never writing a [T, S] matrix: q [N, T, hd], k and v [N, S, hd].
// Built once per head-dim bound HD (16, 32, 64, 128: variants "d16"...);
// a head of hd <= HD is read with zeros past hd, so the HD-wide math is
// exact. Scores are kept in base 2: s2 = (q·k) · scale · log2(e), so
// exp2(s2 - m2) is the softmax numerator and lse = m2 · ln(2) + ln(l).
//
// One workgroup of 64 invocations per (n, block of 64 "own" rows). The
// invocations go in pairs (subgroup lanes 2p, 2p + 1): a pair owns the
// adjacent rows 2p, 2p + 1 of the block and each of the two holds one half
// of the head dim (HH vec4) of both rows in registers, so one shared-memory
// read of a tile element feeds two rows' FMAs (the reads of a pass halve;
// the registers per invocation stay those of one whole row). A score is the
// sum of the two halves' partial dots (subgroupShuffleXor 1: both lanes get
// the same bits, so they take the same branches). The "other" side streams
// through shared memory in tiles of BC rows, read by every invocation
// (broadcast; a tile row is padded by one vec4 between its halves so that
// the two halves a subgroup reads at once fall in different banks). A tile
// is walked in blocks of KB rows: KB scores (and KB g·v products) are summed
// side by side, KB independent FMA chains instead of one, and the softmax
// bookkeeping runs once per block.
//   AT_FWD  own = query i, tiles of k, v: online softmax (a running max m2
//           and sum l per row, the accumulator rescaled once per block when
//           the block's max passes m2); out[n, i, :] = acc / l.
//   AT_LSE  as AT_FWD without v: out[n, i] = the row's logsumexp.
//   AT_DQ   own = query i, tiles of k, v; with p = exp2(s2 - lse2_i),
//           ds = p (g_i·v_j - D_i): out = scale · sum_j ds k_j.
//   AT_DK   own = key j, tiles of q (times scale·log2 e), g, and the
//           tile rows' lse · log2 e and D (staged with the tile):
//           out = scale · sum_i ds q_i.
//   AT_DV   own = key j, tiles of q and g (and lse): out = sum_i p g_i.
// Causal: key j is masked for query i when j > i (torch's is_causal, the
// top-left diagonal); tiles wholly masked are skipped, and so are the
// KB-blocks wholly masked for every row of a subgroup (the block loop's
// bounds are subgroup-uniform: no divergence on the diagonal); masked
// entries of a block get s2 = -inf (AT_FWD, AT_LSE) or p = 0 (gradients),
// as do the rows past the end of the last tile.
// Workgroup order: under a causal mask the blocks that see the most of the
// other side (the last query blocks, the first key blocks) take the lowest
// workgroup ids, for every n, so the long ones start first.
// Loads: when hd % 4 == 0 rows are read as whole vec4 (vec4 views of the
// same buffers: rows start at multiples of hd floats, bindings at offset
// 0); otherwise element by element with zeros past hd.
//
// Loops: the half head dim and the KB rows of a block are unrolled by
// macros (FOR_HH, FOR_KB: no loop at all), so an invocation runs, per tile, one
// loop iteration, BC · HD4 / WG tile loads and up to BC / KB blocks:
// attention_loop_iters (attention.c, whose attention_tile and
// attention_block mirror BC and KB_N) keeps the sum within OP_LOOP_BUDGET.
// Mirrors struct attention_push in daemon/ops/attention.c.
#define DT_F32 1
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

#define AT_FWD 0u
#define AT_LSE 1u
#define AT_DQ 2u
#define AT_DK 3u
#define AT_DV 4u

#define WG 64u
#define HD4 (HD / 4)
#define HH (HD4 / 2) // vec4 of an own row per invocation
#define STR (HD4 + 1u) // vec4 per tile row: half 0, a pad, half 1
#if HD <= 64
#define BC 64u
#else
#define BC 32u
#endif
// Rows of a tile per block (divides BC; 1, 2, 4, 8 or 16; attention.c's
// attention_block mirrors it). A block's scores are KB · 2 independent
// chains (two own rows). Fewer at HD 64: 4 · 2 chains keep the FMA pipes
// of an NVIDIA GPU fed, and the block's scalars (s, w, dp of two rows)
// must fit beside x, y and acc (192 registers); fewer still at HD 128,
// where x, y and acc already fill the registers, and lavapipe's LLVM time
// grows with the unrolled block (on a 2-core host, uncached: d64 at 4
// about 6 s, d128 at 2 about 20 s; with one row per invocation d64 at 8
// took about 20 s, d128 at 2 about 23 s, at 8 over 5 minutes).
#ifndef KB_N
#if HD <= 32
#define KB_N 8
#elif HD <= 64
#define KB_N 4
#else
#define KB_N 2
#endif
#endif
#define KB uint(KB_N)
#define LOG2E 1.4426950408889634
#define NEG_INF uintBitsToFloat(0xff800000u)

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer G { float g[]; };
layout(std430, binding = 4) readonly buffer L { float lse[]; };
layout(std430, binding = 5) readonly buffer D { float dd[]; };
layout(std430, binding = 6) writeonly buffer O { float o[]; };
// The same buffers as vec4 (used when hd % 4 == 0).
layout(std430, binding = 0) readonly buffer Q4 { vec4 q4[]; };
layout(std430, binding = 1) readonly buffer K4 { vec4 k4[]; };
layout(std430, binding = 2) readonly buffer V4 { vec4 v4[]; };
layout(std430, binding = 3) readonly buffer G4 { vec4 g4[]; };
layout(std430, binding = 6) writeonly buffer O4 { vec4 o4[]; };
layout(push_constant) uniform P {
	uint n;       // N
	uint t;       // query rows
	uint s;       // key rows
	uint hd;      // head dim (<= HD)
	uint mode;
	uint causal;
	uint nblk;    // blocks of WG own rows per n
	float scale;  // the softmax scale
	float scale2; // scale · log2(e)
} pc;

// Tiles: the other side's rows, BC of them, STR vec4 each (half h of a row
// at h · (HH + 1)); in the column modes also their lse · log2(e) and D.
shared vec4 ta[BC * STR];
shared vec4 tb[BC * STR];
shared float tl[BC];
shared float td[BC];

// Repeat X(c) for c = 0 .. HH-1 (constant indices: registers, no loop).
#define R1(X, b) X(b)
#define R2(X, b) R1(X, b) R1(X, (b) + 1)
#define R4(X, b) R2(X, b) R2(X, (b) + 2)
#define R8(X, b) R4(X, b) R4(X, (b) + 4)
#define R16(X, b) R8(X, b) R8(X, (b) + 8)
#if HD == 16
#define FOR_HH(X) R2(X, 0)
#elif HD == 32
#define FOR_HH(X) R4(X, 0)
#elif HD == 64
#define FOR_HH(X) R8(X, 0)
#elif HD == 128
#define FOR_HH(X) R16(X, 0)
#else
#error "HD must be 16, 32, 64 or 128"
#endif

// Repeat Y(c, u) for u = 0 .. KB-1 (inside FOR_HH too: other macros).
#define U1(Y, c, u) Y(c, u)
#define U2(Y, c, u) U1(Y, c, u) U1(Y, c, (u) + 1)
#define U4(Y, c, u) U2(Y, c, u) U2(Y, c, (u) + 2)
#define U8(Y, c, u) U4(Y, c, u) U4(Y, c, (u) + 4)
#define U16(Y, c, u) U8(Y, c, u) U8(Y, c, (u) + 8)
#if KB_N == 1
#define FOR_KB(Y, c) U1(Y, c, 0)
#elif KB_N == 2
#define FOR_KB(Y, c) U2(Y, c, 0)
#elif KB_N == 4
#define FOR_KB(Y, c) U4(Y, c, 0)
#elif KB_N == 8
#define FOR_KB(Y, c) U8(Y, c, 0)
#elif KB_N == 16
#define FOR_KB(Y, c) U16(Y, c, 0)
#else
#error "KB_N must be 1, 2, 4, 8 or 16"
#endif

// Element d of a row at `base` of a buffer, 0 past the head dim.
#define LD(buf, base, d) ((d) < pc.hd ? buf[(base) + (d)] : 0.0)
#define LD4(buf, base, c) \
	vec4(LD(buf, base, 4u * (c)), LD(buf, base, 4u * (c) + 1u), LD(buf, base, 4u * (c) + 2u), \
	     LD(buf, base, 4u * (c) + 3u))
// Vec4 c of row `row` of a buffer (both views), 0 past the head dim.
#define ROW4(buf, row, c) \
	((pc.hd & 3u) == 0u ? (4u * (c) < pc.hd ? buf##4[(row) * (pc.hd >> 2) + (c)] : vec4(0.0)) \
			    : LD4(buf, (row) * pc.hd, c))

// Vec4 c of the own row `row` of the output, the elements below hd.
void put4(uint row, uint c, vec4 val)
{
	uint d = 4u * c, base = row * pc.hd;
	if ((pc.hd & 3u) == 0u) {
		if (d < pc.hd)
			o4[row * (pc.hd >> 2) + c] = val;
		return;
	}
	if (d < pc.hd)
		o[base + d] = val.x;
	if (d + 1u < pc.hd)
		o[base + d + 1u] = val.y;
	if (d + 2u < pc.hd)
		o[base + d + 2u] = val.z;
	if (d + 3u < pc.hd)
		o[base + d + 3u] = val.w;
}

bool row_mode()
{
	return pc.mode <= AT_DQ;
}

// Tile `tile` of the other side into ta (k, or q · scale2) and tb (v or g);
// in the column modes its rows' lse · log2(e) into tl and D into td.
void load_tile(uint n, uint tile, uint rows)
{
	bool rm = row_mode();
	uint lid = gl_LocalInvocationID.x;
	barrier();
	for (uint e = lid; e < BC * HD4; e += WG) {
		uint r = tile * BC + e / HD4, c = e % HD4, at = e / HD4 * STR + c + (c >= HH ? 1u : 0u);
		vec4 a = vec4(0.0), b = vec4(0.0);
		if (r < rows) {
			uint row = n * rows + r;
			if (rm) {
				a = ROW4(k, row, c);
				if (pc.mode != AT_LSE)
					b = ROW4(v, row, c);
			} else {
				a = ROW4(q, row, c) * pc.scale2;
				b = ROW4(g, row, c);
			}
		}
		ta[at] = a;
		tb[at] = b;
	}
	if (!rm && lid < BC) { // BC <= WG: one row each, no loop
		uint r = tile * BC + lid;
		tl[lid] = r < rows ? lse[n * rows + r] * LOG2E : 0.0;
		td[lid] = r < rows && pc.mode == AT_DK ? dd[n * rows + r] : 0.0;
	}
	barrier();
}

// An invocation's state: its half (HH vec4) of the own rows 0 and 1 of its
// pair: x (q · scale2 or k), y (g or v), acc; per row the online softmax's
// m2 and l, and (AT_DQ; else 0) its lse · log2(e) and D.
vec4 x0[HH], x1[HH], y0[HH], y1[HH], acc0[HH], acc1[HH];
float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0, l1 = 0.0, ls0 = 0.0, ls1 = 0.0, d0 = 0.0, d1 = 0.0;

// The statements FOR_HH and FOR_KB repeat: c is a vec4 of the half head
// dim, u a row of the block (tile vec4 jb + u · STR).
#define TA(c, u) ta[jb + (u) * STR + (c)]
#define TB(c, u) tb[jb + (u) * STR + (c)]
#define ZERO_S(c, u) s0[u] = 0.0; s1[u] = 0.0;
#define ZERO_DP(c, u) dp0[u] = 0.0; dp1[u] = 0.0;
#define SDOT(c, u) { vec4 e = TA(c, u); s0[u] += dot(x0[c], e); s1[u] += dot(x1[c], e); }
#define DOT_S(c) FOR_KB(SDOT, c)
#define DPDOT(c, u) { vec4 e = TB(c, u); dp0[u] += dot(y0[c], e); dp1[u] += dot(y1[c], e); }
#define DOT_DP(c) FOR_KB(DPDOT, c)
#define ACCA(c, u) { vec4 e = TA(c, u); acc0[c] += w0[u] * e; acc1[c] += w1[u] * e; }
#define ACC_A(c) FOR_KB(ACCA, c)
#define ACCB(c, u) { vec4 e = TB(c, u); acc0[c] += w0[u] * e; acc1[c] += w1[u] * e; }
#define ACC_B(c) FOR_KB(ACCB, c)
// The other half's partial sums (the pair's lanes differ in bit 0).
#define PAIR_S(c, u) s0[u] += subgroupShuffleXor(s0[u], 1u); s1[u] += subgroupShuffleXor(s1[u], 1u);
#define PAIR_DP(c, u) dp0[u] += subgroupShuffleXor(dp0[u], 1u); dp1[u] += subgroupShuffleXor(dp1[u], 1u);
// Row u of the block is in [lo, hi) of own row 0 or 1 (lo <= hi): one
// unsigned compare, and selects, not branches.
#define IN0(u) (uint(u) - sp.x < sp.y - sp.x)
#define IN1(u) (uint(u) - sp.z < sp.w - sp.z)
#define MASK_S(c, u) s0[u] = mix(NEG_INF, s0[u], IN0(u)); s1[u] = mix(NEG_INF, s1[u], IN1(u));
#define MASK_W(c, u) w0[u] = mix(0.0, w0[u], IN0(u)); w1[u] = mix(0.0, w1[u], IN1(u));
#define SUM_L(c, u) l0 += w0[u]; l1 += w1[u];
#define MAX_S(c, u) b0 = max(b0, s0[u]); b1 = max(b1, s1[u]);
#define EXP_W(c, u) w0[u] = exp2(s0[u] - m0); w1[u] = exp2(s1[u] - m1);
#define LT_ZERO(c, u) lt[u] = 0.0; dt[u] = 0.0;
#define LT_LOAD(c, u) lt[u] = tl[jj + (u)]; dt[u] = td[jj + (u)];
#define P_W(c, u) w0[u] = exp2(s0[u] - ls0 - lt[u]); w1[u] = exp2(s1[u] - ls1 - lt[u]);
#define DS_W(c, u) w0[u] *= dp0[u] - d0 - dt[u]; w1[u] *= dp1[u] - d1 - dt[u];
#define RESCALE0(c) acc0[c] *= a;
#define RESCALE1(c) acc1[c] *= a;
#define ZERO(c) acc0[c] = vec4(0.0); acc1[c] = vec4(0.0);
#define LOAD_X(c) x0[c] = ROW4(q, row0, hc + (c)) * pc.scale2; x1[c] = ROW4(q, row1, hc + (c)) * pc.scale2;
#define LOAD_XK(c) x0[c] = ROW4(k, row0, hc + (c)); x1[c] = ROW4(k, row1, hc + (c));
#define LOAD_YG(c) y0[c] = ROW4(g, row0, hc + (c)); y1[c] = ROW4(g, row1, hc + (c));
#define LOAD_YV(c) y0[c] = ROW4(v, row0, hc + (c)); y1[c] = ROW4(v, row1, hc + (c));
#define PUT0(c) put4(row0, hc + (c), acc0[c] * f);
#define PUT1(c) put4(row1, hc + (c), acc1[c] * f);

// The block of KB tile rows from row jj (this invocation's half at vec4
// jb), rows [sp.x, sp.y) for own row 0 and [sp.z, sp.w) for own row 1 (the
// others masked): AT_FWD, AT_LSE into the online softmax (m, l) and acc (row
// modes: the first block a row sees has row 0 unmasked, so m is finite from
// then on; a block wholly masked for a row leaves it be); the gradient modes
// into acc, with (AT_DQ) the rows' lse · log2(e) and D, else the tile's,
// lt and dt (AT_DQ: 0, so the subtractions stay exact).
// The scores and one accumulation are shared by the modes (code size: the
// unrolled block is what lavapipe's compile time grows with).
void block(uint jj, uint jb, uvec4 sp)
{
	float s0[KB], s1[KB], w0[KB], w1[KB], dp0[KB], dp1[KB], lt[KB], dt[KB];
	FOR_KB(ZERO_S, 0)
	FOR_HH(DOT_S)
	FOR_KB(PAIR_S, 0)
	if (pc.mode <= AT_LSE) {
		FOR_KB(MASK_S, 0)
		float b0 = s0[0], b1 = s1[0];
		FOR_KB(MAX_S, 0)
		if (b0 > m0) {
			float a = exp2(m0 - b0);
			l0 *= a;
			if (pc.mode == AT_FWD) {
				FOR_HH(RESCALE0)
			}
			m0 = b0;
		}
		if (b1 > m1) {
			float a = exp2(m1 - b1);
			l1 *= a;
			if (pc.mode == AT_FWD) {
				FOR_HH(RESCALE1)
			}
			m1 = b1;
		}
		FOR_KB(EXP_W, 0)
		FOR_KB(MASK_W, 0)
		FOR_KB(SUM_L, 0)
	} else {
		FOR_KB(LT_ZERO, 0)
		if (pc.mode != AT_DQ) {
			FOR_KB(LT_LOAD, 0)
		}
		FOR_KB(P_W, 0)
		FOR_KB(MASK_W, 0)
	}
	if (pc.mode == AT_FWD || pc.mode == AT_DV) {
		FOR_HH(ACC_B)
	} else if (pc.mode != AT_LSE) {
		FOR_KB(ZERO_DP, 0)
		FOR_HH(DOT_DP)
		FOR_KB(PAIR_DP, 0)
		FOR_KB(DS_W, 0)
		FOR_HH(ACC_A)
	}
}

// The rows [lo, hi) of a block from jj, within [0, KB], lo <= hi.
uvec2 span(uint lo_t, uint hi_t, uint jj)
{
	uint hi = hi_t > jj ? min(hi_t - jj, KB) : 0u, lo = lo_t > jj ? min(lo_t - jj, KB) : 0u;
	return uvec2(min(lo, hi), hi);
}

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	if (wg >= pc.n * pc.nblk)
		return; // a whole workgroup: no barrier is left waiting
	bool rm = row_mode();
	// Rank r of the blocks, n fastest; causal: the longest blocks first.
	uint n = wg % pc.n, blk = wg / pc.n;
	if (pc.causal != 0u && rm)
		blk = pc.nblk - 1u - blk;
	uint own_rows = rm ? pc.t : pc.s, other = rm ? pc.s : pc.t;
	// Pairs by subgroup lane, not by local id (the subgroups of a 1D
	// workgroup are full, WG being a multiple of their size): lane ranks
	// 0 .. WG-1 alike.
	uint lane = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
	uint h = lane & 1u, hc = h * HH, hb = h * (HH + 1u);
	uint i0 = blk * WG + (lane & ~1u), i1 = i0 + 1u; // the own rows
	bool live = i0 < own_rows; // the pair's, alike for both lanes
	uint row0 = n * own_rows + min(i0, own_rows - 1u), row1 = n * own_rows + min(i1, own_rows - 1u);

	FOR_HH(ZERO)
	if (rm) {
		FOR_HH(LOAD_X)
		if (pc.mode == AT_DQ) {
			FOR_HH(LOAD_YG)
			ls0 = lse[row0] * LOG2E;
			ls1 = lse[row1] * LOG2E;
			d0 = dd[row0];
			d1 = dd[row1];
		}
	} else {
		FOR_HH(LOAD_XK)
		if (pc.mode == AT_DK) {
			FOR_HH(LOAD_YV)
		}
	}

	// The tiles this block needs: causal row modes stop past the block's
	// last query; causal column modes start at the block's first key.
	uint first = 0u, end = (other + BC - 1u) / BC;
	if (pc.causal != 0u) {
		if (rm)
			end = min(end, (min(blk * WG + WG, own_rows) + BC - 1u) / BC);
		else
			first = blk * WG / BC;
	}
	for (uint tile = first; tile < end; tile++) {
		load_tile(n, tile, other);
		if (!live)
			continue;
		// The tile rows [lo, hi) each own row sees: causal row modes see
		// keys up to i, causal column modes queries from i on.
		uint t0 = tile * BC, nj = min(BC, other - t0);
		uvec4 rng = uvec4(0u, nj, 0u, nj); // row 0's [lo, hi), row 1's
		if (pc.causal != 0u) {
			if (rm) {
				rng.y = i0 + 1u > t0 ? min(nj, i0 + 1u - t0) : 0u;
				rng.w = i1 + 1u > t0 ? min(nj, i1 + 1u - t0) : 0u;
			} else {
				rng.x = i0 > t0 ? min(nj, i0 - t0) : 0u;
				rng.z = i1 > t0 ? min(nj, i1 - t0) : 0u;
			}
		}
		// The blocks any live row of the subgroup sees (row 0 starts
		// first, row 1 ends last): uniform bounds, the rest masked.
		uint lo_t = subgroupMin(rng.x), hi_t = subgroupMax(rng.w);
		for (uint jj = lo_t - lo_t % KB; jj < hi_t; jj += KB)
			block(jj, jj * STR + hb, uvec4(span(rng.x, rng.y, jj), span(rng.z, rng.w, jj)));
	}
	if (!live)
		return;
	if (pc.mode == AT_LSE) {
		if (h == 0u) {
			o[n * pc.t + i0] = (m0 + log2(l0)) / LOG2E;
			if (i1 < own_rows)
				o[n * pc.t + i1] = (m1 + log2(l1)) / LOG2E;
		}
		return;
	}
	// AT_DQ: acc holds sum ds k, times scale; AT_DK: sum ds q·scale2, over
	// log2(e); AT_FWD: over l.
	float f = pc.mode == AT_FWD ? 1.0 / l0 : pc.mode == AT_DQ ? pc.scale : pc.mode == AT_DK ? 1.0 / LOG2E : 1.0;
	FOR_HH(PUT0)
	if (i1 < own_rows) {
		if (pc.mode == AT_FWD)
			f = 1.0 / l1;
		FOR_HH(PUT1)
	}
}
