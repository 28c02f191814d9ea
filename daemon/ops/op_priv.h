/* What an op's infer works out for its record, family by family:
 * op_ctx.priv is the union of these notes, so each family reads its own
 * member and nothing is cast from bytes. A family that needs notes declares
 * them here and adds a member to union op_priv. Push-constant structs kept
 * whole as notes mirror their GLSL block (static asserts below). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gpu/pipeline.h"
#include "wire_limits.h"

/* conv.c: conv2d's parameters. */
struct conv_plan {
	uint32_t stride[2], pad[2], dil[2], groups;
	int algo;                   /* enum conv_algo (conv_shape.h) */
};

/* conv.c (max_pool2d, avg_pool2d): mirrors PoolPush in shaders/pool2d.comp. */
struct pool_push {
	uint32_t total;
	uint32_t h, w;
	uint32_t oh, ow;
	uint32_t kh, kw;
	uint32_t sh, sw;
	uint32_t ph, pw;
	uint32_t op;
};
_Static_assert(sizeof(struct pool_push) == 48, "pool_push must mirror PoolPush");

/* conv_grad.c (conv2d_grad_*): mirrors ConvGradPush in shaders/conv2d_grad.comp. */
struct convg_push {
	uint32_t total;
	uint32_t n, c, h, w;
	uint32_t oc, oh, ow;
	uint32_t kh, kw;
	uint32_t sh, sw;
	uint32_t ph, pw;
	uint32_t dh, dw;
	uint32_t cpg, opg;
	uint32_t mode;
	uint32_t chunk, nchunks;
};
_Static_assert(sizeof(struct convg_push) == 84, "convg_push must mirror ConvGradPush");

/* conv_grad.c (*_pool2d_grad): mirrors PoolGradPush in shaders/pool2d_grad.comp. */
struct poolg_push {
	uint32_t total;
	uint32_t h, w;
	uint32_t oh, ow;
	uint32_t kh, kw;
	uint32_t sh, sw;
	uint32_t ph, pw;
	uint32_t op;
};
_Static_assert(sizeof(struct poolg_push) == 48, "poolg_push must mirror PoolGradPush");

/* create.c: mirrors the push block of shaders/create_arange.comp. */
struct create_arange_push {
	uint32_t n;
	int32_t istart, istep;
	float fstart, fstep;
};

/* create.c */
struct create_notes {
	uint32_t bits;              /* fill value */
	struct create_arange_push arange;
};

/* index_add.c */
struct index_add_notes {
	int axis;
};

/* layout.c */
struct layout_notes {
	unsigned axis;
	unsigned perm[TDP_MAX_RANK];         /* result dim d is input dim perm[d] */
	uint64_t start[TDP_MAX_RANK];        /* slice start / pad before, per input dim */
	uint64_t step[TDP_MAX_RANK];
	uint32_t bits;                       /* pad value, one_hot's one */
};

/* loss.c */
enum loss_reduction { LOSS_REDUCE_MEAN, LOSS_REDUCE_SUM, LOSS_REDUCE_NONE };

struct loss_plan {
	enum loss_reduction reduction;
	uint64_t items;     /* elements (mse, bce) or samples (cross_entropy, nll) */
	uint64_t classes;
};

/* matmul.c and matmul_small.c */
#define MM_MAX_BDIMS 6

/* K advances 16 (matmul, matmul_v4) or 8 (matmul_l) per loop iteration of an
 * invocation: the longest products each kernel takes (OP_LOOP_BUDGET).
 * Lavapipe counts matmul_l's inner loop over its 8-term K-step too (nine
 * iterations per step; measured: K-chunks of 75,000 came out short, of
 * 50,000 right), so it takes a tenth of the budget in K-steps. */
#define MM_MAX_K (OP_LOOP_BUDGET * 16ull)
#define MM_L_MAX_K (OP_LOOP_BUDGET / 10 * 8ull)

/* Flags of mm_push (matmul.glsl's MM_TA, MM_TB, MM_PART). */
#define MM_TA 1u
#define MM_TB 2u
#define MM_PART 4u
/* The epilogue's flags (matmul_epi.glsl), kept in mm_plan.epi. */
#define MM_BIAS 8u
#define MM_RELU 16u
#define MM_MASK 32u
#define MM_EPI (MM_BIAS | MM_RELU | MM_MASK)
#define MM_LAYOUT (MM_TA | MM_TB)

/* Split-K: K chunks are whole K-steps of every kernel (and vec4s); a chunk
 * has at least MM_SPLIT_MIN_K terms when the heuristic splits, at most
 * MM_MAX_SPLITS chunks are taken for speed (more only where the loop budget
 * needs them). */
#define MM_SPLIT_ALIGN 16u
#define MM_MAX_SPLITS 32u

/* Mirrors MmPush in shaders/matmul.comp. */
struct mm_push {
	uint32_t m, n, k;
	uint32_t batches, tiles_n, tiles_mn, nbdims;
	uint32_t bshape[MM_MAX_BDIMS];
	uint32_t astride[MM_MAX_BDIMS];
	uint32_t bstride[MM_MAX_BDIMS];
	uint32_t flags, splits, kchunk;
};
_Static_assert(sizeof(struct mm_push) == 112, "mm_push must mirror MmPush");


struct mm_plan {
	uint64_t m, n, k;
	unsigned bdims;                       /* broadcast batch rank */
	uint64_t bshape[MM_MAX_BDIMS];        /* the result's batch dims */
	uint64_t abatch[MM_MAX_BDIMS];        /* a's batch dims, right-aligned, 1 where absent */
	uint64_t bbatch[MM_MAX_BDIMS];
	uint32_t flags;                       /* MM_TA, MM_TB (matmul.c) */
	uint32_t epi;                         /* MM_BIAS, MM_RELU: the epilogue */
	int64_t split_k;                      /* the attr: 0 auto, 1 never, n chunks */
};

/* norm.c (softmax, log_softmax): the axis normalised. */
struct softmax_notes {
	int axis;
};

/* sort.c */
struct sort_notes {
	int axis;
	uint32_t k;                          /* result length along the axis */
	bool descending;                     /* cumsum: reversed */
};

/* reduce.c */
struct red_note {
	bool reduced[TDP_MAX_RANK];
};

/* engine/kernel_node.c: a client kernel as a graph node. */
struct kernel;

struct kernel_node_notes {
	struct kernel *k;
	uint32_t groups[3];
	uint32_t result;                     /* the binding holding the result */
	uint8_t push[GPU_PUSH_BYTES];        /* the push constants, as bytes */
};

union op_priv {
	struct conv_plan conv;
	struct pool_push pool;
	struct convg_push conv_grad;
	struct poolg_push pool_grad;
	struct create_notes create;
	struct index_add_notes index_add;
	struct layout_notes layout;
	struct loss_plan loss;
	struct mm_plan matmul;
	struct softmax_notes softmax;
	struct red_note reduce;
	struct sort_notes sort;
	struct kernel_node_notes kernel;
};
/* It sits in every graph node (4096 of them at most): keep it small. */
_Static_assert(sizeof(union op_priv) <= 256, "op_priv grew past 256 bytes");
