/* Shape rules conv2d, the pools and their gradients share. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "ops/op.h"

/* Spatial sizes, kernel sizes, strides, paddings and dilations are kept below
 * this so the shaders' signed 32-bit window arithmetic cannot overflow. */
#define CONV_MAX_DIM (1u << 24)

/* Read an int-or-pair attr into (ret[0], ret[1]) = (height, width); `def` when
 * it is absent. Values must lie in [lo, CONV_MAX_DIM). Returns 0 or op_fail(). */
int conv_attr_pair(struct op_ctx *ctx, const char *name, int64_t def, int64_t lo, uint32_t ret[2]);

/* Output size of one spatial dim: floor((in + 2 pad - span) / stride) + 1,
 * where span = dilation (kernel - 1) + 1; an empty kernel or a window larger
 * than the padded input is an error. Returns 0 or op_fail(). */
int conv_out_dim(struct op_ctx *ctx, const char *axis, uint64_t in, uint64_t k, uint32_t s,
		 uint32_t p, uint32_t d, uint64_t *ret);

/* A pooling window from attrs kernel_size, stride (default: the kernel size)
 * and padding (at most half the kernel, as PyTorch, so every window holds an
 * input element): (height, width) each. Returns 0 or op_fail(). */
int conv_pool_window(struct op_ctx *ctx, uint32_t k[2], uint32_t s[2], uint32_t p[2]);

/* conv2d's and its gradients' kernel choice, attr `algo` (a test and
 * benchmarking switch; "auto" when absent). */
enum conv_algo {
	CONV_ALGO_AUTO,
	CONV_ALGO_DIRECT,
	CONV_ALGO_IM2COL,
	CONV_ALGO_IMPLICIT,
	CONV_ALGO_OLD,              /* the choice before the implicit GEMM */
};

/* Read attr `algo`: "auto", "direct", "implicit" and, where `im2col_ok`
 * (the forward), "im2col". Without the attr, $TENSORD_CONV_ALGO (for
 * timing): "direct", "implicit", or "old" (the choice before the implicit
 * GEMM: im2col + matmul for large f32 one-group forwards, else the direct
 * kernels); else "auto". Returns 0 or op_fail(). */
int conv_attr_algo(struct op_ctx *ctx, bool im2col_ok, enum conv_algo *ret);
