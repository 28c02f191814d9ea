/* Constants shared by daemon/ops/conv.c and the conv2d/pool2d shaders (both
 * include this file). */
#ifndef TENSORD_CONV_CODES_H
#define TENSORD_CONV_CODES_H

/* pool2d.comp: which reduction over the window */
#define POOL_MAX 0
#define POOL_AVG 1

/* conv2d.comp flags */
#define CONV_HAS_BIAS 1

/* conv2d_grad.comp modes */
#define CONVG_INPUT 0
#define CONVG_WPART 1
#define CONVG_WSUM 2

/* conv_igemm.glsl modes: the forward, the input and the weight gradient */
#define CONVI_FWD 0
#define CONVI_DGRAD 1
#define CONVI_WGRAD 2

#endif
