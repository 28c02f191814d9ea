/* The linalg family: matmul with NumPy's semantics (1-D operands promoted and
 * the added dimension removed again, batch dimensions broadcast), either
 * operand read transposed in place (attrs transpose_a, transpose_b: the
 * kernels index the stored layout, nothing is copied). Shaders: matmul.comp
 * and matmul_l.comp, shared-memory tiled GEMMs (matmul.glsl) with 64x64 and
 * 128x128 output tiles, matmul_v4.comp (f32, vec4), matmul_cm_khr.comp and
 * matmul_cm.comp (f16 and bf16 on tensor cores, KHR or NV: gpu/coopmat.h;
 * NN, and NT and TN as the modules matmul_cm{,_khr}_nt and _tn),
 * the small products' kernels (matmul_small.c) and matmul_reduce.comp, the fixed-order sum of a
 * split-K product's partial results.
 *
 * The epilogue (issue 16): an optional third input, a bias with one value
 * per result column, and attr activation "relu" are applied as each result
 * is stored (shaders/matmul_epi.glsl): the product rounded to the dtype,
 * plus the bias rounded again, then max(x, 0) -- the same bits as the nodes
 * matmul -> add -> relu, which engine/graph_epilogue.c rewrites into one.
 * 16-bit products take the plain product's kernel and apply the epilogue in
 * place after it (matmul_epi_apply.comp), so that no choice of kernel can
 * change their bits.
 * Activation "relu_grad" takes a third input of the result's shape instead,
 * a mask: the product is kept where the mask is > 0, else 0 -- the bits of
 * matmul -> relu_grad(product, mask), relu's backward, rewritten likewise.
 *
 * Autocast (ctx->autocast bf16 or f16, set from a training step's
 * `precision`): an f32 product multiplies its operands rounded to that
 * dtype and accumulates in f32 (matmul_autocast.c), as torch.autocast
 * does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env_once.h"
#include "dtype.h"
#include "gpu/device.h"
#include "ops/grad_rules.h"
#include "ops/matmul.h"
#include "ops/matmul_small.h"
#include "ops/op.h"
#include "status.h"

/* Products with at least this many 128x128 output tiles use them: enough
 * workgroups to fill a large GPU; smaller ones keep the 64x64 tiles. */
#define MM_LARGE_TILES 128
/* A split product's chunks have at least MM_SPLIT_MIN_K terms when the
 * heuristic splits. */
#define MM_SPLIT_MIN_K 512u
/* Fewer 128x128 output tiles than this split into smaller chunks (mm_split). */
#define MM_FEW_TILES 16u
/* Small products on devices of at least MM_SMALL_SPLIT_CU compute units
 * split K too, into at most MM_SMALL_MAX_SPLITS chunks of at least
 * MM_SMALL_SPLIT_MIN_K terms (mm_split; not on lavapipe, whose compute
 * units are its few CPUs). */
#define MM_SMALL_SPLIT_CU 16u
#define MM_SMALL_SPLIT_MIN_K 64u
#define MM_SMALL_MAX_SPLITS 8u


/* Mirrors MmReducePush in shaders/matmul_reduce.comp. */
struct mm_reduce_push {
	uint32_t count, splits, n, flags;
};

/* Mirrors MmCmPush in shaders/matmul_cm.comp. */
struct mm_cm_push {
	uint32_t m, n, k;
	uint32_t tiles_n, tiles_mn, batches;
	uint32_t astride, bstride;
	uint32_t mstore, flags;
};

/* The NT modules' shared memory: both tiles 128 rows of 32 + 8 halves
 * (matmul_cm.glsl), over the 18.5 KiB gpu/coopmat.c asks of a device for
 * the NN one (TN takes 17 KiB). */
#define MM_CM_NT_SHARED (2u * 128u * 40u * 2u)


/* Activation "relu_grad": input 2 is a mask of the result's shape and dtype. */
static int mm_mask_infer(struct op_ctx *ctx, struct mm_plan *pl)
{
	const struct op_tensor *mask = &ctx->in[2];

	if (ctx->ninputs < 3)
		return op_fail(ctx, TDP_INVALID_ARGUMENT,
			       "activation \"relu_grad\" needs a third input, the mask (the result's shape)");
	if (mask->dtype != ctx->out.dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "the mask is %s, the product %s", tdp_dtype_name(mask->dtype),
			       tdp_dtype_name(ctx->out.dtype));
	if (mask->rank != ctx->out.rank || memcmp(mask->shape, ctx->out.shape, mask->rank * sizeof(*mask->shape)))
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "the mask must have the result's shape");
	pl->epi = MM_MASK;
	return 0;
}

/* The epilogue's attr and optional bias (input 2): one value per result
 * column, any leading dims 1 and no more dims than the result, so that the
 * add it stands for broadcasts it along the rows and leaves the shape. */
static int mm_epilogue_infer(struct op_ctx *ctx, struct mm_plan *pl)
{
	const struct op_attr_value *act = op_attr(ctx, "activation");
	const struct op_tensor *bias = &ctx->in[2];

	if (act->set && !strcmp(act->s, "relu_grad"))
		return mm_mask_infer(ctx, pl);
	if (act->set && strcmp(act->s, "none") && strcmp(act->s, "relu"))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "activation is '%s'; \"none\", \"relu\" or \"relu_grad\"",
			       act->s);
	pl->epi = act->set && !strcmp(act->s, "relu") ? MM_RELU : 0;
	if (ctx->ninputs < 3)
		return 0;
	pl->epi |= MM_BIAS;
	if (bias->dtype != ctx->out.dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "the bias is %s, the product %s", tdp_dtype_name(bias->dtype),
			       tdp_dtype_name(ctx->out.dtype));
	if (bias->rank == 0 || bias->rank > ctx->out.rank || bias->shape[bias->rank - 1] != pl->n ||
	    bias->count != pl->n)
		return op_fail(ctx, TDP_SHAPE_MISMATCH,
			       "the bias must hold one value per result column ([%llu], leading dims 1, rank at most %u)",
			       (unsigned long long)pl->n, ctx->out.rank);
	return 0;
}

static int matmul_infer(struct op_ctx *ctx)
{
	const struct op_tensor *a = &ctx->in[0], *b = &ctx->in[1];
	struct mm_plan *pl = &ctx->priv.matmul;
	unsigned abd, bbd, r = 0;
	uint64_t ak, bk;

	if (a->dtype != b->dtype)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "inputs are %s and %s", tdp_dtype_name(a->dtype),
			       tdp_dtype_name(b->dtype));
	if (!op_dtype_is_float(a->dtype))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "needs f32, f16 or bf16, not %s",
			       tdp_dtype_name(a->dtype));
	if (a->rank == 0 || b->rank == 0)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "input %d is a scalar (rank 0); matmul needs rank 1 or more",
			       a->rank == 0 ? 0 : 1);
	memset(pl, 0, sizeof(*pl));
	pl->flags = (op_attr(ctx, "transpose_a")->i ? MM_TA : 0) | (op_attr(ctx, "transpose_b")->i ? MM_TB : 0);
	if ((pl->flags & MM_TA) && a->rank < 2)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "transpose_a needs input 0 of rank 2 or more, not %u",
			       a->rank);
	if ((pl->flags & MM_TB) && b->rank < 2)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "transpose_b needs input 1 of rank 2 or more, not %u",
			       b->rank);
	pl->split_k = op_attr(ctx, "split_k")->i;
	if (pl->split_k < 0 || pl->split_k > 65536)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "split_k is %lld; 0 (automatic), 1 (never) up to 65536",
			       (long long)pl->split_k);
	/* A 1-D a is a row [1,K], a 1-D b a column [K,1]; a transposed operand
	 * is stored [.., K, M] (a) or [.., N, K] (b). */
	pl->m = a->rank == 1 ? 1 : a->shape[a->rank - ((pl->flags & MM_TA) ? 1 : 2)];
	ak = a->shape[a->rank - ((pl->flags & MM_TA) ? 2 : 1)];
	bk = b->rank == 1 ? b->shape[0] : b->shape[b->rank - ((pl->flags & MM_TB) ? 1 : 2)];
	pl->n = b->rank == 1 ? 1 : b->shape[b->rank - ((pl->flags & MM_TB) ? 2 : 1)];
	if (ak != bk) {
		char sa[96], sb[96];

		op_shape_text(a, sa, sizeof(sa));
		op_shape_text(b, sb, sizeof(sb));
		return op_fail(ctx, TDP_SHAPE_MISMATCH,
			       "inner dimensions differ: a %s%s has %llu columns, b %s%s has %llu rows", sa,
			       (pl->flags & MM_TA) ? " transposed" : "", (unsigned long long)ak, sb,
			       (pl->flags & MM_TB) ? " transposed" : "", (unsigned long long)bk);
	}
	pl->k = ak;
	abd = a->rank > 2 ? a->rank - 2 : 0;
	bbd = b->rank > 2 ? b->rank - 2 : 0;
	pl->bdims = abd > bbd ? abd : bbd;
	for (unsigned d = 0; d < pl->bdims; d++) {
		int ka = (int)d - (int)(pl->bdims - abd), kb = (int)d - (int)(pl->bdims - bbd);
		uint64_t da = ka < 0 ? 1 : a->shape[ka], db = kb < 0 ? 1 : b->shape[kb];

		if (da != db && da != 1 && db != 1)
			return op_fail(ctx, TDP_SHAPE_MISMATCH,
				       "batch dimension %u: a has %llu, b has %llu (they must match or be 1)",
				       d, (unsigned long long)da, (unsigned long long)db);
		pl->abatch[d] = da;
		pl->bbatch[d] = db;
		pl->bshape[d] = da == 1 ? db : da;
		ctx->out.shape[r++] = pl->bshape[d];
	}
	if (a->rank > 1)
		ctx->out.shape[r++] = pl->m;
	if (b->rank > 1)
		ctx->out.shape[r++] = pl->n;
	ctx->out.rank = r;
	ctx->out.dtype = a->dtype;
	return mm_epilogue_infer(ctx, pl);
}

/* Collapse the batch dims for the shader: drop size-1 dims, merge neighbours
 * that are contiguous in both operands. Strides are in elements. */
static int mm_batch_setup(struct op_ctx *ctx, const struct mm_plan *pl, struct mm_push *pc)
{
	uint64_t sa = pl->m * pl->k, sb = pl->k * pl->n;
	uint64_t st_a[MM_MAX_BDIMS], st_b[MM_MAX_BDIMS], shape[MM_MAX_BDIMS], batches = 1;
	unsigned nd = 0;

	/* Element strides per batch dim, innermost first. */
	for (int d = (int)pl->bdims - 1; d >= 0; d--) {
		st_a[d] = pl->abatch[d] == 1 ? 0 : sa;
		st_b[d] = pl->bbatch[d] == 1 ? 0 : sb;
		sa *= pl->abatch[d];
		sb *= pl->bbatch[d];
	}
	for (unsigned d = 0; d < pl->bdims; d++) {
		batches *= pl->bshape[d];
		if (pl->bshape[d] == 1)
			continue;
		if (nd > 0 && st_a[nd - 1] == st_a[d] * pl->bshape[d] &&
		    st_b[nd - 1] == st_b[d] * pl->bshape[d]) {
			shape[nd - 1] *= pl->bshape[d];
			st_a[nd - 1] = st_a[d];
			st_b[nd - 1] = st_b[d];
			continue;
		}
		shape[nd] = pl->bshape[d];
		st_a[nd] = st_a[d];
		st_b[nd] = st_b[d];
		nd++;
	}
	pc->nbdims = nd;
	for (unsigned d = 0; d < nd; d++) {
		if (shape[d] > UINT32_MAX || st_a[d] > UINT32_MAX || st_b[d] > UINT32_MAX)
			return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "a batch stride over 2^32 elements");
		pc->bshape[d] = (uint32_t)shape[d];
		pc->astride[d] = (uint32_t)st_a[d];
		pc->bstride[d] = (uint32_t)st_b[d];
	}
	if (batches > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "more than 2^32 matrices");
	pc->batches = (uint32_t)batches;
	return 0;
}

/* B shared by every batch and A's matrices back to back, untransposed: one
 * product of batches * m rows (the output, [batches, m, n], is the same
 * bytes). A transformer's projections, [32, 128, 256] @ [256, 256], took
 * the small-tile kernel as 32 products of 128 rows (35 us on the H100). */
void matmul_fold_batches(struct mm_push *pc)
{
	if (pc->nbdims != 1 || pc->bstride[0] != 0 || (pc->flags & MM_TA) ||
	    pc->astride[0] != pc->m * pc->k || (uint64_t)pc->m * pc->batches > UINT32_MAX)
		return;
	pc->m *= pc->batches;
	pc->batches = 1;
	pc->nbdims = 0;
	pc->bshape[0] = pc->astride[0] = 0;
}

/* bf16 products on the KHR bf16 module where the device has one, unless
 * TENSORD_COOPMAT_BF16=0 (docs/ops.md): tested on an H200, 286 TFLOP/s at
 * 8192^2 against 32 on the scalar kernel. */
static bool mm_bf16_coopmat(void)
{
	static atomic_int on = -1;
	const char *v;

	return ENV_ONCE(on, !((v = getenv("TENSORD_COOPMAT_BF16")) && !strcmp(v, "0")));
}

/* Whether the product runs autocast: bf16 or f16 operands, f32
 * accumulation and result (f32 inputs: matmul_infer makes both the
 * result's dtype). */
bool matmul_autocast(const struct op_ctx *ctx)
{
	return (ctx->autocast == TDP_DTYPE_BF16 || ctx->autocast == TDP_DTYPE_F16) &&
	       ctx->out.dtype == TDP_DTYPE_F32;
}

/* The cooperative-matrix kernel for the product's dtype on its device, if
 * it has one (gpu/coopmat.h); for an autocast product the KHR one of the
 * autocast dtype with an f32 result (matmul_cm_khr_f32out.bf16 or .f16:
 * NV matrices have no f32-result module). */
static bool mm_cm_kernel(const struct op_ctx *ctx, struct gpu_coopmat_gemm *ret)
{
	bool ac = matmul_autocast(ctx);
	bool bf16 = ctx->out.dtype == TDP_DTYPE_BF16 || (ac && ctx->autocast == TDP_DTYPE_BF16);
	bool f16 = ac ? !bf16 : ctx->out.dtype == TDP_DTYPE_F16;

	if (!f16 && !(bf16 && mm_bf16_coopmat()))
		return false;
	if (!gpu_coopmat_gemm(ctx->g->coopmat_kind, ctx->g->coopmat_bf16, bf16, ret))
		return false;
	if (ac) {
		if (ctx->g->coopmat_kind != GPU_COOPMAT_KHR)
			return false;
		ret->family = "matmul_cm_khr_f32out";
	}
	return true;
}

/* The cooperative-matrix family for a layout (0, MM_TA or MM_TB) of the
 * NN family `family` names: matmul_cm.glsl built with the layout constant
 * (shaders/meson.build). */
static const char *mm_cm_family(const char *family, uint32_t layout, uint32_t tile_n, bool epi)
{
	static const char *const khr[] = { "matmul_cm_khr", "matmul_cm_khr_tn", "matmul_cm_khr_nt" };
	static const char *const khr32[] = { "matmul_cm_khr_f32out", "matmul_cm_khr_f32out_tn",
					     "matmul_cm_khr_f32out_nt" };
	static const char *const khr32_n64[] = { "matmul_cm_khr_f32out_n64", "matmul_cm_khr_f32out_n64_tn",
						 "matmul_cm_khr_f32out_n64_nt" };
	static const char *const khr32_epi[] = { "matmul_cm_khr_f32out_epi", "matmul_cm_khr_f32out_epi_tn",
						 "matmul_cm_khr_f32out_epi_nt" };
	static const char *const nv[] = { "matmul_cm", "matmul_cm_tn", "matmul_cm_nt" };

	if (strcmp(family, "matmul_cm_khr_f32out") == 0)
		return (tile_n != MM_CM_TILE ? khr32_n64 : epi ? khr32_epi : khr32)[layout];
	return (strcmp(family, "matmul_cm_khr") == 0 ? khr : nv)[layout];
}

/* The width of the product's cooperative-matrix tiles: MM_CM_TILE where N
 * is a multiple of it, else for an autocast product MM_CM_TILE_N64 where N
 * is a multiple of that (an attention's products over heads of 64: the
 * matmul_cm_khr_f32out_n64 modules, two subgroups), else 0: none. */
uint32_t matmul_cm_tile_n(const struct op_ctx *ctx, const struct mm_plan *pl)
{
	if (pl->n % MM_CM_TILE == 0)
		return MM_CM_TILE;
	return matmul_autocast(ctx) && pl->n % MM_CM_TILE_N64 == 0 ? MM_CM_TILE_N64 : 0;
}

/* Whole tiles in layout NN, NT (B transposed) or TN (A transposed); not
 * both transposed. */
bool matmul_use_cm(const struct op_ctx *ctx, const struct mm_plan *pl, const struct mm_push *pc)
{
	struct gpu_coopmat_gemm cm;
	uint32_t tn = matmul_cm_tile_n(ctx, pl);

	return mm_cm_kernel(ctx, &cm) && pl->flags != (MM_TA | MM_TB) &&
	       (pl->flags != MM_TB || ctx->g->props.limits.maxComputeSharedMemorySize >= MM_CM_NT_SHARED) &&
	       pl->m % MM_CM_TILE == 0 && tn && pl->k % MM_CM_K == 0 && pc->nbdims <= 1 &&
	       (uint64_t)(pl->m / MM_CM_TILE) * (pl->n / tn) * pc->batches <= UINT32_MAX;
}

/* Chunks for a product of one to two waves of 128x128 tiles on a large GPU
 * (the second wave mostly idle): on the H200 (132 SMs) a GPT-small step's
 * weight gradients (TN 768x3072 from K 4096, 144 tiles) ran 1018 us
 * unsplit, 785 in 2 chunks and 620 in 8; its input gradients (NT 4096x768
 * from K 3072, 192 tiles) 866 unsplit, 679 in 2 and 693 in 4; its MLP's
 * second product (NN 4096x768 from K 3072) 789 unsplit, 660 in 2 and 673 in
 * 4 (bench/gemm_sweep.py SWEEP_SHAPES=gpt). */
static uint64_t mm_split_wave(const struct mm_push *pc, uint64_t tiles, uint64_t cu)
{
	uint64_t want = 1, most = (pc->flags & MM_TA) ? 8 : 2;

	if (cu < MM_SMALL_SPLIT_CU || tiles < cu || tiles >= 2 * cu)
		return 1;
	while (want < most && want * 2 <= pc->k / MM_SPLIT_MIN_K)
		want *= 2;
	/* From fewer terms NT and NN gained little or lost (4096x768 from K
	 * 768: NT 322 -> 299 us, NN 186 -> 193). */
	return (pc->flags & MM_TA) || pc->k >= 4 * MM_SPLIT_MIN_K ? want : 1;
}

/* Chunks for an NN or NT product of an eighth to half a wave of 128x128
 * tiles on a large GPU (`v4`: one the vectorised kernels take): enough to
 * fill about one wave, each of at least 128 terms. On the H200 (132 SMs) a
 * data-parallel MLP shard's products (bench/gemm_sweep.py SWEEP_SHAPES=mlp):
 * NN 2048x512 from K 784 (64 tiles) 82.1 us on the 64-wide tiles, 63.4 in 2
 * chunks; NT 2048x512 from K 512 62.2 -> 48.9; NN 1024x512 from K 784
 * (32 tiles) 51.5 -> 41.6 in 4; at 512 rows (16 tiles) splitting lost. */
static uint64_t mm_split_fill(const struct mm_push *pc, uint64_t tiles, uint64_t cu, bool v4)
{
	uint64_t want = 1;

	if (!v4 || (pc->flags & MM_TA) || cu < MM_SMALL_SPLIT_CU || tiles * 8 < cu || 2 * tiles >= cu)
		return 1;
	while (tiles * want * 2 <= cu && pc->k / (want * 2) >= 128)
		want *= 2;
	return want;
}

/* Split-K: set pc->splits and pc->kchunk. `split_attr` chunks when the
 * caller asked (1: never), else the heuristic: when the 128x128 output
 * tiles are fewer than the device runs at once, a power of two of chunks of
 * at least MM_SPLIT_MIN_K terms for about eight workgroups per compute
 * unit (mm_split_wave and mm_split_fill for other sizes; `v4`: the
 * vectorised kernels take the product). Either way
 * at least as many chunks as the loop budget needs (unless 1 was asked). */
static void mm_split(const struct op_ctx *ctx, struct mm_push *pc, int64_t split_attr, bool v4)
{
	uint64_t k = pc->k, want = 1, need = (k + MM_MAX_K - 1) / MM_MAX_K, chunk;
	uint64_t tiles = ((pc->m + 127ull) / 128) * ((pc->n + 127ull) / 128) * pc->batches;
	uint64_t cu = ctx->g->compute_units ? ctx->g->compute_units : 1;

	pc->splits = 1;
	pc->kchunk = pc->k;
	if (split_attr == 1 || k <= MM_SPLIT_ALIGN || tiles == 0)
		return;
	if (split_attr > 1) {
		want = (uint64_t)split_attr;
	} else if (tiles < cu && k >= 2 * MM_SPLIT_MIN_K) {
		/* About 8 workgroups per compute unit, in a power of two of
		 * chunks: on the H100 the weight gradients of issue 16 ran
		 * fastest with the most chunks (784x512 from K 16384: 32 chunks
		 * 725 us, 10 chunks 927 us), and counts that cut K unevenly
		 * (12, 17) ran slower than their powers of two around them. */
		uint64_t target = (8 * cu + tiles - 1) / tiles;
		/* Outputs of a few tiles take chunks down to 64 terms: on the
		 * H100 256x256 from K 4096 (4 tiles) ran 45.6 us in 8 chunks and
		 * 31.7 in 32, a 10x256 weight gradient from K 1024 43.3 us in
		 * 2 and 16.7 in 16; from 16 tiles up, 8 chunks stayed best. */
		uint64_t min_k = tiles < MM_FEW_TILES ? MM_SMALL_SPLIT_MIN_K : MM_SPLIT_MIN_K;

		while (want < target && want < MM_MAX_SPLITS && want * 2 <= k / min_k)
			want *= 2;
	} else if (cu >= MM_SMALL_SPLIT_CU && tiles * 8 <= cu && k >= 2 * MM_SMALL_SPLIT_MIN_K) {
		/* A small product on a large GPU, the products of a training step
		 * at batch 256: on an H100 (132 SMs) 256x784 @ 784x512 took
		 * 58 us unsplit and 25 us in 8 chunks (reduction included),
		 * 256x512 @ 512x10 40 and 17.5 us; 784x512 from K 256 (28
		 * tiles) ran slower split, hence tiles * 8 <= cu. */
		uint64_t target = (8 * cu + tiles - 1) / tiles;

		while (want < target && want < MM_SMALL_MAX_SPLITS && want * 2 <= k / MM_SMALL_SPLIT_MIN_K)
			want *= 2;
	}
	if (want == 1 && split_attr != 1)
		want = mm_split_wave(pc, tiles, cu);
	if (want == 1 && split_attr != 1)
		want = mm_split_fill(pc, tiles, cu, v4);
	if (want < need)
		want = need;
	if (want <= 1)
		return;
	chunk = (k + want - 1) / want;
	chunk = (chunk + MM_SPLIT_ALIGN - 1) / MM_SPLIT_ALIGN * MM_SPLIT_ALIGN;
	pc->splits = (uint32_t)((k + chunk - 1) / chunk);
	pc->kchunk = pc->splits > 1 ? (uint32_t)chunk : pc->k;
}

/* Scratch for the f32 partial results of a split product, bound as
 * binding 3 (the dummy when unsplit). */
int matmul_partials(struct op_ctx *ctx, const struct mm_push *pc, bool force, struct gpu_binding *ret)
{
	static const struct gpu_alloc none;
	uint64_t count = (uint64_t)pc->batches * pc->m * pc->n, bytes = count * pc->splits * 4;
	struct gpu_alloc *s;

	if (pc->splits <= 1 && !force) {
		*ret = gpu_rec_bind(ctx->g, &none, 0, 0, false);
		return 0;
	}
	if (bytes / 4 > UINT32_MAX || bytes > ctx->g->props.limits.maxStorageBufferRange)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "split-K into %u chunks needs %llu bytes of partial results, more than this device binds",
			       pc->splits, (unsigned long long)bytes);
	if (op_scratch_alloc(ctx, bytes, &s) < 0)
		return -1;
	*ret = gpu_rec_bind(ctx->g, s, 0, bytes, true);
	return 0;
}

/* The dummy binding standing for an absent bias. */
static struct gpu_binding mm_no_bias(struct op_ctx *ctx)
{
	static const struct gpu_alloc none;

	return gpu_rec_bind(ctx->g, &none, 0, 0, false);
}

/* The fixed-order sum of the partial results `part` into bind_out, through
 * the epilogue (its bias at binding 2). */
int matmul_reduce(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding *part,
		  const struct gpu_binding *bind_out, const struct gpu_binding *bias, int dtype,
		  const struct mm_push *pc)
{
	const struct gpu_pipeline *p;
	struct gpu_binding b[3] = { *part, *bind_out, *bias };
	struct mm_reduce_push rp = {
		.count = pc->batches * pc->m * pc->n, .splits = pc->splits, .n = pc->n,
		.flags = pc->flags & MM_EPI,
	};

	b[0].write = false;
	if (op_pipeline(ctx, "matmul_reduce", tdp_dtype_name(dtype), &p) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, b, 3, &rp, sizeof(rp), rp.count, 256);
}

/* The epilogue `epi` of a 16-bit product, in place over the rounded result
 * its kernel stored (matmul_epi_apply.comp; `bias` is the bias or mask):
 * the bits of the unfused add/relu/relu_grad nodes after that same product.
 * Also after an autocast product's f32 tensor-core kernel, which has no
 * epilogue (variant f32). */
int matmul_epilogue_after(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding *bias,
			     uint32_t n, uint32_t epi)
{
	const struct gpu_pipeline *p;
	struct gpu_binding b[2] = { { 0 }, *bias };
	struct mm_reduce_push ep = { .count = (uint32_t)ctx->out.count, .splits = 1, .n = n, .flags = epi };

	if (ep.count == 0)
		return 0;
	if (op_bind(ctx, &ctx->out, true, &b[0]) < 0 ||
	    op_pipeline(ctx, "matmul_epi_apply", tdp_dtype_name(ctx->out.dtype), &p) < 0)
		return -1;
	return op_dispatch(ctx, rec, p, b, 2, &ep, sizeof(ep), ep.count, 256);
}

/* The tensor-core path: f16 (bf16 where switched on) on a device with
 * cooperative matrices, whole tiles, NN, NT or TN (the module of that
 * layout), and at most one batch dimension left after collapsing. `ab`:
 * the operands' bindings (an autocast product's bf16 copies), or NULL for
 * the inputs themselves. */
int matmul_record_cm(struct op_ctx *ctx, struct gpu_recorder *rec, const struct mm_plan *pl, struct mm_push *mp,
		     const struct gpu_binding *ab, const struct gpu_binding *out, const struct gpu_binding *epi)
{
	const struct gpu_pipeline *p;
	struct gpu_coopmat_gemm cm;
	struct gpu_binding bind[4];
	uint32_t tn = matmul_cm_tile_n(ctx, pl), wg;
	struct mm_cm_push pc = {
		.m = mp->m, .n = mp->n, .k = mp->k, .batches = mp->batches,
		.tiles_n = tn ? (uint32_t)(pl->n / tn) : 0,
		.astride = mp->nbdims ? mp->astride[0] : 0,
		.bstride = mp->nbdims ? mp->bstride[0] : 0,
		.mstore = (uint32_t)pl->m,
		.flags = epi ? pl->epi : 0,
	};
	uint64_t groups;

	pc.tiles_mn = (uint32_t)(mp->m / MM_CM_TILE) * pc.tiles_n;
	groups = (uint64_t)pc.tiles_mn * pc.batches;
	if (!mm_cm_kernel(ctx, &cm) || !tn)
		return op_fail(ctx, TDP_INTERNAL, "no cooperative-matrix kernel for %s", tdp_dtype_name(ctx->out.dtype));
	/* The narrow tile has half the subgroups. */
	wg = tn == MM_CM_TILE ? cm.wg : cm.wg / 2;
	if (ab) {
		bind[0] = ab[0];
		bind[1] = ab[1];
	}
	if (op_pipeline(ctx, mm_cm_family(cm.family, pl->flags & MM_LAYOUT, tn, epi != NULL), cm.variant, &p) < 0 ||
	    (!ab && (op_bind(ctx, &ctx->in[0], false, &bind[0]) < 0 ||
		     op_bind(ctx, &ctx->in[1], false, &bind[1]) < 0)) ||
	    (!out && op_bind(ctx, &ctx->out, true, &bind[2]) < 0))
		return -1;
	if (out)
		bind[2] = *out;
	bind[3] = epi ? *epi : mm_no_bias(ctx);
	return op_dispatch(ctx, rec, p, bind, 4, &pc, sizeof(pc), groups * wg, wg);
}

/* Pick the tiled kernel and split-K for the product `pc` describes (m, n,
 * k, flags -- layout and epilogue -- and the batch fields set), fill in its
 * tile counts and record it (and the reduction of a split product). bind[3]
 * is the epilogue's bias (the dummy when MM_BIAS is clear). */
int matmul_dispatch(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding bind[4],
		       int dtype, struct mm_push *pc, int64_t split_attr)
{
	const struct gpu_pipeline *p;
	struct gpu_binding b[5] = { bind[0], bind[1], bind[2], { 0 }, bind[3] };
	uint64_t tiles_m, tiles_n, groups, tile = 64, big;
	uint64_t cu = ctx->g->compute_units ? ctx->g->compute_units : 1;
	bool ta = pc->flags & MM_TA, tb = pc->flags & MM_TB, v4;
	const char *name;

	switch (matmul_small_pick(pc, dtype, split_attr)) {
	case MATMUL_SMALL_K:
		b[3] = mm_no_bias(ctx);
		return matmul_record_smallk(ctx, rec, b, pc);
	case MATMUL_SMALL_N:
		return matmul_record_smalln(ctx, rec, b, pc);
	case MATMUL_SMALL_NONE:
		break;
	}
	/* Narrow NN products take the skinny kernel, split or not: on the H200
	 * a data-parallel MLP shard's classifier (2048x512 @ 512x10) split 8
	 * ways onto 128-wide tiles took 146 us (bench/trace_summary.py). */
	pc->splits = 1;
	pc->kchunk = pc->k;
	if (split_attr == 0 && pc->k <= MM_MAX_K && matmul_skinny_fits(pc))
		return matmul_partials(ctx, pc, false, &b[3]) < 0 ? -1 : matmul_record_skinny(ctx, rec, b, dtype, pc);
	/* vec4 loads along each operand's stored rows and vec4 stores. */
	v4 = dtype == TDP_DTYPE_F32 && pc->n % 4 == 0 && (ta ? pc->m : pc->k) % 4 == 0 &&
	     (tb ? pc->k : pc->n) % 4 == 0;
	mm_split(ctx, pc, split_attr, v4);
	if (pc->kchunk > MM_MAX_K)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "a product of %u terms unsplit (split_k 1, or conv2d): at most %llu are summed",
			       pc->kchunk, MM_MAX_K);
	big = ((uint64_t)(pc->m + 127) / 128) * ((pc->n + 127) / 128) * pc->batches * pc->splits;
	/* The vectorised 128-tile kernels also from half a wave of tiles on a
	 * large GPU: on the H200 (132 SMs) a data-parallel GPT-small shard's
	 * products of 2048 rows ran 64-wide before, NT 2048x768 from K 768
	 * (96 tiles) 125 us -> 102, NN 115 -> 92, NT 2048x3072 from K 768
	 * 425 -> 329, NN 436 -> 349 (bench/gemm_sweep.py SWEEP_SHAPES=gpt
	 * SWEEP_ROWS=2048). */
	if ((big >= MM_LARGE_TILES || (v4 && cu >= MM_SMALL_SPLIT_CU && 2 * big >= cu)) &&
	    (pc->kchunk <= MM_L_MAX_K || v4))
		tile = 128;
	tiles_m = (pc->m + tile - 1) / tile;
	tiles_n = (pc->n + tile - 1) / tile;
	/* m, n < 2^32, so neither product overflows 64 bits. */
	groups = tiles_m * tiles_n;
	if (groups > UINT32_MAX || (groups *= pc->batches) > UINT32_MAX ||
	    (groups *= pc->splits) > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "more than 2^32 output tiles");
	pc->tiles_n = (uint32_t)tiles_n;
	pc->tiles_mn = (uint32_t)(tiles_m * tiles_n);
	/* Large f32 products in whole vec4s take the vectorised kernel; NN
	 * unsplit products the kernels without layout branches (matmul_nn.glsl
	 * says why). */
	name = tile == 128 ? "matmul_l" : "matmul";
	if (tile == 128 && v4)
		name = (pc->flags & MM_LAYOUT) == MM_TA ? "matmul_tn_v4"
		       : (pc->flags & MM_LAYOUT) == MM_TB ? "matmul_nt_v4"
		       : (pc->flags & MM_LAYOUT) == 0 ? "matmul_nnp_v4" : "matmul_v4";
	if ((pc->flags & MM_LAYOUT) == 0 && pc->splits == 1)
		name = tile == 128 ? (v4 ? "matmul_nn_v4" : "matmul_nn_l") : "matmul_nn";
	if (matmul_partials(ctx, pc, false, &b[3]) < 0)
		return -1;
	if (matmul_skinny_fits(pc))
		return matmul_record_skinny(ctx, rec, b, dtype, pc);
	if (pc->splits > 1)
		pc->flags |= MM_PART;
	if (op_pipeline(ctx, name, tdp_dtype_name(dtype), &p) < 0 ||
	    op_dispatch(ctx, rec, p, b, 5, pc, sizeof(*pc), groups * 256, 256) < 0)
		return -1;
	return (pc->flags & MM_PART) ? matmul_reduce(ctx, rec, &b[3], &b[2], &b[4], dtype, pc) : 0;
}

/* The product's push constants before a kernel is chosen (*pc), and the
 * epilogue that runs after it (*ret_epi_after). Returns 0 or op_fail(). */
static int mm_push_setup(struct op_ctx *ctx, struct mm_push *pc, uint32_t *ret_epi_after)
{
	const struct mm_plan *pl = &ctx->priv.matmul;
	uint32_t epi_after;

	/* The shader indexes in 32-bit elements (operands are bound whole, so
	 * they fit when the device binds them); keep K clear of the loop's
	 * wrap-around too. */
	if (ctx->in[0].count > UINT32_MAX || ctx->in[1].count > UINT32_MAX ||
	    ctx->out.count > UINT32_MAX || pl->k > (1ull << 31))
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "an operand of more than 2^32 elements");
	memset(pc, 0, sizeof(*pc));
	pc->m = (uint32_t)pl->m;
	pc->n = (uint32_t)pl->n;
	pc->k = (uint32_t)pl->k;
	/* A 16-bit product's epilogue comes after it, in place: the product
	 * takes the plain matmul node's kernel, so the fused op gives the
	 * unfused chain's bits whichever kernel that is (the 16-bit kernels
	 * have none in their stores: matmul_epi_store.glsl says why). */
	epi_after = ctx->out.dtype == TDP_DTYPE_F32 ? 0 : pl->epi;
	pc->flags = pl->flags | (pl->epi & ~epi_after);
	*ret_epi_after = epi_after;
	return mm_batch_setup(ctx, pl, pc);
}

/* op_def.casts_whole of matmul and bmm. */
static bool matmul_casts_whole(struct op_ctx *ctx, bool *ret_to_16)
{
	struct mm_push pc;
	uint32_t epi_after;

	if (!matmul_autocast(ctx))
		return false;
	if (mm_push_setup(ctx, &pc, &epi_after) < 0) {
		/* The recording's to report (nothing failed before it). */
		td_error_clear(&ctx->err);
		return false;
	}
	return matmul_autocast_whole(ctx, &ctx->priv.matmul, &pc, ret_to_16);
}

static int matmul_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	const struct mm_plan *pl = &ctx->priv.matmul;
	struct gpu_binding bind[4];
	struct mm_push pc;
	uint32_t epi_after;
	int r;

	if (mm_push_setup(ctx, &pc, &epi_after) < 0)
		return -1;
	if (!(pl->epi & (MM_BIAS | MM_MASK)))
		bind[3] = mm_no_bias(ctx);
	else if (op_bind(ctx, &ctx->in[2], false, &bind[3]) < 0)
		return -1;
	if (matmul_autocast(ctx)) {
		r = matmul_record_autocast(ctx, rec, pl, &pc, bind);
	} else if (matmul_use_cm(ctx, pl, &pc) && pl->k <= MM_MAX_K) {
		r = matmul_record_cm(ctx, rec, pl, &pc, NULL, NULL, NULL);
	} else {
		if (op_bind(ctx, &ctx->in[0], false, &bind[0]) < 0 || op_bind(ctx, &ctx->in[1], false, &bind[1]) < 0 ||
		    op_bind(ctx, &ctx->out, true, &bind[2]) < 0)
			return -1;
		matmul_fold_batches(&pc);
		r = matmul_dispatch(ctx, rec, bind, ctx->out.dtype, &pc, pl->split_k);
	}
	if (r < 0 || !epi_after)
		return r;
	return matmul_epilogue_after(ctx, rec, &bind[3], (uint32_t)pl->n, epi_after);
}

int matmul_record_bound(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding bind[3],
			int dtype, uint32_t m, uint32_t n, uint32_t k, uint32_t batches,
			uint32_t astride, uint32_t bstride)
{
	struct mm_push pc = {
		.m = m, .n = n, .k = k, .batches = batches, .nbdims = batches > 1,
		.bshape = { batches }, .astride = { astride }, .bstride = { bstride },
	};
	struct gpu_binding b4[4] = { bind[0], bind[1], bind[2], mm_no_bias(ctx) };

	if (k > (1u << 31))
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "a product over 2^31 terms");
	/* Unsplit: the callers' products fill the device, and their scratch
	 * slots are their own. */
	return matmul_dispatch(ctx, rec, b4, dtype, &pc, 1);
}

static const struct op_attr_spec matmul_attrs[] = {
	{ "transpose_a", ATTR_BOOL, false },
	{ "transpose_b", ATTR_BOOL, false },
	{ "split_k", ATTR_INT, false },
	{ "activation", ATTR_STR, false },
	{ NULL, 0, false },
};

/* bmm: torch.bmm, matmul of two rank-3 tensors with equal batch dims. */
static int bmm_infer(struct op_ctx *ctx)
{
	const struct op_tensor *a = &ctx->in[0], *b = &ctx->in[1];

	if (a->rank != 3 || b->rank != 3)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "needs two rank-3 tensors [B, M, K] and [B, K, N], not ranks %u and %u",
			       a->rank, b->rank);
	if (a->shape[0] != b->shape[0])
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "batch dims differ: %llu and %llu",
			       (unsigned long long)a->shape[0], (unsigned long long)b->shape[0]);
	return matmul_infer(ctx);
}

const struct op_def op_defs_linalg[] = {
	{ .name = "matmul", .min_inputs = 2, .max_inputs = 3, .attrs = matmul_attrs, .infer = matmul_infer,
	  .record = matmul_record, .backward = grad_matmul, .casts_whole = matmul_casts_whole },
	{ .name = "bmm", .min_inputs = 2, .max_inputs = 3, .attrs = matmul_attrs, .infer = bmm_infer,
	  .record = matmul_record, .backward = grad_matmul, .casts_whole = matmul_casts_whole },
	{ .name = NULL },
};
