/* Matmul epilogue fusion (graph_epilogue.h).
 *
 * A chain qualifies when every intermediate is free: read by exactly one
 * input slot of one node (the next link), not stored, returned inline,
 * kept or a derived out, and all links run on one device. The add must be
 * the two-input form with the product as one operand; the other operand is
 * the bias, which matmul's inference then checks (one value per result
 * column, dtype of the product): anything else leaves the chain as it was.
 * A relu_grad reading the product as its input 0 makes the chain matmul ->
 * relu_grad, fused with its input 1 as the mask (activation "relu_grad",
 * which matmul's inference checks: the result's shape and dtype).
 * The retired links keep their indices (ids and every src stay valid) and
 * become views of their input 0, so they get no memory and record nothing.
 * Only f32 products are rewritten (fuse_at). */
#include "engine/graph_epilogue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

static bool is_op(const struct node *nd, const char *name)
{
	return !strcmp(nd->ctx.def->name, name);
}

/* Node i's result is read once, by node `next`, and by nothing else. */
static bool free_link(const struct graph *gr, const unsigned *uses, unsigned i, unsigned *ret_next)
{
	const struct node *nd = &gr->nodes[i];

	if (uses[i] != 1 || nd->has_out || nd->out_like || nd->inline_out || nd->keep || nd->ctx.view ||
	    nd->fused)
		return false;
	for (unsigned c = i + 1; c < gr->n; c++)
		for (unsigned k = 0; k < gr->nodes[c].ctx.ninputs; k++)
			if (gr->nodes[c].src[k] == (int)i) {
				*ret_next = c;
				return gr->nodes[c].device == nd->device;
			}
	return false;
}

static bool same_input(const struct node *a, unsigned ka, const struct node *b, unsigned kb)
{
	return a->src[ka] >= 0 ? a->src[ka] == b->src[kb] : b->src[kb] < 0 && a->stored[ka] == b->stored[kb];
}

/* Whether a node strictly between the chain's ends (other than the add)
 * reads one of the fused node's operands: its gradient would then be
 * summed in another order. */
static bool operands_read_between(const struct graph *gr, unsigned first, unsigned add, unsigned last,
				  const struct node *fused)
{
	for (unsigned c = first + 1; c < last; c++) {
		if (c == add)
			continue;
		for (unsigned k = 0; k < gr->nodes[c].ctx.ninputs; k++)
			for (unsigned f = 0; f < fused->ctx.ninputs; f++)
				if (same_input(&gr->nodes[c], k, fused, f))
					return true;
	}
	return false;
}

/* Make node i a view of its input 0 that records nothing. */
static void retire(struct node *nd)
{
	nd->ctx.out = nd->ctx.in[0];
	nd->ctx.out.alloc = NULL;
	nd->ctx.view = true;
}

/* Turn node `last` into matmul node mm's product with a third input (input
 * `bk` of node `add`, when add >= 0: the bias, or relu_grad's mask) and
 * activation `act` (NULL: none). `between`: refuse when a node between the
 * ends reads an operand (operands_read_between; not after autograd, when no
 * gradient is summed any more). Returns 0, or -1 with node `last` as it was. */
static int rewrite(struct graph *gr, unsigned mm, int add, unsigned bk, const char *act_name, unsigned last,
		   bool between)
{
	struct node *nd = &gr->nodes[last], *saved = malloc(sizeof(*saved));
	const struct node *m = &gr->nodes[mm];
	const struct op_attr_value *act;
	unsigned n = 2;

	if (!saved)
		return -1;
	*saved = *nd;
	nd->ctx.def = m->ctx.def;
	memcpy(nd->ctx.attr, m->ctx.attr, sizeof(nd->ctx.attr));
	for (unsigned k = 0; k < 2; k++) {
		nd->src[k] = m->src[k];
		nd->stored[k] = m->stored[k];
		nd->ctx.in[k] = m->ctx.in[k];
	}
	if (add >= 0) {
		/* (the add itself, as it was, when it is the last link) */
		const struct node *a = (unsigned)add == last ? saved : &gr->nodes[add];

		nd->src[2] = a->src[bk];
		nd->stored[2] = a->stored[bk];
		nd->ctx.in[2] = a->ctx.in[bk];
		n = 3;
	}
	nd->ctx.ninputs = n;
	act = op_attr(&nd->ctx, "activation");
	if (act_name) {
		struct op_attr_value *v = &nd->ctx.attr[act - nd->ctx.attr];

		v->set = true;
		snprintf(v->s, sizeof(v->s), "%s", act_name);
	}
	memset(&nd->ctx.priv, 0, sizeof(nd->ctx.priv));
	if (graph_infer_node(gr, last) < 0 || nd->ctx.out.dtype != saved->ctx.out.dtype ||
	    nd->ctx.out.count != saved->ctx.out.count ||
	    (between && operands_read_between(gr, mm, add, last, nd))) {
		*nd = *saved;
		free(saved);
		return -1;
	}
	free(saved);
	return 0;
}

/* Whether node i is a plain f32 matmul (two inputs, no activation) whose
 * product only node *ret_next reads. f32 only: on an H100 the f16 fused
 * results differed from the chain's in their last bits (the driver's half
 * arithmetic), and the rewrite must not change what a graph computes. */
static bool plain_product(const struct graph *gr, const unsigned *uses, unsigned i, unsigned *ret_next)
{
	const struct node *nd = &gr->nodes[i];
	const struct op_attr_value *act;

	if (!is_op(nd, "matmul") || nd->ctx.ninputs != 2 || nd->ctx.out.dtype != TDP_DTYPE_F32)
		return false;
	act = op_attr(&nd->ctx, "activation");
	return !(act->set && strcmp(act->s, "none")) && free_link(gr, uses, i, ret_next);
}

/* The chain matmul node i -> relu_grad(product, mask), if it qualifies:
 * the relu_grad becomes the product with activation "relu_grad". */
static int fuse_mask_at(struct graph *gr, const unsigned *uses, unsigned i, bool between)
{
	const struct node *rg;
	unsigned next;

	if (!plain_product(gr, uses, i, &next))
		return 0;
	rg = &gr->nodes[next];
	if (!is_op(rg, "relu_grad") || rg->ctx.ninputs != 2 || rg->src[0] != (int)i || rg->src[1] == (int)i ||
	    rg->keep || rewrite(gr, i, (int)next, 1, "relu_grad", next, between) < 0)
		return 0;
	retire(&gr->nodes[i]);
	return 1;
}

/* The chain starting at matmul node i, if one qualifies. */
static int fuse_at(struct graph *gr, const unsigned *uses, unsigned i)
{
	unsigned next, last = i, bk = 0;
	int add = -1;
	bool relu = false;

	if (!plain_product(gr, uses, i, &next))
		return 0;
	if (is_op(&gr->nodes[next], "add") && gr->nodes[next].ctx.ninputs == 2 &&
	    (gr->nodes[next].src[0] == (int)i) != (gr->nodes[next].src[1] == (int)i)) {
		add = (int)next;
		bk = gr->nodes[next].src[0] == (int)i ? 1 : 0;
		last = next;
	}
	/* next: the product's (or the sum's) one reader, a relu or not */
	if ((last == i || free_link(gr, uses, last, &next)) && is_op(&gr->nodes[next], "relu") &&
	    gr->nodes[next].ctx.ninputs == 1) {
		relu = true;
		last = next;
	}
	/* A node the daemon reads back (a training loss) stays what the client
	 * wrote, so that its checks name its own op. */
	if (last == i || gr->nodes[last].keep || rewrite(gr, i, add, bk, relu ? "relu" : NULL, last, true) < 0)
		return 0;
	retire(&gr->nodes[i]);
	if (add >= 0 && (unsigned)add != last)
		retire(&gr->nodes[add]);
	return 1;
}

/* Fuse the chains starting among nodes [first, gr->n): the forward kinds
 * and the mask (checking operands read between its ends), or after autograd
 * the mask alone (not checking). Returns the number fused. */
static int fuse_from(struct graph *gr, unsigned first, bool backward)
{
	unsigned *uses = calloc(gr->n ? gr->n : 1, sizeof(*uses));
	int fused = 0;

	if (!uses)
		return 0;
	for (unsigned c = 0; c < gr->n; c++)
		for (unsigned k = 0; k < gr->nodes[c].ctx.ninputs; k++)
			if (gr->nodes[c].src[k] >= 0)
				uses[gr->nodes[c].src[k]]++;
	for (unsigned i = first; i < gr->n; i++) {
		int f = backward ? 0 : fuse_at(gr, uses, i);

		fused += f ? f : fuse_mask_at(gr, uses, i, !backward);
	}
	free(uses);
	return fused;
}

int graph_fuse_epilogues(struct graph *gr, unsigned first)
{
	return fuse_from(gr, first, false);
}

int graph_fuse_backward_masks(struct graph *gr, unsigned first)
{
	return fuse_from(gr, first, true);
}
