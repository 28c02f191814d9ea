/* Which ops are differentiable, and by which rule. An op missing here is not
 * differentiable: a training graph that needs its gradient is refused. */
#include <string.h>

#include "ops/grad_rules.h"

static const struct {
	const char *op;
	op_backward_fn fn;
} rules[] = {
	{ "add", grad_add }, { "sub", grad_sub }, { "mul", grad_mul }, { "div", grad_div },
	{ "pow", grad_pow }, { "maximum", grad_maximum }, { "minimum", grad_minimum },
	{ "eq", grad_none }, { "ne", grad_none }, { "lt", grad_none }, { "le", grad_none },
	{ "gt", grad_none }, { "ge", grad_none }, { "where", grad_where },
	{ "neg", grad_unary }, { "abs", grad_unary }, { "exp", grad_unary }, { "log", grad_unary },
	{ "sqrt", grad_unary }, { "rsqrt", grad_unary }, { "sin", grad_unary }, { "cos", grad_unary },
	{ "tanh", grad_unary }, { "sigmoid", grad_unary }, { "relu", grad_unary },
	{ "silu", grad_unary }, { "softplus", grad_unary }, { "clamp", grad_unary },
	{ "copy", grad_unary }, { "gelu", grad_unary }, { "erf", grad_unary },
	{ "matmul", grad_matmul }, { "cast", grad_cast },
	{ "sum", grad_sum_mean }, { "mean", grad_sum_mean }, { "prod", grad_prod },
	{ "max", grad_max_min }, { "min", grad_max_min }, { "var", grad_var_std }, { "std", grad_var_std },
	{ "softmax", grad_softmax }, { "log_softmax", grad_softmax },
	{ "reshape", grad_reshape }, { "transpose", grad_transpose }, { "permute", grad_permute },
	{ "slice", grad_slice }, { "concat", grad_concat }, { "stack", grad_stack }, { "pad", grad_pad },
	{ "gather", grad_gather }, { "index_select", grad_gather }, { "index_add", grad_index_add },
	{ "mse", grad_mse }, { "binary_cross_entropy_with_logits", grad_bce_logits },
	{ "cross_entropy", grad_class_loss }, { "nll", grad_class_loss },
	{ "conv2d", grad_conv2d }, { "max_pool2d", grad_pool2d }, { "avg_pool2d", grad_pool2d },
	{ "layer_norm", grad_row_norm }, { "rms_norm", grad_row_norm }, { "batch_norm", grad_batch_norm },
};

op_backward_fn op_backward_find(const char *name)
{
	for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
		if (!strcmp(rules[i].op, name))
			return rules[i].fn;
	return NULL;
}
