/* The row-reduction engine behind the reduce ops and batch_norm's training
 * statistics: a tensor's axes split into kept and reduced ones, every result
 * ("row") combined pairwise on the GPU by reduce.comp, in as many passes as
 * the row length needs. When the kept dims are the innermost, contiguous
 * block (a bias gradient's sum over axis 0), the first pass runs in columns
 * (RED_COLUMNS) so that its reads are coalesced. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "ops/op.h"

/* The logical permutation of an input: kept dims, then reduced dims,
 * coalesced where the tensor is contiguous across them. */
struct red_plan {
	uint64_t M;                 /* rows (results) */
	uint64_t L;                 /* elements per row */
	unsigned nk, nr;
	uint64_t shape[TDP_MAX_RANK];
	uint64_t stride[TDP_MAX_RANK];
};

/* What to reduce and where the result goes. */
struct red_job {
	uint32_t op;                /* RED_SUM ... RED_ARGMIN */
	uint32_t post;              /* RED_POST_*: applied by the final pass */
	float div;                  /* divisor of RED_POST_DIV / RED_POST_SQRT_DIV */
	bool sqdev;                 /* reduce (x - mean[row])^2; `mean` is set */
	struct gpu_binding mean;    /* f32 per row, with sqdev */
	uint32_t out_flag;          /* 0 (an x-dtype tensor), RED_OUT_F32 or RED_OUT_IDX */
	struct gpu_binding out;     /* M results */
};

/* Plan reducing the axes of `x` that `reduced` marks (x->rank entries).
 * Fails (RESOURCE_EXHAUSTED) past the 2^31 elements the shaders index. */
int red_plan_make(struct op_ctx *ctx, const struct op_tensor *x, const bool *reduced,
		  struct red_plan *ret);

/* Record the passes that reduce `x` (of dtype x->dtype) per `plan` and
 * `job`, with scratch from op_scratch_alloc (one allocation at most).
 * Rows of length 0 give the op's identity (then `post`). Returns 0 or op_fail(). */
int red_record(struct op_ctx *ctx, struct gpu_recorder *rec, const struct red_plan *plan,
	       const struct op_tensor *x, const struct red_job *job);

/* The binding of bytes [offset, offset + size) of a scratch allocation. */
struct gpu_binding red_bind(struct op_ctx *ctx, const struct gpu_alloc *a, uint64_t offset,
			    uint64_t size, bool write);

/* `bytes` rounded up to the device's storage-buffer offset alignment. */
uint64_t red_align(const struct op_ctx *ctx, uint64_t bytes);
