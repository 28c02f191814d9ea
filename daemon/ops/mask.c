/* Masks and randomness over a tensor: tril, triu, masked_fill, dropout and
 * multinomial. Shader: mask.comp (docs/ops.md, "Masks and sampling").
 * dropout and multinomial draw from rand's counter-based stream (Philox
 * keyed by the seed attr), so a seed gives the same mask or samples on every
 * run and device, and dropout's gradient recomputes its mask from the seed. */
#include <math.h>
#include <string.h>

#include "dtype.h"
#include "gpu/device.h"
#include "ops/grad_rules.h"
#include "ops/op.h"
#include "status.h"

#define MK_TRIL 0u
#define MK_TRIU 1u
#define MK_FILL 2u
#define MK_DROPOUT 3u
#define MK_MULTINOMIAL 4u
#define MK_MN_SUM 5u
#define MK_MN_SCAN 6u
#define MK_MN_APPLY 7u
/* multinomial sums a row's weights in chunks of this many classes (the
 * loops stay within OP_LOOP_BUDGET: a row may have up to
 * MK_CHUNK · OP_LOOP_BUDGET classes). */
#define MK_CHUNK 1024u

/* Mirrors the push block of shaders/mask.comp. */
struct mask_push {
	uint32_t n, mode, rows, cols;
	int32_t k, ival;
	float fval;
	uint32_t key0, key1;
	float p, scale;
	uint32_t rank;
	uint32_t shape[8];
	uint32_t mstride[8];
	uint32_t chunk, nch;
};
_Static_assert(sizeof(struct mask_push) == 120, "mask_push must mirror mask.comp");

static int same_as_input(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];

	if (x->count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "takes fewer than 2^32 elements");
	ctx->out = (struct op_tensor){ .dtype = x->dtype, .rank = x->rank };
	memcpy(ctx->out.shape, x->shape, sizeof(x->shape));
	return 0;
}

static int tri_infer(struct op_ctx *ctx)
{
	if (ctx->in[0].rank < 2)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "needs rank 2 or more (a matrix or a batch of them), not %u",
			       ctx->in[0].rank);
	return same_as_input(ctx);
}

static int fill_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0], *m = &ctx->in[1];
	double v = op_attr(ctx, "value")->f;

	if (m->dtype != TDP_DTYPE_U8)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "input 1 (the mask) must be u8 (bool), not %s",
			       tdp_dtype_name(m->dtype));
	if (m->rank > x->rank)
		return op_fail(ctx, TDP_SHAPE_MISMATCH, "the mask (rank %u) must broadcast to x (rank %u)", m->rank,
			       x->rank);
	for (unsigned d = 0; d < m->rank; d++) {
		uint64_t md = m->shape[m->rank - 1 - d], xd = x->shape[x->rank - 1 - d];

		if (md != 1 && md != xd)
			return op_fail(ctx, TDP_SHAPE_MISMATCH, "the mask must broadcast to x: dim %u is %llu, x's %llu",
				       m->rank - 1 - d, (unsigned long long)md, (unsigned long long)xd);
	}
	if (!op_dtype_is_float(x->dtype)) {
		double lo = x->dtype == TDP_DTYPE_U8 ? 0 : -2147483648.0;
		double hi = x->dtype == TDP_DTYPE_U8 ? 255 : 2147483647.0;

		if (!(v >= lo && v <= hi) || v != floor(v))
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "value %g is not a %s", v, tdp_dtype_name(x->dtype));
	}
	return same_as_input(ctx);
}

static int dropout_infer(struct op_ctx *ctx)
{
	const struct op_attr_value *p = op_attr(ctx, "p");

	if (!op_dtype_is_float(ctx->in[0].dtype))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "needs f32, f16 or bf16, not %s",
			       tdp_dtype_name(ctx->in[0].dtype));
	if (p->set && !(p->f >= 0.0 && p->f <= 1.0))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "p must be in [0, 1], not %g", p->f);
	return same_as_input(ctx);
}

static int multinomial_infer(struct op_ctx *ctx)
{
	const struct op_tensor *x = &ctx->in[0];
	int64_t ns = op_attr(ctx, "num_samples")->i;

	if (!op_dtype_is_float(x->dtype))
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "the probabilities must be f32, f16 or bf16, not %s",
			       tdp_dtype_name(x->dtype));
	if (x->rank == 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "needs probabilities [..., C], not a scalar");
	if (ns < 1 || ns > INT32_MAX)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "num_samples must be 1 or more, not %lld", (long long)ns);
	if (x->shape[x->rank - 1] > (uint64_t)MK_CHUNK * OP_LOOP_BUDGET || x->count > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "takes fewer than 2^32 weights and at most %llu classes",
			       (unsigned long long)MK_CHUNK * OP_LOOP_BUDGET);
	if (x->shape[x->rank - 1] == 0)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "needs at least one class");
	ctx->out = (struct op_tensor){ .dtype = TDP_DTYPE_I32, .rank = x->rank };
	memcpy(ctx->out.shape, x->shape, sizeof(x->shape));
	ctx->out.shape[x->rank - 1] = (uint64_t)ns;
	if ((x->count / x->shape[x->rank - 1]) * (uint64_t)ns > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "takes fewer than 2^32 samples");
	return 0;
}

/* multinomial: the rows' running sums in chunks (sums, their scan, the
 * running sums into scratch), then one binary search per sample. */
static int multinomial_record(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_pipeline *p,
			      struct gpu_binding bind[6], struct mask_push *pc)
{
	const struct op_tensor *x = &ctx->in[0];
	uint64_t range = ctx->g->props.limits.maxStorageBufferRange;
	uint64_t cols = x->shape[x->rank - 1], rows = x->count / cols, sbytes, cbytes;
	struct gpu_alloc *s, *cum;

	pc->cols = (uint32_t)cols;
	pc->rows = (uint32_t)rows;
	pc->k = (int32_t)ctx->out.shape[x->rank - 1];
	pc->chunk = MK_CHUNK;
	pc->nch = (uint32_t)((cols + MK_CHUNK - 1) / MK_CHUNK);
	sbytes = rows * (pc->nch + 1) * 4;
	cbytes = x->count * 4;
	if (sbytes > range || cbytes > range)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "%llu bytes of running sums, more than this device binds",
			       (unsigned long long)cbytes);
	if (op_scratch_alloc(ctx, sbytes, &s) < 0 || op_scratch_alloc(ctx, cbytes, &cum) < 0)
		return -1;
	bind[4] = gpu_rec_bind(ctx->g, s, 0, sbytes, true);
	bind[5] = gpu_rec_bind(ctx->g, cum, 0, cbytes, true);
	pc->mode = MK_MN_SUM;
	if (op_dispatch(ctx, rec, p, bind, 6, pc, sizeof(*pc), rows * pc->nch, 256) < 0)
		return -1;
	pc->mode = MK_MN_SCAN;
	if (op_dispatch(ctx, rec, p, bind, 6, pc, sizeof(*pc), rows, 256) < 0)
		return -1;
	pc->mode = MK_MN_APPLY;
	if (op_dispatch(ctx, rec, p, bind, 6, pc, sizeof(*pc), rows * pc->nch, 256) < 0)
		return -1;
	pc->mode = MK_MULTINOMIAL;
	return op_dispatch(ctx, rec, p, bind, 6, pc, sizeof(*pc), ctx->out.count, 256);
}

/* Merge neighbouring dims the mask steps through alike (contiguous across
 * the pair, or broadcast along both): fewer divisions per element in
 * mask.comp's index loop ([128, 128, 128] under a [128, 128] mask: two
 * dims, [128, 16384] with strides 0 and 1). */
static void fill_merge_dims(struct mask_push *pc)
{
	unsigned r = 0;

	for (unsigned d = 0; d < pc->rank; d++) {
		if (r > 0 && pc->mstride[r - 1] == pc->mstride[d] * pc->shape[d]) {
			pc->shape[r - 1] *= pc->shape[d];
			pc->mstride[r - 1] = pc->mstride[d];
			continue;
		}
		pc->shape[r] = pc->shape[d];
		pc->mstride[r] = pc->mstride[d];
		r++;
	}
	for (unsigned d = r; d < pc->rank; d++)
		pc->shape[d] = pc->mstride[d] = 0;
	pc->rank = r;
}

static int mask_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	static const struct gpu_alloc none;
	const struct op_tensor *x = &ctx->in[0];
	struct mask_push pc = { .mode = ctx->def->code, .rows = 1, .cols = 1 };
	struct gpu_binding bind[6];
	const struct gpu_pipeline *p;
	uint64_t inv = ctx->out.count;

	if (ctx->out.count == 0)
		return 0;
	pc.n = (uint32_t)ctx->out.count;
	for (unsigned b = 1; b < 6; b++)
		bind[b] = gpu_rec_bind(ctx->g, &none, 0, 0, false);
	if (pc.mode == MK_TRIL || pc.mode == MK_TRIU) {
		int64_t k = op_attr(ctx, "diagonal")->i;

		pc.rows = (uint32_t)x->shape[x->rank - 2];
		pc.cols = (uint32_t)x->shape[x->rank - 1];
		pc.k = k > INT32_MAX ? INT32_MAX : k < -INT32_MAX ? -INT32_MAX : (int32_t)k;
	} else if (pc.mode == MK_FILL) {
		const struct op_tensor *m = &ctx->in[1];
		uint64_t st = 1;

		pc.fval = (float)op_attr(ctx, "value")->f;
		pc.ival = (int32_t)op_attr(ctx, "value")->f;
		pc.rank = x->rank;
		for (unsigned d = x->rank; d-- > 0;) {
			unsigned md = d + m->rank - x->rank;
			bool has = d + m->rank >= x->rank;

			pc.shape[d] = (uint32_t)x->shape[d];
			pc.mstride[d] = has && m->shape[md] != 1 ? (uint32_t)st : 0;
			if (has)
				st *= m->shape[md];
		}
		fill_merge_dims(&pc);
		if (op_bind(ctx, m, false, &bind[1]) < 0)
			return -1;
	} else {
		uint64_t seed = (uint64_t)op_attr(ctx, "seed")->i;

		pc.key0 = (uint32_t)seed;
		pc.key1 = (uint32_t)(seed >> 32);
	}
	if (pc.mode == MK_DROPOUT) {
		const struct op_attr_value *pa = op_attr(ctx, "p");
		double pr = pa->set ? pa->f : 0.5;

		pc.p = (float)pr;
		pc.scale = pr < 1.0 ? (float)(1.0 / (1.0 - pr)) : 0.0f;
		inv = (ctx->out.count + 3) / 4;
	}
	if (op_pipeline(ctx, "mask", tdp_dtype_name(x->dtype), &p) < 0 || op_bind(ctx, x, false, &bind[0]) < 0 ||
	    op_bind(ctx, &ctx->out, true, &bind[pc.mode == MK_MULTINOMIAL ? 3 : 2]) < 0)
		return -1;
	if (pc.mode == MK_MULTINOMIAL)
		return multinomial_record(ctx, rec, p, bind, &pc);
	return op_dispatch(ctx, rec, p, bind, 6, &pc, sizeof(pc), inv, 256);
}

static const struct op_attr_spec tri_attrs[] = {
	{ "diagonal", ATTR_INT, false },
	{ NULL, 0, false },
};

static const struct op_attr_spec fill_attrs[] = {
	{ "value", ATTR_FLOAT, true },
	{ NULL, 0, false },
};

static const struct op_attr_spec dropout_attrs[] = {
	{ "p", ATTR_FLOAT, false },
	{ "seed", ATTR_INT, true },
	{ NULL, 0, false },
};

static const struct op_attr_spec multinomial_attrs[] = {
	{ "num_samples", ATTR_INT, true },
	{ "seed", ATTR_INT, true },
	{ NULL, 0, false },
};

const struct op_def op_defs_mask[] = {
	{ .name = "tril", .min_inputs = 1, .max_inputs = 1, .attrs = tri_attrs, .code = MK_TRIL,
	  .infer = tri_infer, .record = mask_record, .backward = grad_tril },
	{ .name = "triu", .min_inputs = 1, .max_inputs = 1, .attrs = tri_attrs, .code = MK_TRIU,
	  .infer = tri_infer, .record = mask_record, .backward = grad_triu },
	{ .name = "masked_fill", .min_inputs = 2, .max_inputs = 2, .attrs = fill_attrs, .code = MK_FILL,
	  .infer = fill_infer, .record = mask_record, .backward = grad_masked_fill },
	{ .name = "dropout", .min_inputs = 1, .max_inputs = 1, .attrs = dropout_attrs, .code = MK_DROPOUT,
	  .infer = dropout_infer, .record = mask_record, .backward = grad_dropout },
	{ .name = "multinomial", .min_inputs = 1, .max_inputs = 1, .attrs = multinomial_attrs,
	  .code = MK_MULTINOMIAL, .infer = multinomial_infer, .record = mask_record },
	{ .name = NULL },
};
