/* Shared autocast copies (docs/training.md, "Mixed precision"; the memory
 * plan, docs/performance.md): in a training step with precision "bf16" or
 * "f16" every product casts both operands, and one tensor is often an
 * operand of several products close together (a block's normalised input
 * of the q, k and v projections, and again of their weight gradients; an
 * output gradient of both the weight and the input gradient). Products of
 * a part that read the same operand within GRAPH_CAST_WINDOW nodes of each
 * other, and every product of a part that reads the same stored tensor (a
 * parameter, as torch.autocast's cast cache), share one copy: the first to
 * record writes it, the others bind it. The plan gives each copy a place
 * in the step's arena from its first reader to its last. */
#include "engine/graph_casts.h"

#include <stdlib.h>

#include "engine/graph_core.h"
#include "ops/op.h"

/* Readers of a node's result further apart than this (in node order) get
 * copies of their own: a copy shared from the forward pass to the backward
 * would hold the step's activations twice. */
#define GRAPH_CAST_WINDOW 32u

/* One operand of one product that the product casts whole. */
struct cast_use {
	unsigned node, input;
	uint32_t device;
	int src;                       /* the node whose result it is; -1: stored */
	const void *stored;            /* the stored tensor read, when src < 0 */
	bool to_16;
};

static int cmp_ptr(const void *a, const void *b)
{
	return (a > b) - (a < b);
}

static int use_cmp(const void *pa, const void *pb)
{
	const struct cast_use *a = pa, *b = pb;

	if (a->device != b->device)
		return a->device < b->device ? -1 : 1;
	if (a->src != b->src)
		return a->src < b->src ? -1 : 1;
	if (a->stored != b->stored)
		return cmp_ptr(a->stored, b->stored);
	if (a->to_16 != b->to_16)
		return a->to_16 ? 1 : -1;
	if (a->node != b->node)
		return a->node < b->node ? -1 : 1;
	return (a->input > b->input) - (a->input < b->input);
}

/* Whether use `b` (after `a` in use_cmp's order) reads the same copy. */
static bool same_copy(const struct cast_use *a, const struct cast_use *b)
{
	return a->device == b->device && a->src == b->src && a->stored == b->stored && a->to_16 == b->to_16 &&
	       (a->src < 0 || b->node - a->node <= GRAPH_CAST_WINDOW);
}

/* Use `u`'s operand as the memory it is: through views (reshapes, which
 * the graph gives their input's memory), the node or stored tensor whose
 * bytes they are, in the same order, so that their copies are the same. */
static void resolve_views(const struct graph *gr, struct cast_use *u)
{
	while (u->src >= 0 && gr->nodes[u->src].ctx.view && !gr->nodes[u->src].has_out) {
		const struct node *v = &gr->nodes[u->src];

		u->src = v->src[0];
		if (u->src < 0)
			u->stored = v->stored[0];
	}
}

/* The operands of nodes [first, last) that their products cast whole, into
 * *ret (the caller frees). Returns their number, or -1 out of memory. */
static int collect_uses(struct graph *gr, unsigned first, unsigned last, struct cast_use **ret)
{
	struct cast_use *u = NULL;
	unsigned n = 0, cap = 0;

	for (unsigned i = first; i < last; i++) {
		struct node *nd = &gr->nodes[i];
		bool to_16;

		if (nd->dead || nd->aliased || nd->ctx.out.count == 0 || !nd->ctx.def || !nd->ctx.def->casts_whole ||
		    nd->ctx.ninputs < 2)
			continue;
		nd->ctx.autocast = gr->autocast;
		if (!nd->ctx.def->casts_whole(&nd->ctx, &to_16))
			continue;
		for (unsigned k = 0; k < 2; k++) {
			if (nd->ctx.in[k].count == 0)
				continue;
			if (n == cap) {
				struct cast_use *m = realloc(u, (cap ? 2 * cap : 64) * sizeof(*u));

				if (!m) {
					free(u);
					return -1;
				}
				u = m;
				cap = cap ? 2 * cap : 64;
			}
			u[n] = (struct cast_use){ .node = i, .input = k, .device = nd->device, .src = nd->src[k],
						  .stored = nd->src[k] < 0 ? (const void *)nd->stored[k] : NULL,
						  .to_16 = to_16 };
			resolve_views(gr, &u[n++]);
		}
	}
	*ret = u;
	return (int)n;
}

int graph_casts_plan(struct graph *gr, unsigned first, unsigned last)
{
	struct cast_use *u = NULL;
	unsigned ncasts = 0;
	int n;

	graph_casts_free(gr);
	if (!gr->autocast)
		return 0;
	if ((n = collect_uses(gr, first, last, &u)) <= 0) {
		free(u);
		return n;
	}
	qsort(u, (size_t)n, sizeof(*u), use_cmp);
	/* A run of two or more uses of one copy is one shared copy. */
	for (int j = 0, e; j < n; j = e) {
		for (e = j + 1; e < n && same_copy(&u[e - 1], &u[e]); e++)
			;
		ncasts += e - j > 1;
	}
	if (ncasts && !(gr->casts = calloc(ncasts, sizeof(*gr->casts)))) {
		free(u);
		return -1;
	}
	for (int j = 0, e; j < n; j = e) {
		struct op_cast *c;

		for (e = j + 1; e < n && same_copy(&u[e - 1], &u[e]); e++)
			;
		if (e - j < 2)
			continue;
		c = &gr->casts[gr->ncasts++];
		*c = (struct op_cast){ .device = u[j].device, .to_16 = u[j].to_16, .first = u[j].node,
				       .last = u[e - 1].node,
				       .bytes = op_cast_bytes(&gr->nodes[u[j].node].ctx.in[u[j].input], u[j].to_16) };
		for (int k = j; k < e; k++)
			gr->nodes[u[k].node].ctx.cast[u[k].input] = c;
	}
	free(u);
	return 0;
}

void graph_casts_free(struct graph *gr)
{
	for (unsigned c = 0; c < gr->ncasts; c++)
		for (unsigned i = gr->casts[c].first; i <= gr->casts[c].last && i < gr->n; i++)
			gr->nodes[i].ctx.cast[0] = gr->nodes[i].ctx.cast[1] = NULL;
	free(gr->casts);
	gr->casts = NULL;
	gr->ncasts = 0;
}
