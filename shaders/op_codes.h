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
#define BIN_RELU_GRAD 7   /* relu_grad(g, x): g where x > 0, else 0 */
#define BIN_GELU_GRAD 8   /* gelu_grad(g, x): g times gelu's slope at x (erf form) */
#define BIN_GELU_TANH_GRAD 9 /* the same for gelu's tanh form */
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

/* fused.comp: a program of up to FU_MAX_WORDS 32-bit words (instructions from
 * the front, f32 constants from the back). An instruction is
 * opcode | dst << 6 | a << 10 | b << 15 | c << 20; an operand below
 * FU_MAX_REGS names a register, FU_MAX_REGS + k the k-th constant (word
 * FU_MAX_WORDS - 1 - k). Opcodes: a UN_* code (operand b and c: alpha, beta),
 * FU_BINARY + a BIN_* or CMP_* code (a OP b; comparisons give 0 or 1), FU_WHERE
 * (a != 0 ? b : c). */
#define FU_MAX_WORDS 26
#define FU_PER_INVOCATION 4u /* elements, 256 apart */
#define FU_MAX_REGS 16
#define FU_MAX_SLOTS 8     /* tensors: inputs first, then outputs */
#define FU_MAX_CONSTS 16
#define FU_BINARY 32u
#define FU_WHERE 48u
/* how an input slot is indexed (2 bits per slot in `modes`) */
#define FU_FULL 0u         /* laid out like the output */
#define FU_SCALAR 1u       /* one element, read everywhere */
#define FU_SUFFIX 2u       /* the output's trailing dims: element i % mod */

#endif
