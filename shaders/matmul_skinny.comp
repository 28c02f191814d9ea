#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Tall-skinny NN product: C[b] = A[b] @ B[b] with N <= 16 (a classifier's
// logits, h @ W3 with 10 classes), K unsplit, in every float dtype. The
// square tiles waste most of their columns on such a product and read A in
// 64-byte pieces: on an H100 16384x512 @ 512x10 took 340 us in matmul_nn,
// about 30x what reading A once costs. Here one invocation owns one row of
// C (all of its N <= 16 columns); a workgroup of 128 rows stages A in
// 16-wide K-chunks through shared memory, read from global memory in whole
// 64-byte row pieces, and B's chunk (16 x N) beside it. Each result sums its
// K terms in order, as the tiled kernels do, then matmul_epi.glsl's
// epilogue. Push constants and bindings are matmul_nn.glsl's (the host
// passes tiles_n = 1, tiles_mn = ceil(M / 128)).
#include "common.glsl"

#define ROWS 128
#define KC 16
#define NMAX 16
#define WG ROWS

layout(local_size_x = WG) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
layout(std430, binding = 1) readonly buffer B { ELEM b[]; };
layout(std430, binding = 2) writeonly buffer O { ELEM o[]; };

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
	uint flags;       // MM_BIAS, MM_RELU (the layout bits are clear here)
} pc;

// MM_STORE: the epilogue in f32 only (matmul_epi_store.glsl).
#define BIAS_BINDING 4
#include "matmul_epi_store.glsl"

shared float As[KC][ROWS + 1];
shared float Bs[KC][NMAX];
shared float Cs[ROWS][NMAX + 1];

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	// The whole workgroup leaves together, before any barrier.
	if (wg >= pc.batches * pc.tiles_mn)
		return;
	uint batch = wg / pc.tiles_mn;
	uint row0 = (wg - batch * pc.tiles_mn) * ROWS;
	uint aoff = 0u, boff = 0u, rest = batch;
	for (int d = int(pc.nbdims) - 1; d >= 0; d--) {
		uint c = rest % pc.bshape[d];
		rest /= pc.bshape[d];
		aoff += c * pc.astride[d];
		boff += c * pc.bstride[d];
	}
	uint ooff = batch * pc.m * pc.n;
	uint tid = gl_LocalInvocationID.x;

	float acc[NMAX];
	[[unroll]] for (int j = 0; j < NMAX; j++)
		acc[j] = 0.0;

	for (uint k0 = 0u; k0 < pc.k; k0 += KC) {
		// A: ROWS x KC, KC consecutive k of a row per KC invocations.
		for (uint p = 0u; p < KC; p++) {
			uint e = tid + WG * p, r = e / KC, kk = e % KC, gr = row0 + r, gk = k0 + kk;
			As[kk][r] = (gr < pc.m && gk < pc.k) ? float(LOAD(a[aoff + gr * pc.k + gk])) : 0.0;
		}
		// B: KC x NMAX, zeros past N and K.
		for (uint p = 0u; p < KC * NMAX / WG; p++) {
			uint e = tid + WG * p, kk = e / NMAX, c = e % NMAX, gk = k0 + kk;
			Bs[kk][c] = (gk < pc.k && c < pc.n) ? float(LOAD(b[boff + gk * pc.n + c])) : 0.0;
		}
		barrier();
		for (uint kk = 0u; kk < KC; kk++) {
			float av = As[kk][tid];
			[[unroll]] for (int j = 0; j < NMAX; j++)
				acc[j] += av * Bs[kk][j];
		}
		barrier();
	}

	uint gr = row0 + tid;
	if (gr >= pc.m)
		return;
	// Through shared memory, so that the stores loop over N at run time
	// while acc is only ever indexed by constants: sixteen unrolled bf16
	// stores took Mesa's lavapipe seconds to compile, acc indexed at run
	// time about one.
	[[unroll]] for (int j = 0; j < NMAX; j++)
		Cs[tid][j] = acc[j];
	for (uint j = 0u; j < pc.n; j++)
		o[ooff + gr * pc.n + j] = MM_STORE(Cs[tid][j], j);
}
