/* Op codes and flags shared by daemon/ops/optim.c and shaders/optim.comp
 * (both include this file). */
#ifndef TENSORD_OPTIM_CODES_H
#define TENSORD_OPTIM_CODES_H

#define OPT_SGD_BUF 0
#define OPT_SGD_PARAM 1
#define OPT_ADAM_M 2
#define OPT_ADAM_V 3
#define OPT_ADAM_PARAM 4

#define OPT_F_BUF 1u        /* input 2 (sgd's old momentum buffer) is present */
#define OPT_F_MOMENTUM 2u   /* sgd_param: momentum != 0 */
#define OPT_F_NESTEROV 4u   /* sgd_param: Nesterov momentum */
#define OPT_F_L2 8u         /* add weight_decay * w to the gradient */
#define OPT_F_DECAY 16u     /* adam_param: AdamW's decoupled decay, w *= 1 - lr * wd */

#define OPT_WG 256          /* invocations per workgroup */

#endif
