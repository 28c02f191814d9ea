#include "engine/graph_plan.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "daemon.h"
#include "engine/graph_casts.h"
#include "engine/graph_fuse.h"
#include "gpu/device.h"
#include "gpu/memory.h"
#include "gpu/range_alloc.h"

/* The most arenas a part has per device (each at most what the device
 * allocates at once). */
#define PLAN_MAX_BINS 8

/* The items placed: the nodes' results (0 .. n-1), then the shared
 * autocast copies (n + c for gr->casts[c], graph_casts.c), each alive from
 * its first reader to its last. */
struct plan {
	struct graph *gr;
	unsigned first, last;
	unsigned nitems;     /* gr->n + gr->ncasts */
	int *owner;          /* per node: the node whose memory its result is, -1: none planned here */
	unsigned *end;       /* per owner or copy: the last node recorded that reads it */
	bool *eligible;      /* per item: it may be planned */
	uint64_t *offset;    /* per eligible item: its place in its arena */
	unsigned *bin;       /* per eligible item: which of the device's arenas */
	unsigned *by_end;    /* the eligible items, by `end` */
	unsigned *by_first;  /* the copies, by their first reader */
};

/* The node whose recording does node `i`'s work: its fused kernel's or its
 * node group's last member, else `i`. */
static unsigned recorded_at(const struct plan *p, unsigned i)
{
	const struct node *nd = &p->gr->nodes[i];

	if (nd->fused)
		return graph_fuse_recorded_at(p->gr, i);
	if (nd->group) {
		const struct graph_group *g = &p->gr->groups[nd->group - 1];

		if (g->first >= p->first && g->last < p->last)
			return g->last;
	}
	return i;
}

/* Which results may be planned and whose memory each node's result is. */
static void mark_owners(struct plan *p)
{
	struct graph *gr = p->gr;

	for (unsigned i = 0; i < gr->n; i++) {
		const struct node *nd = &gr->nodes[i];

		p->owner[i] = -1;
		if (nd->dead || nd->fused_internal)
			continue;
		if (nd->ctx.view && !nd->has_out) {
			p->owner[i] = nd->src[0] >= 0 ? p->owner[nd->src[0]] : -1;
			/* A view read after the graph (the loss, an inline output)
			 * keeps the memory it shares out of the plan. */
			if (p->owner[i] >= 0 && (nd->keep || nd->inline_out))
				p->eligible[p->owner[i]] = false;
			continue;
		}
		p->owner[i] = (int)i;
		p->end[i] = i;
		p->eligible[i] = i >= p->first && i < p->last && !nd->has_out && !nd->keep &&
				 !nd->inline_out && !nd->out_like && nd->ctx.out.bytes > 0;
	}
}

/* Results copied to or from the host live outside the nodes' order. */
static void drop_copied(struct plan *p, const struct graph_copy *c, unsigned n)
{
	for (unsigned k = 0; k < n; k++)
		if (c[k].node >= 0 && p->owner[c[k].node] >= 0)
			p->eligible[p->owner[c[k].node]] = false;
}

/* Each result's last reader; results read after the part are not planned. */
static void mark_ends(struct plan *p)
{
	struct graph *gr = p->gr;

	for (unsigned i = p->first; i < gr->n; i++) {
		const struct node *nd = &gr->nodes[i];
		unsigned at;

		if (nd->dead)
			continue;
		at = i < p->last ? recorded_at(p, i) : UINT_MAX;
		for (unsigned k = 0; k < nd->ctx.ninputs; k++) {
			int o = nd->src[k] >= 0 ? p->owner[nd->src[k]] : -1;

			if (o < 0 || !p->eligible[o])
				continue;
			if (at >= p->last)
				p->eligible[o] = false;
			else if (at > p->end[o])
				p->end[o] = at;
		}
	}
}

/* A result's place: its bytes rounded up to the device's alignment. */
static uint64_t slot_bytes(const struct node *nd, uint64_t align)
{
	return (nd->ctx.out.bytes + align - 1) & ~(align - 1);
}

/* Item j's place (struct plan), aligned likewise, and its device. */
static uint64_t item_bytes(const struct plan *p, unsigned j, uint64_t align)
{
	if (j < p->gr->n)
		return slot_bytes(&p->gr->nodes[j], align);
	return (p->gr->casts[j - p->gr->n].bytes + align - 1) & ~(align - 1);
}

static uint32_t item_device(const struct plan *p, unsigned j)
{
	return j < p->gr->n ? p->gr->nodes[j].device : p->gr->casts[j - p->gr->n].device;
}

/* The copies may be planned, each up to its last reader. */
static void mark_casts(struct plan *p)
{
	for (unsigned c = 0; c < p->gr->ncasts; c++) {
		p->eligible[p->gr->n + c] = p->gr->casts[c].bytes > 0;
		p->end[p->gr->n + c] = p->gr->casts[c].last;
		p->by_first[c] = c;
	}
}

static const unsigned *sort_end;

static int cmp_end(const void *a, const void *b)
{
	unsigned x = sort_end[*(const unsigned *)a], y = sort_end[*(const unsigned *)b];

	return x < y ? -1 : x > y;
}

static const struct op_cast *sort_casts;

static int cmp_first(const void *a, const void *b)
{
	unsigned x = sort_casts[*(const unsigned *)a].first, y = sort_casts[*(const unsigned *)b].first;

	return x < y ? -1 : x > y;
}

/* Take item j's place in the first of the `*nbins` bins (up to `cap` bytes
 * each) it fits, opening a bin if none has room. Returns 0, 1 when it gets
 * no place (memory of its own), or -ENOMEM. */
static int take_place(struct plan *p, unsigned j, struct range_alloc *ra, unsigned *nbins, uint64_t align,
		      uint64_t cap, uint64_t *tops)
{
	uint64_t bytes = item_bytes(p, j, align);
	unsigned b;

	for (b = 0; b < *nbins; b++)
		if (range_alloc_take(&ra[b], bytes, align, &p->offset[j]) == 0)
			break;
	if (b == *nbins && bytes <= cap && *nbins < PLAN_MAX_BINS) {
		if (range_alloc_init(&ra[*nbins], cap) < 0)
			return -ENOMEM;
		tops[(*nbins)++] = 0;
		if (range_alloc_take(&ra[b], bytes, align, &p->offset[j]) < 0)
			b = *nbins; /* cannot happen: the bin is empty and large enough */
	}
	if (b == *nbins) {
		p->eligible[j] = false; /* gets memory of its own */
		return 1;
	}
	p->bin[j] = b;
	if (p->offset[j] + bytes > tops[b])
		tops[b] = p->offset[j] + bytes;
	return 0;
}

#define PEAK_KINDS 16

/* With `verbose`, what the arena holds when it is fullest (`at`: the node
 * made then), by op: which results a step keeps alive at once. */
static void log_peak(const struct plan *p, uint32_t dev, unsigned at, uint64_t live, uint64_t align)
{
	struct {
		const char *op;
		uint64_t bytes;
		unsigned n;
	} kind[PEAK_KINDS] = { { 0 } };
	unsigned nk = 0;
	char line[768];
	size_t len;

	for (unsigned j = p->first; j <= at; j++) {
		const struct node *nd = &p->gr->nodes[j];
		unsigned k;

		if (!p->eligible[j] || nd->device != dev || p->end[j] < at)
			continue;
		for (k = 0; k < nk && strcmp(kind[k].op, nd->ctx.def->name); k++)
			;
		if (k == nk && nk < PEAK_KINDS)
			kind[nk++].op = nd->ctx.def->name;
		else if (k == nk)
			k = nk - 1, kind[k].op = "(others)";
		kind[k].bytes += slot_bytes(nd, align);
		kind[k].n++;
	}
	len = (size_t)snprintf(line, sizeof(line), "plan: device %u peak %.1f MiB at node %u (%s):", dev,
			       (double)live / 1048576, at, p->gr->nodes[at].ctx.def->name);
	for (unsigned k = 0; k < nk && len < sizeof(line); k++)
		len += (size_t)snprintf(line + len, sizeof(line) - len, " %s %u = %.1f MiB%s", kind[k].op, kind[k].n,
					(double)kind[k].bytes / 1048576, k + 1 < nk ? "," : "");
	log_debug("%s", line);
}

/* Lay out device `dev`'s eligible items in time order, first fit, each
 * range given back once its last reader is recorded, into bins of at most
 * `cap` bytes (what the device allocates at once): an item goes to the
 * first bin it fits; one larger than a bin, or past PLAN_MAX_BINS, is not
 * planned. A node's result is placed at its node, a shared copy at its
 * first reader. Sets tops[b], each bin's size. Returns the bins used or
 * -ENOMEM. */
static int lay_out(struct plan *p, uint32_t dev, uint64_t align, uint64_t cap, uint64_t *tops)
{
	struct graph *gr = p->gr;
	struct range_alloc ra[PLAN_MAX_BINS];
	unsigned nby = 0, freed = 0, nbins = 0, peak_at = 0, nextc = 0;
	uint64_t live = 0, peak = 0;
	int r = 0;

	for (unsigned j = 0; j < p->nitems; j++)
		if (p->eligible[j] && item_device(p, j) == dev && (j >= gr->n || (j >= p->first && j < p->last)))
			p->by_end[nby++] = j;
	if (!nby)
		return 0;
	sort_end = p->end;
	qsort(p->by_end, nby, sizeof(*p->by_end), cmp_end);
	for (unsigned i = p->first; i < p->last && r == 0; i++) {
		/* A range read last by node e is free for an item made after e. */
		for (; freed < nby && p->end[p->by_end[freed]] < i; freed++) {
			unsigned j = p->by_end[freed];

			if (p->eligible[j]) {
				range_alloc_give(&ra[p->bin[j]], p->offset[j], item_bytes(p, j, align));
				live -= item_bytes(p, j, align);
			}
		}
		if (p->eligible[i] && gr->nodes[i].device == dev && (r = take_place(p, i, ra, &nbins, align, cap, tops)) == 0)
			live += item_bytes(p, i, align);
		for (; r >= 0 && nextc < gr->ncasts && gr->casts[p->by_first[nextc]].first <= i; nextc++) {
			unsigned j = gr->n + p->by_first[nextc];

			if (p->eligible[j] && item_device(p, j) == dev &&
			    (r = take_place(p, j, ra, &nbins, align, cap, tops)) == 0)
				live += item_bytes(p, j, align);
		}
		r = r < 0 ? r : 0;
		if (live > peak)
			peak = live, peak_at = i;
	}
	for (unsigned b = 0; b < nbins; b++)
		range_alloc_fini(&ra[b]);
	if (r == 0 && peak && log_wanted(LOG_DEBUG))
		log_peak(p, dev, peak_at, peak, align);
	return r < 0 ? r : (int)nbins;
}

/* An arena's most bytes: what the device allocates at once, or less where
 * TENSORD_PLAN_BIN_BYTES says (tests: results spread over several arenas). */
static uint64_t bin_bytes(const struct gpu_device *g)
{
	uint64_t cap = gpu_memory_largest(&g->mem);
	const char *v = getenv("TENSORD_PLAN_BIN_BYTES");

	if (v && strtoull(v, NULL, 10) > 0 && strtoull(v, NULL, 10) < cap)
		cap = strtoull(v, NULL, 10);
	return cap & ~(g->mem.align - 1);
}

/* An arena of the cache on `dev` of at least `size` bytes that this graph
 * has not taken yet. Returns 0 or -ENOENT. */
static int take_cached(struct graph *gr, uint32_t dev, uint64_t size, struct gpu_alloc *ret)
{
	struct graph_arena_cache *c = gr->arena_cache;

	for (unsigned k = 0; c && k < c->n; k++) {
		bool taken = false;

		if (c->a[k].device != dev || c->a[k].alloc.size < size)
			continue;
		for (unsigned j = 0; j < gr->narenas && !taken; j++)
			taken = gr->arenas[j].cached && gr->arenas[j].alloc.block == c->a[k].alloc.block &&
				gr->arenas[j].alloc.offset == c->a[k].alloc.offset;
		if (taken)
			continue;
		*ret = c->a[k].alloc;
		gr->arenas[gr->narenas++] = (struct graph_arena){ .device = dev, .alloc = *ret, .cached = true };
		return 0;
	}
	return -ENOENT;
}

/* Record a new arena: the cache's while it has room, else the graph's. */
static void keep_arena(struct graph *gr, uint32_t dev, const struct gpu_alloc *a)
{
	struct graph_arena_cache *c = gr->arena_cache;
	bool cached = c && c->n < GRAPH_ARENA_CACHE;

	if (cached)
		c->a[c->n++] = (struct graph_arena){ .device = dev, .alloc = *a, .cached = true };
	gr->arenas[gr->narenas++] = (struct graph_arena){ .device = dev, .alloc = *a, .cached = cached };
}

/* Take device `dev`'s arenas and place its results there; a bin whose
 * memory cannot be had leaves its results unplanned. */
static int place(struct plan *p, uint32_t dev)
{
	struct graph *gr = p->gr;
	struct gpu_device *g = NULL;
	uint64_t tops[PLAN_MAX_BINS];
	struct gpu_alloc got[PLAN_MAX_BINS];
	struct graph_arena *a;
	int nbins;

	for (unsigned i = p->first; i < p->last && !g; i++)
		if ((p->eligible[i] || gr->nodes[i].ctx.cast[0] || gr->nodes[i].ctx.cast[1]) &&
		    gr->nodes[i].device == dev)
			g = gr->nodes[i].ctx.g;
	if (!g)
		return 0;
	nbins = lay_out(p, dev, g->mem.align, bin_bytes(g), tops);
	if (nbins <= 0)
		return nbins;
	a = realloc(gr->arenas, (gr->narenas + (unsigned)nbins) * sizeof(*a));
	if (!a)
		return -ENOMEM;
	gr->arenas = a;
	for (int b = 0; b < nbins; b++) {
		got[b] = (struct gpu_alloc){ 0 };
		if (take_cached(gr, dev, tops[b], &got[b]) == 0)
			continue;
		/* Failing, its results ask for their own, as without a plan. */
		if (gpu_memory_alloc(g, tops[b], &got[b]) == 0)
			keep_arena(gr, dev, &got[b]);
	}
	for (unsigned i = p->first; i < p->last; i++) {
		struct node *nd = &gr->nodes[i];
		const struct gpu_alloc *bin = &got[p->bin[i]];

		if (!p->eligible[i] || nd->device != dev || !bin->block)
			continue;
		/* reserved: the slot, aligned as gpu_memory_alloc's own would be */
		nd->alloc = (struct gpu_alloc){ .block = bin->block, .offset = bin->offset + p->offset[i],
						.size = nd->ctx.out.bytes, .reserved = slot_bytes(nd, g->mem.align) };
		nd->planned = true;
	}
	for (unsigned c = 0; c < gr->ncasts; c++) {
		unsigned j = gr->n + c;
		const struct gpu_alloc *bin = &got[p->bin[j]];

		if (p->eligible[j] && gr->casts[c].device == dev && bin->block)
			gr->casts[c].alloc = (struct gpu_alloc){ .block = bin->block,
								 .offset = bin->offset + p->offset[j],
								 .size = gr->casts[c].bytes,
								 .reserved = item_bytes(p, j, g->mem.align) };
	}
	return 0;
}

int graph_plan_part(struct graph *gr, unsigned first, unsigned last)
{
	struct plan p = { .gr = gr, .first = first, .last = last };
	int r = -ENOMEM;

	if (first >= last)
		return 0;
	if (gr->arena_cache && gr->arena_cache->scratch_hint > gr->scratch_pool.hint)
		gr->scratch_pool.hint = gr->arena_cache->scratch_hint;
	/* Out of memory for the copies' plan, products cast into scratch. */
	if (graph_casts_plan(gr, first, last) < 0)
		graph_casts_free(gr);
	p.nitems = gr->n + gr->ncasts;
	p.owner = calloc(gr->n, sizeof(*p.owner));
	p.end = calloc(p.nitems, sizeof(*p.end));
	p.eligible = calloc(p.nitems, sizeof(*p.eligible));
	p.offset = calloc(p.nitems, sizeof(*p.offset));
	p.by_end = calloc(p.nitems, sizeof(*p.by_end));
	p.bin = calloc(p.nitems, sizeof(*p.bin));
	p.by_first = calloc(gr->ncasts + 1, sizeof(*p.by_first));
	if (!p.owner || !p.end || !p.eligible || !p.offset || !p.by_end || !p.bin || !p.by_first)
		goto out;
	mark_owners(&p);
	mark_casts(&p);
	sort_casts = gr->casts;
	qsort(p.by_first, gr->ncasts, sizeof(*p.by_first), cmp_first);
	drop_copied(&p, gr->copies_before, gr->ncopies_before);
	drop_copied(&p, gr->copies_after, gr->ncopies_after);
	drop_copied(&p, gr->copies_at, gr->ncopies_at);
	mark_ends(&p);
	r = 0;
	for (uint32_t dev = 0; dev < gr->call->d->ngpus && r == 0; dev++)
		r = place(&p, dev);
out:
	if (r < 0)
		graph_casts_free(gr);
	free(p.by_first);
	free(p.owner);
	free(p.end);
	free(p.eligible);
	free(p.offset);
	free(p.by_end);
	free(p.bin);
	return r;
}

void graph_plan_free(struct graph *gr)
{
	struct op_scratch_pool *sp = &gr->scratch_pool;

	graph_casts_free(gr);
	if (gr->arena_cache && sp->want > gr->arena_cache->scratch_hint)
		gr->arena_cache->scratch_hint = sp->want;
	if (sp->mem.block)
		gpu_memory_free_unused(sp->g, &sp->mem);
	for (unsigned k = 0; k < sp->noutgrown; k++)
		gpu_memory_free_unused(sp->g, &sp->outgrown[k]);
	*sp = (struct op_scratch_pool){ 0 };
	for (unsigned k = 0; k < gr->narenas; k++)
		/* The graph's own work ended (graph_free waited); none other binds it. */
		if (!gr->arenas[k].cached)
			gpu_memory_free_unused(gr->call->d->gpus[gr->arenas[k].device], &gr->arenas[k].alloc);
	free(gr->arenas);
	gr->arenas = NULL;
	gr->narenas = 0;
}

void graph_arena_cache_free(struct graph_arena_cache *c, struct gpu_device *const *gpus)
{
	for (unsigned k = 0; k < c->n; k++)
		gpu_memory_free(gpus[c->a[k].device], &c->a[k].alloc);
	c->n = 0;
}
