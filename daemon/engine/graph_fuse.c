/* Elementwise fusion: which nodes of a graph run together as one fused.comp
 * kernel.
 *
 * Nodes are visited in order. A fusable node (a row's fusion kind, a float
 * dtype: ew_describe) joins the group of one of its producers when both have
 * the same result shape and dtype, the group still fits one kernel
 * (fused_compile decides), and no member's result is read by a node outside
 * the group that comes before the new member: the kernel is recorded at its
 * last member, so everything outside that reads a member must come after it.
 * A member is materialised (gets memory and an output slot) when it is stored,
 * returned inline, kept for the caller, read outside the group, or read by
 * nobody; the rest live only in the kernel's registers. Groups of one node
 * run as that node's own kernel. */
#include "engine/graph_fuse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "gpu/device.h"
#include "ops/elementwise.h"
#include "ops/fused.h"

#define SIBLING_TRIES 4

struct fuse_kernel {
	struct fused_kernel k;
	unsigned last;                   /* the member it is recorded at */
	unsigned in_node[FU_MAX_SLOTS];  /* input slot s is input in_k[s] of node in_node[s] */
	unsigned in_k[FU_MAX_SLOTS];
	unsigned out_node[FU_MAX_SLOTS]; /* output j is node out_node[j]'s result */
};

struct group {
	unsigned m[FU_MAX_WORDS];        /* members, ascending */
	unsigned n;
};

struct planner {
	struct graph *gr;
	struct ew_desc *desc;            /* per node */
	bool *ok;                        /* per node: fusable */
	int *group;                      /* per node: its group, -1: none */
	unsigned *cstart;                /* consumers of node i: cons[cstart[i] .. cstart[i + 1]) */
	unsigned *cons;
	struct group *groups;
	unsigned ngroups;
};

static bool fusable(struct planner *pl, unsigned i)
{
	const struct node *nd = &pl->gr->nodes[i];
	uint64_t range = nd->ctx.g->props.limits.maxStorageBufferRange;

	if (nd->dead || nd->ctx.view || nd->ctx.out.count == 0 || nd->ctx.out.count > UINT32_MAX / 2 ||
	    nd->ctx.out.bytes > range || ew_describe(&nd->ctx, &pl->desc[i]) < 0)
		return false;
	/* Too large to bind: let the op's own kernel report it. */
	for (unsigned k = 0; k < nd->ctx.ninputs; k++)
		if (nd->ctx.in[k].bytes > range)
			return false;
	return true;
}

/* Same result shape and compute dtype. */
static bool same_key(struct planner *pl, unsigned a, unsigned b)
{
	const struct op_tensor *x = &pl->gr->nodes[a].ctx.out, *y = &pl->gr->nodes[b].ctx.out;

	return pl->desc[a].dtype == pl->desc[b].dtype && x->rank == y->rank &&
	       !memcmp(x->shape, y->shape, x->rank * sizeof(x->shape[0]));
}

static bool in_set(struct planner *pl, unsigned c, int g, int extra)
{
	return pl->group[c] == g || (int)c == extra;
}

/* Whether node j (a member of g, or `extra` joining it) must be materialised. */
static bool must_store(struct planner *pl, unsigned j, int g, int extra)
{
	const struct node *nd = &pl->gr->nodes[j];

	if (nd->has_out || nd->inline_out || nd->keep || pl->cstart[j] == pl->cstart[j + 1])
		return true;
	for (unsigned e = pl->cstart[j]; e < pl->cstart[j + 1]; e++)
		if (!in_set(pl, pl->cons[e], g, extra))
			return true;
	return false;
}

/* Whether `k` may join group g: nothing outside reads a member before k. */
static bool can_join(struct planner *pl, int g, unsigned k)
{
	const struct group *gp = &pl->groups[g];

	if (gp->n == FU_MAX_WORDS)
		return false;
	for (unsigned a = 0; a < gp->n; a++) {
		unsigned m = gp->m[a];

		for (unsigned e = pl->cstart[m]; e < pl->cstart[m + 1]; e++)
			if (pl->cons[e] < k && pl->group[pl->cons[e]] != g)
				return false;
	}
	return true;
}

/* Compile group g (plus node `extra` when >= 0) into `ret`. Returns 0 or
 * -E2BIG when it does not fit one kernel. */
static int build(struct planner *pl, int g, int extra, struct fuse_kernel *ret)
{
	const struct group *gp = &pl->groups[g];
	struct fused_member fm[FU_MAX_WORDS];
	struct op_tensor in[FU_MAX_SLOTS];
	unsigned list[FU_MAX_WORDS], n = 0, nin = 0, nout = 0;
	struct fuse_kernel fk;

	for (unsigned a = 0; a < gp->n; a++)
		list[n++] = gp->m[a];
	if (extra >= 0) {
		if (n == FU_MAX_WORDS)
			return -E2BIG;
		list[n++] = (unsigned)extra;
	}
	memset(&fk, 0, sizeof(fk));
	memset(fm, 0, sizeof(fm));
	for (unsigned j = 0; j < n; j++) {
		const struct node *nd = &pl->gr->nodes[list[j]];

		fm[j].desc = pl->desc[list[j]];
		fm[j].store = must_store(pl, list[j], g, extra);
		if (fm[j].store) {
			if (nout == FU_MAX_SLOTS)
				return -E2BIG;
			fk.out_node[nout++] = list[j];
		}
		for (unsigned k = 0; k < nd->ctx.ninputs; k++) {
			int src = nd->src[k];
			unsigned s;

			if (src >= 0 && in_set(pl, (unsigned)src, g, extra)) {
				for (unsigned p = 0; p < j; p++)
					if (list[p] == (unsigned)src)
						fm[j].src[k] = (int)p;
				continue;
			}
			/* An input slot per distinct producer or stored tensor. */
			for (s = 0; s < nin; s++) {
				const struct node *o = &pl->gr->nodes[fk.in_node[s]];
				int osrc = o->src[fk.in_k[s]];

				if (src >= 0 ? osrc == src : (osrc < 0 && o->stored[fk.in_k[s]] == nd->stored[k]))
					break;
			}
			if (s == nin) {
				if (nin == FU_MAX_SLOTS)
					return -E2BIG;
				fk.in_node[nin] = list[j];
				fk.in_k[nin] = k;
				in[nin++] = nd->ctx.in[k];
			}
			fm[j].src[k] = -1 - (int)s;
		}
	}
	if (fused_compile(fm, n, in, nin, &pl->gr->nodes[list[0]].ctx.out, &fk.k) < 0)
		return -E2BIG;
	fk.last = list[n - 1];
	*ret = fk;
	return 0;
}

/* Add k to group g if it may join and the result fits one kernel. */
static bool join(struct planner *pl, int g, unsigned k, struct fuse_kernel *scratch)
{
	struct group *gp = &pl->groups[g];

	if (!same_key(pl, gp->m[0], k) || !can_join(pl, g, k) || build(pl, g, (int)k, scratch) < 0)
		return false;
	gp->m[gp->n++] = k;
	pl->group[k] = g;
	return true;
}

/* Try node k in the groups of its producers, then in the last few groups
 * (siblings reading the same inputs: a kernel reads a shared input once);
 * else start a group. */
static void place(struct planner *pl, unsigned k, struct fuse_kernel *scratch)
{
	const struct node *nd = &pl->gr->nodes[k];
	struct group *gp;

	for (unsigned a = 0; a < nd->ctx.ninputs; a++) {
		int p = nd->src[a];

		if (p >= 0 && pl->group[p] >= 0 && join(pl, pl->group[p], k, scratch))
			return;
	}
	for (unsigned back = 1; back <= SIBLING_TRIES && back <= pl->ngroups; back++)
		if (join(pl, (int)(pl->ngroups - back), k, scratch))
			return;
	gp = &pl->groups[pl->ngroups];
	gp->n = 1;
	gp->m[0] = k;
	pl->group[k] = (int)pl->ngroups;
	/* A node that does not fit a kernel alone fits none: leave it out. */
	if (build(pl, (int)pl->ngroups, -1, scratch) < 0) {
		pl->group[k] = -1;
		return;
	}
	pl->ngroups++;
}

static int consumers(struct planner *pl)
{
	struct graph *gr = pl->gr;
	unsigned edges = 0, *fill;

	for (unsigned i = 0; i < gr->n; i++)
		for (unsigned k = 0; k < gr->nodes[i].ctx.ninputs; k++)
			if (gr->nodes[i].src[k] >= 0) {
				pl->cstart[gr->nodes[i].src[k] + 1]++;
				edges++;
			}
	for (unsigned i = 0; i < gr->n; i++)
		pl->cstart[i + 1] += pl->cstart[i];
	pl->cons = malloc((edges ? edges : 1) * sizeof(*pl->cons));
	fill = calloc(gr->n, sizeof(*fill));
	if (!pl->cons || !fill) {
		free(fill);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < gr->n; i++)
		for (unsigned k = 0; k < gr->nodes[i].ctx.ninputs; k++) {
			int p = gr->nodes[i].src[k];

			if (p >= 0)
				pl->cons[pl->cstart[p] + fill[p]++] = i;
		}
	free(fill);
	return 0;
}

bool graph_fuse_default(const struct gpu_device *g)
{
	/* Off everywhere for now: the interpreter measured slower than the
	 * separate kernels on lavapipe (2x) and on an H100 (x*sigmoid(x)+b over
	 * 64M f32: 568 GB/s fused, about 820 GB/s unfused; docs/performance.md),
	 * and NVIDIA's compiler contracts its f32 math differently from the
	 * separate kernels, so fused bits differ there. `fuse: true` opts in. */
	(void)g;
	return false;
}

void graph_fuse_free(struct graph *gr)
{
	free(gr->kernels);
	gr->kernels = NULL;
	gr->nkernels = 0;
}

int graph_fuse_plan(struct graph *gr)
{
	struct planner pl = { .gr = gr };
	struct fuse_kernel scratch;
	unsigned n = gr->n;
	int r = -ENOMEM;

	graph_fuse_free(gr);
	for (unsigned i = 0; i < n; i++) {
		gr->nodes[i].fused = 0;
		gr->nodes[i].fused_internal = false;
	}
	pl.desc = calloc(n, sizeof(*pl.desc));
	pl.ok = calloc(n, sizeof(*pl.ok));
	pl.group = malloc(n * sizeof(*pl.group));
	pl.cstart = calloc(n + 1, sizeof(*pl.cstart));
	pl.groups = malloc(n * sizeof(*pl.groups));
	if (!pl.desc || !pl.ok || !pl.group || !pl.cstart || !pl.groups || consumers(&pl) < 0)
		goto out;
	for (unsigned i = 0; i < n; i++) {
		pl.group[i] = -1;
		pl.ok[i] = fusable(&pl, i);
	}
	for (unsigned i = 0; i < n; i++)
		if (pl.ok[i])
			place(&pl, i, &scratch);
	gr->kernels = calloc(pl.ngroups ? pl.ngroups : 1, sizeof(*gr->kernels));
	if (!gr->kernels)
		goto out;
	for (unsigned g = 0; g < pl.ngroups; g++) {
		struct fuse_kernel *fk = &gr->kernels[gr->nkernels];
		const struct group *gp = &pl.groups[g];

		/* A group of one runs as its node's own kernel; the final build
		 * only drops outputs the planning kept, so it fits. */
		if (gp->n < 2 || build(&pl, (int)g, -1, fk) < 0)
			continue;
		gr->nkernels++;
		for (unsigned a = 0; a < gp->n; a++) {
			struct node *nd = &gr->nodes[gp->m[a]];

			nd->fused = gr->nkernels;
			nd->fused_internal = !must_store(&pl, gp->m[a], (int)g, -1);
		}
	}
	r = 0;
out:
	free(pl.desc);
	free(pl.ok);
	free(pl.group);
	free(pl.cstart);
	free(pl.cons);
	free(pl.groups);
	return r;
}

unsigned graph_fuse_recorded_at(const struct graph *gr, unsigned i)
{
	return gr->nodes[i].fused ? gr->kernels[gr->nodes[i].fused - 1].last : i;
}

int graph_fuse_record(struct graph *gr, unsigned i, struct gpu_recorder *rec)
{
	struct fuse_kernel *fk = &gr->kernels[gr->nodes[i].fused - 1];

	if (fk->last != i)
		return 0;
	for (unsigned s = 0; s < fk->k.nin; s++)
		fk->k.slot[s].alloc = gr->nodes[fk->in_node[s]].ctx.in[fk->in_k[s]].alloc;
	for (unsigned j = 0; j < fk->k.nout; j++)
		fk->k.slot[fk->k.nin + j].alloc = gr->nodes[fk->out_node[j]].result;
	return fused_record(&gr->nodes[i].ctx, &fk->k, rec);
}
