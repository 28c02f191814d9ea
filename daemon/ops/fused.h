/* Fused elementwise kernels (shaders/fused.comp): a chain or DAG of
 * elementwise ops compiled into one small program that reads each input once
 * and writes each materialised result once. The graph decides what to fuse
 * (graph_fuse.c); this module turns the members into a program and records it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "op_codes.h"
#include "ops/op.h"

/* An elementwise node as a fused program sees it. */
struct ew_desc {
	uint32_t opcode;        /* program opcode: UN_*, FU_BINARY + BIN_ / CMP_*, FU_WHERE */
	int operand[3];         /* program operands a, b, c: input index, or -1: konst[] */
	float konst[3];
	bool u8_out;            /* a comparison: the result is u8 0/1 */
	int dtype;              /* the float dtype it computes in */
};


/* Mirrors FusedPush in shaders/fused.comp (128 bytes). */
struct fused_push {
	uint32_t n;
	uint32_t info;
	uint32_t modes;
	uint32_t modulus;
	uint32_t magic;
	uint32_t outregs;
	uint32_t w[FU_MAX_WORDS];
};

/* One member of a fused kernel, in execution order. src[k] is where input k
 * of the node comes from: >= 0 an earlier member, < 0 input slot -1 - src[k]. */
struct fused_member {
	struct ew_desc desc;
	int src[OP_MAX_INPUTS];
	bool store;             /* materialise the result: it gets an output slot */
};

/* A compiled kernel: the program and its tensors (slots: inputs, then the
 * stored members in order). `slot[].alloc` is set by the caller before
 * fused_record. */
struct fused_kernel {
	struct fused_push pc;
	unsigned nin, nout;
	int dtype;
	uint64_t count;
	struct op_tensor slot[FU_MAX_SLOTS];
};

/* Compile `n` members computing tensors shaped like `out` over the input
 * slots `in[0..nin)`. Returns 0, or -E2BIG when they do not fit one kernel
 * (slots, registers, words, broadcast forms); *ret is written only on
 * success. */
int fused_compile(const struct fused_member *m, unsigned n, const struct op_tensor *in, unsigned nin,
		  const struct op_tensor *out, struct fused_kernel *ret);

/* Record kernel `k`; failures go through op_fail on `ctx`. */
int fused_record(struct op_ctx *ctx, const struct fused_kernel *k, struct gpu_recorder *rec);
