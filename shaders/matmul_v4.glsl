// The body of matmul_v4.comp, matmul_tn_v4.comp, matmul_nt_v4.comp and
// matmul_nnp_v4.comp (the last three define MM_FIXED_LAYOUT: their layout is a
// compile-time constant; matmul_v4.comp keeps the products with both
// operands transposed).
// f32 batched matrix product for large products whose K and N are multiples
// of 4: matmul_l.comp's 128x128 tile and 8x8 per invocation, with every
// global and shared-memory access a vec4 and shared memory double-buffered
// (one barrier per K-step, the next step's operands read from global memory
// while this one computes). An invocation owns rows ty*4+{0..3} and
// 64+ty*4+{0..3} and the same pattern of columns, so its shared reads are two
// vec4 of A (broadcast across the half-warp) and two of B (consecutive).
// A is kept k-major in shared memory (As[k][row/4]); loads past M, N or K
// read zero and stores past M or N are skipped. Push constants, the
// transposed layouts (MM_TA: A stored [K, M], MM_TB: B stored [N, K]), the
// split-K chunks, the epilogue (MM_BIAS, MM_RELU, MM_MASK) and the workgroup numbering
// are matmul.glsl's. Global loads
// are vec4 along each operand's stored rows: the host picks this kernel only
// when those rows (K or M for A, N or K for B), N and the chunk are whole vec4s.
//
// Variant knobs for bench/gemm_variants.py (the defaults are the shipped
// code): MM_WG invocations (256 or 128) and MM_THR_M x MM_THR_N results per
// invocation (8x8; 8x16 or 16x8 with 128), so MM_WG * MM_THR_M * MM_THR_N =
// 128 * 128; MM_WMAP, a subgroup's 32 invocations cover 8 x 4 of the
// invocation grid instead of 16 x 2 (fewer distinct B vectors a read);
// MM_SPAD, shared rows padded by one vec4 (the transposing scalar stores of
// A in NN and B in NT spread over the banks).
#define TM 128
#define TN 128
#define TK 16
#ifndef MM_WG
#define MM_WG 256
#endif
#ifndef MM_THR_M
#define MM_THR_M 8
#endif
#ifndef MM_THR_N
#define MM_THR_N 8
#endif
#ifndef MM_SPAD
#define MM_SPAD 0
#endif
#define NTX (TN / MM_THR_N)           // invocations across the tile's columns
#define NTY (TM / MM_THR_M)           // and down its rows
#define LOADS (TM * TK / 4 / MM_WG)   // vec4 of each operand an invocation loads a K-step
#define AROWS (MM_WG / 4)             // rows (or columns) of four vec4 one loader pass covers
#define KROWS (MM_WG / 32)            // k rows of 32 vec4 one loader pass covers

layout(local_size_x = MM_WG) in;
layout(std430, binding = 0) readonly buffer A { vec4 a[]; };
layout(std430, binding = 1) readonly buffer B { vec4 b[]; };
layout(std430, binding = 2) writeonly buffer O { vec4 o[]; };
layout(std430, binding = 3) writeonly buffer P { vec4 part[]; };
layout(std430, binding = 4) readonly buffer Bias { vec4 bias[]; };

#define MM_TA 1u
#define MM_TB 2u
#define MM_PART 4u
#define MM_BIAS 8u
#define MM_RELU 16u
#define MM_MASK 32u

// Mirrors struct mm_push in daemon/ops/matmul.c.
layout(push_constant) uniform MmPush {
	uint m, n, k;
	uint batches;
	uint tiles_n;
	uint tiles_mn;
	uint nbdims;
	uint bshape[6];
	uint astride[6];
	uint bstride[6];
	uint flags;
	uint splits;
	uint kchunk;
} pc;

// The epilogue (matmul_epi.glsl's, in f32 where rounding to the dtype is
// exact): + bias[columns c .. c+3], then relu.
vec4 mm_epilogue4(vec4 v, uint c, uint q)
{
	// MM_MASK: the mask (bound as the bias) has the result's shape; q is
	// the vec4 of the result these four columns are. relu_grad's choice,
	// lane by lane: v where mask > 0, else 0.
	if ((pc.flags & MM_MASK) != 0u)
		return mix(vec4(0.0), v, greaterThan(bias[q], vec4(0.0)));
	if ((pc.flags & MM_BIAS) != 0u)
		v = v + bias[c / 4u];
	if ((pc.flags & MM_RELU) != 0u)
		v = max(v, vec4(0.0));
	return v;
}

shared vec4 As[2][TK][TM / 4 + MM_SPAD];
shared vec4 Bs[2][TK][TN / 4 + MM_SPAD];

// The K-step at k0 of both operands into registers (zeros past M, N, kend).
void load_tiles(uint k0, uint gr, uint gc, uint ar, uint ak, uint bk, uint bc, uint aoff, uint boff,
		uint kend, bool ta, bool tb, out vec4 va[LOADS], out vec4 vb[LOADS])
{
	[[unroll]] for (uint p = 0u; p < LOADS; p++) {
		if (ta) {
			uint k = k0 + ak + KROWS * p;
			va[p] = (gr < pc.m && k < kend) ? a[(aoff + k * pc.m + gr) / 4u] : vec4(0.0);
		} else {
			uint r = gr + AROWS * p, k = k0 + ak;
			va[p] = (r < pc.m && k < kend) ? a[(aoff + r * pc.k + k) / 4u] : vec4(0.0);
		}
		if (tb) {
			uint c = gc + AROWS * p, k = k0 + bk;
			vb[p] = (c < pc.n && k < kend) ? b[(boff + c * pc.k + k) / 4u] : vec4(0.0);
		} else {
			uint k = k0 + bk + KROWS * p;
			vb[p] = (k < kend && gc < pc.n) ? b[(boff + k * pc.n + gc) / 4u] : vec4(0.0);
		}
	}
}

// Registers into shared buffer `buf`: As[k][row / 4], Bs[k][column / 4].
void store_tiles(uint buf, uint ar, uint ak, uint bk, uint bc, bool ta, bool tb, vec4 va[LOADS], vec4 vb[LOADS])
{
	[[unroll]] for (uint p = 0u; p < LOADS; p++) {
		if (ta) {
			As[buf][ak + KROWS * p][ar >> 2] = va[p];
		} else {
			uint r = ar + AROWS * p;
			[[unroll]] for (uint c = 0u; c < 4u; c++)
				As[buf][ak + c][r >> 2][r & 3u] = va[p][c];
		}
		if (tb) {
			uint col = bc + AROWS * p;
			[[unroll]] for (uint c = 0u; c < 4u; c++)
				Bs[buf][bk + c][col >> 2][col & 3u] = vb[p][c];
		} else {
			Bs[buf][bk + KROWS * p][bc >> 2] = vb[p];
		}
	}
}

#ifdef MM_RASTER
#include "tile_raster.glsl"
#endif

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	uint per_split = pc.batches * pc.tiles_mn;
	if (wg >= pc.splits * per_split)
		return;
	uint split = wg / per_split;
	wg -= split * per_split;
	uint batch = wg / pc.tiles_mn;
	uint tile = wg - batch * pc.tiles_mn;
#ifdef MM_RASTER
	uvec2 rc = tile_raster(tile, pc.tiles_n, pc.tiles_mn, MM_RASTER);
	uint row0 = rc.x * TM, col0 = rc.y * TN;
#else
	uint row0 = (tile / pc.tiles_n) * TM;
	uint col0 = (tile % pc.tiles_n) * TN;
#endif
	uint aoff = 0u, boff = 0u, rest = batch;
	for (int d = int(pc.nbdims) - 1; d >= 0; d--) {
		uint c = rest % pc.bshape[d];
		rest /= pc.bshape[d];
		aoff += c * pc.astride[d];
		boff += c * pc.bstride[d];
	}
	uint ooff = batch * pc.m * pc.n;

	uint tid = gl_LocalInvocationID.x;
#ifdef MM_WMAP
	uint lane = tid & 31u, warp = tid >> 5;
	uint tx = (warp % (NTX / 8u)) * 8u + (lane & 7u), ty = (warp / (NTX / 8u)) * 4u + (lane >> 3);
#else
	uint tx = tid % NTX, ty = tid / NTX;
#endif
#ifdef MM_FIXED_LAYOUT
	// matmul_tn_v4.comp, matmul_nt_v4.comp: the layout is a constant, so
	// the loaders' branches on it compile away.
	const bool ta = (MM_FIXED_LAYOUT & MM_TA) != 0u, tb = (MM_FIXED_LAYOUT & MM_TB) != 0u;
#else
	bool ta = (pc.flags & MM_TA) != 0u, tb = (pc.flags & MM_TB) != 0u;
#endif
	uint kbeg = split * pc.kchunk, kend = min(pc.k, kbeg + pc.kchunk);
	// Loaders, two vec4 per operand and K-step. A untransposed: 128 rows of
	// four vec4 (k), two passes of 64 rows; transposed: 16 k of 32 vec4
	// (rows), two passes of 8 k. B untransposed: 16 k of 32 vec4 (columns),
	// two passes of 8 k; transposed: 128 columns of four vec4 (k), two
	// passes of 64 columns.
	uint ar = ta ? (tid & 31u) * 4u : tid >> 2, ak = ta ? tid >> 5 : (tid & 3u) * 4u;
	uint bk = tb ? (tid & 3u) * 4u : tid >> 5, bc = tb ? tid >> 2 : (tid & 31u) * 4u;
	uint gr = row0 + ar, gc = col0 + bc;

	float acc[MM_THR_M][MM_THR_N];
	[[unroll]] for (int i = 0; i < MM_THR_M; i++)
		[[unroll]] for (int j = 0; j < MM_THR_N; j++)
			acc[i][j] = 0.0;

	uint ntiles = (kend - kbeg + TK - 1u) / TK;
	vec4 va[LOADS], vb[LOADS];
	load_tiles(kbeg, gr, gc, ar, ak, bk, bc, aoff, boff, kend, ta, tb, va, vb);
	store_tiles(0u, ar, ak, bk, bc, ta, tb, va, vb);
	barrier();

	for (uint t = 0u; t < ntiles; t++) {
		uint cur = t & 1u;
		bool more = t + 1u < ntiles;
		if (more)
			load_tiles(kbeg + (t + 1u) * TK, gr, gc, ar, ak, bk, bc, aoff, boff, kend, ta, tb, va, vb);
		[[unroll]] for (uint kk = 0u; kk < TK; kk++) {
			// Rows ty*4 + NTY*4*g and columns tx*4 + NTX*4*g, a vec4 each.
			float av[MM_THR_M], bv[MM_THR_N];
			[[unroll]] for (uint g = 0u; g < MM_THR_M / 4u; g++) {
				vec4 v = As[cur][kk][NTY * g + ty];
				av[4u * g] = v.x; av[4u * g + 1u] = v.y; av[4u * g + 2u] = v.z; av[4u * g + 3u] = v.w;
			}
			[[unroll]] for (uint g = 0u; g < MM_THR_N / 4u; g++) {
				vec4 v = Bs[cur][kk][NTX * g + tx];
				bv[4u * g] = v.x; bv[4u * g + 1u] = v.y; bv[4u * g + 2u] = v.z; bv[4u * g + 3u] = v.w;
			}
			[[unroll]] for (int i = 0; i < MM_THR_M; i++)
				[[unroll]] for (int j = 0; j < MM_THR_N; j++)
					acc[i][j] += av[i] * bv[j];
		}
		if (more)
			store_tiles(cur ^ 1u, ar, ak, bk, bc, ta, tb, va, vb);
		barrier();
	}

	bool to_part = (pc.flags & MM_PART) != 0u;
	uint pbase = split * pc.batches * pc.m * pc.n;
	[[unroll]] for (int i = 0; i < MM_THR_M; i++) {
		uint r = row0 + NTY * 4u * uint(i / 4) + ty * 4u + uint(i % 4);
		if (r >= pc.m)
			continue;
		[[unroll]] for (int g = 0; g < MM_THR_N / 4; g++) {
			uint c = col0 + NTX * 4u * uint(g) + tx * 4u;
			vec4 v = vec4(acc[i][4 * g], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]);
			if (c >= pc.n)
				continue;
			if (to_part)
				part[(pbase + ooff + r * pc.n + c) / 4u] = v;
			else
				o[(ooff + r * pc.n + c) / 4u] = mm_epilogue4(v, c, (ooff + r * pc.n + c) / 4u);
		}
	}
}
