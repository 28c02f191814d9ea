/* conv2d as a matrix product (im2col + GEMM), for large f32 convolutions
 * without groups: the tiled matmul kernels do the arithmetic at several
 * times the direct kernel's rate. Images go in chunks whose column matrix
 * (C*kh*kw x oh*ow per image) fits one storage-buffer binding and a memory
 * cap; each chunk is an im2col dispatch, one batched matmul
 * (out[n] = weight[oc x K] @ col[n]) and, with a bias, an add. Sums run over
 * k = (c*kh + ky)*kw + kx in order, as in the direct kernel. Shader:
 * conv_gemm.comp. */
#include "ops/conv_gemm.h"

#include <string.h>

#include "dtype.h"
#include "gpu/device.h"
#include "ops/matmul.h"
#include "status.h"

/* Mirrors ConvGemmPush in shaders/conv_gemm.comp. */
struct conv_gemm_push {
	uint32_t total;
	uint32_t c, h, w;
	uint32_t oh, ow;
	uint32_t kh, kw;
	uint32_t sh, sw;
	uint32_t ph, pw;
	uint32_t dh, dw;
	uint32_t n0;
	uint32_t mode;
};
_Static_assert(sizeof(struct conv_gemm_push) == 64, "conv_gemm_push must mirror ConvGemmPush");

/* Below this many multiply-adds the direct kernel is fast enough and skips
 * the column matrix. */
#define CONV_GEMM_MIN_MACS (1ull << 22)
/* The most memory one chunk's column matrix takes. */
#define CONV_GEMM_MAX_COL (1ull << 30)

static uint64_t chunk_images(const struct op_ctx *ctx, uint64_t col_bytes_per_image)
{
	uint64_t cap = ctx->g->props.limits.maxStorageBufferRange;

	if (cap > CONV_GEMM_MAX_COL)
		cap = CONV_GEMM_MAX_COL;
	return col_bytes_per_image ? cap / col_bytes_per_image : 0;
}

bool conv_gemm_usable(const struct op_ctx *ctx, uint32_t groups, bool wide)
{
	const struct op_tensor *x = &ctx->in[0], *w = &ctx->in[1];
	uint64_t k = x->shape[1] * w->shape[2] * w->shape[3];
	uint64_t hw = ctx->out.shape[2] * ctx->out.shape[3], oc = ctx->out.shape[1];
	uint64_t align = ctx->g->props.limits.minStorageBufferOffsetAlignment;
	uint64_t per = chunk_images(ctx, k * hw * 4);

	if (x->dtype != TDP_DTYPE_F32 || groups != 1 || ctx->out.count == 0 ||
	    (ctx->out.count * k < CONV_GEMM_MIN_MACS && !wide) || per == 0)
		return false;
	/* 32-bit indexing, and chunks of the output bound at aligned offsets. */
	if (x->count > UINT32_MAX || ctx->out.count > UINT32_MAX || k * hw * per > UINT32_MAX ||
	    ctx->out.bytes > ctx->g->props.limits.maxStorageBufferRange)
		return false;
	return per >= x->shape[0] || (align && (oc * hw * 4) % align == 0);
}

int conv_gemm_record(struct op_ctx *ctx, struct gpu_recorder *rec, const uint32_t stride[2],
		     const uint32_t pad[2], const uint32_t dil[2])
{
	const struct op_tensor *x = &ctx->in[0], *w = &ctx->in[1];
	uint64_t n = x->shape[0], oc = ctx->out.shape[1];
	uint64_t hw = ctx->out.shape[2] * ctx->out.shape[3];
	uint64_t k = x->shape[1] * w->shape[2] * w->shape[3];
	uint64_t per = chunk_images(ctx, k * hw * 4);
	const struct gpu_pipeline *p;
	struct gpu_alloc *col;
	struct conv_gemm_push pc = {
		.c = (uint32_t)x->shape[1], .h = (uint32_t)x->shape[2], .w = (uint32_t)x->shape[3],
		.oh = (uint32_t)ctx->out.shape[2], .ow = (uint32_t)ctx->out.shape[3],
		.kh = (uint32_t)w->shape[2], .kw = (uint32_t)w->shape[3],
		.sh = stride[0], .sw = stride[1], .ph = pad[0], .pw = pad[1], .dh = dil[0], .dw = dil[1],
	};

	if (per > n)
		per = n;
	if (op_pipeline(ctx, "conv_gemm", "f32", &p) < 0)
		return -1;
	if (op_scratch_alloc(ctx, per * k * hw * 4, &col) < 0)
		return -1;
	for (uint64_t n0 = 0; n0 < n; n0 += per) {
		uint64_t nb = n - n0 < per ? n - n0 : per;
		uint64_t out_off = n0 * oc * hw * 4, out_len = nb * oc * hw * 4;
		struct gpu_binding b[3];

		pc.mode = 0;
		pc.n0 = (uint32_t)n0;
		pc.total = (uint32_t)(nb * k * hw);
		if (op_bind(ctx, x, false, &b[0]) < 0)
			return -1;
		b[1] = gpu_rec_bind(ctx->g, col, 0, nb * k * hw * 4, true);
		if (op_dispatch(ctx, rec, p, b, 2, &pc, sizeof(pc), pc.total, 256) < 0)
			return -1;
		if (op_bind(ctx, w, false, &b[0]) < 0)
			return -1;
		b[1] = gpu_rec_bind(ctx->g, col, 0, nb * k * hw * 4, false);
		b[2] = gpu_rec_bind(ctx->g, ctx->out.alloc, out_off, out_len, true);
		if (matmul_record_bound(ctx, rec, b, TDP_DTYPE_F32, (uint32_t)oc, (uint32_t)hw, (uint32_t)k,
					(uint32_t)nb, 0, (uint32_t)(k * hw)) < 0)
			return -1;
		if (ctx->ninputs < 3)
			continue;
		pc.mode = 1;
		pc.c = (uint32_t)oc;
		pc.total = (uint32_t)(nb * oc * hw);
		if (op_bind(ctx, &ctx->in[2], false, &b[0]) < 0)
			return -1;
		b[1] = gpu_rec_bind(ctx->g, ctx->out.alloc, out_off, out_len, true);
		if (op_dispatch(ctx, rec, p, b, 2, &pc, sizeof(pc), pc.total, 256) < 0)
			return -1;
		pc.c = (uint32_t)x->shape[1];
	}
	return 0;
}
