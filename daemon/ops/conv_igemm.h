/* Implicit-GEMM conv2d and its gradients (conv_igemm.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "ops/op.h"

/* Below this many multiply-adds the direct kernels are fast enough. */
#define CONVI_MIN_MACS (1ull << 22)
/* ... and, for a weight gradient, at least this many columns (C/groups·KH·KW). */
#define CONVI_WGRAD_MIN_N 64u

/* Whether `ctx`'s product in `mode` (CONVI_*, conv_codes.h) fits the
 * implicit-GEMM kernel: 32-bit indices, the tile grid, and (FWD, DGRAD)
 * a reduction short enough for one invocation's loop budget. `geo` holds the
 * forward's geometry (n, c, h, w, oc, oh, ow, kernel, stride, padding,
 * dilation, cpg, opg; the rest is ignored). */
bool conv_igemm_usable(const struct op_ctx *ctx, int mode, const struct convg_push *geo);

/* Whether the "auto" choice takes the implicit GEMM for `mode`: usable, at
 * least CONVI_MIN_MACS multiply-adds (or `wide`: too long a sum for the
 * direct kernel) and at least 16 rows per group, so the 128-row tiles are
 * not mostly empty (depthwise convolutions stay direct); a weight gradient
 * also needs CONVI_WGRAD_MIN_N columns. */
bool conv_igemm_wanted(const struct op_ctx *ctx, int mode, const struct convg_push *geo, bool wide);

/* Record `mode` into ctx->out: FWD a = weight, b = x, `bias` or NULL;
 * DGRAD a = weight, b = grad_out; WGRAD a = grad_out, b = x, split over the
 * batch x spatial positions in geo->nchunks chunks of geo->chunk, each
 * chunk's f32 sums into `part` (chunk-major; the caller sums them in order)
 * or, with one chunk, straight into ctx->out (`part` NULL). Returns 0 or
 * op_fail(). */
int conv_igemm_record(struct op_ctx *ctx, struct gpu_recorder *rec, int mode, const struct convg_push *geo,
		      const struct op_tensor *a, const struct op_tensor *b, const struct op_tensor *bias,
		      const struct gpu_binding *part);
