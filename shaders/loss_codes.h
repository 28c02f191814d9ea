/* Op codes, flags and sizes shared by daemon/ops/loss.c and shaders/loss.comp
 * (both include this file). */
#ifndef TENSORD_LOSS_CODES_H
#define TENSORD_LOSS_CODES_H

#define LOSS_MSE 0
#define LOSS_BCE_LOGITS 1
#define LOSS_CROSS_ENTROPY 2
#define LOSS_NLL 3

#define LOSS_F_NONE 1u       /* write each item's loss to the output (reduction none) */
#define LOSS_F_PARTIALS 2u   /* items are (sum, weight) partials of an earlier level */
#define LOSS_F_FINAL 4u      /* one workgroup: write the reduced value to the output */
#define LOSS_F_MEAN 8u       /* the final value is a mean, not a sum */
#define LOSS_F_WEIGHTED 16u  /* divide by the sum of weights (ignore_index), not `denom` */
#define LOSS_F_IGNORE 32u    /* targets equal to ignore_index weigh 0 */
#define LOSS_F_ROWS 64u      /* cross_entropy's row pass: (logsumexp, sum) of each row */

/* cross_entropy's rows are at most this wide: a row pass invocation then
 * loops at most 2 * 2^22 / 256 = 32768 times (Mesa 22.3's lavapipe ends an
 * invocation's loops after 65535 iterations in all). */
#define LOSS_MAX_CLASSES (1u << 22)

#define LOSS_WG 256          /* invocations per workgroup */
#define LOSS_PER_THREAD 8    /* items each invocation folds in, in order, before the tree */
#define LOSS_CHUNK (LOSS_WG * LOSS_PER_THREAD)

#endif
