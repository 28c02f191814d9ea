#include "engine/graph_core.h"
#include "engine/graph_fuse.h"
#include "engine/graph_plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "daemon.h"
#include "devices.h"
#include "dtype.h"
#include "engine/kernel_node.h"
#include "errorf.h"
#include "gpu/completion.h"
#include "gpu/device.h"
#include "gpu/host_import.h"
#include "gpu/recorder.h"
#include "gpu/transfer.h"
#include "mode.h"
#include "name.h"
#include "ops/op.h"
#include "status.h"
#include "store/lookup.h"
#include "store/names.h"
#include "store/store.h"
#include <stdio.h>


/* Report a node's failure with its position, id and op. */
int graph_node_fail(struct graph *gr, unsigned i, int code, const char *what)
{
	struct node *nd = &gr->nodes[i];
	const char *op = nd->ctx.def ? nd->ctx.def->name : NULL;

	/* Without a known op (an unknown op's name is in `what`), no op part. */
	if (gr->n == 1 && !nd->id[0])
		return op ? td_fail(&gr->call->err, code, "%s: %s", op, what)
			  : td_fail(&gr->call->err, code, "%s", what);
	if (i < gr->base)
		return td_fail(&gr->call->err, code, "feeding '%s': %s", nd->id, what);
	return td_fail(&gr->call->err, code, "node %u%s%s%s%s%s%s: %s", i - gr->base, nd->id[0] ? " '" : "",
			    nd->id, nd->id[0] ? "'" : "", op ? " (" : "", op ? op : "", op ? ")" : "", what);
}

struct named_out {
	const char *name;
	unsigned node;
};

static int named_out_cmp(const void *a, const void *b)
{
	const struct named_out *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (x->node > y->node) - (x->node < y->node);
}

/* The first node that stores a name an earlier node stores too, or gr->n:
 * the names sorted (a training step stores hundreds; comparing each with
 * every earlier one took a fifth of a GPT step's host time). -1 when out
 * of memory. */
static long first_repeated_output(const struct graph *gr)
{
	struct named_out *v = calloc(gr->n ? gr->n : 1, sizeof(*v));
	unsigned n = 0, first = gr->n;

	if (!v)
		return -1;
	for (unsigned i = 0; i < gr->n; i++)
		if (gr->nodes[i].has_out)
			v[n++] = (struct named_out){ gr->nodes[i].out_name, i };
	qsort(v, n, sizeof(*v), named_out_cmp);
	for (unsigned k = 1; k < n; k++)
		if (!strcmp(v[k - 1].name, v[k].name) && v[k].node < first)
			first = v[k].node;
	free(v);
	return first;
}

/* Check named outputs: valid, distinct, ours to replace, within the tensor
 * limit and the owners' quotas. */
int graph_check_outputs(struct graph *gr)
{
	struct caller *call = gr->call;
	struct lookup_output *outs;
	uint64_t count, bytes, fresh = 0;
	size_t nout = 0;
	long repeated = first_repeated_output(gr);
	int r;

	outs = repeated < 0 ? NULL : calloc(gr->n ? gr->n : 1, sizeof(*outs));
	if (!outs)
		return td_fail(&call->err, TDP_INTERNAL, "out of memory");
	for (unsigned i = 0; i < gr->n; i++) {
		struct node *nd = &gr->nodes[i];
		char why[TDP_MAX_ERROR_MESSAGE];
		struct tensor *old;
		int code;

		if (!nd->has_out)
			continue;
		if (i == (unsigned long)repeated) {
			free(outs);
			return graph_node_fail(gr, i, TDP_INVALID_ARGUMENT, "two nodes store the same name");
		}
		if (nd->out_like) {
			struct tensor base = { .owner = nd->like_owner };

			code = lookup_derived_why(call, "out", nd->out_name, &base, ACCESS_WRITE, &old, why,
						  sizeof(why));
		} else {
			code = lookup_tensor_why(call, "out", nd->out_name, ACCESS_WRITE, &old, why, sizeof(why));
		}
		if (code == TDP_PERMISSION_DENIED || code == TDP_FAILED_PRECONDITION) {
			free(outs);
			return graph_node_fail(gr, i, code, why);
		}
		fresh += code == TDP_NOT_FOUND;
		outs[nout++] = (struct lookup_output){ .name = nd->out_name, .bytes = nd->ctx.out.bytes };
	}
	store_totals(call->d->store, &count, &bytes);
	if (count + fresh > call->d->cfg.max_tensors) {
		free(outs);
		return td_fail(&call->err, TDP_RESOURCE_EXHAUSTED, "storing the outputs would pass %llu tensors "
				    "(max_tensors)", (unsigned long long)call->d->cfg.max_tensors);
	}
	r = lookup_check_quota(call, outs, nout);
	free(outs);
	return r;
}

static int device_fail(struct graph *gr, int r)
{
	if (r == -ENODEV)
		return td_fail(&gr->call->err, TDP_DEVICE_LOST, "the GPU was lost");
	return td_fail(&gr->call->err, TDP_INTERNAL, "the GPU submission failed (%s)", strerror(-r));
}

int graph_place_node(struct graph *gr, unsigned i, int want)
{
	struct node *nd = &gr->nodes[i];
	const struct daemon *d = gr->call->d;
	int have = -1;
	unsigned first = 0;

	for (unsigned k = 0; k < nd->ctx.ninputs; k++) {
		int dev = nd->src[k] >= 0 ? (int)gr->nodes[nd->src[k]].device :
			  nd->stored[k] ? (int)nd->stored[k]->device : -1;

		if (dev < 0)
			continue;
		if (have >= 0 && dev != have)
			return op_fail(&nd->ctx, TDP_FAILED_PRECONDITION,
				       "input %u is on device %d but input %u on device %d; an op's "
				       "inputs must be on one device (move one with tensor.copy)",
				       first, have, k, dev);
		if (have < 0)
			first = k;
		have = dev;
	}
	if (want >= 0 && have >= 0 && want != have)
		return op_fail(&nd->ctx, TDP_FAILED_PRECONDITION,
			       "input %u is on device %d, not on device %d where the node is to run "
			       "(move it with tensor.copy)", first, have, want);
	if (have < 0)
		have = want;
	/* A node that nothing places (no inputs, no device: a constant) runs
	 * where the graph's first placed node runs, else on device 0. */
	if (have < 0)
		have = gr->default_set ? (int)gr->default_device : gr->replica ? (int)gr->replica->device : 0;
	if (!gr->default_set) {
		gr->default_device = (uint32_t)have;
		gr->default_set = true;
	}
	nd->device = (uint32_t)have;
	nd->ctx.g = d->gpus[have];
	return 0;
}

struct tensor *graph_stored(const struct graph *gr, struct tensor *t)
{
	if (!gr->replica)
		return t;
	for (unsigned k = 0; k < gr->replica->n; k++)
		if (!strcmp(gr->replica->tensors[k]->name, t->name))
			return gr->replica->tensors[k];
	return NULL;
}

/* Give node `i` its result memory (or none: a view, a fused intermediate). */
static int alloc_result(struct graph *gr, unsigned i)
{
	struct node *nd = &gr->nodes[i];
	struct gpu_device *g = nd->ctx.g;
	char what[200];
	int r;

	/* Inputs made by earlier nodes had no memory when they were resolved. */
	for (unsigned k = 0; k < nd->ctx.ninputs; k++)
		if (nd->src[k] >= 0)
			nd->ctx.in[k].alloc = gr->nodes[nd->src[k]].result;
	if (nd->fused_internal) {
		nd->result = NULL;
	} else if (nd->ctx.view && !nd->has_out) {
		nd->result = nd->ctx.in[0].alloc;
		nd->aliased = true;
	} else if (nd->planned) {
		nd->result = &nd->alloc;
	} else {
		r = gpu_memory_alloc(g, nd->ctx.out.bytes, &nd->alloc);
		if (r < 0) {
			if (r == -EFBIG)
				snprintf(what, sizeof(what), "the result's %llu bytes are more than device %u "
					 "allocates at once (%llu)", (unsigned long long)nd->ctx.out.bytes, g->id,
					 (unsigned long long)gpu_memory_largest(&g->mem));
			else
				snprintf(what, sizeof(what), "out of device memory on device %u for the result's %llu "
					 "bytes (%llu of %llu taken)", g->id, (unsigned long long)nd->ctx.out.bytes,
					 (unsigned long long)g->mem.reserved, (unsigned long long)g->mem.limit);
			return graph_node_fail(gr, i, TDP_RESOURCE_EXHAUSTED, what);
		}
		nd->result = &nd->alloc;
	}
	nd->ctx.out.alloc = nd->result;
	return 0;
}

/* The recording for device `id`, begun on first use. */
static struct gpu_recorder *recorder(struct graph *gr, uint32_t id, int *ret_err)
{
	const struct daemon *d = gr->call->d;

	if (!gr->recs) {
		gr->recs = calloc(d->ngpus, sizeof(*gr->recs));
		if (!gr->recs) {
			*ret_err = -ENOMEM;
			return NULL;
		}
		gr->nrecs = d->ngpus;
	}
	if (!gr->recs[id].g) {
		int r = gr->async ? gpu_rec_begin_async(&gr->recs[id], d->gpus[id]) :
			gpu_rec_begin(&gr->recs[id], d->gpus[id]);

		if (r < 0) {
			gr->recs[id].g = NULL;
			*ret_err = r;
			return NULL;
		}
		/* A graph with a custom kernel runs under kernel_timeout. */
		gr->recs[id].timeout_ns = kernel_node_timeout_ns(gr);
	}
	return &gr->recs[id];
}

/* Abandon every recording not yet submitted; forget them all. */
static void abort_recordings(struct graph *gr)
{
	for (uint32_t id = 0; id < gr->nrecs; id++)
		if (gr->recs[id].g && gr->recs[id].cb) {
			gpu_rec_abort(&gr->recs[id]);
			gr->recs[id].g = NULL;
		}
}

/* Record the host copies `c` (`n`) of a part on device `id`. */
static int record_copies(struct graph *gr, uint32_t id, const struct graph_copy *c, unsigned n,
			 bool to_device)
{
	struct gpu_recorder *rec;
	int r = 0;

	if (!n)
		return 0;
	rec = recorder(gr, id, &r);
	if (!rec)
		return r;
	for (unsigned k = 0; k < n; k++) {
		const struct gpu_alloc *a = c[k].node >= 0 ? gr->nodes[c[k].node].result : c[k].alloc;

		if (c[k].mean && (r = gpu_rec_host_mean(rec, c[k].host, c[k].offset, c[k].stride, c[k].mean, c[k].self,
							a)) < 0)
			return r;
		if (!c[k].mean)
			gpu_rec_host_copy(rec, a, c[k].host, c[k].offset, to_device);
	}
	return 0;
}

/* Record the copies of `c` (`n`) made after node `i`: result to host. */
static int record_copies_at(struct graph *gr, unsigned i, const struct graph_copy *c, unsigned n)
{
	struct gpu_recorder *rec = NULL;
	int r = 0;

	for (unsigned k = 0; k < n; k++) {
		const struct gpu_alloc *a = gr->nodes[i].result;
		struct gpu_binding src, dst;

		if (c[k].node != (int)i || !a || !a->size)
			continue;
		if (!rec && !(rec = recorder(gr, gr->nodes[i].device, &r)))
			return r;
		src = gpu_rec_bind(rec->g, a, 0, a->size, false);
		dst = (struct gpu_binding){ c[k].host, c[k].offset, a->size, true };
		gpu_rec_copy(rec, &src, &dst);
	}
	return 0;
}

/* Device memory in use on the graph's devices now, its part recorded. */
static void note_peak(struct graph *gr)
{
	uint64_t used = 0;

	for (uint32_t id = 0; id < gr->nrecs; id++)
		if (gr->recs[id].g)
			used += gr->recs[id].g->mem.used;
	if (used > gr->peak_bytes)
		gr->peak_bytes = used;
}

/* Record gr->after's commands after node `i`, on its device. */
static int record_after(struct graph *gr, unsigned i, int (*fn)(struct graph *, struct gpu_recorder *, void *))
{
	struct gpu_recorder *rec;
	int r = 0;

	rec = recorder(gr, gr->nodes[i].device, &r);
	return rec ? fn(gr, rec, gr->after_data) : r;
}

int graph_submit_part(struct graph *gr, unsigned first, unsigned last)
{
	const struct graph_copy *before = gr->copies_before, *after = gr->copies_after, *at = gr->copies_at;
	unsigned nbefore = gr->ncopies_before, nafter = gr->ncopies_after, nat = gr->ncopies_at;
	int (*after_fn)(struct graph *, struct gpu_recorder *, void *) = gr->after;
	int r = 0;

	gr->copies_before = gr->copies_after = gr->copies_at = NULL;
	gr->ncopies_before = gr->ncopies_after = gr->ncopies_at = 0;
	gr->after = NULL;
	if (gr->fuse && first == 0 && graph_fuse_plan(gr) < 0)
		return td_fail(&gr->call->err, TDP_INTERNAL, "out of memory");
	if (gr->plan_memory && graph_plan_part(gr, first, last) < 0)
		return td_fail(&gr->call->err, TDP_INTERNAL, "out of memory");
	for (unsigned i = first; i < last; i++)
		if (!gr->nodes[i].dead && alloc_result(gr, i) < 0)
			return -1;
	if (first < last && (r = record_copies(gr, gr->nodes[first].device, before, nbefore, true)) < 0) {
		abort_recordings(gr);
		return device_fail(gr, r);
	}
	for (unsigned i = first; i < last; i++) {
		struct node *nd = &gr->nodes[i];
		struct gpu_recorder *rec;

		nd->ctx.autocast = gr->autocast;
		if (nd->dead || nd->ctx.out.count == 0 || nd->aliased) {
			if ((nat && (r = record_copies_at(gr, i, at, nat)) < 0) ||
			    (after_fn && i == gr->after_node && (r = record_after(gr, i, after_fn)) < 0)) {
				abort_recordings(gr);
				return device_fail(gr, r);
			}
			continue;
		}
		rec = recorder(gr, nd->device, &r);
		if (!rec) {
			abort_recordings(gr);
			return device_fail(gr, r);
		}
		if (gr->plan_memory) {
			nd->ctx.scratch.pool = &gr->scratch_pool;
			gr->scratch_pool.used = 0;
		}
		if (nd->group ? graph_group_record(gr, i, first, last, rec) < 0 :
		    nd->fused ? graph_fuse_record(gr, i, rec) < 0 : nd->ctx.def->record(&nd->ctx, rec) < 0) {
			abort_recordings(gr);
			return graph_node_fail(gr, i, nd->ctx.err.code, nd->ctx.err.message);
		}
		if ((nat && (r = record_copies_at(gr, i, at, nat)) < 0) ||
		    (after_fn && i == gr->after_node && (r = record_after(gr, i, after_fn)) < 0)) {
			abort_recordings(gr);
			return device_fail(gr, r);
		}
	}
	if (first < last && (r = record_copies(gr, gr->nodes[first].device, after, nafter, false)) < 0) {
		abort_recordings(gr);
		return device_fail(gr, r);
	}
	note_peak(gr);
	/* Every device's part is submitted before any is waited for: they run at once. */
	for (uint32_t id = 0; id < gr->nrecs; id++) {
		struct gpu_recorder *rec = &gr->recs[id];

		if (!rec->g || !rec->cb)
			continue;
		r = gpu_rec_submit(rec);
		rec->cb = VK_NULL_HANDLE; /* submitted (or ended): only a wait is left */
		if (r < 0) {
			rec->g = NULL;
			abort_recordings(gr);
			graph_wait(gr);
			return device_fail(gr, r);
		}
	}
	return 0;
}

int graph_record_into(struct graph *gr, struct gpu_recorder *rec)
{
	for (unsigned i = 0; i < gr->n; i++) {
		struct node *nd = &gr->nodes[i];

		if (nd->device != rec->g->id)
			return graph_node_fail(gr, i, TDP_INTERNAL, "not on the batch's device");
		if (nd->dead)
			continue;
		if (alloc_result(gr, i) < 0)
			return -1;
		if (nd->ctx.out.count == 0 || nd->aliased)
			continue;
		nd->ctx.autocast = gr->autocast;
		if (nd->ctx.def->record(&nd->ctx, rec) < 0)
			return graph_node_fail(gr, i, nd->ctx.err.code, nd->ctx.err.message);
	}
	return 0;
}

int graph_wait(struct graph *gr)
{
	int err = 0;

	for (uint32_t id = 0; id < gr->nrecs; id++) {
		struct gpu_recorder *rec = &gr->recs[id];
		int r;

		if (!rec->g || rec->cb)
			continue;
		r = gpu_rec_wait(rec);
		if (r < 0 && !err)
			err = r;
		if (r == 0) {
			gr->gpu_ns += rec->gpu_ns;
			/* Charged to whoever asked (info's "users"). */
			usage_charge_gpu(&gr->call->d->usage, (uint32_t)gr->call->cred.uid, rec->gpu_ns);
		}
		gr->dispatches += rec->dispatches;
		rec->g = NULL;
	}
	/* request_timeout bounds every submission; kernel_timeout may be lower. */
	if (err == -ETIMEDOUT && !kernel_node_timeout_ns(gr))
		return td_fail(&gr->call->err, TDP_DEADLINE_EXCEEDED, "the graph ran past request_timeout "
				    "(%.1f s); the GPU is now marked lost and will be re-created",
				    (double)gr->call->d->cfg.request_timeout_ms / 1e3);
	if (err == -ETIMEDOUT)
		return kernel_node_timeout_fail(gr);
	return err < 0 ? device_fail(gr, err) : 0;
}

int graph_execute(struct graph *gr)
{
	if (graph_submit_part(gr, 0, gr->n) < 0)
		return -1;
	return graph_wait(gr);
}

/* One device's part completed: the graph is done when every part is. */
static void part_done(void *data)
{
	struct graph *gr = data;

	if (--gr->watching == 0)
		gr->done(gr, gr->done_data);
}

int graph_execute_async(struct graph *gr, void (*done)(struct graph *gr, void *data), void *data)
{
	return graph_submit_part_async(gr, 0, gr->n, done, data);
}

int graph_submit_part_async(struct graph *gr, unsigned first, unsigned last,
			    void (*done)(struct graph *gr, void *data), void *data)
{
	bool async = true;
	unsigned n = 0;

	gr->async = true;
	if (graph_submit_part(gr, first, last) < 0)
		return -1;
	for (uint32_t id = 0; id < gr->nrecs; id++)
		if (gr->recs[id].g) {
			async &= gr->recs[id].slot >= GPU_CMD_SYNC;
			n++;
		}
	/* A short submission is answered at once, without the completion
	 * thread's hand-off (tens of µs: docs/architecture.md, "Processes and
	 * threads"); the loop polls for at most GRAPH_SPIN_NS. */
	if (!async || n == 0 ||
	    gpu_recs_finished_within(gr->recs, gr->nrecs, gr->spin_ns ? gr->spin_ns : GRAPH_SPIN_NS))
		return graph_wait(gr) < 0 ? -1 : 1;
	gr->done = done;
	gr->done_data = data;
	gr->watching = n;
	/* Watching cannot fail on a device with a completion thread. */
	for (uint32_t id = 0; id < gr->nrecs; id++)
		if (gr->recs[id].g)
			gpu_rec_watch(&gr->recs[id], part_done, gr);
	return 0;
}

void graph_out_meta(const struct graph *gr, unsigned i, struct tensor *t)
{
	const struct node *nd = &gr->nodes[i];

	t->name_len = strlen(nd->out_name);
	memcpy(t->name, nd->out_name, t->name_len + 1);
	t->dtype = nd->ctx.out.dtype;
	t->rank = nd->ctx.out.rank;
	memcpy(t->shape, nd->ctx.out.shape, sizeof(t->shape));
	t->count = nd->ctx.out.count;
	t->bytes = nd->ctx.out.bytes;
}

/* Move node `i`'s result into the store under its out name. */
static struct tensor *graph_commit(struct graph *gr, unsigned i)
{
	struct node *nd = &gr->nodes[i];
	struct caller *call = gr->call;
	struct tensor *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	graph_out_meta(gr, i, t);
	/* For a new name (a replacement keeps the old owner, group and mode):
	 * its namespace's owner, or for a derived tensor made by someone else
	 * the owner, group and mode of what it derives from. */
	names_new_owner(&call->cred, t->name, &t->owner, &t->group);
	t->mode = TDP_MODE_PRIVATE;
	if (nd->out_like && nd->like_owner != call->cred.uid) {
		t->owner = nd->like_owner;
		t->group = nd->like_group;
		t->mode = nd->like_mode;
	}
	t->device = nd->device;
	t->created_ns = t->modified_ns = daemon_now_ns(CLOCK_REALTIME);
	t->alloc = nd->alloc;
	nd->alloc = (struct gpu_alloc){ 0 };
	/* Room and quota were checked just before (graph_commit_all). */
	if (store_put(call->d->store, t) < 0) {
		nd->alloc = t->alloc;
		free(t);
		return NULL;
	}
	return t;
}

int graph_commit_all(struct graph *gr)
{
	if (graph_check_outputs(gr) < 0)
		return -1;
	for (unsigned i = 0; i < gr->n; i++) {
		struct node *nd = &gr->nodes[i];

		if (!nd->has_out)
			continue;
		nd->committed = graph_commit(gr, i);
		if (!nd->committed)
			return td_fail(&gr->call->err, TDP_INTERNAL, "out of memory");
	}
	return 0;
}

int graph_read_result(struct graph *gr, unsigned i, void *dst)
{
	int r = gpu_download(gr->nodes[i].ctx.g, gr->nodes[i].result, dst);

	return r < 0 ? device_fail(gr, r) : 0;
}

void graph_free(struct graph *gr)
{
	/* Work still running reads and writes the memory freed below. */
	if (gr->recs) {
		abort_recordings(gr);
		for (uint32_t id = 0; id < gr->nrecs; id++)
			if (gr->recs[id].g)
				gpu_rec_wait(&gr->recs[id]);
	}
	free(gr->recs);
	gr->recs = NULL;
	for (unsigned i = 0; gr->nodes && i < gr->n; i++) {
		struct op_scratch *s = &gr->nodes[i].ctx.scratch;
		struct gpu_device *g = gr->nodes[i].ctx.g;

		if (!g)
			continue;
		if (!gr->nodes[i].planned)
			gpu_memory_free(g, &gr->nodes[i].alloc);
		for (unsigned k = 0; k < s->n; k++)
			if (!s->borrowed[k])
				gpu_memory_free(g, &s->allocs[k]);
	}
	graph_plan_free(gr);
	free(gr->nodes);
	free(gr->groups);
	gr->groups = NULL;
	gr->ngroups = 0;
	graph_fuse_free(gr);
}

void graph_mark_dead(struct graph *gr, unsigned from, unsigned to)
{
	/* Nodes read only earlier ones: one pass from the last decides. */
	bool *live = calloc(gr->n ? gr->n : 1, sizeof(*live));

	if (!live)
		return; /* nothing marked: everything runs, as without the pass */
	for (unsigned i = gr->n; i-- > 0;) {
		struct node *nd = &gr->nodes[i];

		nd->dead = false;
		if (i < from || i >= to || nd->has_out || nd->keep || nd->inline_out || nd->out_like)
			live[i] = true;
		if (!live[i]) {
			nd->dead = true;
			continue;
		}
		for (unsigned k = 0; k < nd->ctx.ninputs; k++)
			if (nd->src[k] >= 0)
				live[nd->src[k]] = true;
	}
	free(live);
}

/* Room for `want` nodes in all (the capacity only: nodes are zeroed as they
 * are taken). Returns 0 or -1. */
static int grow_nodes(struct graph *gr, unsigned want)
{
	struct node *p;

	if (want <= gr->cap)
		return 0;
	p = realloc(gr->nodes, want * sizeof(*p));
	if (!p)
		return -1;
	gr->nodes = p;
	gr->cap = want;
	return 0;
}

int graph_reserve(struct graph *gr, unsigned n)
{
	if (n > GRAPH_MAX_NODES)
		n = GRAPH_MAX_NODES;
	return grow_nodes(gr, n);
}

int graph_alloc_nodes(struct graph *gr, uint32_t n)
{
	if (n == 0 || gr->n + n > GRAPH_MAX_NODES)
		return td_fail(&gr->call->err, TDP_INVALID_ARGUMENT, "a graph has 1 to %d nodes, not %u",
				    GRAPH_MAX_NODES, gr->n + n);
	if (grow_nodes(gr, gr->n + n) < 0)
		return td_fail(&gr->call->err, TDP_INTERNAL, "out of memory");
	memset(gr->nodes + gr->n, 0, n * sizeof(*gr->nodes));
	gr->n += n;
	return 0;
}

int graph_infer_node(struct graph *gr, unsigned i)
{
	struct op_ctx *ctx = &gr->nodes[i].ctx;
	uint64_t max = gr->call->d->cfg.max_tensor_bytes;

	if (ctx->ninputs < ctx->def->min_inputs || ctx->ninputs > ctx->def->max_inputs) {
		if (ctx->def->min_inputs == ctx->def->max_inputs)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "takes %u inputs, got %u",
				       ctx->def->min_inputs, ctx->ninputs);
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "takes %u to %u inputs, got %u",
			       ctx->def->min_inputs, ctx->def->max_inputs, ctx->ninputs);
	}
	for (unsigned k = 0; ctx->def->attrs && ctx->def->attrs[k].name; k++)
		if (ctx->def->attrs[k].required && !ctx->attr[k].set)
			return op_fail(ctx, TDP_INVALID_ARGUMENT, "missing attr '%s'", ctx->def->attrs[k].name);
	if (ctx->def->infer(ctx) < 0)
		return -1;
	if (op_tensor_sizes(&ctx->out) < 0 || ctx->out.bytes > max)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "the result is larger than the limit of %llu bytes",
			       (unsigned long long)max);
	return 0;
}

struct op_tensor graph_stored_input(struct tensor *t)
{
	struct op_tensor v = {
		.dtype = t->dtype, .rank = t->rank, .count = t->count, .bytes = t->bytes,
		.alloc = &t->alloc,
	};

	memcpy(v.shape, t->shape, sizeof(t->shape));
	return v;
}

int graph_append(struct graph *gr, const struct op_def *def, const int *src,
		 struct tensor *const *stored, unsigned n, const struct op_attr_value *attrs)
{
	struct node *nd;
	unsigned i = gr->n;

	if (gr->n == gr->cap) {
		unsigned cap = gr->cap ? 2 * gr->cap : 64;

		if (cap > GRAPH_MAX_NODES)
			cap = GRAPH_MAX_NODES;
		if (gr->n == cap || grow_nodes(gr, cap) < 0)
			return -1;
	}
	gr->n++;
	nd = &gr->nodes[i];
	memset(nd, 0, sizeof(*nd));
	nd->ctx.def = def;
	nd->ctx.ninputs = n;
	if (n > OP_MAX_INPUTS) {
		op_fail(&nd->ctx, TDP_INTERNAL, "too many inputs");
		return -1;
	}
	for (unsigned k = 0; k < n; k++) {
		nd->src[k] = src[k];
		nd->stored[k] = src[k] >= 0 ? NULL : graph_stored(gr, stored[k]);
		if (src[k] < 0 && !nd->stored[k]) {
			op_fail(&nd->ctx, TDP_INTERNAL, "'%s' has no replica", stored[k]->name);
			return -1;
		}
		nd->ctx.in[k] = src[k] >= 0 ? gr->nodes[src[k]].ctx.out : graph_stored_input(nd->stored[k]);
	}
	if (graph_place_node(gr, i, -1) < 0)
		return -1;
	if (attrs)
		memcpy(nd->ctx.attr, attrs, sizeof(nd->ctx.attr));
	if (graph_infer_node(gr, i) < 0)
		return -1;
	return (int)i;
}


static bool set_attr(struct op_attr_value *v, enum op_attr_type type, const struct graph_attr *a)
{
	v->set = true;
	switch (type) {
	case ATTR_FLOAT:
		v->f = a->f;
		return true;
	case ATTR_INT:
		/* One int in ints: exact (a 64-bit seed is not a double). */
		if (a->ints && a->nints == 1) {
			v->i = a->ints[0];
			v->f = (double)v->i;
			return true;
		}
		/* Casting a double outside int64 (or NaN) is undefined behaviour. */
		if (!(a->f > -9.2e18 && a->f < 9.2e18))
			return false;
		v->f = a->f;
		v->i = (int64_t)a->f;
		return true;
	case ATTR_BOOL:
		v->i = a->b;
		return true;
	case ATTR_STR:
		snprintf(v->s, sizeof(v->s), "%s", a->s ? a->s : "");
		return true;
	case ATTR_INTS:
		if (a->nints > OP_MAX_INTS)
			return false;
		/* An empty list (a scalar's shape) may come as NULL. */
		if (a->nints)
			memcpy(v->ints, a->ints, a->nints * sizeof(*a->ints));
		v->nints = a->nints;
		return true;
	}
	return false;
}

int graph_emit(struct graph *gr, const char *op, const int *src, struct tensor *const *stored,
	       unsigned n, const struct graph_attr *attrs, unsigned nattrs, char *why, size_t why_len)
{
	const struct op_def *def = op_find(op, strlen(op));
	struct op_attr_value vals[OP_MAX_ATTRS];
	int r;

	if (!def)
		return tdp_errorf(why, why_len, -1, "op '%s' is missing", op);
	memset(vals, 0, sizeof(vals));
	for (unsigned a = 0; a < nattrs; a++) {
		unsigned k;

		for (k = 0; def->attrs && def->attrs[k].name; k++)
			if (!strcmp(def->attrs[k].name, attrs[a].name))
				break;
		if (!def->attrs || !def->attrs[k].name || !set_attr(&vals[k], def->attrs[k].type, &attrs[a]))
			return tdp_errorf(why, why_len, -1, "op '%s' has no attr '%s'", op, attrs[a].name);
	}
	r = graph_append(gr, def, src, stored, n, vals);
	if (r < 0) {
		struct node *bad = &gr->nodes[gr->n - 1];
		bool appended = gr->n > 0 && bad->ctx.def == def && bad->ctx.err.message[0];

		tdp_errorf(why, why_len, -1, "%s", appended ? bad->ctx.err.message : "the graph is too large");
		if (appended)
			gr->n--; /* drop the half-built node */
		return -1;
	}
	return r;
}
