/* Backward rules of the layout ops that move parts of a tensor (forward:
 * layout.c): slice, concat, stack, pad, and gather / index_select (whose
 * gradient is the scatter-add op index_add, index_add.c). Each rule puts
 * the gradient back where the forward took the elements from; positions
 * the forward never read get zeros. */
#include <string.h>

#include "ops/grad.h"
#include "ops/grad_rules.h"

/* Axis `a` (negative counts from the end) of a rank-`rank` tensor. The
 * forward's inference already checked it. */
static unsigned norm_axis(int64_t a, unsigned rank)
{
	return (unsigned)(a < 0 ? a + (int64_t)rank : a);
}

/* Python's clamping of index `v` into [0, n] (as slice_infer). */
static int64_t clamp_index(int64_t v, int64_t n)
{
	if (v < 0)
		v = v < -n ? 0 : v + n;
	return v > n ? n : v;
}

/* `x` padded with zeros by (`before`, `after`) along `axis`. */
static int pad_axis(struct autograd *ag, int x, unsigned axis, int64_t before, int64_t after)
{
	int64_t pads[2] = { before, after }, ax = axis;
	struct graph_attr a[2] = {
		{ .name = "pads", .ints = pads, .nints = 2 },
		{ .name = "axes", .ints = &ax, .nints = 1 },
	};

	if (before == 0 && after == 0)
		return x;
	return ag_emit(ag, "pad", &x, 1, a, 2);
}

/* `x[begin:end]` along `axis`. */
static int slice_axis(struct autograd *ag, int x, unsigned axis, int64_t begin, int64_t end)
{
	int64_t ax = axis;
	struct graph_attr a[3] = {
		{ .name = "starts", .ints = &begin, .nints = 1 },
		{ .name = "ends", .ints = &end, .nints = 1 },
		{ .name = "axes", .ints = &ax, .nints = 1 },
	};

	return ag_emit(ag, "slice", &x, 1, a, 3);
}

/* Undo x[b : b + m·step : step] along `axis` of `g` (whose dim there is m)
 * for a dim of length n: with step 1 a zero padding; otherwise each element
 * is followed by step − 1 zeros first (a pad along a new dim of the
 * [pre, m, 1, post] view), the tail beyond n cut off, then padded. */
static int unslice_axis(struct autograd *ag, int g, unsigned axis, int64_t b, int64_t step, int64_t n)
{
	struct op_tensor t = ag_tensor(ag, g);
	uint64_t pre = 1, post = 1, m, view[4];
	int64_t len;
	int r;

	if (g < 0)
		return -1;
	m = t.shape[axis];
	if (step == 1)
		return pad_axis(ag, g, axis, b, n - b - (int64_t)m);
	for (unsigned d = 0; d < t.rank; d++) {
		if (d < axis)
			pre *= t.shape[d];
		else if (d > axis)
			post *= t.shape[d];
	}
	view[0] = pre;
	view[1] = m;
	view[2] = 1;
	view[3] = post;
	r = ag_reshape(ag, g, 4, view);
	r = pad_axis(ag, r, 2, 0, step - 1);
	view[1] = m * (uint64_t)step;
	view[2] = post;
	r = ag_reshape(ag, r, 3, view);
	len = (int64_t)m * step < n - b ? (int64_t)m * step : n - b;
	if (len < (int64_t)m * step)
		r = slice_axis(ag, r, 1, 0, len);
	r = pad_axis(ag, r, 1, b, n - b - len);
	t.shape[axis] = (uint64_t)n;
	return ag_reshape(ag, r, t.rank, t.shape);
}

/* slice: the gradient goes back to the positions read, zeros elsewhere. */
int grad_slice(struct autograd *ag, unsigned node, int g, int *out)
{
	/* copies: emitting moves the node storage the attrs live in */
	const struct op_attr_value starts = *ag_attr_of(ag, node, "starts");
	const struct op_attr_value steps = *ag_attr_of(ag, node, "steps");
	const struct op_attr_value axes = *ag_attr_of(ag, node, "axes");
	struct op_tensor x = ag_tensor(ag, ag_input(ag, node, 0));
	int r = g;

	for (unsigned j = 0; j < starts.nints && r >= 0; j++) {
		unsigned a = axes.set ? norm_axis(axes.ints[j], x.rank) : j;
		int64_t n = (int64_t)x.shape[a];

		r = unslice_axis(ag, r, a, clamp_index(starts.ints[j], n), steps.set ? steps.ints[j] : 1, n);
	}
	out[0] = r;
	return r < 0 ? -1 : 0;
}

/* concat: each input gets its slice of the gradient along the axis. */
int grad_concat(struct autograd *ag, unsigned node, int g, int *out)
{
	unsigned nin = ag_ninputs(ag, node), rank = ag_tensor(ag, g).rank;
	unsigned axis = norm_axis(ag_attr_of(ag, node, "axis")->i, rank);
	int64_t off = 0;

	for (unsigned k = 0; k < nin; k++) {
		int64_t len = (int64_t)ag_tensor(ag, ag_input(ag, node, k)).shape[axis];

		out[k] = nin == 1 ? g : slice_axis(ag, g, axis, off, off + len);
		if (out[k] < 0)
			return -1;
		off += len;
	}
	return 0;
}

/* stack: input k gets index k of the new axis. */
int grad_stack(struct autograd *ag, unsigned node, int g, int *out)
{
	unsigned nin = ag_ninputs(ag, node), rank = ag_tensor(ag, g).rank;
	unsigned axis = norm_axis(ag_attr_of(ag, node, "axis")->i, rank);

	for (unsigned k = 0; k < nin; k++) {
		struct op_tensor x = ag_tensor(ag, ag_input(ag, node, k));

		out[k] = ag_reshape(ag, slice_axis(ag, g, axis, k, k + 1), x.rank, x.shape);
		if (out[k] < 0)
			return -1;
	}
	return 0;
}

/* pad (constant mode, the only one): the interior of the gradient. */
int grad_pad(struct autograd *ag, unsigned node, int g, int *out)
{
	const struct op_attr_value *pads = ag_attr_of(ag, node, "pads"), *axes = ag_attr_of(ag, node, "axes");
	struct op_tensor x = ag_tensor(ag, ag_input(ag, node, 0));
	unsigned k = pads->nints / 2;
	int64_t starts[TDP_MAX_RANK], ends[TDP_MAX_RANK], ax[TDP_MAX_RANK];
	struct graph_attr a[3] = {
		{ .name = "starts", .ints = starts, .nints = k },
		{ .name = "ends", .ints = ends, .nints = k },
		{ .name = "axes", .ints = ax, .nints = k },
	};

	for (unsigned j = 0; j < k; j++) {
		ax[j] = axes->set ? norm_axis(axes->ints[j], x.rank) : x.rank - k + j;
		starts[j] = pads->ints[2 * j];
		ends[j] = starts[j] + (int64_t)x.shape[ax[j]];
	}
	out[0] = k ? ag_emit(ag, "slice", &g, 1, a, 3) : g;
	return out[0] < 0 ? -1 : 0;
}

/* gather / index_select: the rows of the gradient are added into zeros at
 * the indices they were read from (repeated indices accumulate; indices the
 * forward read as zeros contribute nothing). The indices get none. */
int grad_gather(struct autograd *ag, unsigned node, int g, int *out)
{
	int x = ag_input(ag, node, 0);
	struct graph_attr a = { .name = "axis", .f = (double)ag_attr_of(ag, node, "axis")->i };
	int in[3] = { ag_zeros_like(ag, x), ag_input(ag, node, 1), g };

	out[0] = ag_emit(ag, "index_add", in, 3, &a, 1);
	out[1] = AG_NONE;
	return out[0] < 0 ? -1 : 0;
}

/* embedding(weight, indices): gather's rule on axis 0. */
int grad_embedding(struct autograd *ag, unsigned node, int g, int *out)
{
	struct graph_attr a = { .name = "axis", .f = 0.0 };
	int in[3] = { ag_zeros_like(ag, ag_input(ag, node, 0)), ag_input(ag, node, 1), g };

	out[0] = ag_emit(ag, "index_add", in, 3, &a, 1);
	out[1] = AG_NONE;
	return out[0] < 0 ? -1 : 0;
}

/* index_add(x, indices, src): x gets g, src gets g gathered at the indices. */
int grad_index_add(struct autograd *ag, unsigned node, int g, int *out)
{
	struct graph_attr a = { .name = "axis", .f = (double)ag_attr_of(ag, node, "axis")->i };
	int in[2] = { g, ag_input(ag, node, 1) };

	out[0] = g;
	out[1] = AG_NONE;
	out[2] = ag_emit(ag, "gather", in, 2, &a, 1);
	return out[2] < 0 ? -1 : 0;
}
