#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// f32 NN batched matrix product for large products whose K and N are
// multiples of 4: matmul_l.comp's 128x128 tile and 8x8 per invocation, with every
// global and shared-memory access a vec4 and shared memory double-buffered
// (one barrier per K-step, the next step's operands read from global memory
// while this one computes). An invocation owns rows ty*4+{0..3} and
// 64+ty*4+{0..3} and the same pattern of columns, so its shared reads are two
// vec4 of A (broadcast across the half-warp) and two of B (consecutive).
// A is kept k-major in shared memory (As[k][row/4]); loads past M, N or K
// read zero and stores past M or N are skipped. Push constants (splits and
// kchunk are not read, flags only for the epilogue) and the workgroup numbering are
// matmul.glsl's. NN and unsplit only, like matmul_nn.glsl and for the same
// reason; matmul_v4.comp does the other layouts and split-K.
#define TM 128
#define TN 128
#define TK 16

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { vec4 a[]; };
layout(std430, binding = 1) readonly buffer B { vec4 b[]; };
layout(std430, binding = 2) writeonly buffer O { vec4 o[]; };
layout(std430, binding = 4) readonly buffer Bias { vec4 bias[]; };

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
	uint flags;   // MM_BIAS, MM_RELU, MM_MASK only
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

shared vec4 As[2][TK][TM / 4];
shared vec4 Bs[2][TK][TN / 4];

void main()
{
	uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
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
	// Loaders: A as 128 rows of four vec4 (k), two passes of 64 rows; B as
	// 16 rows (k) of 32 vec4, two passes of 8 rows.
	uint ar = tid >> 2, ak = (tid & 3u) * 4u;
	uint bk = tid >> 5, bc = (tid & 31u) * 4u;
	uint gr = row0 + ar, gc = col0 + bc;

	float acc[8][8];
	[[unroll]] for (int i = 0; i < 8; i++)
		[[unroll]] for (int j = 0; j < 8; j++)
			acc[i][j] = 0.0;

	uint ntiles = (pc.k + TK - 1u) / TK;
	vec4 va[2], vb[2];
	[[unroll]] for (uint p = 0u; p < 2u; p++) {
		uint r = gr + 64u * p, kb = bk + 8u * p;
		va[p] = (r < pc.m && ak < pc.k) ? a[(aoff + r * pc.k + ak) / 4u] : vec4(0.0);
		vb[p] = (kb < pc.k && gc < pc.n) ? b[(boff + kb * pc.n + gc) / 4u] : vec4(0.0);
		[[unroll]] for (uint c = 0u; c < 4u; c++)
			As[0][ak + c][(ar + 64u * p) >> 2][(ar + 64u * p) & 3u] = va[p][c];
		Bs[0][kb][bc >> 2] = vb[p];
	}
	barrier();

	for (uint t = 0u; t < ntiles; t++) {
		uint cur = t & 1u;
		bool more = t + 1u < ntiles;
		if (more) {
			uint k1 = (t + 1u) * TK;
			[[unroll]] for (uint p = 0u; p < 2u; p++) {
				uint r = gr + 64u * p, kb = k1 + bk + 8u * p;
				va[p] = (r < pc.m && k1 + ak < pc.k) ? a[(aoff + r * pc.k + k1 + ak) / 4u] : vec4(0.0);
				vb[p] = (kb < pc.k && gc < pc.n) ? b[(boff + kb * pc.n + gc) / 4u] : vec4(0.0);
			}
		}
		[[unroll]] for (uint kk = 0u; kk < TK; kk++) {
			vec4 a0 = As[cur][kk][ty], a1 = As[cur][kk][16u + ty];
			vec4 b0 = Bs[cur][kk][tx], b1 = Bs[cur][kk][16u + tx];
			float av[8] = float[8](a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w);
			float bv[8] = float[8](b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w);
			[[unroll]] for (int i = 0; i < 8; i++)
				[[unroll]] for (int j = 0; j < 8; j++)
					acc[i][j] += av[i] * bv[j];
		}
		if (more) {
			uint nxt = cur ^ 1u;
			[[unroll]] for (uint p = 0u; p < 2u; p++) {
				[[unroll]] for (uint c = 0u; c < 4u; c++)
					As[nxt][ak + c][(ar + 64u * p) >> 2][(ar + 64u * p) & 3u] = va[p][c];
				Bs[nxt][bk + 8u * p][bc >> 2] = vb[p];
			}
		}
		barrier();
	}

	[[unroll]] for (int i = 0; i < 8; i++) {
		uint r = row0 + (i < 4 ? ty * 4u + uint(i) : 64u + ty * 4u + uint(i - 4));
		if (r >= pc.m)
			continue;
		uint c0 = col0 + tx * 4u, c1 = col0 + 64u + tx * 4u;
		if (c0 < pc.n)
			o[(ooff + r * pc.n + c0) / 4u] = mm_epilogue4(vec4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]), c0,
								       (ooff + r * pc.n + c0) / 4u);
		if (c1 < pc.n)
			o[(ooff + r * pc.n + c1) / 4u] = mm_epilogue4(vec4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]), c1,
								       (ooff + r * pc.n + c1) / 4u);
	}
}
