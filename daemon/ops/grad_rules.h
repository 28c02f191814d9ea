/* The backward rules (op_backward_fn, ops/grad.h), each named by its op's
 * row as `backward`; the rules live next to their family (grad_<family>.c). */
#pragma once

#include "ops/grad.h"

/* elementwise.c: grad_elementwise.c */
int grad_add(struct autograd *ag, unsigned node, int g, int *out);
int grad_sub(struct autograd *ag, unsigned node, int g, int *out);
int grad_mul(struct autograd *ag, unsigned node, int g, int *out);
int grad_div(struct autograd *ag, unsigned node, int g, int *out);
int grad_pow(struct autograd *ag, unsigned node, int g, int *out);
int grad_maximum(struct autograd *ag, unsigned node, int g, int *out);
/* relu_grad(g, x): the upstream gradient masked where x > 0; none for x */
int grad_relu_grad(struct autograd *ag, unsigned node, int g, int *out);
int grad_minimum(struct autograd *ag, unsigned node, int g, int *out);
int grad_none(struct autograd *ag, unsigned node, int g, int *out);
int grad_where(struct autograd *ag, unsigned node, int g, int *out);
int grad_neg(struct autograd *ag, unsigned node, int g, int *out);
int grad_abs(struct autograd *ag, unsigned node, int g, int *out);
int grad_exp(struct autograd *ag, unsigned node, int g, int *out);
int grad_log(struct autograd *ag, unsigned node, int g, int *out);
int grad_sqrt(struct autograd *ag, unsigned node, int g, int *out);
int grad_rsqrt(struct autograd *ag, unsigned node, int g, int *out);
int grad_sin(struct autograd *ag, unsigned node, int g, int *out);
int grad_cos(struct autograd *ag, unsigned node, int g, int *out);
int grad_tanh(struct autograd *ag, unsigned node, int g, int *out);
int grad_sigmoid(struct autograd *ag, unsigned node, int g, int *out);
int grad_relu(struct autograd *ag, unsigned node, int g, int *out);
int grad_gelu(struct autograd *ag, unsigned node, int g, int *out);
int grad_erf(struct autograd *ag, unsigned node, int g, int *out);
int grad_silu(struct autograd *ag, unsigned node, int g, int *out);
int grad_softplus(struct autograd *ag, unsigned node, int g, int *out);
int grad_clamp(struct autograd *ag, unsigned node, int g, int *out);
int grad_copy(struct autograd *ag, unsigned node, int g, int *out);

/* create.c (cast), matmul.c, norm.c (softmax), layout.c (reshape, transpose,
 * permute), loss.c: grad_nn.c */
int grad_cast(struct autograd *ag, unsigned node, int g, int *out);
int grad_matmul(struct autograd *ag, unsigned node, int g, int *out);
int grad_softmax(struct autograd *ag, unsigned node, int g, int *out);
int grad_log_softmax(struct autograd *ag, unsigned node, int g, int *out);
int grad_reshape(struct autograd *ag, unsigned node, int g, int *out);
int grad_transpose(struct autograd *ag, unsigned node, int g, int *out);
int grad_permute(struct autograd *ag, unsigned node, int g, int *out);
int grad_mse(struct autograd *ag, unsigned node, int g, int *out);
int grad_bce_logits(struct autograd *ag, unsigned node, int g, int *out);
int grad_cross_entropy(struct autograd *ag, unsigned node, int g, int *out);
int grad_nll(struct autograd *ag, unsigned node, int g, int *out);

/* layout.c, index_add.c: grad_layout.c */
int grad_slice(struct autograd *ag, unsigned node, int g, int *out);
int grad_concat(struct autograd *ag, unsigned node, int g, int *out);
int grad_stack(struct autograd *ag, unsigned node, int g, int *out);
int grad_pad(struct autograd *ag, unsigned node, int g, int *out);
int grad_gather(struct autograd *ag, unsigned node, int g, int *out);
int grad_embedding(struct autograd *ag, unsigned node, int g, int *out);
int grad_index_add(struct autograd *ag, unsigned node, int g, int *out);

/* reduce.c: grad_reduce.c */
int grad_sum(struct autograd *ag, unsigned node, int g, int *out);
int grad_mean(struct autograd *ag, unsigned node, int g, int *out);
int grad_prod(struct autograd *ag, unsigned node, int g, int *out);
int grad_max_min(struct autograd *ag, unsigned node, int g, int *out);
int grad_var(struct autograd *ag, unsigned node, int g, int *out);
int grad_std(struct autograd *ag, unsigned node, int g, int *out);

/* conv.c: grad_conv.c */
int grad_conv2d(struct autograd *ag, unsigned node, int g, int *out);
int grad_max_pool2d(struct autograd *ag, unsigned node, int g, int *out);
int grad_avg_pool2d(struct autograd *ag, unsigned node, int g, int *out);

/* norm.c: grad_norm.c */
int grad_layer_norm(struct autograd *ag, unsigned node, int g, int *out);
int grad_rms_norm(struct autograd *ag, unsigned node, int g, int *out);
int grad_batch_norm(struct autograd *ag, unsigned node, int g, int *out);

/* sort.c, mask.c, norm.c (logsumexp): grad_sort.c */
int grad_sort(struct autograd *ag, unsigned node, int g, int *out);
int grad_topk(struct autograd *ag, unsigned node, int g, int *out);
int grad_cumsum(struct autograd *ag, unsigned node, int g, int *out);
int grad_tril(struct autograd *ag, unsigned node, int g, int *out);
int grad_triu(struct autograd *ag, unsigned node, int g, int *out);
int grad_masked_fill(struct autograd *ag, unsigned node, int g, int *out);
int grad_dropout(struct autograd *ag, unsigned node, int g, int *out);
int grad_logsumexp(struct autograd *ag, unsigned node, int g, int *out);

/* attention.c: grad_attention.c */
int grad_attention(struct autograd *ag, unsigned node, int g, int *out);
