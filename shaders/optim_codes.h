/* Op codes and flags shared by daemon/ops/optim.c and shaders/optim.comp
 * (both include this file). */
#ifndef TENSORD_OPTIM_CODES_H
#define TENSORD_OPTIM_CODES_H

#define OPT_SGD_BUF 0
#define OPT_SGD_PARAM 1
#define OPT_ADAM_M 2
#define OPT_ADAM_V 3
#define OPT_ADAM_PARAM 4
#define OPT_FOUND_INF 5     /* found_inf: whether any input holds inf or NaN */

#define OPT_F_BUF 1u        /* input 2 (sgd's old momentum buffer) is present */
#define OPT_F_MOMENTUM 2u   /* sgd_param: momentum != 0 */
#define OPT_F_NESTEROV 4u   /* sgd_param: Nesterov momentum */
#define OPT_F_L2 8u         /* add weight_decay * w to the gradient */
#define OPT_F_DECAY 16u     /* adam_param: AdamW's decoupled decay, w *= 1 - lr * wd */
#define OPT_F_GATE 32u      /* `gated`: a non-zero skip flag makes the result the old value */
#define OPT_F_FLAG 64u      /* found_inf's segment: the input is an earlier flag (non-zero: found) */
#define OPT_F_UNSCALE 128u  /* the gradient times the skip flag's element 1 (1 / loss scale) */

#define OPT_WG 256          /* invocations per workgroup */

/* optim_multi.comp: every update of a training step in one dispatch. Its
 * table (binding 7) holds one segment of OPTM_SEG_WORDS uint words per
 * parameter update, in the order of their first workgroups; bindings 0 to
 * OPTM_SLOTS - 1 are windows of the device's memory blocks that the
 * segments' tensors lie in. */
#define OPTM_SLOTS 7
#define OPTM_SEG_WORDS 48
#define OPTM_KIND 0         /* OPTM_ONE or OPTM_ADAM */
#define OPTM_N 1            /* elements */
#define OPTM_WG0 2          /* the segment's first workgroup */
#define OPTM_REF 4          /* 8 tensors: (slot, element offset in it) */
#define OPTM_ARGS 20        /* 3 ops' coefficients, OPTM_ARG_WORDS each */
#define OPTM_ARG_WORDS 9    /* op, flags, wd, beta, mix, lr, bc2_sqrt, eps, decay */
#define OPTM_ONE 0          /* one op: a, b, c -> o (tensors 0 to 3), args 0 */
#define OPTM_ADAM 1         /* adam_m, adam_v, adam_param: g, m, v, w -> m', v', w' */
#define OPTM_CHECK 2        /* found_inf: tensor 0 (times tensor 2's element 0 with OPT_F_UNSCALE)
                             * checked, 1.0 stored into tensor 1 when not finite */
#define OPTM_SKIP 7         /* a gated segment's skip flag (1 element): its tensor index */

#endif
