// The body of matmul_nn.comp and matmul_nn_l.comp: the batched matrix product
// C[b] = A[b] @ B[b] (row-major, contiguous matrices, neither transposed, K
// unsplit), accumulated in f32 and stored in the variant's dtype. matmul.glsl
// does every layout and split-K with the layout read from push constants;
// kept apart because those runtime branches in the loaders cost a third of
// the H100's f32 throughput and most of bf16's (docs/performance.md), while
// the NN product is what forward passes and most client products are. The
// push constants are matmul.glsl's (splits and kchunk are not read; flags
// only for the epilogue, matmul_epi.glsl).
//
// Tiling: each workgroup of 256 invocations (16x16) computes a TM x TN tile of
// C; each invocation an R x R micro-tile (R = TM / 16) whose rows are
// ty + 16*i and columns tx + 16*j (strided, so neighbouring invocations read
// neighbouring shared-memory words and write neighbouring global addresses).
// K advances TK at a time through shared memory; loads past M, N or K read
// zero and stores past M or N are skipped, so no size needs to be a tile
// multiple. The includer defines TM (= TN) and TK: 64/16 (matmul.comp) or
// 128/8 (matmul_l.comp, more work per shared-memory read for large products).
//
// The workgroup's linear id (the grid may spill into y) is
// batch * tiles_m * tiles_n + tile_m * tiles_n + tile_n. The batch index is
// split over up to 6 collapsed batch dims; each operand has an element stride
// per dim (0 where it is broadcast). The output is contiguous.
#include "common.glsl"

#define TN TM
#define R (TM / 16)
#define WG 256
#define A_ROWS (WG / TK)      // A rows loaded per pass
#define A_PASSES (TM / A_ROWS)
#define B_KS (WG / TN)        // B rows (k) loaded per pass
#define B_PASSES (TK / B_KS)

layout(local_size_x = WG) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
layout(std430, binding = 1) readonly buffer B { ELEM b[]; };
layout(std430, binding = 2) writeonly buffer O { ELEM o[]; };

// Mirrors struct mm_push in daemon/ops/matmul.c.
layout(push_constant) uniform MmPush {
	uint m, n, k;
	uint batches;     // product of bshape
	uint tiles_n;     // ceil(n / TN)
	uint tiles_mn;    // ceil(m / TM) * tiles_n
	uint nbdims;      // batch dims after collapsing (0..6)
	uint bshape[6];   // batch dims, outermost first
	uint astride[6];  // element stride of A per batch dim (0: broadcast)
	uint bstride[6];
	uint flags;       // MM_BIAS, MM_RELU, MM_MASK (the layout bits are clear here)
} pc;

// MM_STORE: the epilogue in f32 only (matmul_epi_store.glsl).
#define BIAS_BINDING 4
#include "matmul_epi_store.glsl"

shared float As[TK][TM + 1];
shared float Bs[TK][TN];

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	// The whole workgroup leaves together, before any barrier.
	if (wg >= pc.batches * pc.tiles_mn)
		return;
	uint batch = wg / pc.tiles_mn;
	uint tile = wg - batch * pc.tiles_mn;
	uint row0 = (tile / pc.tiles_n) * TM;
	uint col0 = (tile % pc.tiles_n) * TN;

	uint aoff = 0u, boff = 0u, rest = batch;
	for (int d = int(pc.nbdims) - 1; d >= 0; d--) {
		uint c = rest % pc.bshape[d];
		rest /= pc.bshape[d];
		aoff += c * pc.astride[d];
		boff += c * pc.bstride[d];
	}
	uint ooff = batch * pc.m * pc.n;

	uint tid = gl_LocalInvocationID.x;
	uint tx = tid % 16u, ty = tid / 16u;
	// Loader coordinates: A in rows of 16 k, B in rows of 64 columns.
	uint a_k = tid % TK, a_r = tid / TK;
	uint b_c = tid % TN, b_k = tid / TN;

	float acc[R][R];
	for (int i = 0; i < R; i++)
		for (int j = 0; j < R; j++)
			acc[i][j] = 0.0;

	for (uint k0 = 0u; k0 < pc.k; k0 += TK) {
		for (uint p = 0u; p < A_PASSES; p++) {
			uint r = a_r + A_ROWS * p, gr = row0 + r, gk = k0 + a_k;
			float v = 0.0;
			if (gr < pc.m && gk < pc.k)
				v = float(LOAD(a[aoff + gr * pc.k + gk]));
			As[a_k][r] = v;
		}
		for (uint p = 0u; p < B_PASSES; p++) {
			uint kk = b_k + B_KS * p, gk = k0 + kk, gc = col0 + b_c;
			float v = 0.0;
			if (gk < pc.k && gc < pc.n)
				v = float(LOAD(b[boff + gk * pc.n + gc]));
			Bs[kk][b_c] = v;
		}
		barrier();
		for (uint kk = 0u; kk < TK; kk++) {
			float av[R], bv[R];
			for (uint i = 0u; i < R; i++)
				av[i] = As[kk][ty + 16u * i];
			for (uint j = 0u; j < R; j++)
				bv[j] = Bs[kk][tx + 16u * j];
			for (uint i = 0u; i < R; i++)
				for (uint j = 0u; j < R; j++)
					acc[i][j] += av[i] * bv[j];
		}
		barrier();
	}

	for (uint i = 0u; i < R; i++) {
		uint gr = row0 + ty + 16u * i;
		if (gr >= pc.m)
			continue;
		for (uint j = 0u; j < R; j++) {
			uint gc = col0 + tx + 16u * j;
			if (gc < pc.n)
				o[ooff + gr * pc.n + gc] = MM_STORE(acc[i][j], gc, ooff + gr * pc.n + gc);
		}
	}
}
