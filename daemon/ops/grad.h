/* Reverse-mode differentiation, as the backward functions of ops see it.
 *
 * A backward function gets the node it differentiates and the node holding
 * the gradient of that node's result, and appends ordinary op nodes (mul,
 * matmul, sum...) that compute the gradient of each input. Values are named
 * by refs: a node index (>= 0), or a stored tensor the forward graph read
 * (< 0; from ag_input). The engine (daemon/autograd/autograd.c) accumulates gradients
 * that reach a value along several paths and reduces broadcast gradients back
 * to their operand's shape.
 *
 * This header is the interface between two layers: ops/ declares it and its
 * rules (ops/grad_*.c, named by each op_def's `backward`) call it; autograd/,
 * the layer above, implements the ag_* functions. The rules stay next to
 * their family so that a row can name its rule without including upward. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "ops/op.h"

struct autograd;

/* op_backward_fn (ops/op.h), each op's `backward`: the engine fills
 * ret_grads with AG_NONE first, and reduces broadcast gradients to each
 * input's shape. */

#define AG_NONE INT32_MIN

/* Append op `op` on `inputs` (refs) with `attrs`. Returns the new node's ref,
 * or -1 after recording the failure. */
int ag_emit(struct autograd *ag, const char *op, const int *inputs, unsigned n,
	    const struct graph_attr *attrs, unsigned nattrs);

/* One- and two-input shorthands of ag_emit without attributes. */
int ag_op1(struct autograd *ag, const char *op, int a);
int ag_op2(struct autograd *ag, const char *op, int a, int b);

/* x OP scalar (OP a binary op), e.g. ag_scalar(ag, "mul", x, 0.5). */
int ag_scalar(struct autograd *ag, const char *op, int x, double scalar);

/* The ref of input `k` of forward node `node`. */
int ag_input(struct autograd *ag, unsigned node, unsigned k);

/* How many inputs forward node `node` has (for optional inputs, e.g. a bias). */
unsigned ag_ninputs(struct autograd *ag, unsigned node);

/* The ref of forward node `node`'s own result. */
int ag_output(struct autograd *ag, unsigned node);

/* The tensor description (dtype, shape) behind a ref (a copy: emitting nodes
 * may move the graph's storage); dtype -1 and rank 0 for a failed ref (-1). */
struct op_tensor ag_tensor(struct autograd *ag, int ref);

/* An attribute value of forward node `node`. The pointer is into the graph's
 * node storage, which ag_emit may move: copy the value before emitting. */
const struct op_attr_value *ag_attr_of(struct autograd *ag, unsigned node, const char *name);

/* Sum `grad` over the dimensions where it was broadcast so that it has the
 * shape of `like` (a ref). Returns the ref (maybe `grad` itself) or -1. */
int ag_unbroadcast(struct autograd *ag, int grad, int like);

/* Reshape `x` to `rank`/`shape`. */
int ag_reshape(struct autograd *ag, int x, unsigned rank, const uint64_t *shape);

/* u8 mask -> the dtype of `like` (0 or 1), for masking gradients. */
int ag_mask_like(struct autograd *ag, int mask, int like);

/* `x` broadcast to the shape of `like` (x must broadcast to it). */
int ag_broadcast_to(struct autograd *ag, int x, int like);

/* `x` summed over `axis` with keepdims (the reduction a backward rule needs). */
int ag_sum_keep(struct autograd *ag, int x, int64_t axis);

/* Reduction `op` (sum, mean, prod...) of `x` over `axes` (`naxes` of them;
 * NULL: every axis), keeping the reduced dims as size 1 when `keepdims`. */
int ag_reduce(struct autograd *ag, const char *op, int x, const int64_t *axes, unsigned naxes,
	      bool keepdims);

/* Zeros of the shape and dtype of `like`. */
int ag_zeros_like(struct autograd *ag, int like);

/* Fail the backward pass of `node` with a reason (reported with the node). */
__attribute__((format(printf, 3, 4)))
int ag_fail(struct autograd *ag, unsigned node, const char *fmt, ...);
