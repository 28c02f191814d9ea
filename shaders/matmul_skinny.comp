#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Tall-skinny NN product: C[b] = A[b] @ B[b] with N <= 16 (a classifier's
// logits, h @ W3 with 10 classes), K unsplit, in every float dtype. The
// square tiles waste most of their columns on such a product and read A in
// 64-byte pieces (on an H100 16384x512 @ 512x10 took 340 us in matmul_nn,
// about 30x what reading A once costs); a kernel with one invocation per row
// walking K alone is bound by one memory round trip per K-step (41 us for
// 4096 or 16384 rows).
//
// Here a workgroup owns ROWS rows, TPR invocations per row: K advances KC
// at a time, invocation q of a row taking the vec4-wide pieces q, q + TPR,
// ... of the row's KC terms (so a row's TPR invocations read 16 * TPR
// consecutive bytes, one piece each), held in registers, the next step's
// read while this one computes; B's KC x 16 step sits in double-buffered
// shared memory. Each invocation sums its terms in k order into 16
// accumulators; at the end the TPR partial sums of a result are added in q
// order (deterministic, though not the order of the tiled kernels), then
// matmul_epi.glsl's epilogue. Push constants and bindings are
// matmul_nn.glsl's (the host passes tiles_n = 1, tiles_mn = ceil(M / ROWS)).
#include "common.glsl"

#define ROWS 32
#define TPR 8
#define KC 64               // K per step: TPR invocations x PIECES x 4
#define PIECES (KC / 4 / TPR)
#define NMAX 16
#define WG (ROWS * TPR)

layout(local_size_x = WG) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
#ifdef DT_F32
layout(std430, binding = 0) readonly buffer A4 { vec4 a4[]; };
#endif
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
	uint flags;       // MM_BIAS, MM_RELU, MM_MASK (the layout bits are clear here)
} pc;

// MM_STORE: the epilogue in f32 only (matmul_epi_store.glsl).
#define BIAS_BINDING 4
#include "matmul_epi_store.glsl"

shared float Bs[2][KC][NMAX + 1];
shared float Cs[ROWS][TPR][NMAX + 1];

// This invocation's pieces of row `row` for the step at k0: PIECES vec4 of k
// k0 + 4 (q + TPR p) .. + 3, zeros past M and K.
void load_a(uint aoff, uint row, uint q, uint k0, bool v4, out vec4 va[PIECES])
{
	[[unroll]] for (uint p = 0u; p < PIECES; p++) {
		uint k = k0 + 4u * (q + TPR * p);
		va[p] = vec4(0.0);
		if (row >= pc.m)
			continue;
#ifdef DT_F32
		if (v4) {
			if (k < pc.k)
				va[p] = a4[(aoff + row * pc.k + k) / 4u];
			continue;
		}
#endif
		[[unroll]] for (uint c = 0u; c < 4u; c++)
			if (k + c < pc.k)
				va[p][c] = float(LOAD(a[aoff + row * pc.k + k + c]));
	}
}

// B's KC x NMAX step at k0 into Bs[buf] (zeros past K and N).
void load_b(uint boff, uint k0, uint buf, uint tid)
{
	for (uint e = tid; e < KC * NMAX; e += WG) {
		uint kk = e / NMAX, c = e % NMAX, gk = k0 + kk;
		Bs[buf][kk][c] = (gk < pc.k && c < pc.n) ? float(LOAD(b[boff + gk * pc.n + c])) : 0.0;
	}
}

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
	uint r = tid / TPR, q = tid % TPR, row = row0 + r;
	// vec4 reads of A where its rows are whole vec4s (then so is aoff).
	bool v4 = pc.k % 4u == 0u && aoff % 4u == 0u;

	float acc[NMAX];
	[[unroll]] for (int j = 0; j < NMAX; j++)
		acc[j] = 0.0;

	vec4 va[PIECES];
	load_a(aoff, row, q, 0u, v4, va);
	load_b(boff, 0u, 0u, tid);
	barrier();
	uint steps = (pc.k + KC - 1u) / KC;
	for (uint t = 0u; t < steps; t++) {
		uint cur = t & 1u;
		vec4 cv[PIECES] = va;
		if (t + 1u < steps) {
			load_a(aoff, row, q, (t + 1u) * KC, v4, va);
			load_b(boff, (t + 1u) * KC, cur ^ 1u, tid);
		}
		[[unroll]] for (uint p = 0u; p < PIECES; p++)
			[[unroll]] for (uint c = 0u; c < 4u; c++) {
				uint kk = 4u * (q + TPR * p) + c;
				[[unroll]] for (int j = 0; j < NMAX; j++)
					acc[j] += cv[p][c] * Bs[cur][kk][j];
			}
		barrier();
	}

	// Partial sums through shared memory, acc indexed by constants only
	// (sixteen unrolled bf16 stores took Mesa's lavapipe seconds to compile).
	[[unroll]] for (int j = 0; j < NMAX; j++)
		Cs[r][q][j] = acc[j];
	barrier();
	if (row >= pc.m)
		return;
	for (uint j = q; j < pc.n; j += TPR) {
		float s = 0.0;
		for (uint i = 0u; i < TPR; i++)
			s += Cs[r][i][j];
		o[ooff + row * pc.n + j] = MM_STORE(s, j, ooff + row * pc.n + j);
	}
}
