/* Op codes and flags shared by the C side and the GLSL shaders (both include
 * this file), so a switch in a shader and the registry cannot drift apart. */
#ifndef TENSORD_OP_CODES_H
#define TENSORD_OP_CODES_H

/* binary.comp and compare.comp */
#define BIN_ADD 0
#define BIN_SUB 1
#define BIN_MUL 2
#define BIN_DIV 3
#define BIN_POW 4
#define BIN_MAXIMUM 5
#define BIN_MINIMUM 6
#define CMP_EQ 10
#define CMP_NE 11
#define CMP_LT 12
#define CMP_LE 13
#define CMP_GT 14
#define CMP_GE 15

/* unary.comp */
#define UN_NEG 0
#define UN_ABS 1
#define UN_EXP 2
#define UN_LOG 3
#define UN_SQRT 4
#define UN_RSQRT 5
#define UN_SIN 6
#define UN_COS 7
#define UN_TANH 8
#define UN_SIGMOID 9
#define UN_RELU 10
#define UN_GELU 11
#define UN_GELU_TANH 12
#define UN_SILU 13
#define UN_SOFTPLUS 14
#define UN_CLAMP 15
#define UN_COPY 16
#define UN_ERF 17

/* flags of the elementwise push constants */
#define EW_CONTIGUOUS 1u   /* every operand is laid out like the output */
#define EW_B_SCALAR 2u     /* the second operand is the push constant `alpha` */
#define EW_A_SCALAR 4u     /* the first operand is the push constant `alpha` */

#endif
