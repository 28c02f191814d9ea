/* Constants shared by daemon/ops/reduce*.c, daemon/ops/norm.c and the
 * reduce/softmax/norm shaders (both sides include this file). */
#ifndef TENSORD_REDUCE_CODES_H
#define TENSORD_REDUCE_CODES_H

/* reduce.comp: how a row is combined */
#define RED_SUM 0
#define RED_PROD 1
#define RED_MAX 2
#define RED_MIN 3
#define RED_ARGMAX 4
#define RED_ARGMIN 5

/* reduce.comp: flags */
#define RED_IN_PARTIAL 1u   /* read the previous pass's partials, not the tensor */
#define RED_OUT_PARTIAL 2u  /* write raw partials (one per row and chunk) */
#define RED_OUT_F32 4u      /* final: write f32 values to binding 3 */
#define RED_OUT_IDX 8u      /* final: write the index (i32) to binding 4 */
#define RED_SQDEV 16u       /* reduce (x - mean[row])^2 instead of x */
#define RED_COLUMNS 32u     /* first pass: invocation i folds row i % M, every
			       nchunks-th element from i / M (coalesced when
			       the kept dims are the innermost) */
#define RED_COLUMNS4 64u    /* RED_COLUMNS in 4-row vectors (M % 4 == 0; f32, f16,
			       i32; not argmax/argmin) */
#define RED_ROWS4 128u      /* first pass over contiguous rows (one reduced dim of
			       stride 1; L and every row's start multiples of
			       4; f32, f16, i32; not argmax/argmin): an
			       invocation folds vectors of four, lane by lane,
			       then its four lanes pairwise */

/* reduce.comp: what the final pass does to the combined value */
#define RED_POST_NONE 0
#define RED_POST_DIV 1      /* v / div; div <= 0 gives NaN for 0, else inf */
#define RED_POST_SQRT_DIV 2 /* sqrt of the above */

/* softmax.comp */
#define SM_SOFTMAX 0
#define SM_LOG_SOFTMAX 1
#define SM_LOGSUMEXP 2

/* norm.comp flags */
#define NORM_RMS 1u         /* rms_norm: no centring */
#define NORM_HAS_W 2u
#define NORM_HAS_B 4u
/* norm_batch.comp flags (with NORM_HAS_W, NORM_HAS_B) */
#define NORM_STATS_F32 8u   /* mean/var are f32 batch statistics, not running stats */
/* norm_batch_grad.comp phases, and BNG_FOLD */
#define BNG_PARTIAL 0u      /* a chunk's statistics into the partials */
#define BNG_DX 1u           /* the channel's statistics, then dx over the chunk */
#define BNG_WEIGHT 2u       /* one workgroup a channel: its statistics, then Σ g·xhat */
#define BNG_FOLD 4u         /* the channel's statistics from its partials, not its one chunk */

#endif
