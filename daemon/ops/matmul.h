/* matmul's kernels for the ops built on a product (matmul.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gpu/recorder.h"
#include "ops/op_priv.h"

struct op_ctx;

/* Record C[b] = A[b] @ B[b] for b < batches on explicit bindings (A [m,k],
 * B [k,n], C [m,n], row-major, in dtype), A and B advancing astride and
 * bstride elements per batch (0: the same matrix for all), with the kernel
 * matmul picks for that size: for ops built on a product (conv2d). Returns
 * 0 or op_fail(). */
int matmul_record_bound(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding bind[3],
			int dtype, uint32_t m, uint32_t n, uint32_t k, uint32_t batches,
			uint32_t astride, uint32_t bstride);

/* Scratch for the f32 partial results of split product `pc` (or any
 * product with `force`) into *ret, bound as binding 3; the dummy binding
 * when unsplit. Returns 0 or op_fail(). */
int matmul_partials(struct op_ctx *ctx, const struct mm_push *pc, bool force, struct gpu_binding *ret);

/* Record the fixed-order sum of split product `pc`'s partials `part` into
 * `bind_out` through its epilogue (`bias`: matmul_reduce.comp). Returns 0
 * or op_fail(). */
int matmul_reduce(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding *part,
		  const struct gpu_binding *bind_out, const struct gpu_binding *bias, int dtype,
		  const struct mm_push *pc);
