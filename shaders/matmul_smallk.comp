#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Small-K product (f32): C[b] = op(A[b]) @ op(B[b]) with K <= 16, in every
// layout -- the input gradient of a classifier layer, dh2 = g3 · W3ᵀ
// ([16384, 10] · [512, 10]ᵀ, K = 10). Such a product is bound by writing C;
// the square tiles took 182 us on an H100 for its 32 MB (12 us to write).
//
// A workgroup owns a block of 4·QB consecutive columns (QB quads, the
// smallest power of two holding a row's quads, at most 64) and 256 / QB ·
// splits rows (splits: 8, fewer where that would leave the GPU idle): it stages B's [K, 4·QB] block in shared memory (read along B's
// stored rows: B may be stored [K, N], or [N, K] with MM_TB). Each
// invocation then holds its quad's K x 4 values of B in registers and
// computes that quad, C[m][n0 .. n0 + 3], for 8 rows: the K values of A's
// row m (stored [M, K], or [K, M] with MM_TA; neighbouring invocations
// mostly on one row: the same words) times the quad's, summed in k order,
// stored through the epilogue (matmul_epi.glsl) -- one vec4 store where N
// is a multiple of 4 (then every quad is aligned: each matrix holds M·N
// floats), else its columns below N one by one.
//
// Push constants are matmul.glsl's MmPush: the host passes tiles_n, the
// column blocks, and tiles_mn, the blocks of one matrix (mm_smallk_grid in
// daemon/ops/matmul.c computes QB as this shader does); bindings too: 0 A,
// 1 B, 2 O, 3 unused, 4 the bias.
#include "common.glsl"

#define WG 256
#define KMAX 16
#define QMAX 64            // quads per block, at most
#define PASSES 8           // rows per invocation
#define MM_TA 1u
#define MM_TB 2u

layout(local_size_x = WG) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 2) writeonly buffer O4 { vec4 o4[]; };

// Mirrors struct mm_push in daemon/ops/matmul.c.
layout(push_constant) uniform MmPush {
	uint m, n, k;
	uint batches;
	uint tiles_n;     // column blocks
	uint tiles_mn;    // row blocks * column blocks
	uint nbdims;
	uint bshape[6];
	uint astride[6];
	uint bstride[6];
	uint flags;       // MM_TA, MM_TB, MM_BIAS, MM_RELU, MM_MASK
	uint splits;      // rows per invocation, 1 to PASSES (a row block: rp * splits rows)
	uint kchunk;      // unused
} pc;

#define BIAS_BINDING 4
#include "matmul_epi_store.glsl"

// A row of one vec4 more: the staging stores of B stored [N, K] (k the
// fastest) spread over the banks.
shared vec4 Bs[KMAX][QMAX + 1];

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	// The whole workgroup leaves together, before the barrier.
	if (wg >= pc.batches * pc.tiles_mn)
		return;
	uint n = pc.n, k = pc.k, quads = (n + 3u) / 4u;
	uint qb = min(QMAX, quads <= 1u ? 1u : 1u << (findMSB(quads - 1u) + 1));
	uint rp = WG / qb;
	uint batch = wg / pc.tiles_mn, t = wg - batch * pc.tiles_mn;
	uint rb = t / pc.tiles_n, cb = t - rb * pc.tiles_n;
	uint aoff = 0u, boff = 0u, rest = batch;
	for (int d = int(pc.nbdims) - 1; d >= 0; d--) {
		uint c = rest % pc.bshape[d];
		rest /= pc.bshape[d];
		aoff += c * pc.astride[d];
		boff += c * pc.bstride[d];
	}
	bool ta = (pc.flags & MM_TA) != 0u, tb = (pc.flags & MM_TB) != 0u;
	uint tid = gl_LocalInvocationID.x, c0 = cb * qb * 4u, width = min(qb * 4u, n - c0);

	// B's block, zeros past N.
	for (uint e = tid; e < k * qb * 4u; e += WG) {
		uint kk = tb ? e % k : e / (qb * 4u), c = tb ? e / k : e % (qb * 4u);
		Bs[kk][c / 4u][c % 4u] = c < width ? b[boff + (tb ? (c0 + c) * k + kk : kk * n + c0 + c)] : 0.0;
	}
	barrier();

	uint q = tid % qb, n0 = c0 + 4u * q, ooff = batch * pc.m * n;
	if (n0 >= n)
		return;
	// The invocation's quad of B in registers, for all its rows.
	vec4 bq[KMAX];
	[[unroll]] for (uint kk = 0u; kk < KMAX; kk++)
		bq[kk] = kk < k ? Bs[kk][q] : vec4(0.0);
	[[unroll]] for (uint p = 0u; p < PASSES; p++) {
		uint m = (rb * pc.splits + p) * rp + tid / qb;
		if (p >= pc.splits || m >= pc.m)
			break;
		vec4 acc = vec4(0.0);
		[[unroll]] for (uint kk = 0u; kk < KMAX; kk++) {
			if (kk >= k)
				break;
			acc += a[aoff + (ta ? kk * pc.m + m : m * k + kk)] * bq[kk];
		}
		uint at = ooff + m * n + n0;
		if (n % 4u == 0u) {
			o4[at / 4u] = vec4(MM_STORE(acc.x, n0, at), MM_STORE(acc.y, n0 + 1u, at + 1u),
					   MM_STORE(acc.z, n0 + 2u, at + 2u), MM_STORE(acc.w, n0 + 3u, at + 3u));
			continue;
		}
		[[unroll]] for (uint c = 0u; c < 4u; c++)
			if (n0 + c < n)
				o[at + c] = MM_STORE(acc[c], n0 + c, at + c);
	}
}
