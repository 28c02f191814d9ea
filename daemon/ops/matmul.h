/* matmul's kernels for the ops built on a product (matmul.c). */
#pragma once

#include <stdint.h>

#include "gpu/recorder.h"

struct op_ctx;

/* Record C[b] = A[b] @ B[b] for b < batches on explicit bindings (A [m,k],
 * B [k,n], C [m,n], row-major, in dtype), A and B advancing astride and
 * bstride elements per batch (0: the same matrix for all), with the kernel
 * matmul picks for that size: for ops built on a product (conv2d). Returns
 * 0 or op_fail(). */
int matmul_record_bound(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding bind[3],
			int dtype, uint32_t m, uint32_t n, uint32_t k, uint32_t batches,
			uint32_t astride, uint32_t bstride);
