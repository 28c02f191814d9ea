/* conv2d's GEMM path (conv_gemm.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "ops/op.h"

/* Whether conv2d `ctx` (inferred) takes the GEMM path: f32, one group, large
 * enough to pay for its column matrix (or `wide`: too many terms per output
 * for the direct kernel, whatever the size), and within the device's
 * bindings. */
bool conv_gemm_usable(const struct op_ctx *ctx, uint32_t groups, bool wide);

/* Record conv2d `ctx` through im2col and matmul. Returns 0 or op_fail(). */
int conv_gemm_record(struct op_ctx *ctx, struct gpu_recorder *rec, const uint32_t stride[2],
		     const uint32_t pad[2], const uint32_t dil[2]);
