/* Backward rules of the reductions (forward: reduce.c). Each works on the
 * "keepdims" form: the gradient (and, where needed, the result) reshaped so
 * that the reduced axes are size 1 and broadcast against x.
 *   sum:  g;  mean: g / n
 *   prod: the product of the other elements, exact with zeros in the row
 *   max, min: g split evenly among the elements equal to the result (torch's
 *         amax/amin; a NaN result matches nothing and gives NaN)
 *   var:  g · 2 (x − mean) / (n − correction)
 *   std:  g · (x − mean) / ((n − correction) · std) */
#include <string.h>

#include "ops/grad.h"
#include "ops/grad_rules.h"

/* The shape of x with node's reduced axes kept as size 1, and how many
 * elements each result reduces. */
static void keep_shape(struct autograd *ag, unsigned node, unsigned *rank, uint64_t *shape,
		       uint64_t *count)
{
	struct op_tensor x = ag_tensor(ag, ag_input(ag, node, 0));
	const struct op_attr_value *axis = ag_attr_of(ag, node, "axis");

	*rank = x.rank;
	*count = 1;
	for (unsigned d = 0; d < x.rank; d++) {
		bool reduced = !axis->set;

		for (unsigned k = 0; axis->set && k < axis->nints; k++) {
			int64_t a = axis->ints[k] < 0 ? axis->ints[k] + x.rank : axis->ints[k];

			reduced = reduced || a == (int64_t)d;
		}
		shape[d] = reduced ? 1 : x.shape[d];
		if (reduced)
			*count *= x.shape[d];
	}
}

/* `v` (the node's gradient or result) in the keepdims shape. */
static int keep(struct autograd *ag, unsigned node, int v)
{
	uint64_t shape[TDP_MAX_RANK], count;
	unsigned rank;

	keep_shape(ag, node, &rank, shape, &count);
	return ag_reshape(ag, v, rank, shape);
}

/* Reduction `op` of `x` over node's axes, keepdims. */
static int reduce_like(struct autograd *ag, unsigned node, const char *op, int x)
{
	const struct op_attr_value *axis = ag_attr_of(ag, node, "axis");

	if (x == -1)
		return -1;
	return ag_reduce(ag, op, x, axis->set ? axis->ints : NULL, axis->nints, true);
}

/* sum and mean: the gradient spreads evenly over the reduced elements. */
static int sum_mean(struct autograd *ag, unsigned node, int g, int *out, bool mean)
{
	uint64_t shape[TDP_MAX_RANK], count;
	unsigned rank;
	int x = ag_input(ag, node, 0), r;

	keep_shape(ag, node, &rank, shape, &count);
	r = ag_reshape(ag, g, rank, shape);
	if (r >= 0 && mean)
		r = ag_scalar(ag, "div", r, (double)(count ? count : 1));
	out[0] = r < 0 ? -1 : ag_broadcast_to(ag, r, x);
	return out[0] < 0 ? -1 : 0;
}

int grad_sum(struct autograd *ag, unsigned node, int g, int *out)
{
	return sum_mean(ag, node, g, out, false);
}

int grad_mean(struct autograd *ag, unsigned node, int g, int *out)
{
	return sum_mean(ag, node, g, out, true);
}

/* prod: dx_i = g · (product of the row's other elements), computed without
 * dividing by zero. With z the row's zero count and P the product of its
 * non-zero elements: z = 0 gives P / x_i; z = 1 gives P at the zero and 0
 * elsewhere; z > 1 gives 0 everywhere. */
int grad_prod(struct autograd *ag, unsigned node, int g, int *out)
{
	int x = ag_input(ag, node, 0);
	int zero = ag_scalar(ag, "eq", x, 0.0);
	int zf = ag_mask_like(ag, zero, x);
	int nz = reduce_like(ag, node, "sum", zf);
	int xs = ag_op2(ag, "add", x, zf);          /* zeros replaced by ones */
	int p = reduce_like(ag, node, "prod", xs);
	int none = ag_mask_like(ag, ag_scalar(ag, "eq", nz, 0.0), x);
	int one = ag_mask_like(ag, ag_scalar(ag, "eq", nz, 1.0), x);
	int in[3] = { zero, one, ag_op2(ag, "div", none, xs) };
	int factor = ag_emit(ag, "where", in, 3, NULL, 0);

	out[0] = ag_op2(ag, "mul", ag_op2(ag, "mul", keep(ag, node, g), p), factor);
	return out[0] < 0 ? -1 : 0;
}

/* max and min: g / (number of ties) to every element equal to the result. */
int grad_max_min(struct autograd *ag, unsigned node, int g, int *out)
{
	int x = ag_input(ag, node, 0);
	int m = ag_mask_like(ag, ag_op2(ag, "eq", x, keep(ag, node, ag_output(ag, node))), x);
	int n = reduce_like(ag, node, "sum", m);

	out[0] = ag_op2(ag, "mul", ag_op2(ag, "div", keep(ag, node, g), n), m);
	return out[0] < 0 ? -1 : 0;
}

/* var and std, with the forward's correction (default 1). A divisor
 * n − correction ≤ 0 (where the forward gives inf or NaN) gives infinite
 * or NaN gradients. */
static int var_std(struct autograd *ag, unsigned node, int g, int *out, bool is_std)
{
	const struct op_attr_value *corr = ag_attr_of(ag, node, "correction");
	uint64_t shape[TDP_MAX_RANK], count;
	unsigned rank;
	int x = ag_input(ag, node, 0), xc, gk;
	double div;

	keep_shape(ag, node, &rank, shape, &count);
	div = (double)count - (corr->set ? corr->f : 1.0);
	xc = ag_op2(ag, "sub", x, reduce_like(ag, node, "mean", x));
	gk = ag_reshape(ag, g, rank, shape);
	if (is_std)
		gk = ag_op2(ag, "div", gk, ag_reshape(ag, ag_output(ag, node), rank, shape));
	gk = ag_scalar(ag, "mul", gk, div > 0 ? (is_std ? 1.0 : 2.0) / div : __builtin_inf());
	out[0] = ag_op2(ag, "mul", xc, gk);
	return out[0] < 0 ? -1 : 0;
}

int grad_var(struct autograd *ag, unsigned node, int g, int *out)
{
	return var_std(ag, node, g, out, false);
}

int grad_std(struct autograd *ag, unsigned node, int g, int *out)
{
	return var_std(ag, node, g, out, true);
}
