/* matmul's kernels for small products (matmul_small.c): NN products of at
 * most 16 columns (matmul_skinny.comp), f32 products of K <= 16
 * (matmul_smallk.comp) and f32 products with A transposed and at most 16
 * columns (matmul_smalln.comp). Bindings `b` are matmul's five: A, B, C,
 * split-K partials, bias. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gpu/recorder.h"
#include "ops/op_priv.h"

struct op_ctx;

/* Which small-product kernel takes `pc` (matmul_small_pick). */
enum matmul_small { MATMUL_SMALL_NONE, MATMUL_SMALL_K, MATMUL_SMALL_N };

/* The small kernel for product `pc` of `dtype` with the op's split_k attr,
 * or MATMUL_SMALL_NONE (also for an empty product, and with
 * TENSORD_NO_SKINNY set). */
enum matmul_small matmul_small_pick(const struct mm_push *pc, int dtype, int64_t split_attr);

/* Record matmul_smallk.comp for `pc` (MATMUL_SMALL_K); sets its split and
 * tile fields. Returns 0 or op_fail(). */
int matmul_record_smallk(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding b[5],
			 struct mm_push *pc);

/* Record matmul_smalln.comp for `pc` (MATMUL_SMALL_N) and, when it splits
 * K, the reduction of its partials (b[3] is set here). Returns 0 or
 * op_fail(). */
int matmul_record_smalln(struct op_ctx *ctx, struct gpu_recorder *rec, struct gpu_binding b[5],
			 struct mm_push *pc);

/* Whether NN product `pc`, after the split was chosen, takes
 * matmul_skinny.comp: unsplit, at most 16 columns, rows enough to fill a
 * GPU. */
bool matmul_skinny_fits(const struct mm_push *pc);

/* Record matmul_skinny.comp for `pc`. Returns 0 or op_fail(). */
int matmul_record_skinny(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_binding b[5],
			 int dtype, struct mm_push *pc);
