/* Backward rules of matmul, softmax, reshape/transpose/permute and losses. */
#include <string.h>

#include "dtype.h"
#include "ops/grad.h"
#include "ops/grad_rules.h"

/* matmul(a, b) with the transpose attrs read as one flag each. */
static int mm_emit(struct autograd *ag, int a, bool ta, int b, bool tb)
{
	struct graph_attr at[2] = {
		{ .name = "transpose_a", .b = ta },
		{ .name = "transpose_b", .b = tb },
	};
	int in[2] = { a, b };

	return ag_emit(ag, "matmul", in, 2, at, 2);
}

/* A 2-D B under a batched, untransposed A: dB = sum over the batch of
 * A_i^T g_i is one product over the batch's rows, A [.., M, K] and g
 * [.., M, N] seen as [rows, K] and [rows, N] (views), instead of a product
 * per batch and a sum of them (a transformer's weight gradients). AG_NONE
 * when the shapes are not that. */
static int db_folded(struct autograd *ag, int a, bool ta, int b, bool tb, int g)
{
	struct op_tensor at = ag_tensor(ag, a), bt = ag_tensor(ag, b), gt = ag_tensor(ag, g);
	uint64_t rows = 1, as[2], gs[2];

	if (ta || bt.rank != 2 || at.rank <= 2 || gt.rank != at.rank)
		return AG_NONE;
	for (unsigned d = 0; d + 1 < at.rank; d++)
		rows *= at.shape[d];
	as[0] = gs[0] = rows;
	as[1] = at.shape[at.rank - 1];
	gs[1] = gt.shape[gt.rank - 1];
	a = ag_reshape(ag, a, 2, as);
	g = ag_reshape(ag, g, 2, gs);
	if (a < 0 || g < 0)
		return -1;
	return tb ? mm_emit(ag, g, true, a, false) : mm_emit(ag, a, true, g, false);
}

/* dA = g @ B^T, dB = A^T @ g (batch broadcasting is undone by the engine),
 * as matmuls that read the transposed operand in place (the transpose
 * attrs), so no transpose is materialised. A forward that already read an
 * operand transposed gets dA = B @ g^T (transpose_a) or dB = g^T @ A
 * (transpose_b), likewise without copies.
 * A 1-D operand is the row [1, K] (a) or the column [K, 1] (b) it is in the
 * forward, so g gets the dimension the forward dropped back, and the
 * operand's gradient loses it again.
 * The epilogue (issue 16) first: g zeroed where the result is not > 0
 * (relu's rule, relu_grad, which reads its input z: z > 0 exactly where
 * relu(z) > 0, so the same bits), and the bias gets g itself (add's
 * rule; the engine sums it over the rows it was broadcast along). With
 * activation "relu_grad" g is masked likewise by input 2, which gets zeros
 * (relu_grad's rule). */
int grad_matmul(struct autograd *ag, unsigned node, int g, int *out)
{
	const struct op_attr_value *act = ag_attr_of(ag, node, "activation");
	int a = ag_input(ag, node, 0), b = ag_input(ag, node, 1);
	struct op_tensor at, bt, gt;
	bool a1, b1;
	uint64_t shape[TDP_MAX_RANK];
	unsigned nb;
	int a2 = a, b2 = b, g2, da, db;
	bool ta, tb;
	/* (read before emitting: that moves the node storage act points into) */
	bool relu = act->set && !strcmp(act->s, "relu"), masked = act->set && !strcmp(act->s, "relu_grad");

	if (relu) {
		int y = ag_output(ag, node);

		g = ag_op2(ag, "relu_grad", g, y);
		if (g < 0)
			return -1;
	}
	if (masked) {
		int mask = ag_input(ag, node, 2);

		g = ag_op2(ag, "relu_grad", g, mask);
		out[2] = ag_zeros_like(ag, mask);
		if (g < 0 || out[2] < 0)
			return -1;
	} else if (ag_ninputs(ag, node) > 2) {
		out[2] = g;
	}
	at = ag_tensor(ag, a);
	bt = ag_tensor(ag, b);
	gt = ag_tensor(ag, g);
	a1 = at.rank == 1;
	b1 = bt.rank == 1;
	g2 = g;
	if (a1 || b1) {
		uint64_t row[2] = { 1, at.shape[0] }, col[2] = { bt.shape[0], 1 };

		nb = gt.rank - (a1 ? 0 : 1) - (b1 ? 0 : 1);
		memcpy(shape, gt.shape, sizeof(shape));
		shape[nb] = a1 ? 1 : gt.shape[nb];
		shape[nb + 1] = b1 ? 1 : gt.shape[gt.rank - 1];
		g2 = ag_reshape(ag, g, nb + 2, shape);
		if (a1)
			a2 = ag_reshape(ag, a, 2, row);
		if (b1)
			b2 = ag_reshape(ag, b, 2, col);
	}
	/* (copies: emitting moves the node storage the attrs live in) */
	ta = ag_attr_of(ag, node, "transpose_a")->i != 0;
	tb = ag_attr_of(ag, node, "transpose_b")->i != 0;
	/* C = op(A) op(B); dop(A) = g op(B)^T, dop(B) = op(A)^T g, and the
	 * gradient of a transposed operand is that transposed again. */
	da = ta ? mm_emit(ag, b2, tb, g2, true) : mm_emit(ag, g2, false, b2, !tb);
	db = db_folded(ag, a2, ta, b2, tb, g2);
	if (db == AG_NONE)
		db = tb ? mm_emit(ag, g2, true, a2, ta) : mm_emit(ag, a2, !ta, g2, false);
	if (da < 0 || db < 0)
		return -1;
	/* [..., 1, K] -> [..., K] and [..., K, 1] -> [..., K]; the engine then
	 * sums the batch dims. */
	if (a1) {
		struct op_tensor t = ag_tensor(ag, da);

		t.shape[t.rank - 2] = t.shape[t.rank - 1];
		da = ag_reshape(ag, da, t.rank - 1, t.shape);
	}
	if (b1) {
		struct op_tensor t = ag_tensor(ag, db);

		db = ag_reshape(ag, db, t.rank - 1, t.shape);
	}
	out[0] = da;
	out[1] = db;
	return da < 0 || db < 0 ? -1 : 0;
}

static int64_t axis_of(struct autograd *ag, unsigned node)
{
	const struct op_attr_value *a = ag_attr_of(ag, node, "axis");

	return a->set ? a->i : -1;
}

/* softmax: y * (g - sum(g*y)) */
int grad_softmax(struct autograd *ag, unsigned node, int g, int *out)
{
	int y = ag_output(ag, node);
	int s = ag_sum_keep(ag, ag_op2(ag, "mul", g, y), axis_of(ag, node));

	out[0] = ag_op2(ag, "mul", y, ag_op2(ag, "sub", g, s));
	return out[0] < 0 ? -1 : 0;
}

/* log_softmax: g - exp(y) * sum(g) */
int grad_log_softmax(struct autograd *ag, unsigned node, int g, int *out)
{
	int y = ag_output(ag, node);
	int s = ag_sum_keep(ag, g, axis_of(ag, node));

	out[0] = ag_op2(ag, "sub", g, ag_op2(ag, "mul", ag_op1(ag, "exp", y), s));
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

/* Which samples count with ignore_index, as an [N, 1] mask in the logits'
 * dtype, from the one-hot targets `oh` [N, C]: an ignore_index inside
 * [0, C) masks the samples of that class (1 − oh[:, i]); one outside masks
 * every sample whose class is outside [0, C) (sum of the one-hot row). The
 * two agree with the forward on every sample whose loss is not NaN (any
 * other out-of-range class makes the forward NaN). Exact for any C. */
static int kept_mask(struct autograd *ag, int oh, int64_t ignore, uint64_t classes)
{
	int64_t axis = 1;

	if (ignore >= 0 && (uint64_t)ignore < classes) {
		int64_t b = ignore, e = ignore + 1;
		struct graph_attr a[3] = {
			{ .name = "starts", .ints = &b, .nints = 1 },
			{ .name = "ends", .ints = &e, .nints = 1 },
			{ .name = "axes", .ints = &axis, .nints = 1 },
		};
		int col = ag_emit(ag, "slice", &oh, 1, a, 3);

		return ag_scalar(ag, "sub", ag_op1(ag, "neg", col), -1.0); /* 1 − col */
	}
	return ag_reduce(ag, "sum", oh, &axis, 1, true);
}

/* cross_entropy: (softmax(x) - smoothed one-hot) * scale; nll: -one-hot * scale.
 * With ignore_index the ignored samples get 0 and the mean divides by the
 * number of samples kept (as the forward and PyTorch). */
static int class_loss(struct autograd *ag, unsigned node, int g, int *out, bool ce)
{
	int x = ag_input(ag, node, 0);
	struct op_tensor xt = ag_tensor(ag, x);
	/* copies: emitting moves the node storage the attrs live in (nll has
	 * no label_smoothing) */
	const struct op_attr_value ign = *ag_attr_of(ag, node, "ignore_index");
	const struct op_attr_value red = *ag_attr_of(ag, node, "reduction");
	const struct op_attr_value *ls = ag_attr_of(ag, node, "label_smoothing");
	double smoothing = ce && ls && ls->set ? ls->f : 0.0;
	int s, t, d;

	if (xt.rank != 2)
		return ag_fail(ag, node, "the gradient needs [N, C] inputs");
	if (ign.set) {
		int oh = targets(ag, node, x, 0.0);
		int mask = kept_mask(ag, oh, ign.i, xt.shape[1]);

		if (!red.set || !strcmp(red.s, "mean"))
			s = ag_op2(ag, "div", g, ag_reduce(ag, "sum", mask, NULL, 0, false));
		else
			s = loss_scale(ag, node, g, xt.shape[0], true);
		s = ag_op2(ag, "mul", s, mask);
		t = smoothing == 0 ? oh : targets(ag, node, x, smoothing);
	} else {
		s = loss_scale(ag, node, g, xt.shape[0], true);
		t = targets(ag, node, x, smoothing);
	}
	if (ce)
		d = ag_op2(ag, "mul", ag_op2(ag, "sub", ag_op1(ag, "softmax", x), t), s);
	else
		d = ag_op1(ag, "neg", ag_op2(ag, "mul", t, s));
	out[0] = d;
	out[1] = AG_NONE;
	return d < 0 ? -1 : 0;
}

int grad_cross_entropy(struct autograd *ag, unsigned node, int g, int *out)
{
	return class_loss(ag, node, g, out, true);
}

int grad_nll(struct autograd *ag, unsigned node, int g, int *out)
{
	return class_loss(ag, node, g, out, false);
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
