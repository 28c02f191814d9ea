/* Matmul epilogue fusion (issue 16): the node chains matmul -> add(bias
 * row) -> relu, matmul -> add(bias row) and matmul -> relu become one
 * matmul node with a bias input and/or activation "relu", and matmul ->
 * relu_grad(product, mask) one with the mask and activation "relu_grad";
 * each stores the same bits (ops/matmul.c, shaders/matmul_epi.glsl) in one
 * dispatch instead of two or three. docs/architecture.md, "Fusion", states
 * the rules. */
#pragma once

#include "engine/graph_core.h"

/* Rewrite the chains among nodes [first, gr->n) whose intermediates nothing
 * else reads (no other consumer, not stored, returned, kept or derived):
 * the chain's last node becomes the fused matmul (it keeps its id, out and
 * flags, so whatever reads it is unchanged) and the nodes before it become
 * views that record nothing. Run it before autograd_build, so that the
 * backward pass differentiates the fused node (grad_matmul) with the same
 * nodes and bits as the chain. A chain whose rewrite would move where a
 * gradient is summed (another node between its ends reads its operands),
 * or whose last node is kept (a loss), is left alone. Returns the number of chains fused (>= 0); nothing fails. */
int graph_fuse_epilogues(struct graph *gr, unsigned first);

/* The chains matmul -> relu_grad(product, mask) among nodes [first, gr->n)
 * of a backward pass autograd_build just emitted (relu's backward, the
 * gradient of each hidden layer), under the rules above except the one
 * about gradients (nothing differentiates these nodes). Returns the number
 * fused. */
int graph_fuse_backward_masks(struct graph *gr, unsigned first);
