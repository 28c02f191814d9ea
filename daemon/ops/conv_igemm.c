/* Implicit-GEMM conv2d (issue 16): the forward and both gradients as tiled
 * matrix products whose operand tiles the kernel gathers straight from the
 * input, weight and grad_out tensors (conv_igemm.glsl), so no column matrix
 * is written or read. Sums run in the direct kernels' order; the weight
 * gradient is split over the batch x spatial positions in the direct
 * kernel's chunks, summed in order by the caller. */
#include "ops/conv_igemm.h"

#include "conv_codes.h"
#include "dtype.h"
#include "status.h"

/* Mirrors ConvIgemmPush in shaders/conv_igemm.glsl. */
struct convi_push {
	uint32_t m, n, k;
	uint32_t tiles_n, tiles_mn;
	uint32_t groups, splits, kchunk;
	uint32_t mode, flags;
	uint32_t c, h, w;
	uint32_t oc, oh, ow;
	uint32_t kh, kw;
	uint32_t sh, sw;
	uint32_t ph, pw;
	uint32_t dh, dw;
	uint32_t cpg, opg;
};
_Static_assert(sizeof(struct convi_push) == 104, "convi_push must mirror ConvIgemmPush");

#define CONVI_TILE 128u
/* Terms one unsplit invocation may sum: 16 per loop iteration. */
#define CONVI_MAX_K (OP_LOOP_BUDGET * 16ull)

/* The number of groups (from the output channels, or the input channels
 * when there are none). */
static uint32_t groups_of(const struct convg_push *geo)
{
	if (geo->opg)
		return geo->oc / geo->opg;
	return geo->cpg ? geo->c / geo->cpg : 0;
}

/* The product's M, N and K for `mode`. */
static void dims(int mode, const struct convg_push *geo, uint64_t *m, uint64_t *n, uint64_t *k)
{
	uint64_t taps = (uint64_t)geo->kh * geo->kw;
	uint64_t ohw = (uint64_t)geo->oh * geo->ow, hw = (uint64_t)geo->h * geo->w;

	if (mode == CONVI_FWD) {
		*m = geo->opg;
		*n = geo->n * ohw;
		*k = geo->cpg * taps;
	} else if (mode == CONVI_DGRAD) {
		*m = geo->cpg;
		*n = geo->n * hw;
		*k = geo->opg * taps;
	} else {
		*m = geo->opg;
		*n = geo->cpg * taps;
		*k = geo->n * ohw;
	}
}

bool conv_igemm_usable(const struct op_ctx *ctx, int mode, const struct convg_push *geo)
{
	uint64_t m, n, k, groups = groups_of(geo);
	uint64_t x = (uint64_t)geo->n * geo->c * geo->h * geo->w;
	uint64_t y = (uint64_t)geo->n * geo->oc * geo->oh * geo->ow;
	uint64_t wc = (uint64_t)geo->oc * geo->cpg * geo->kh * geo->kw;

	(void)ctx;
	dims(mode, geo, &m, &n, &k);
	if (m == 0 || n == 0 || groups == 0)
		return false;
	/* 32-bit element indices (with room for a tile past the end). */
	if (x > UINT32_MAX || y > UINT32_MAX || wc > UINT32_MAX || n > UINT32_MAX - CONVI_TILE ||
	    m > UINT32_MAX - CONVI_TILE)
		return false;
	if (mode != CONVI_WGRAD && k > CONVI_MAX_K)
		return false;
	return ((m + CONVI_TILE - 1) / CONVI_TILE) * ((n + CONVI_TILE - 1) / CONVI_TILE) * groups <= UINT32_MAX;
}

bool conv_igemm_wanted(const struct op_ctx *ctx, int mode, const struct convg_push *geo, bool wide)
{
	uint64_t m, n, k, groups = groups_of(geo);

	dims(mode, geo, &m, &n, &k);
	if (!conv_igemm_usable(ctx, mode, geo))
		return false;
	if (wide)
		return true;
	/* A weight gradient with few columns (C/groups·KH·KW) is one or two
	 * 128x128 tiles over a long K: on an H100 the digits CNN's (16 x 9,
	 * K = 65,536) took 4.4 ms here, 0.65 ms in the direct kernel. */
	if (mode == CONVI_WGRAD && n < CONVI_WGRAD_MIN_N)
		return false;
	/* In double: the product of the four may pass 2^64. */
	return m >= 16 && (double)m * (double)n * (double)k * (double)groups >= (double)CONVI_MIN_MACS;
}

int conv_igemm_record(struct op_ctx *ctx, struct gpu_recorder *rec, int mode, const struct convg_push *geo,
		      const struct op_tensor *a, const struct op_tensor *b, const struct op_tensor *bias,
		      const struct gpu_binding *part)
{
	const struct gpu_pipeline *p;
	struct gpu_binding bind[5];
	uint64_t m, n, k, tiles, wgs;
	struct convi_push pc = {
		.groups = groups_of(geo), .splits = 1,
		.mode = (uint32_t)mode, .flags = bias ? CONV_HAS_BIAS : 0,
		.c = geo->c, .h = geo->h, .w = geo->w, .oc = geo->oc, .oh = geo->oh, .ow = geo->ow,
		.kh = geo->kh, .kw = geo->kw, .sh = geo->sh, .sw = geo->sw, .ph = geo->ph, .pw = geo->pw,
		.dh = geo->dh, .dw = geo->dw, .cpg = geo->cpg, .opg = geo->opg,
	};

	if (!conv_igemm_usable(ctx, mode, geo))
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "this convolution is too large for the implicit GEMM");
	dims(mode, geo, &m, &n, &k);
	pc.m = (uint32_t)m;
	pc.n = (uint32_t)n;
	pc.k = (uint32_t)k;
	pc.kchunk = (uint32_t)k;
	if (mode == CONVI_WGRAD) {
		pc.splits = geo->nchunks;
		pc.kchunk = geo->chunk;
	}
	pc.tiles_n = (uint32_t)((n + CONVI_TILE - 1) / CONVI_TILE);
	tiles = ((m + CONVI_TILE - 1) / CONVI_TILE) * pc.tiles_n;
	pc.tiles_mn = (uint32_t)tiles;
	wgs = tiles * pc.groups * pc.splits;
	if (wgs > UINT32_MAX)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "more than 2^32 output tiles");
	/* One pipeline per mode, the mode a compile-time constant there. */
	if (op_pipeline(ctx, mode == CONVI_FWD ? "conv_igemm_fwd" : mode == CONVI_DGRAD ? "conv_igemm_dgrad"
			: "conv_igemm_wgrad", tdp_dtype_name(ctx->out.dtype), &p) < 0 ||
	    op_bind(ctx, a, false, &bind[0]) < 0 || op_bind(ctx, b, false, &bind[1]) < 0 ||
	    op_bind(ctx, bias ? bias : a, false, &bind[2]) < 0 || op_bind(ctx, &ctx->out, true, &bind[3]) < 0)
		return -1;
	/* Unused bindings get a tensor already bound: binding 4 without partials. */
	bind[4] = part ? *part : bind[3];
	return op_dispatch(ctx, rec, p, bind, 5, &pc, sizeof(pc), wgs * 256, 256);
}
