/* Autocast products (docs/training.md, "Mixed precision"): an f32 matmul
 * of a training step with precision "bf16" or "f16" multiplies its operands
 * rounded to that dtype and accumulates in f32, as torch.autocast does. On
 * a device whose KHR cooperative matrices take the dtype, products of whole
 * tiles, or of shapes that zeros make whole at little cost, run on the
 * tensor cores; the others on the f32 kernels over operands rounded and
 * widened back (matmul.c holds both kernels' recording). */
#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "gpu/device.h"
#include "ops/matmul.h"
#include "ops/op.h"
#include "status.h"

/* Split-K of a weight gradient (TN) on the tensor cores: on devices of at
 * least MM_CM_SPLIT_CU compute units, a product of fewer tiles than compute
 * units runs in up to MM_CM_MAX_SPLITS chunks of K, each at least
 * MM_CM_SPLIT_MIN_K terms. On the H200 the 784-512-512-10 MLP's weight
 * gradients at batch 16384 (28 and 16 tiles from K 16384) took 358 and
 * 348 us unsplit. */
#define MM_CM_SPLIT_CU 16u
#define MM_CM_MAX_SPLITS 16u
#define MM_CM_SPLIT_MIN_K 256u

/* A padded product does at most this much more work than its own: the
 * 784-512-512-10 MLP's first layer pads K 784 -> 800 forward (1.02x) and M
 * 784 -> 896 for its weight gradient (1.14x). */
#define MM_PAD_MAX_WORK 1.3

/* Mirrors the push constants of shaders/cast_pad.comp. */
struct cast_pad_push {
	uint32_t rows, cols, cols_p, pairs;
};

static uint64_t round_up(uint64_t v, uint64_t to)
{
	return (v + to - 1) / to * to;
}

uint64_t op_cast_bytes(const struct op_tensor *t, bool to_16)
{
	return t->count * (to_16 ? 2u : 4u);
}

/* Input `k` (f32) rounded for an autocast product, bound read-only as
 * *ret: cast to the autocast dtype (bf16 or f16) for the tensor cores
 * (`to_16`), else rounded to it and widened back to f32 for the scalar
 * kernels; into the step's shared copy (ctx->cast[k], recorded by its
 * first reader) where the plan gave one, else into scratch. */
static int mm_round_operand(struct op_ctx *ctx, struct gpu_recorder *rec, unsigned k, bool to_16,
			    struct gpu_binding *ret)
{
	const struct op_tensor *t = &ctx->in[k];
	struct op_cast *shared = ctx->cast[k];
	bool f16 = ctx->autocast == TDP_DTYPE_F16;
	uint32_t n = (uint32_t)t->count;
	uint64_t bytes = op_cast_bytes(t, to_16);
	const char *family, *variant;
	const struct gpu_pipeline *p;
	struct gpu_binding b[2];
	struct gpu_alloc *s;

	/* A copy the plan placed, of the kind this product reads. */
	if (shared && (!shared->alloc.block || shared->to_16 != to_16 || shared->bytes != bytes))
		shared = NULL;
	if (shared && shared->recorded) {
		*ret = gpu_rec_bind(ctx->g, &shared->alloc, 0, bytes, false);
		return 0;
	}
	if (op_bind(ctx, t, false, &b[0]) < 0)
		return -1;
	if (n == 0) {
		*ret = b[0];
		return 0;
	}
	/* Four elements an invocation where they come in fours (the same
	 * bits: cast_bf16_vec4.comp, cast_f16_vec4.comp), else cast.comp
	 * (f32_bf16 or f32_f16, or _f32: rounded and widened back). */
	if (f16) {
		family = n % 4 == 0 ? "cast_f16_vec4" : "cast";
		variant = to_16 ? "f32_f16" : "f32_f16_f32";
	} else {
		family = n % 4 == 0 ? "cast_bf16_vec4" : "cast";
		variant = to_16 ? "f32_bf16" : "f32_bf16_f32";
	}
	if (n % 4 == 0)
		n /= 4;
	if ((shared ? (s = &shared->alloc, 0) : op_scratch_alloc(ctx, bytes, &s)) < 0 ||
	    op_pipeline(ctx, family, variant, &p) < 0)
		return -1;
	b[1] = gpu_rec_bind(ctx->g, s, 0, bytes, true);
	if (op_dispatch(ctx, rec, p, b, 2, &n, sizeof(n), n, 256) < 0)
		return -1;
	if (shared)
		shared->recorded = true;
	*ret = b[1];
	ret->write = false;
	return 0;
}

/* Whether an autocast product that is not whole tiles runs on the tensor
 * cores over operands padded with zeros to M a multiple of 128 (*ret_m)
 * and K of 32 (*ret_k): one matrix (no batch dims), N already whole tiles,
 * M a multiple of 16 (the kernel stores 16-row fragments and skips those
 * past M; zeros past K add nothing), at most MM_PAD_MAX_WORK of the
 * product's work or K within one K step (a product bound by its result's
 * bytes: the classifier's input gradient, [B, 10] @ [10, 512], took 79 us
 * at B 16384 on the f32 kernels), and the padded product one matmul_use_cm
 * takes. */
static bool mm_cm_padded(const struct op_ctx *ctx, const struct mm_plan *pl, const struct mm_push *pc,
			 uint64_t *ret_m, uint64_t *ret_k)
{
	struct mm_plan padded = *pl;

	padded.m = round_up(pl->m, MM_CM_TILE);
	padded.k = round_up(pl->k, MM_CM_K);
	if (pc->nbdims != 0 || pc->batches != 1 || pl->m % 16 || pl->m == 0 || pl->k == 0 ||
	    padded.k > MM_MAX_K ||
	    ((double)padded.m * (double)padded.k > MM_PAD_MAX_WORK * (double)pl->m * (double)pl->k &&
	     padded.k > MM_CM_K) ||
	    !matmul_use_cm(ctx, &padded, pc))
		return false;
	*ret_m = padded.m;
	*ret_k = padded.k;
	return true;
}

/* How many chunks of K an autocast product of `mp` rows and `kp` terms
 * (padded or not) on the tensor cores runs in: 1, or for a product with A
 * transposed (TN: each chunk's A and B are whole rows of the stored
 * operands), one matrix, of fewer tiles than the device has compute units,
 * about two tiles a compute unit (MM_CM_* above). matmul's split_k 1
 * keeps it whole. */
static uint32_t mm_cm_splits(const struct op_ctx *ctx, const struct mm_plan *pl, const struct mm_push *pc,
			     uint64_t mp, uint64_t kp)
{
	uint64_t cu = ctx->g->compute_units, tn = matmul_cm_tile_n(ctx, pl), tiles, s;

	if (pl->flags != MM_TA || pc->nbdims != 0 || pc->batches != 1 || pl->split_k == 1 ||
	    cu < MM_CM_SPLIT_CU || !tn)
		return 1;
	tiles = (mp / MM_CM_TILE) * (pl->n / tn);
	if (tiles == 0 || tiles >= cu)
		return 1;
	s = (2 * cu + tiles - 1) / tiles;
	if (s > MM_CM_MAX_SPLITS)
		s = MM_CM_MAX_SPLITS;
	while (s > 1 && kp / s < MM_CM_SPLIT_MIN_K)
		s--;
	return (uint32_t)s;
}

/* The split product: chunk j of K (`kc` terms, A's rows j*kc.. of [Kp, mp]
 * and B's of [Kp, N]) as batch j of the kernel into f32 partials [splits,
 * M, N], then their fixed-order sum into the result with the epilogue
 * (matmul_reduce). */
static int mm_record_split(struct op_ctx *ctx, struct gpu_recorder *rec, const struct mm_plan *pl,
			   struct mm_push *pc, struct gpu_binding bind[4], uint64_t mp, uint64_t kc, uint32_t splits)
{
	struct mm_push sum = *pc;
	struct gpu_binding part, out;

	sum.m = (uint32_t)pl->m;
	sum.n = (uint32_t)pl->n;
	sum.batches = 1;
	sum.splits = splits;
	if (matmul_partials(ctx, &sum, false, &part) < 0 || op_bind(ctx, &ctx->out, true, &out) < 0)
		return -1;
	pc->m = (uint32_t)mp;
	pc->k = (uint32_t)kc;
	pc->batches = splits;
	pc->nbdims = 1;
	pc->astride[0] = (uint32_t)(kc * mp);
	pc->bstride[0] = (uint32_t)(kc * pl->n);
	if (matmul_record_cm(ctx, rec, pl, pc, bind, &part, NULL) < 0)
		return -1;
	return matmul_reduce(ctx, rec, &part, &out, &bind[3], TDP_DTYPE_F32, &sum);
}

/* Operand `t` (f32, `rows` x `cols` as stored) rounded to the autocast
 * dtype into scratch of `rows_p` x `cols_p`, zeros around it
 * (cast_pad.comp), bound read-only as *ret. */
static int mm_cast_padded(struct op_ctx *ctx, struct gpu_recorder *rec, const struct op_tensor *t, uint64_t rows,
			  uint64_t cols, uint64_t rows_p, uint64_t cols_p, struct gpu_binding *ret)
{
	uint64_t pairs = rows_p * cols_p / 2;
	struct cast_pad_push pp = { (uint32_t)rows, (uint32_t)cols, (uint32_t)cols_p, (uint32_t)pairs };
	const struct gpu_pipeline *p;
	struct gpu_binding b[2];
	struct gpu_alloc *s;

	if (pairs > UINT32_MAX || rows_p > UINT32_MAX || cols_p > UINT32_MAX || cols_p % 2)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "a padded operand of more than 2^32 elements");
	if (op_bind(ctx, t, false, &b[0]) < 0 || op_scratch_alloc(ctx, pairs * 4, &s) < 0 ||
	    op_pipeline(ctx, "cast_pad", ctx->autocast == TDP_DTYPE_F16 ? "f32_f16" : "f32_bf16", &p) < 0)
		return -1;
	b[1] = gpu_rec_bind(ctx->g, s, 0, pairs * 4, true);
	if (op_dispatch(ctx, rec, p, b, 2, &pp, sizeof(pp), pairs, 256) < 0)
		return -1;
	*ret = b[1];
	ret->write = false;
	return 0;
}

/* The operands cast for the tensor cores into copies padded to M `mp` and
 * K `kp` (mm_cm_padded, mm_cm_splits): A as stored [M, K] (TA: [K, M]) and
 * B [K, N] (TB: [N, K]), into bind[0] and bind[1]. */
static int mm_cast_operands_padded(struct op_ctx *ctx, struct gpu_recorder *rec, const struct mm_plan *pl,
				   struct gpu_binding bind[4], uint64_t mp, uint64_t kp)
{
	bool ta = pl->flags & MM_TA, tb = pl->flags & MM_TB;

	if ((ta ? mm_cast_padded(ctx, rec, &ctx->in[0], pl->k, pl->m, kp, mp, &bind[0])
		: mm_cast_padded(ctx, rec, &ctx->in[0], pl->m, pl->k, mp, kp, &bind[0])) < 0 ||
	    (tb ? mm_cast_padded(ctx, rec, &ctx->in[1], pl->n, pl->k, pl->n, kp, &bind[1])
		: mm_cast_padded(ctx, rec, &ctx->in[1], pl->k, pl->n, kp, pl->n, &bind[1])) < 0)
		return -1;
	return 0;
}

/* An autocast product: the operands rounded to bf16 (f16 likewise, with the
 * .f16 modules), f32 accumulation, an f32 result. On a device whose KHR
 * cooperative matrices take bf16, for the products matmul_use_cm takes
 * (or, padded with zeros, mm_cm_padded), the operands are cast to bf16 and
 * matmul_cm_khr_f32out stores its f32 accumulators: the epilogue applied
 * in f32 in the stores of the 128-wide modules (_epi), after the narrow
 * ones, or in the sum of a split product (mm_cm_splits); elsewhere
 * (lavapipe, other shapes, NV matrices) the operands are rounded to bf16
 * and widened back to f32, then the f32 kernels run with the epilogue in
 * their stores. A product of two bf16 (or f16) values is exact in f32, so
 * both compute the same terms and differ only in the order of the sums. */
/* How autocast product `pl` runs: on the tensor cores or not (*ret->cm),
 * over zero-padded copies of M `mp` rows and K `kp` terms or copies of the
 * operands whole (pad), in `splits` chunks of K. */
struct mm_autocast_way {
	bool cm, pad;
	uint32_t splits;
	uint64_t mp, kp;
};

static void mm_autocast_choose(const struct op_ctx *ctx, const struct mm_plan *pl, const struct mm_push *pc,
			       struct mm_autocast_way *ret)
{
	struct mm_autocast_way w = { .cm = matmul_use_cm(ctx, pl, pc) && pl->k <= MM_MAX_K, .mp = pl->m, .kp = pl->k };

	w.pad = !w.cm && mm_cm_padded(ctx, pl, pc, &w.mp, &w.kp);
	w.splits = w.cm || w.pad ? mm_cm_splits(ctx, pl, pc, w.mp, w.kp) : 1;
	/* K padded with zeros to whole chunks of whole K steps. */
	if (w.splits > 1) {
		w.kp = round_up((w.kp + w.splits - 1) / w.splits, MM_CM_K) * w.splits;
		w.pad = w.pad || w.kp != pl->k;
	}
	*ret = w;
}

bool matmul_autocast_whole(const struct op_ctx *ctx, const struct mm_plan *pl, const struct mm_push *pc,
			   bool *ret_to_16)
{
	struct mm_autocast_way w;

	mm_autocast_choose(ctx, pl, pc, &w);
	if (w.pad)
		return false;
	*ret_to_16 = w.cm;
	return true;
}

int matmul_record_autocast(struct op_ctx *ctx, struct gpu_recorder *rec, const struct mm_plan *pl,
			   struct mm_push *pc, struct gpu_binding bind[4])
{
	struct mm_autocast_way w;
	uint64_t mp, kp;
	uint32_t splits;
	bool fold;

	mm_autocast_choose(ctx, pl, pc, &w);
	mp = w.mp;
	kp = w.kp;
	splits = w.splits;
	if (!w.cm && !w.pad) {
		if (mm_round_operand(ctx, rec, 0, false, &bind[0]) < 0 ||
		    mm_round_operand(ctx, rec, 1, false, &bind[1]) < 0 ||
		    op_bind(ctx, &ctx->out, true, &bind[2]) < 0)
			return -1;
		matmul_fold_batches(pc);
		return matmul_dispatch(ctx, rec, bind, TDP_DTYPE_F32, pc, pl->split_k);
	}
	if (w.pad ? mm_cast_operands_padded(ctx, rec, pl, bind, mp, kp) < 0
		: (mm_round_operand(ctx, rec, 0, true, &bind[0]) < 0 ||
		   mm_round_operand(ctx, rec, 1, true, &bind[1]) < 0))
		return -1;
	if (splits > 1)
		return mm_record_split(ctx, rec, pl, pc, bind, mp, kp / splits, splits);
	pc->m = (uint32_t)mp;
	pc->k = (uint32_t)kp;
	/* The epilogue in the 128-wide kernels' stores; after the narrow ones. */
	fold = pl->epi && matmul_cm_tile_n(ctx, pl) == MM_CM_TILE;
	if (matmul_record_cm(ctx, rec, pl, pc, bind, NULL, fold ? &bind[3] : NULL) < 0)
		return -1;
	return pl->epi && !fold ? matmul_epilogue_after(ctx, rec, &bind[3], (uint32_t)pl->n, pl->epi) : 0;
}
