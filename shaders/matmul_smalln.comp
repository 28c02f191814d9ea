#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Small-N product with A transposed (f32): C[b] = A[b]ᵀ @ op(B[b]), A stored
// [K, M], N <= 16, K long -- the weight gradient of a classifier layer,
// dW3 = h2ᵀ · g3 ([16384, 512]ᵀ · [16384, 10]). The square tiles read such
// an A across its stored rows and keep 10 of 128 columns busy: on an H100
// it took 1290 us at batch 16384 (split-K on matmul_l), for 32 MB read.
//
// A workgroup of 256 invocations owns 32 consecutive rows m of C and one
// chunk of K (kchunk terms; split `splits` ways like the tiled kernels'
// split-K). Invocation (r = tid % 32, s = tid / 32) sums the terms
// k = s, s + 8, s + 16, ... of the chunk for row m0 + r, its N results in
// 16 registers (zeros past N): a subgroup reads 32 consecutive floats of
// one stored row of A (coalesced). B's rows of the chunk are staged KB at a
// time in shared memory ([KB][16], zeros past N and the chunk), read as
// vec4s every invocation of a subgroup shares. Then the 8 slices of a row
// are summed in slice order through shared memory, so each result is a
// fixed-order sum: with splits > 1 the chunk's f32 partials go to
// part[split][batch][m][n] and matmul_reduce.comp sums the chunks in chunk
// order (bit-identical run to run); unsplit the result is stored through
// the epilogue (matmul_epi.glsl).
//
// Push constants are matmul.glsl's MmPush (the host passes tiles_mn =
// ceil(M / 32), the row blocks of one matrix); bindings too: 0 A, 1 B
// (stored [K, N], or [N, K] with MM_TB), 2 O, 3 partials, 4 the bias.
#include "common.glsl"

#define RW 32              // rows of C per workgroup
#define KS 8               // K slices per row
#define WG (RW * KS)
#define KB 128             // terms of the chunk staged per pass
#define NMAX 16
#define MM_TB 2u

layout(local_size_x = WG) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 3) writeonly buffer P { float part[]; };

// Mirrors struct mm_push in daemon/ops/matmul.c.
layout(push_constant) uniform MmPush {
	uint m, n, k;
	uint batches;
	uint tiles_n;
	uint tiles_mn;    // row blocks of RW rows per matrix
	uint nbdims;
	uint bshape[6];
	uint astride[6];
	uint bstride[6];
	uint flags;       // MM_TB, MM_BIAS, MM_RELU, MM_MASK (MM_TA is implied)
	uint splits;
	uint kchunk;
} pc;

#define BIAS_BINDING 4
#include "matmul_epi_store.glsl"

shared vec4 Bs[KB][NMAX / 4];
shared vec4 red[KS][RW][NMAX / 4];

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	uint per_split = pc.batches * pc.tiles_mn;
	// The whole workgroup leaves together, before any barrier.
	if (wg >= pc.splits * per_split)
		return;
	uint split = wg / per_split;
	wg -= split * per_split;
	uint batch = wg / pc.tiles_mn;
	uint row0 = (wg - batch * pc.tiles_mn) * RW;
	uint aoff = 0u, boff = 0u, rest = batch;
	for (int d = int(pc.nbdims) - 1; d >= 0; d--) {
		uint c = rest % pc.bshape[d];
		rest /= pc.bshape[d];
		aoff += c * pc.astride[d];
		boff += c * pc.bstride[d];
	}
	uint ooff = batch * pc.m * pc.n;
	uint tid = gl_LocalInvocationID.x;
	uint r = tid % RW, s = tid / RW, gm = row0 + r;
	bool tb = (pc.flags & MM_TB) != 0u, live = gm < pc.m;
	uint kbeg = split * pc.kchunk, kend = min(pc.k, kbeg + pc.kchunk);

	vec4 acc0 = vec4(0.0), acc1 = vec4(0.0), acc2 = vec4(0.0), acc3 = vec4(0.0);
	for (uint k0 = kbeg; k0 < kend; k0 += KB) {
		// This pass's terms of A first: their loads overlap B's staging.
		float av[KB / KS];
		[[unroll]] for (uint i = 0u; i < KB / KS; i++) {
			uint gk = k0 + s + KS * i;
			av[i] = (live && gk < kend) ? a[aoff + gk * pc.m + gm] : 0.0;
		}
		// B's rows k0 .. k0 + KB - 1, read along its stored rows.
		[[unroll]] for (uint p = 0u; p < KB * NMAX / WG; p++) {
			uint e = tid + WG * p;
			uint j = tb ? e / KB : e % NMAX, kk = tb ? e % KB : e / NMAX, gk = k0 + kk;
			float v = 0.0;
			if (j < pc.n && gk < kend)
				v = b[boff + (tb ? j * pc.k + gk : gk * pc.n + j)];
			Bs[kk][j / 4u][j % 4u] = v;
		}
		barrier();
		[[unroll]] for (uint i = 0u; i < KB / KS; i++) {
			uint kk = s + KS * i;
			acc0 += av[i] * Bs[kk][0];
			acc1 += av[i] * Bs[kk][1];
			acc2 += av[i] * Bs[kk][2];
			acc3 += av[i] * Bs[kk][3];
		}
		barrier();
	}
	red[s][r][0] = acc0;
	red[s][r][1] = acc1;
	red[s][r][2] = acc2;
	red[s][r][3] = acc3;
	barrier();
	// Each of the RW x NMAX results of the block: its slices in order.
	[[unroll]] for (uint p = 0u; p < RW * NMAX / WG; p++) {
		uint e = tid + WG * p, rr = e / NMAX, j = e % NMAX, row = row0 + rr;
		if (row >= pc.m || j >= pc.n)
			continue;
		float v = red[0][rr][j / 4u][j % 4u];
		[[unroll]] for (uint q = 1u; q < KS; q++)
			v += red[q][rr][j / 4u][j % 4u];
		uint at = ooff + row * pc.n + j;
		if (pc.splits > 1u)
			part[split * pc.batches * pc.m * pc.n + at] = v;
		else
			o[at] = MM_STORE(v, j, at);
	}
}
