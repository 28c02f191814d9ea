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

/* matmul_cm.comp's tile: M and N multiples of 128, K of 32. */
#define MM_CM_TILE 128
/* The autocast modules' narrow tile (matmul_cm_khr_f32out_n64): 128x64. */
#define MM_CM_TILE_N64 64
#define MM_CM_K 32

/* Whether matmul's product runs autocast: bf16 or f16 operands, f32
 * accumulation and result (ctx->autocast set, an f32 result). */
bool matmul_autocast(const struct op_ctx *ctx);

/* The width of the product's cooperative-matrix tiles: MM_CM_TILE or, for
 * an autocast product, MM_CM_TILE_N64 where N is a multiple of it; 0: none. */
uint32_t matmul_cm_tile_n(const struct op_ctx *ctx, const struct mm_plan *pl);

/* Whether product `pl` (batch fields of `pc` set) runs on the tensor cores:
 * a kernel for its dtype on this device, whole tiles, NN, NT or TN, at most
 * one batch dimension. */
bool matmul_use_cm(const struct op_ctx *ctx, const struct mm_plan *pl, const struct mm_push *pc);

/* Record product `pl` on the tensor cores: mp's m and k (pl's, or padded
 * ones: the operands' rows as bound) tile it, and the first pl->m rows of
 * each of mp's batches are stored; `ab` the operands' bindings (NULL: the
 * inputs), `out` the result's (NULL: ctx->out); `epi` (an autocast product
 * on 128-wide tiles only) pl->epi's bias or mask, applied in the kernel
 * (matmul_cm_khr_f32out_epi*; NULL: no epilogue). 0 or op_fail(). */
int matmul_record_cm(struct op_ctx *ctx, struct gpu_recorder *rec, const struct mm_plan *pl, struct mm_push *mp,
		     const struct gpu_binding *ab, const struct gpu_binding *out, const struct gpu_binding *epi);

/* Record the scalar kernels' product `pc` (bind: A, B, C, the epilogue's
 * bias or the dummy), choosing tile and split-K (`split_attr`: matmul's
 * split_k). 0 or op_fail(). */
int matmul_dispatch(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding bind[4], int dtype,
		    struct mm_push *pc, int64_t split_attr);

/* Fold broadcast-B batches of an untransposed A into one product of more rows. */
void matmul_fold_batches(struct mm_push *pc);

/* Apply epilogue `epi` (MM_BIAS, MM_RELU, MM_MASK; `bias` its input) in
 * place over the product stored in ctx->out (`n` columns). 0 or op_fail(). */
int matmul_epilogue_after(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding *bias, uint32_t n,
			  uint32_t epi);

/* Whether autocast product `pl` (batch fields of `pc` set) casts both
 * operands whole, unpadded (*ret_to_16: to the 16-bit dtype for the tensor
 * cores, else rounded to it and back to f32), as matmul_record_autocast
 * would record it. */
bool matmul_autocast_whole(const struct op_ctx *ctx, const struct mm_plan *pl, const struct mm_push *pc,
			   bool *ret_to_16);

/* Record an autocast product (matmul_autocast.c): bind[3] the epilogue's
 * bias or the dummy; bind[0..2] are filled in. 0 or op_fail(). */
int matmul_record_autocast(struct op_ctx *ctx, struct gpu_recorder *rec, const struct mm_plan *pl,
			   struct mm_push *pc, struct gpu_binding bind[4]);
