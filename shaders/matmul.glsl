// The body of matmul.comp and matmul_l.comp: the batched matrix product
// C[b] = op(A[b]) @ op(B[b]) (row-major, contiguous matrices; op transposes
// A when flags has MM_TA, B with MM_TB: A is then stored [K, M], B [N, K]),
// accumulated in f32 and stored in the variant's dtype.
//
// Split-K: workgroup ids past batches * tiles_mn take the next K chunk of
// kchunk terms (`splits` chunks in all); with MM_PART set every chunk writes
// its f32 partial tile to p[split][batch][m][n] instead of o, and
// matmul_reduce.comp sums the chunks in a fixed order.
//
// Epilogue (matmul_epi.glsl): with MM_BIAS and/or MM_RELU the stored result
// is relu(round(acc) + bias[column]); with MM_MASK it is round(acc) where the
// mask (the result's shape) is > 0, else 0. Split products apply it in the sum.
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
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

#define TN TM
#define R (TM / 16)
#define WG 256
#define A_LOADS (TM * TK / WG)   // elements of A (and of B) one invocation loads per K-step
#define B_LOADS (TK * TN / WG)
#define MM_TA 1u
#define MM_TB 2u
#define MM_PART 4u

layout(local_size_x = WG) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
layout(std430, binding = 1) readonly buffer B { ELEM b[]; };
layout(std430, binding = 2) writeonly buffer O { ELEM o[]; };
layout(std430, binding = 3) writeonly buffer P { float part[]; };

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
	uint flags;       // MM_TA, MM_TB, MM_PART, MM_BIAS, MM_RELU, MM_MASK
	uint splits;      // K chunks (1: no split)
	uint kchunk;      // terms per chunk
} pc;

// MM_STORE: the epilogue in f32 only (matmul_epi_store.glsl).
#define BIAS_BINDING 4
#include "matmul_epi_store.glsl"

shared float As[TK][TM + 1];
shared float Bs[TK][TN + 1];

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
	// The whole workgroup leaves together, before any barrier.
	uint per_split = pc.batches * pc.tiles_mn;
	if (wg >= pc.splits * per_split)
		return;
	uint split = wg / per_split;
	wg -= split * per_split;
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
	bool ta = (pc.flags & MM_TA) != 0u, tb = (pc.flags & MM_TB) != 0u;
	uint kbeg = split * pc.kchunk, kend = min(pc.k, kbeg + pc.kchunk);

	float acc[R][R];
	for (int i = 0; i < R; i++)
		for (int j = 0; j < R; j++)
			acc[i][j] = 0.0;

	for (uint k0 = kbeg; k0 < kend; k0 += TK) {
		// Element e of the tile runs along the operand's stored rows, so
		// neighbouring invocations read neighbouring global words.
		[[unroll]] for (uint p = 0u; p < A_LOADS; p++) {
			uint e = tid + WG * p;
			uint r = ta ? e % TM : e / TK, kk = ta ? e / TM : e % TK;
			uint gr = row0 + r, gk = k0 + kk;
			float v = 0.0;
			if (gr < pc.m && gk < kend)
				v = float(LOAD(a[aoff + (ta ? gk * pc.m + gr : gr * pc.k + gk)]));
			As[kk][r] = v;
		}
		[[unroll]] for (uint p = 0u; p < B_LOADS; p++) {
			uint e = tid + WG * p;
			uint c = tb ? e / TK : e % TN, kk = tb ? e % TK : e / TN;
			uint gk = k0 + kk, gc = col0 + c;
			float v = 0.0;
			if (gk < kend && gc < pc.n)
				v = float(LOAD(b[boff + (tb ? gc * pc.k + gk : gk * pc.n + gc)]));
			Bs[kk][c] = v;
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
			if (gc >= pc.n)
				continue;
			if ((pc.flags & MM_PART) != 0u)
				part[split * pc.batches * pc.m * pc.n + ooff + gr * pc.n + gc] = acc[i][j];
			else
				o[ooff + gr * pc.n + gc] = MM_STORE(acc[i][j], gc, ooff + gr * pc.n + gc);
		}
	}
}
