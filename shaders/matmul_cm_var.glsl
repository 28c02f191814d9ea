// The K loop of matmul_cm.glsl's variants, included there in place of the
// shipped loop when CM_DBUF or CM_FRAG_PF is defined (bench/gemm_variants.py
// builds them; no module of the daemon does). Same names as there: ra/rb
// hold the next K step's operands, As/Bs hold CM_NBUF tiles of each operand.
//
// CM_DBUF: the first step is stored into buffer 0 before the loop; step t
// computes from buffer t & 1, then stores the registers read meanwhile into
// the other buffer, and one barrier ends the step (no invocation still reads
// the other buffer then: the previous step's barrier has passed).
// CM_FRAG_PF: the fragments of kk + 16 are loaded into fresh variables
// before the MulAdds of kk, then copied over (indices stay constant after
// unrolling: no dynamic indexing of matrix arrays).
#define CM_ABUF (A_OUT * ASTR)
#define CM_BBUF (B_OUT * BSTR)
#define CM_STORE(ao, bo) \
	[[unroll]] for (int p = 0; p < A_LOADS; p++) \
		As[(ao) + (ar + uint(p * A_ROWS_PER)) * ASTR + ac] = ra[p]; \
	[[unroll]] for (int p = 0; p < B_LOADS; p++) \
		Bs[(bo) + (br + uint(p * B_ROWS_PER)) * BSTR + bc] = rb[p];
#define M0 (wm * (FM * 16u) + uint(i) * 16u)
#define N0 (wn * (FN * 16u) + uint(j) * 16u)
#ifdef CM_TA
#define CM_LOAD_A(f, kk) coopMatLoadNV(f, As, ao + (kk) * ASTR + M0 / 8u, ASTR, true)
#else
#define CM_LOAD_A(f, kk) coopMatLoadNV(f, As, ao + M0 * ASTR + (kk) / 8u, ASTR, false)
#endif
#ifdef CM_TB
#define CM_LOAD_B(f, kk) coopMatLoadNV(f, Bs, bo + N0 * BSTR + (kk) / 8u, BSTR, true)
#else
#define CM_LOAD_B(f, kk) coopMatLoadNV(f, Bs, bo + (kk) * BSTR + N0 / 8u, BSTR, false)
#endif
#ifdef CM_DIRECT
	// CM_DIRECT: no shared memory; each subgroup loads its fragments from
	// the operands in global memory (their reuse across subgroups left to
	// the caches). ga and gb's tile starts, in uvec4.
	uint ta0 = (batch * pc.astride + A_TILE) / 8u, tb0 = (batch * pc.bstride + B_TILE) / 8u;
	for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
		[[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
			HALF fa[FM], fb[FN];
			[[unroll]] for (int i = 0; i < FM; i++)
#ifdef CM_TA
				coopMatLoadNV(fa[i], a, ta0 + (k0 + kk) * alen8 + M0 / 8u, alen8, true);
#else
				coopMatLoadNV(fa[i], a, ta0 + M0 * alen8 + (k0 + kk) / 8u, alen8, false);
#endif
			[[unroll]] for (int j = 0; j < FN; j++)
#ifdef CM_TB
				coopMatLoadNV(fb[j], b, tb0 + N0 * blen8 + (k0 + kk) / 8u, blen8, true);
#else
				coopMatLoadNV(fb[j], b, tb0 + (k0 + kk) * blen8 + N0 / 8u, blen8, false);
#endif
			[[unroll]] for (int i = 0; i < FM; i++)
				[[unroll]] for (int j = 0; j < FN; j++)
					acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
		}
	}
#else
#ifdef CM_DBUF
	CM_STORE(0u, 0u)
	barrier();
#endif
	for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
#ifdef CM_DBUF
		uint cur = (k0 / BK) & 1u;
		uint ao = cur * CM_ABUF, bo = cur * CM_BBUF;
#else
		const uint ao = 0u, bo = 0u;
		CM_STORE(0u, 0u)
		barrier();
#endif
		bool more = k0 + BK < pc.k;
		if (more) {
			uint na = ga + A_KOFF(k0 + BK), nb = gb + B_KOFF(k0 + BK);
			[[unroll]] for (int p = 0; p < A_LOADS; p++)
				ra[p] = a[na + uint(p * A_ROWS_PER) * alen8];
			[[unroll]] for (int p = 0; p < B_LOADS; p++)
				rb[p] = b[nb + uint(p * B_ROWS_PER) * blen8];
		}
#ifdef CM_FRAG_PF
		HALF fa[FM], fb[FN];
		[[unroll]] for (int i = 0; i < FM; i++)
			CM_LOAD_A(fa[i], 0u);
		[[unroll]] for (int j = 0; j < FN; j++)
			CM_LOAD_B(fb[j], 0u);
		[[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
			HALF pa[FM], pb[FN];
			if (kk + 16u < BK) {
				[[unroll]] for (int i = 0; i < FM; i++)
					CM_LOAD_A(pa[i], kk + 16u);
				[[unroll]] for (int j = 0; j < FN; j++)
					CM_LOAD_B(pb[j], kk + 16u);
			}
			[[unroll]] for (int i = 0; i < FM; i++)
				[[unroll]] for (int j = 0; j < FN; j++)
					acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
			if (kk + 16u < BK) {
				[[unroll]] for (int i = 0; i < FM; i++)
					fa[i] = pa[i];
				[[unroll]] for (int j = 0; j < FN; j++)
					fb[j] = pb[j];
			}
		}
#else
		[[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
			HALF fa[FM], fb[FN];
			[[unroll]] for (int i = 0; i < FM; i++)
				CM_LOAD_A(fa[i], kk);
			[[unroll]] for (int j = 0; j < FN; j++)
				CM_LOAD_B(fb[j], kk);
			[[unroll]] for (int i = 0; i < FM; i++)
				[[unroll]] for (int j = 0; j < FN; j++)
					acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
		}
#endif
#ifdef CM_DBUF
		if (more) {
			CM_STORE((cur ^ 1u) * CM_ABUF, (cur ^ 1u) * CM_BBUF)
		}
#endif
		barrier();
	}
#endif
