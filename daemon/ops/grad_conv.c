/* Backward rules of the conv family: conv2d, max_pool2d and avg_pool2d, on
 * the gradient ops of conv_grad.c, which take the forward's attributes plus
 * the shape of the tensor whose gradient they compute. */
#include <string.h>

#include "ops/grad.h"
#include "ops/grad_rules.h"

/* stride, padding, dilation, groups and one shape */
#define CONV_GRAD_ATTRS 5

/* Copy forward attribute `name` of `node` into a[*n] when the forward set it
 * (unset ones have the same defaults in the gradient ops). A list is copied
 * into ints[*n]: the node's own storage moves when nodes are emitted. */
static void copy_attr(struct autograd *ag, unsigned node, const char *name, bool is_int,
		      struct graph_attr *a, int64_t (*ints)[OP_MAX_INTS], unsigned *n)
{
	const struct op_attr_value *v = ag_attr_of(ag, node, name);

	if (!v || !v->set)
		return;
	a[*n] = (struct graph_attr){ .name = name };
	if (is_int) {
		a[*n].f = (double)v->i;
	} else {
		memcpy(ints[*n], v->ints, v->nints * sizeof(v->ints[0]));
		a[*n].ints = ints[*n];
		a[*n].nints = v->nints;
	}
	(*n)++;
}

/* Attr `name` holding ref `like`'s shape (rank 4: the ops check); the values
 * live in dims[]. */
static struct graph_attr shape_attr(struct autograd *ag, int like, const char *name, int64_t dims[4])
{
	struct op_tensor t = ag_tensor(ag, like);
	unsigned rank = t.rank < 4 ? t.rank : 4;

	for (unsigned d = 0; d < rank; d++)
		dims[d] = (int64_t)t.shape[d];
	return (struct graph_attr){ .name = name, .ints = dims, .nints = rank };
}

/* conv2d: dX = conv2d_grad_input(g, w), dW = conv2d_grad_weight(x, g),
 * dBias = the sum of g over N, OH and OW. */
int grad_conv2d(struct autograd *ag, unsigned node, int g, int *out)
{
	int x = ag_input(ag, node, 0), w = ag_input(ag, node, 1);
	struct graph_attr a[CONV_GRAD_ATTRS];
	int64_t ints[CONV_GRAD_ATTRS][OP_MAX_INTS], xs[4], ws[4];
	unsigned n = 0;

	copy_attr(ag, node, "stride", false, a, ints, &n);
	copy_attr(ag, node, "padding", false, a, ints, &n);
	copy_attr(ag, node, "dilation", false, a, ints, &n);
	copy_attr(ag, node, "groups", true, a, ints, &n);
	a[n] = shape_attr(ag, x, "input_shape", xs);
	out[0] = ag_emit(ag, "conv2d_grad_input", (const int[]){ g, w }, 2, a, n + 1);
	a[n] = shape_attr(ag, w, "weight_shape", ws);
	out[1] = ag_emit(ag, "conv2d_grad_weight", (const int[]){ x, g }, 2, a, n + 1);
	if (out[0] < 0 || out[1] < 0)
		return -1;
	if (ag_ninputs(ag, node) == 3) {
		int64_t axes[3] = { 0, 2, 3 };
		struct graph_attr s = { .name = "axis", .ints = axes, .nints = 3 };

		out[2] = ag_emit(ag, "sum", &g, 1, &s, 1);
		if (out[2] < 0)
			return -1;
	}
	return 0;
}

/* max_pool2d: max_pool2d_grad(x, g); avg_pool2d: avg_pool2d_grad(g). */
static int pool2d(struct autograd *ag, unsigned node, int g, int *out, bool max)
{
	int x = ag_input(ag, node, 0);
	struct graph_attr a[4];
	int64_t ints[4][OP_MAX_INTS], xs[4];
	unsigned n = 0;

	copy_attr(ag, node, "kernel_size", false, a, ints, &n);
	copy_attr(ag, node, "stride", false, a, ints, &n);
	copy_attr(ag, node, "padding", false, a, ints, &n);
	if (max) {
		out[0] = ag_emit(ag, "max_pool2d_grad", (const int[]){ x, g }, 2, a, n);
	} else {
		a[n] = shape_attr(ag, x, "input_shape", xs);
		out[0] = ag_emit(ag, "avg_pool2d_grad", &g, 1, a, n + 1);
	}
	return out[0] < 0 ? -1 : 0;
}

int grad_max_pool2d(struct autograd *ag, unsigned node, int g, int *out)
{
	return pool2d(ag, node, g, out, true);
}

int grad_avg_pool2d(struct autograd *ag, unsigned node, int g, int *out)
{
	return pool2d(ag, node, g, out, false);
}
