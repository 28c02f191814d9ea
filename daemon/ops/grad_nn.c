/* Backward rules of matmul, reductions, softmax, layout ops and losses. */
#include <string.h>

#include "dtype.h"
#include "grad.h"
#include "grad_rules.h"

/* dA = g @ B^T, dB = A^T @ g (batch broadcasting is undone by the engine). */
int grad_matmul(struct autograd *ag, unsigned node, int g, int *out)
{
	int a = ag_input(ag, node, 0), b = ag_input(ag, node, 1);

	if (ag_tensor(ag, a).rank < 2 || ag_tensor(ag, b).rank < 2)
		return ag_fail(ag, node, "the gradient of matmul with a 1-D operand is not supported; "
			       "reshape it to 2-D");
	out[0] = ag_op2(ag, "matmul", g, ag_op1(ag, "transpose", b));
	out[1] = ag_op2(ag, "matmul", ag_op1(ag, "transpose", a), g);
	return out[0] < 0 || out[1] < 0 ? -1 : 0;
}

/* The reduced axes of a reduction node, as a keepdims shape of the input. */
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

/* sum and mean: the gradient spreads evenly over the reduced elements. */
int grad_sum_mean(struct autograd *ag, unsigned node, int g, int *out)
{
	uint64_t shape[TDP_MAX_RANK], count;
	unsigned rank;
	int x = ag_input(ag, node, 0), r;

	keep_shape(ag, node, &rank, shape, &count);
	r = ag_reshape(ag, g, rank, shape);
	if (r >= 0 && !strcmp(ag_op_name(ag, node), "mean"))
		r = ag_scalar(ag, "div", r, (double)(count ? count : 1));
	out[0] = r < 0 ? -1 : ag_broadcast_to(ag, r, x);
	return out[0] < 0 ? -1 : 0;
}

static int64_t axis_of(struct autograd *ag, unsigned node)
{
	const struct op_attr_value *a = ag_attr_of(ag, node, "axis");

	return a->set ? a->i : -1;
}

/* softmax: y * (g - sum(g*y)); log_softmax: g - exp(y) * sum(g). */
int grad_softmax(struct autograd *ag, unsigned node, int g, int *out)
{
	int y = ag_output(ag, node);
	int64_t axis = axis_of(ag, node);

	if (!strcmp(ag_op_name(ag, node), "softmax")) {
		int s = ag_sum_keep(ag, ag_op2(ag, "mul", g, y), axis);

		out[0] = ag_op2(ag, "mul", y, ag_op2(ag, "sub", g, s));
	} else {
		int s = ag_sum_keep(ag, g, axis);

		out[0] = ag_op2(ag, "sub", g, ag_op2(ag, "mul", ag_op1(ag, "exp", y), s));
	}
	return out[0] < 0 ? -1 : 0;
}

int grad_reshape(struct autograd *ag, unsigned node, int g, int *out)
{
	struct op_tensor x = ag_tensor(ag, ag_input(ag, node, 0));

	out[0] = ag_reshape(ag, g, x.rank, x.shape);
	return out[0] < 0 ? -1 : 0;
}

int grad_transpose(struct autograd *ag, unsigned node, int g, int *out)
{
	const struct op_attr_value *d0 = ag_attr_of(ag, node, "dim0"), *d1 = ag_attr_of(ag, node, "dim1");
	struct graph_attr a[2] = {
		{ .name = "dim0", .f = d0->set ? (double)d0->i : -2 },
		{ .name = "dim1", .f = d1->set ? (double)d1->i : -1 },
	};

	out[0] = ag_emit(ag, "transpose", &g, 1, a, 2);
	return out[0] < 0 ? -1 : 0;
}

int grad_permute(struct autograd *ag, unsigned node, int g, int *out)
{
	const struct op_attr_value *dims = ag_attr_of(ag, node, "dims");
	unsigned rank = ag_tensor(ag, g).rank;
	int64_t inv[OP_MAX_INTS];
	struct graph_attr a = { .name = "dims", .ints = inv, .nints = dims->nints };

	for (unsigned k = 0; k < dims->nints; k++) {
		int64_t d = dims->ints[k] < 0 ? dims->ints[k] + rank : dims->ints[k];

		inv[d] = k;
	}
	out[0] = ag_emit(ag, "permute", &g, 1, &a, 1);
	return out[0] < 0 ? -1 : 0;
}

/* The scale a loss's gradient carries: g (sum), g/n (mean), or g per row
 * reshaped to broadcast against [N, C] (none). */
static int loss_scale(struct autograd *ag, unsigned node, int g, uint64_t n, bool per_row)
{
	const struct op_attr_value *red = ag_attr_of(ag, node, "reduction");

	if (!red->set || !strcmp(red->s, "mean"))
		return ag_scalar(ag, "div", g, (double)(n ? n : 1));
	if (!strcmp(red->s, "sum"))
		return g;
	if (per_row) {
		uint64_t shape[2] = { n, 1 };

		return ag_reshape(ag, g, 2, shape);
	}
	return g;
}

/* mse: 2 (p - t) * scale; the target gets the negation. */
int grad_mse(struct autograd *ag, unsigned node, int g, int *out)
{
	int p = ag_input(ag, node, 0), t = ag_input(ag, node, 1);
	int s = loss_scale(ag, node, g, ag_tensor(ag, p).count, false);
	int d = ag_op2(ag, "mul", ag_scalar(ag, "mul", ag_op2(ag, "sub", p, t), 2.0), s);

	out[0] = d;
	out[1] = ag_op1(ag, "neg", d);
	return d < 0 || out[1] < 0 ? -1 : 0;
}

/* bce with logits: (sigmoid(x) - t) * scale, and -x * scale for the target. */
int grad_bce_logits(struct autograd *ag, unsigned node, int g, int *out)
{
	int x = ag_input(ag, node, 0), t = ag_input(ag, node, 1);
	int s = loss_scale(ag, node, g, ag_tensor(ag, x).count, false);

	out[0] = ag_op2(ag, "mul", ag_op2(ag, "sub", ag_op1(ag, "sigmoid", x), t), s);
	out[1] = ag_op1(ag, "neg", ag_op2(ag, "mul", x, s));
	return out[0] < 0 || out[1] < 0 ? -1 : 0;
}

/* The smoothed one-hot targets of a class loss, in the logits' dtype. */
static int targets(struct autograd *ag, unsigned node, int logits, double smoothing)
{
	struct op_tensor x = ag_tensor(ag, logits);
	struct graph_attr a[2] = {
		{ .name = "num_classes", .f = (double)x.shape[1] },
		{ .name = "dtype", .s = tdp_dtype_name(x.dtype) },
	};
	int t = ag_input(ag, node, 1);
	int oh = ag_emit(ag, "one_hot", &t, 1, a, 2);

	if (smoothing == 0 || oh < 0)
		return oh;
	return ag_scalar(ag, "add", ag_scalar(ag, "mul", oh, 1.0 - smoothing),
			 smoothing / (double)x.shape[1]);
}

/* cross_entropy: (softmax(x) - smoothed one-hot) * scale; nll: -one-hot * scale. */
int grad_class_loss(struct autograd *ag, unsigned node, int g, int *out)
{
	int x = ag_input(ag, node, 0);
	struct op_tensor xt = ag_tensor(ag, x);
	const struct op_attr_value *ign = ag_attr_of(ag, node, "ignore_index");
	bool ce = !strcmp(ag_op_name(ag, node), "cross_entropy");
	int s, t;

	if (ign && ign->set)
		return ag_fail(ag, node, "the gradient with ignore_index is not supported yet");
	if (xt.rank != 2)
		return ag_fail(ag, node, "the gradient needs [N, C] inputs");
	s = loss_scale(ag, node, g, xt.shape[0], true);
	if (ce) {
		const struct op_attr_value *ls = ag_attr_of(ag, node, "label_smoothing");

		t = targets(ag, node, x, ls->set ? ls->f : 0.0);
		out[0] = ag_op2(ag, "mul", ag_op2(ag, "sub", ag_op1(ag, "softmax", x), t), s);
	} else {
		t = targets(ag, node, x, 0.0);
		out[0] = ag_op1(ag, "neg", ag_op2(ag, "mul", t, s));
	}
	out[1] = AG_NONE;
	return out[0] < 0 ? -1 : 0;
}

/* cast between floating dtypes passes the gradient through, cast back. */
int grad_cast(struct autograd *ag, unsigned node, int g, int *out)
{
	struct op_tensor x = ag_tensor(ag, ag_input(ag, node, 0));
	struct graph_attr a = { .name = "dtype", .s = tdp_dtype_name(x.dtype) };

	if (!op_dtype_is_float(x.dtype))
		return 0;
	out[0] = ag_tensor(ag, g).dtype == x.dtype ? g : ag_emit(ag, "cast", &g, 1, &a, 1);
	return out[0] < 0 ? -1 : 0;
}
