/* Backward rules of sort.c (sort, topk, cumsum), mask.c (tril, triu,
 * masked_fill, dropout) and norm.c's logsumexp. */
#include "ops/grad_rules.h"

static int axis_of(struct autograd *ag, unsigned node)
{
	const struct op_attr_value *a = ag_attr_of(ag, node, "axis");

	return a->set ? (int)a->i : -1;
}

static int flag_of(struct autograd *ag, unsigned node, const char *name, bool dflt)
{
	const struct op_attr_value *a = ag_attr_of(ag, node, name);

	return a->set ? a->i != 0 : dflt;
}

/* The values' gradient goes back to the positions they were sorted from:
 * sort_grad ranks x again (the same stable order) and reads g there. */
static int sort_back(struct autograd *ag, unsigned node, int g, bool descending, int *out)
{
	struct graph_attr a[2] = {
		{ .name = "axis", .f = axis_of(ag, node) },
		{ .name = "descending", .b = descending },
	};
	int in[2] = { ag_input(ag, node, 0), g };

	out[0] = ag_emit(ag, "sort_grad", in, 2, a, 2);
	return out[0] < 0 ? -1 : 0;
}

/* sort: values back where they came from (descending as the forward). */
int grad_sort(struct autograd *ag, unsigned node, int g, int *out)
{
	return sort_back(ag, node, g, flag_of(ag, node, "descending", false), out);
}

/* topk: the k values back where they came from; the rest get 0. */
int grad_topk(struct autograd *ag, unsigned node, int g, int *out)
{
	return sort_back(ag, node, g, flag_of(ag, node, "largest", true), out);
}

/* d cumsum: each input adds to every later sum, so its gradient is the sum
 * of g from its position to the end: cumsum in the other direction. */
int grad_cumsum(struct autograd *ag, unsigned node, int g, int *out)
{
	struct graph_attr a[2] = {
		{ .name = "axis", .f = axis_of(ag, node) },
		{ .name = "reverse", .b = !flag_of(ag, node, "reverse", false) },
	};

	out[0] = ag_emit(ag, "cumsum", &g, 1, a, 2);
	return out[0] < 0 ? -1 : 0;
}

/* tril / triu keep the same positions of the gradient. */
static int tri_back(struct autograd *ag, unsigned node, const char *op, int g, int *out)
{
	const struct op_attr_value *k = ag_attr_of(ag, node, "diagonal");
	struct graph_attr a = { .name = "diagonal", .f = k->set ? (double)k->i : 0.0 };

	out[0] = ag_emit(ag, op, &g, 1, &a, 1);
	return out[0] < 0 ? -1 : 0;
}

/* tril: tril(g) with the same diagonal. */
int grad_tril(struct autograd *ag, unsigned node, int g, int *out)
{
	return tri_back(ag, node, "tril", g, out);
}

/* triu: triu(g) with the same diagonal. */
int grad_triu(struct autograd *ag, unsigned node, int g, int *out)
{
	return tri_back(ag, node, "triu", g, out);
}

/* masked_fill(x, mask, value): x's gradient is g where the mask is 0. */
int grad_masked_fill(struct autograd *ag, unsigned node, int g, int *out)
{
	struct graph_attr a = { .name = "value", .f = 0.0 };
	int in[2] = { g, ag_input(ag, node, 1) };

	out[0] = ag_emit(ag, "masked_fill", in, 2, &a, 1);
	out[1] = AG_NONE;
	return out[0] < 0 ? -1 : 0;
}

/* dropout: the same mask (recomputed from the same seed) and scale. */
int grad_dropout(struct autograd *ag, unsigned node, int g, int *out)
{
	const struct op_attr_value *p = ag_attr_of(ag, node, "p");
	int64_t seed = ag_attr_of(ag, node, "seed")->i;
	struct graph_attr a[2] = {
		{ .name = "p", .f = p->set ? p->f : 0.5 },
		{ .name = "seed", .ints = &seed, .nints = 1 },   /* exact: any int64 */
	};

	out[0] = ag_emit(ag, "dropout", &g, 1, a, 2);
	return out[0] < 0 ? -1 : 0;
}

/* logsumexp: d lse / d x = softmax(x) = exp(x - lse), times g (both
 * broadcast back over the reduced axis). */
int grad_logsumexp(struct autograd *ag, unsigned node, int g, int *out)
{
	int x = ag_input(ag, node, 0), lse = ag_output(ag, node);
	struct op_tensor xt = ag_tensor(ag, x);
	bool keep = flag_of(ag, node, "keepdims", false);
	int axis = axis_of(ag, node);
	uint64_t shape[TDP_MAX_RANK];

	if (xt.rank == 0)
		return ag_fail(ag, node, "logsumexp of a rank-0 tensor");
	if (axis < 0)
		axis += (int)xt.rank;
	for (unsigned d = 0; d < xt.rank; d++)
		shape[d] = (int)d == axis ? 1 : xt.shape[d];
	if (!keep) {
		lse = ag_reshape(ag, lse, xt.rank, shape);
		g = ag_reshape(ag, g, xt.rank, shape);
	}
	if (lse < 0 || g < 0)
		return -1;
	out[0] = ag_op2(ag, "mul", ag_op1(ag, "exp", ag_op2(ag, "sub", x, lse)), g);
	return out[0] < 0 ? -1 : 0;
}
