/* Node groups: several nodes whose work one call records (the multi-tensor
 * optimizer, ops/optim_multi.c: a training step's updates as one dispatch).
 * The members keep their own results (stored, committed, freed as any
 * node's); only their recording is shared. */
#include <errno.h>
#include <stdlib.h>

#include "engine/graph_core.h"
#include "status.h"

int graph_group_add(struct graph *gr, const unsigned *nodes, unsigned n, graph_group_fn record)
{
	unsigned m = 0, first = 0, last = 0, gi = gr->ngroups;
	struct graph_group *g;

	for (unsigned k = 0; k < n; k++) {
		const struct node *nd;

		if (nodes[k] >= gr->n || (k && nodes[k] <= nodes[k - 1]))
			return -EINVAL;
		nd = &gr->nodes[nodes[k]];
		if (nd->group || nd->fused || nd->ctx.view || !nd->ctx.def || nd->ctx.def->fusion.kind != FUSE_NONE ||
		    nd->device != gr->nodes[nodes[0]].device)
			return -EINVAL;
		if (nd->ctx.out.count == 0)
			continue;
		if (!m++)
			first = nodes[k];
		last = nodes[k];
	}
	if (m < 2)
		return 0;
	/* No node between the first and the last reads a member's result. */
	for (unsigned i = first + 1, k = 0; i < last; i++) {
		const struct node *nd = &gr->nodes[i];

		while (k < n && nodes[k] < i)
			k++;
		if (k < n && nodes[k] == i)
			continue;
		for (unsigned j = 0; j < nd->ctx.ninputs; j++)
			for (unsigned q = 0; nd->src[j] >= (int)first && q < n; q++)
				if ((int)nodes[q] == nd->src[j])
					return -EINVAL;
	}
	g = realloc(gr->groups, (gi + 1) * sizeof(*g));
	if (!g)
		return -ENOMEM;
	gr->groups = g;
	g[gi] = (struct graph_group){ first, last, record };
	gr->ngroups = gi + 1;
	for (unsigned k = 0; k < n; k++)
		if (gr->nodes[nodes[k]].ctx.out.count)
			gr->nodes[nodes[k]].group = gi + 1;
	return 0;
}

int graph_group_record(struct graph *gr, unsigned i, unsigned first, unsigned last, struct gpu_recorder *rec)
{
	const struct graph_group *g = &gr->groups[gr->nodes[i].group - 1];
	struct op_ctx **m;
	unsigned n = 0;
	int r;

	/* Split across parts (data parallel): each member on its own. */
	if (g->first < first || g->last >= last)
		return gr->nodes[i].ctx.def->record(&gr->nodes[i].ctx, rec);
	if (i != g->last)
		return 0;
	m = malloc((g->last - g->first + 1) * sizeof(*m));
	if (!m) {
		td_fail(&gr->nodes[i].ctx.err, TDP_INTERNAL, "out of memory");
		return -1;
	}
	for (unsigned j = g->first; j <= g->last; j++)
		if (gr->nodes[j].group == gr->nodes[i].group)
			m[n++] = &gr->nodes[j].ctx;
	r = g->record(&gr->nodes[i].ctx, m, n, rec);
	free(m);
	return r;
}
