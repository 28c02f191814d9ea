#version 450
#extension GL_GOOGLE_include_directive : require
// Fused attention (daemon/ops/attention.c, docs/ops.md "Attention"), f32,
// never writing a [T, S] matrix: q [N, T, hd], k and v [N, S, hd].
// Built once per head-dim bound HD (16, 32, 64, 128: variants "d16"...);
// a head of hd <= HD is read with zeros past hd, so the HD-wide math is
// exact. Scores are kept in base 2: s2 = (q·k) · scale · log2(e), so
// exp2(s2 - m2) is the softmax numerator and lse = m2 · ln(2) + ln(l).
//
// One workgroup of 64 invocations per (n, block of 64 "own" rows); each
// invocation owns one row and holds its vectors in registers; the "other"
// side streams through shared memory in tiles of BC rows, read by every
// invocation (broadcast). A tile is walked in blocks of KB rows: KB scores
// (and KB g·v products) are summed side by side, KB independent FMA chains
// instead of one, and the softmax bookkeeping runs once per block.
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
// top-left diagonal); tiles and KB-blocks wholly masked are skipped, masked
// entries of a block get s2 = -inf (AT_FWD, AT_LSE) or p = 0 (gradients),
// as do the rows past the end of the last tile.
// Loads: when hd % 4 == 0 rows are read as whole vec4 (vec4 views of the
// same buffers: rows start at multiples of hd floats, bindings at offset
// 0); otherwise element by element with zeros past hd.
//
// Loops: the head dim and the KB rows of a block are unrolled by macros
// (FOR_HD4, FOR_KB: no loop at all), so an invocation runs, per tile, one
// loop iteration, BC · HD4 / WG tile loads and up to BC / KB blocks:
// attention_loop_iters (attention.c, whose attention_tile and
// attention_block mirror BC and KB_N) keeps the sum within OP_LOOP_BUDGET.
// Mirrors struct attention_push in daemon/ops/attention.c.
#define DT_F32 1
#include "common.glsl"

#define AT_FWD 0u
#define AT_LSE 1u
#define AT_DQ 2u
#define AT_DK 3u
#define AT_DV 4u

#define WG 64u
#define HD4 (HD / 4)
#if HD <= 64
#define BC 64u
#else
#define BC 32u
#endif
// Rows of a tile per block (divides BC; 1, 2, 4, 8 or 16; attention.c's
// attention_block mirrors it). Fewer at HD 128: x, y and acc already fill
// the registers, and lavapipe's LLVM time grows with the unrolled block
// (on a 2-core host, uncached: d64 at 8 about 20 s, d128 at 2 about 37 s,
// at 8 over 5 minutes).
#ifndef KB_N
#if HD <= 64
#define KB_N 8
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

// Tiles: the other side's rows, BC of them, HD4 vec4 each; in the column
// modes also their lse · log2(e) and D.
shared vec4 ta[BC * HD4];
shared vec4 tb[BC * HD4];
shared float tl[BC];
shared float td[BC];

// Repeat X(c) for c = 0 .. HD4-1 (constant indices: registers, no loop).
#define R1(X, b) X(b)
#define R2(X, b) R1(X, b) R1(X, (b) + 1)
#define R4(X, b) R2(X, b) R2(X, (b) + 2)
#define R8(X, b) R4(X, b) R4(X, (b) + 4)
#define R16(X, b) R8(X, b) R8(X, (b) + 8)
#define R32(X, b) R16(X, b) R16(X, (b) + 16)
#if HD == 16
#define FOR_HD4(X) R4(X, 0)
#elif HD == 32
#define FOR_HD4(X) R8(X, 0)
#elif HD == 64
#define FOR_HD4(X) R16(X, 0)
#elif HD == 128
#define FOR_HD4(X) R32(X, 0)
#else
#error "HD must be 16, 32, 64 or 128"
#endif

// Repeat Y(c, u) for u = 0 .. KB-1 (inside FOR_HD4 too: other macros).
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
		uint r = tile * BC + e / HD4, c = e % HD4;
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
		ta[e] = a;
		tb[e] = b;
	}
	if (!rm && lid < BC) { // BC <= WG: one row each, no loop
		uint r = tile * BC + lid;
		tl[lid] = r < rows ? lse[n * rows + r] * LOG2E : 0.0;
		td[lid] = r < rows && pc.mode == AT_DK ? dd[n * rows + r] : 0.0;
	}
	barrier();
}

// The statements FOR_HD4 and FOR_KB repeat: c is a vec4 of the head dim,
// u a row of the block (tile row jb / HD4 + u).
#define TA(c, u) ta[jb + (u) * HD4 + (c)]
#define TB(c, u) tb[jb + (u) * HD4 + (c)]
#define ZERO_S(c, u) s[u] = 0.0;
#define ZERO_DP(c, u) dp[u] = 0.0;
#define SDOT(c, u) s[u] += dot(x[c], TA(c, u));
#define DOT_S(c) FOR_KB(SDOT, c)
#define DPDOT(c, u) dp[u] += dot(y[c], TB(c, u));
#define DOT_DP(c) FOR_KB(DPDOT, c)
#define ACCA(c, u) acc[c] += w[u] * TA(c, u);
#define ACC_A(c) FOR_KB(ACCA, c)
#define ACCB(c, u) acc[c] += w[u] * TB(c, u);
#define ACC_B(c) FOR_KB(ACCB, c)
// Row u of the block is in [lo, hi) (lo <= hi): one unsigned compare, and
// selects, not branches.
#define IN_BLOCK(u) (uint(u) - lo < hi - lo)
#define MASK_S(c, u) s[u] = mix(NEG_INF, s[u], IN_BLOCK(u));
#define MASK_W(c, u) w[u] = mix(0.0, w[u], IN_BLOCK(u));
#define SUM_L(c, u) l += w[u];
#define MAX_S(c, u) bm = max(bm, s[u]);
#define EXP_W(c, u) w[u] = exp2(s[u] - m2);
#define P_W(c, u) w[u] = exp2(s[u] - mix(tl[jj + (u)], lse2, rm));
#define DS_W(c, u) w[u] *= dp[u] - mix(td[jj + (u)], drow, rm);
#define RESCALE(c) acc[c] *= a;
#define ZERO(c) acc[c] = vec4(0.0);
#define LOAD_X(c) x[c] = ROW4(q, row, c) * pc.scale2;
#define LOAD_XK(c) x[c] = ROW4(k, row, c);
#define LOAD_YG(c) y[c] = ROW4(g, row, c);
#define LOAD_YV(c) y[c] = ROW4(v, row, c);
#define PUT(c) put4(row, c, acc[c] * f);

// The block of KB tile rows from row jj (vec4 jb), its rows [lo, hi)
// (lo <= hi; the others masked), for the own row x, y: AT_FWD, AT_LSE into
// the online softmax (m2, l) and acc (row modes: the first block a row sees
// has row 0 unmasked, so m2 is finite from then on); the gradient modes
// into acc, with (AT_DQ) the row's lse · log2(e) and D, else the tile's.
// The scores and one accumulation are shared by the modes (code size: the
// unrolled block is what lavapipe's compile time grows with).
void block(uint jj, uint jb, uint lo, uint hi, in vec4 x[HD4], in vec4 y[HD4], inout vec4 acc[HD4],
	   inout float m2, inout float l, float lse2, float drow)
{
	float s[KB], w[KB], dp[KB];
	bool rm = pc.mode == AT_DQ; // lse2 and drow, else the tile's tl and td
	FOR_KB(ZERO_S, 0)
	FOR_HD4(DOT_S)
	if (pc.mode <= AT_LSE) {
		FOR_KB(MASK_S, 0)
		float bm = s[0];
		FOR_KB(MAX_S, 0)
		if (bm > m2) {
			float a = exp2(m2 - bm);
			l *= a;
			if (pc.mode == AT_FWD) {
				FOR_HD4(RESCALE)
			}
			m2 = bm;
		}
		FOR_KB(EXP_W, 0)
		FOR_KB(MASK_W, 0)
		FOR_KB(SUM_L, 0)
	} else {
		FOR_KB(P_W, 0)
		FOR_KB(MASK_W, 0)
	}
	if (pc.mode == AT_FWD || pc.mode == AT_DV) {
		FOR_HD4(ACC_B)
	} else if (pc.mode != AT_LSE) {
		FOR_KB(ZERO_DP, 0)
		FOR_HD4(DOT_DP)
		FOR_KB(DS_W, 0)
		FOR_HD4(ACC_A)
	}
}

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	if (wg >= pc.n * pc.nblk)
		return; // a whole workgroup: no barrier is left waiting
	uint n = wg / pc.nblk, blk = wg % pc.nblk;
	bool rm = row_mode();
	uint own_rows = rm ? pc.t : pc.s, other = rm ? pc.s : pc.t;
	uint i = blk * WG + gl_LocalInvocationID.x; // the own row
	bool live = i < own_rows;
	uint row = n * own_rows + min(i, own_rows - 1u);
	vec4 x[HD4], y[HD4], acc[HD4];
	float m2 = NEG_INF, l = 0.0, lse2 = 0.0, drow = 0.0;

	FOR_HD4(ZERO)
	if (rm) {
		FOR_HD4(LOAD_X)
		if (pc.mode == AT_DQ) {
			FOR_HD4(LOAD_YG)
			lse2 = lse[row] * LOG2E;
			drow = dd[row];
		}
	} else {
		FOR_HD4(LOAD_XK)
		if (pc.mode == AT_DK) {
			FOR_HD4(LOAD_YV)
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
		// The tile rows [lo_t, hi_t) this row sees: causal row modes see
		// keys up to i, causal column modes queries from i on.
		uint t0 = tile * BC, nj = min(BC, other - t0), lo_t = 0u, hi_t = nj;
		if (pc.causal != 0u) {
			if (rm)
				hi_t = i + 1u > t0 ? min(nj, i + 1u - t0) : 0u;
			else
				lo_t = i > t0 ? min(nj, i - t0) : 0u;
		}
		for (uint jj = lo_t - lo_t % KB; jj < hi_t; jj += KB) {
			uint lo = lo_t > jj ? lo_t - jj : 0u, hi = min(hi_t - jj, KB);
			block(jj, jj * HD4, lo, hi, x, y, acc, m2, l, lse2, drow);
		}
	}
	if (!live)
		return;
	if (pc.mode == AT_LSE) {
		o[n * pc.t + i] = (m2 + log2(l)) / LOG2E;
		return;
	}
	// AT_DQ: acc holds sum ds k, times scale; AT_DK: sum ds q·scale2, over
	// log2(e); AT_FWD: over l.
	float f = pc.mode == AT_FWD ? 1.0 / l : pc.mode == AT_DQ ? pc.scale : pc.mode == AT_DK ? 1.0 / LOG2E : 1.0;
	FOR_HD4(PUT)
}
