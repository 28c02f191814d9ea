// The body of matmul_cm.comp, which defines the tile: BM x BN of C per
// workgroup, K steps of BK, WARPS_M x WARPS_N subgroups of 32, FM x FN 16x16
// accumulators per subgroup (BM = WARPS_M * FM * 16, likewise BN).
//
// K advances BK at a time through shared memory; the next step's operands are
// read from global memory into registers while the current step computes.
// Operands move as uvec4 (8 halves): BM, BN and BK must be multiples of 8
// and the tiles a whole number of uvec4 per invocation. Rows are padded in
// shared memory by 8 halves so that fragment loads spread over the banks.
// Every loop over fragments is unrolled: indexing an array of cooperative
// matrices with a loop counter makes the driver spill them (6x slower).
//
// The layout is a compile-time constant: CM_TA defined, A is stored
// transposed ([K, M]: weight gradients x^T g), CM_TB, B is ([N, K]: input
// gradients g W^T); shaders/meson.build builds matmul_cm{,_khr}{_nt,_tn}
// from the same .comp with one of them. Either way an operand's tile is
// copied to shared memory as stored (rows of its contiguous dimension) and
// its fragments are loaded column-major from there, so the global reads stay
// whole uvec4 rows and the NN module is the same code as before.
//
// matmul_cm_khr.comp compiles this too, and spv_coopmat_khr.py rewrites it
// into KHR cooperative matrices, once as is and once with every float16_t
// made bfloat16: so no arithmetic on 16-bit scalars here (SPV_KHR_bfloat16
// allows none), and A and B fragments stay in variables of their own (each
// value gets one Use).
//
// Variant knobs for bench/gemm_variants.py (each off by default, which is
// the shipped code): CM_PAD, halves of padding per shared row (8; 0, 8 or
// 16); CM_DBUF, shared memory double-buffered: the prefetched registers go
// into the other buffer after the step's MulAdds, one barrier per K step
// (twice the shared memory); CM_RASTER=G, workgroups walk the tiles in
// groups of G tile rows, column-major inside a group (L2 reuse of B);
// CM_FRAG_PF, the A/B fragments of step kk + 16 loaded before the MulAdds
// of step kk; CM_DIRECT, fragments loaded from global memory, no shared
// memory. The K loop of these variants is matmul_cm_var.glsl's.
//
// CM_OUT_F32 (the KHR modules matmul_cm_khr_f32out{,_nt,_tn}, for autocast:
// f32 operands rounded to 16 bits beforehand, an f32 result) stores the f32
// accumulators as they are into a float buffer: no conversion, no rounding;
// with CM_EPI too (matmul_cm_khr_f32out_epi*), the epilogue in `flags`
// applied to them first, in f32, as
// matmul_epi_apply.comp would after the store (the same bits): MM_BIAS adds
// bias[column] (binding 3, loaded as a matrix of 16 equal rows: stride 0),
// MM_RELU takes max(v, 0), MM_MASK (binding 3 a mask of the result's shape)
// keeps v where the mask is > 0, else 0.
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require

#define WG (WARPS_M * WARPS_N * 32)
// Each operand's tile as stored: A_OUT rows of A_IN contiguous halves (NN:
// BM rows of BK; CM_TA: BK rows of BM), likewise B (NN: BK rows of BN;
// CM_TB: BN rows of BK). Shared memory keeps that shape, rows padded.
#ifdef CM_TA
#define A_IN BM
#define A_OUT BK
#else
#define A_IN BK
#define A_OUT BM
#endif
#ifdef CM_TB
#define B_IN BK
#define B_OUT BN
#else
#define B_IN BN
#define B_OUT BK
#endif
#ifndef CM_PAD
#define CM_PAD 8
#endif
#define ASTR (A_IN / 8 + CM_PAD / 8)   // uvec4 per A row in shared memory (CM_PAD halves of padding)
#define BSTR (B_IN / 8 + CM_PAD / 8)   // uvec4 per B row
#define A_LOADS (BM * BK / 8 / WG)
#define B_LOADS (BK * BN / 8 / WG)
#define A_ROWS_PER (WG / (A_IN / 8))   // rows one pass of the workgroup covers
#define B_ROWS_PER (WG / (B_IN / 8))

layout(local_size_x = WG) in;
layout(std430, binding = 0) readonly buffer A { uvec4 a[]; };
layout(std430, binding = 1) readonly buffer B { uvec4 b[]; };
#ifdef CM_OUT_F32
layout(std430, binding = 2) writeonly buffer O { float o[]; };
#else
layout(std430, binding = 2) writeonly buffer O { float16_t o[]; };
#endif

// Mirrors struct mm_cm_push in daemon/ops/matmul.c. Strides in elements.
layout(push_constant) uniform MmCmPush {
	uint m, n, k;
	uint tiles_n, tiles_mn, batches;
	uint astride, bstride;   // elements between batch matrices (0: broadcast)
	uint mstore;             // rows stored: m, or fewer where A was padded (a multiple of 16)
	uint flags;              // CM_OUT_F32: the epilogue (MM_BIAS, MM_RELU, MM_MASK)
} pc;
#if defined(CM_OUT_F32) && defined(CM_EPI)
#define MM_BIAS 8u
#define MM_RELU 16u
#define MM_MASK 32u
// An accumulator's elements in one invocation: 16 x 16 over the subgroup of
// 32 that daemon/gpu/coopmat.c requires. A constant: the NVIDIA driver
// (580.159.04) crashed the process creating the pipeline when the loops
// were bounded by length() (OpCooperativeMatrixLengthKHR after the rewrite;
// bench/gemm_variants.py, 2026-11-29).
#define CM_ACC_LEN 8
layout(std430, binding = 3) readonly buffer Epi { float epi[]; };
#endif

#ifdef CM_DBUF
#define CM_NBUF 2
#else
#define CM_NBUF 1
#endif
#ifndef CM_DIRECT
shared uvec4 As[CM_NBUF * A_OUT * ASTR];
shared uvec4 Bs[CM_NBUF * B_OUT * BSTR];
#endif

#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define HALF fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>

#ifdef CM_RASTER
#include "tile_raster.glsl"
#endif

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	if (wg >= pc.batches * pc.tiles_mn)
		return;
	uint batch = wg / pc.tiles_mn;
	uint tile = wg - batch * pc.tiles_mn;
#ifdef CM_RASTER
	uvec2 rc = tile_raster(tile, pc.tiles_n, pc.tiles_mn, CM_RASTER);
	uint row0 = rc.x * BM, col0 = rc.y * BN;
#else
	uint row0 = (tile / pc.tiles_n) * BM;
	uint col0 = (tile % pc.tiles_n) * BN;
#endif
	// An operand's stored rows are alen8 (blen8) uvec4 long, its tile starts
	// A_TILE (B_TILE) halves into its matrix, and the K-step k0 A_KOFF(k0)
	// (B_KOFF(k0)) uvec4 into its tile.
#ifdef CM_TA
	uint alen8 = pc.m / 8u;
#define A_TILE row0
#define A_KOFF(k0) ((k0) * alen8)
#else
	uint alen8 = pc.k / 8u;
#define A_TILE (row0 * pc.k)
#define A_KOFF(k0) ((k0) / 8u)
#endif
#ifdef CM_TB
	uint blen8 = pc.k / 8u;
#define B_TILE (col0 * pc.k)
#define B_KOFF(k0) ((k0) / 8u)
#else
	uint blen8 = pc.n / 8u;
#define B_TILE col0
#define B_KOFF(k0) ((k0) * blen8)
#endif
	uint tid = gl_LocalInvocationID.x;

	uint ar = tid / (A_IN / 8), ac = tid % (A_IN / 8);
	uint br = tid / (B_IN / 8), bc = tid % (B_IN / 8);
	uint ga = (batch * pc.astride + A_TILE) / 8u + ar * alen8 + ac;
	uint gb = (batch * pc.bstride + B_TILE) / 8u + br * blen8 + bc;
	uvec4 ra[A_LOADS], rb[B_LOADS];
	[[unroll]] for (int p = 0; p < A_LOADS; p++)
		ra[p] = a[ga + uint(p * A_ROWS_PER) * alen8];
	[[unroll]] for (int p = 0; p < B_LOADS; p++)
		rb[p] = b[gb + uint(p * B_ROWS_PER) * blen8];

	uint warp = gl_SubgroupID;
	uint wm = warp / WARPS_N, wn = warp % WARPS_N;
	ACC acc[FM][FN];
	[[unroll]] for (int i = 0; i < FM; i++)
		[[unroll]] for (int j = 0; j < FN; j++)
			acc[i][j] = ACC(0.0);

#if defined(CM_DBUF) || defined(CM_FRAG_PF) || defined(CM_DIRECT)
#include "matmul_cm_var.glsl"
#else
	for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
		[[unroll]] for (int p = 0; p < A_LOADS; p++)
			As[(ar + uint(p * A_ROWS_PER)) * ASTR + ac] = ra[p];
		[[unroll]] for (int p = 0; p < B_LOADS; p++)
			Bs[(br + uint(p * B_ROWS_PER)) * BSTR + bc] = rb[p];
		barrier();
		if (k0 + BK < pc.k) {
			uint na = ga + A_KOFF(k0 + BK), nb = gb + B_KOFF(k0 + BK);
			[[unroll]] for (int p = 0; p < A_LOADS; p++)
				ra[p] = a[na + uint(p * A_ROWS_PER) * alen8];
			[[unroll]] for (int p = 0; p < B_LOADS; p++)
				rb[p] = b[nb + uint(p * B_ROWS_PER) * blen8];
		}
		[[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
			HALF fa[FM], fb[FN];
			// A fragment (m, k) and B fragment (k, n) from the tiles as
			// stored: row-major, or column-major where transposed.
#define M0 (wm * (FM * 16u) + uint(i) * 16u)
#define N0 (wn * (FN * 16u) + uint(j) * 16u)
			[[unroll]] for (int i = 0; i < FM; i++)
#ifdef CM_TA
				coopMatLoadNV(fa[i], As, kk * ASTR + M0 / 8u, ASTR, true);
#else
				coopMatLoadNV(fa[i], As, M0 * ASTR + kk / 8u, ASTR, false);
#endif
			[[unroll]] for (int j = 0; j < FN; j++)
#ifdef CM_TB
				coopMatLoadNV(fb[j], Bs, N0 * BSTR + kk / 8u, BSTR, true);
#else
				coopMatLoadNV(fb[j], Bs, kk * BSTR + N0 / 8u, BSTR, false);
#endif
			[[unroll]] for (int i = 0; i < FM; i++)
				[[unroll]] for (int j = 0; j < FN; j++)
					acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
		}
		barrier();
	}
#endif

	uint obase = batch * pc.mstore * pc.n;
	[[unroll]] for (int i = 0; i < FM; i++)
		[[unroll]] for (int j = 0; j < FN; j++) {
			uint r = row0 + wm * (FM * 16u) + uint(i) * 16u, c = col0 + wn * (FN * 16u) + uint(j) * 16u;
			if (r >= pc.mstore)
				continue;
#if defined(CM_OUT_F32) && defined(CM_EPI)
			ACC v = acc[i][j];
			if ((pc.flags & MM_MASK) != 0u) {
				ACC mk;
				coopMatLoadNV(mk, epi, obase + r * pc.n + c, pc.n, false);
				[[unroll]] for (int e = 0; e < CM_ACC_LEN; e++)
					v[e] = mk[e] > 0.0 ? v[e] : 0.0;
			}
			if ((pc.flags & MM_BIAS) != 0u) {
				ACC bf;
				coopMatLoadNV(bf, epi, c, 0u, false);
				v = v + bf;
			}
			if ((pc.flags & MM_RELU) != 0u)
				[[unroll]] for (int e = 0; e < CM_ACC_LEN; e++)
					v[e] = max(v[e], 0.0);
			coopMatStoreNV(v, o, obase + r * pc.n + c, pc.n, false);
#elif defined(CM_OUT_F32)
			coopMatStoreNV(acc[i][j], o, obase + r * pc.n + c, pc.n, false);
#else
			HALF h = HALF(acc[i][j]);
			coopMatStoreNV(h, o, obase + r * pc.n + c, pc.n, false);
#endif
		}
}
