/* The backward rules (op_backward_fn), listed by op in grad_table.c. */
#pragma once

#include "ops/grad.h"

int grad_add(struct autograd *ag, unsigned node, int g, int *out);
int grad_sub(struct autograd *ag, unsigned node, int g, int *out);
int grad_mul(struct autograd *ag, unsigned node, int g, int *out);
int grad_div(struct autograd *ag, unsigned node, int g, int *out);
int grad_pow(struct autograd *ag, unsigned node, int g, int *out);
int grad_maximum(struct autograd *ag, unsigned node, int g, int *out);
int grad_minimum(struct autograd *ag, unsigned node, int g, int *out);
int grad_none(struct autograd *ag, unsigned node, int g, int *out);
int grad_where(struct autograd *ag, unsigned node, int g, int *out);
int grad_unary(struct autograd *ag, unsigned node, int g, int *out);
int grad_cast(struct autograd *ag, unsigned node, int g, int *out);
int grad_matmul(struct autograd *ag, unsigned node, int g, int *out);
int grad_sum_mean(struct autograd *ag, unsigned node, int g, int *out);
int grad_softmax(struct autograd *ag, unsigned node, int g, int *out);
int grad_reshape(struct autograd *ag, unsigned node, int g, int *out);
int grad_transpose(struct autograd *ag, unsigned node, int g, int *out);
int grad_permute(struct autograd *ag, unsigned node, int g, int *out);
int grad_mse(struct autograd *ag, unsigned node, int g, int *out);
int grad_bce_logits(struct autograd *ag, unsigned node, int g, int *out);
int grad_class_loss(struct autograd *ag, unsigned node, int g, int *out);
int grad_conv2d(struct autograd *ag, unsigned node, int g, int *out);
int grad_pool2d(struct autograd *ag, unsigned node, int g, int *out);
int grad_row_norm(struct autograd *ag, unsigned node, int g, int *out);
int grad_batch_norm(struct autograd *ag, unsigned node, int g, int *out);
int grad_prod(struct autograd *ag, unsigned node, int g, int *out);
int grad_max_min(struct autograd *ag, unsigned node, int g, int *out);
int grad_var_std(struct autograd *ag, unsigned node, int g, int *out);
int grad_slice(struct autograd *ag, unsigned node, int g, int *out);
int grad_concat(struct autograd *ag, unsigned node, int g, int *out);
int grad_stack(struct autograd *ag, unsigned node, int g, int *out);
int grad_pad(struct autograd *ag, unsigned node, int g, int *out);
int grad_gather(struct autograd *ag, unsigned node, int g, int *out);
int grad_index_add(struct autograd *ag, unsigned node, int g, int *out);
