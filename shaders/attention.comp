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
// invocation (broadcast).
//   AT_FWD  own = query i, tiles of k, v: online softmax (a running max m2
//           and sum l per row, the accumulator rescaled when m2 grows);
//           out[n, i, :] = acc / l.
//   AT_LSE  as AT_FWD without v: out[n, i] = the row's logsumexp.
//   AT_DQ   own = query i, tiles of k, v; with p = exp2(s2 - lse2_i),
//           ds = p (g_i·v_j - D_i): out = scale · sum_j ds k_j.
//   AT_DK   own = key j, tiles of q (times scale·log2 e) and g:
//           out = scale · sum_i ds q_i.
//   AT_DV   own = key j, tiles of q and g: out = sum_i p g_i.
// Causal: key j is masked for query i when j > i (torch's is_causal, the
// top-left diagonal); tiles wholly masked are skipped.
//
// Loops: the head dim is unrolled by the FOR_HD4 macro (no loop at all), so
// an invocation runs, per tile, one loop iteration, LOADS tile loads and up
// to BC keys: attention_loop_iters (attention.c) keeps the sum within
// OP_LOOP_BUDGET. Mirrors struct attention_push in daemon/ops/attention.c.
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
#define LOG2E 1.4426950408889634

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer G { float g[]; };
layout(std430, binding = 4) readonly buffer L { float lse[]; };
layout(std430, binding = 5) readonly buffer D { float dd[]; };
layout(std430, binding = 6) writeonly buffer O { float o[]; };
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

// Tiles: the other side's rows, BC of them, HD4 vec4 each.
shared vec4 ta[BC * HD4];
shared vec4 tb[BC * HD4];

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

// Element d of a row at `base` of a buffer, 0 past the head dim.
#define LD(buf, base, d) ((d) < pc.hd ? buf[(base) + (d)] : 0.0)
#define LD4(buf, base, c) \
	vec4(LD(buf, base, 4u * (c)), LD(buf, base, 4u * (c) + 1u), LD(buf, base, 4u * (c) + 2u), \
	     LD(buf, base, 4u * (c) + 3u))

// The four elements of vec4 c of the own row at `base`, those below hd.
void put4(uint base, uint c, vec4 val)
{
	uint d = 4u * c;
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

// Tile `tile` of the other side into ta (k, or q · scale2) and tb (v or g).
void load_tile(uint n, uint tile, uint rows)
{
	bool rm = row_mode();
	barrier();
	for (uint e = gl_LocalInvocationID.x; e < BC * HD4; e += WG) {
		uint r = tile * BC + e / HD4, c = e % HD4;
		vec4 a = vec4(0.0), b = vec4(0.0);
		if (r < rows) {
			uint base = (n * rows + r) * pc.hd;
			if (rm) {
				a = LD4(k, base, c);
				if (pc.mode != AT_LSE)
					b = LD4(v, base, c);
			} else {
				a = LD4(q, base, c) * pc.scale2;
				b = LD4(g, base, c);
			}
		}
		ta[e] = a;
		tb[e] = b;
	}
	barrier();
}

// The statements FOR_HD4 repeats; jb is the tile row's first vec4.
#define DOT_A(c) s2 += dot(x[c], ta[jb + (c)]);
#define DOT_B(c) dp += dot(y[c], tb[jb + (c)]);
#define RESCALE(c) acc[c] *= a;
#define ACC_A(c) acc[c] += w * ta[jb + (c)];
#define ACC_B(c) acc[c] += w * tb[jb + (c)];
#define LOAD_X(c) x[c] = LD4(q, base, c) * pc.scale2;
#define LOAD_XK(c) x[c] = LD4(k, base, c);
#define LOAD_YG(c) y[c] = LD4(g, base, c);
#define LOAD_YV(c) y[c] = LD4(v, base, c);
#define ZERO(c) acc[c] = vec4(0.0);
#define PUT(c) put4(base, c, acc[c] * f);

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
	uint base = (n * own_rows + min(i, own_rows - 1u)) * pc.hd;
	vec4 x[HD4], y[HD4], acc[HD4];
	float m2 = uintBitsToFloat(0xff800000u), l = 0.0, lse2 = 0.0, drow = 0.0;

	FOR_HD4(ZERO)
	if (rm) {
		FOR_HD4(LOAD_X)
		if (pc.mode == AT_DQ) {
			FOR_HD4(LOAD_YG)
			lse2 = lse[n * pc.t + min(i, pc.t - 1u)] * LOG2E;
			drow = dd[n * pc.t + min(i, pc.t - 1u)];
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
		uint nj = min(BC, other - tile * BC);
		for (uint jj = 0u; jj < nj; jj++) {
			uint j = tile * BC + jj, jb = jj * HD4;
			if (pc.causal != 0u && (rm ? j > i : i > j))
				continue;
			float s2 = 0.0;
			FOR_HD4(DOT_A)
			if (pc.mode <= AT_LSE) {
				if (s2 > m2) {
					float a = exp2(m2 - s2);
					l *= a;
					if (pc.mode == AT_FWD) {
						FOR_HD4(RESCALE)
					}
					m2 = s2;
				}
				float w = exp2(s2 - m2);
				l += w;
				if (pc.mode == AT_FWD) {
					FOR_HD4(ACC_B)
				}
				continue;
			}
			float lr = rm ? lse2 : lse[n * pc.t + j] * LOG2E;
			float dr = rm ? drow : dd[n * pc.t + j];
			float p = exp2(s2 - lr);
			if (pc.mode == AT_DV) {
				float w = p;
				FOR_HD4(ACC_B)
				continue;
			}
			float dp = 0.0;
			FOR_HD4(DOT_B)
			float w = p * (dp - dr);
			FOR_HD4(ACC_A)
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
