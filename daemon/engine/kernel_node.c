/* Custom kernels as graph.run nodes (kernel_node.h).
 *
 * Reading: every binding is an input, resolved like an op's (an earlier
 * node's result, else a stored tensor the caller may read). Writing: a
 * binding the shader may write gets its own memory, filled with a copy of its
 * input recorded just before the dispatch (the recorder orders both), so the
 * kernel writes in place on that copy. The copy at the `result` binding is
 * the node's result, stored or returned or read by later nodes like any
 * other; copies at other writable bindings are scratch, freed with the
 * request. Stored tensors therefore change only through `out`, when the
 * whole graph succeeded. */
#include "engine/kernel_node.h"

#include <stdio.h>
#include <string.h>

#include "daemon.h"
#include "engine/graph_core.h"
#include "gpu/device.h"
#include "kernels/kernel.h"
#include "name.h"
#include "pack.h"
#include "status.h"
#include "store/lookup.h"
#include "store/names.h"

/* What kernel_node_build leaves in ctx.priv for kn_record: its notes are
 * op_priv's `kernel` (ops/op_priv.h). */
_Static_assert(SPV_MAX_PUSH_BYTES <= sizeof(((struct kernel_node_notes *)0)->push),
	       "a kernel's push constants fit its node's notes");
_Static_assert(SPV_MAX_BINDINGS <= OP_MAX_INPUTS, "every binding can be an input");

static struct kernel_node_notes *priv_of(struct op_ctx *ctx)
{
	return &ctx->priv.kernel;
}

/* The result is the input bound at `result`, as the kernel leaves it. */
static int kn_infer(struct op_ctx *ctx)
{
	ctx->out = ctx->in[priv_of(ctx)->result];
	ctx->out.alloc = NULL;
	return 0;
}

static int kn_record(struct op_ctx *ctx, struct gpu_recorder *rec)
{
	struct kernel_node_notes *p = priv_of(ctx);
	struct kernel *k = p->k;
	uint64_t align = ctx->g->props.limits.minStorageBufferOffsetAlignment, total = 0;
	uint64_t off[SPV_MAX_BINDINGS] = { 0 };
	struct gpu_binding b[SPV_MAX_BINDINGS];
	struct gpu_alloc *scratch = NULL;
	int r;

	if (align < 16)
		align = 16;
	/* One scratch allocation holds the copies that are not the result. */
	for (unsigned i = 0; i < ctx->ninputs; i++) {
		if (k->info.bindings[i].readonly || i == p->result || !ctx->in[i].bytes)
			continue;
		off[i] = total;
		total += (ctx->in[i].bytes + align - 1) / align * align;
	}
	if (total && op_scratch_alloc(ctx, total, &scratch) < 0)
		return -1;
	for (unsigned i = 0; i < ctx->ninputs; i++) {
		const struct op_tensor *in = &ctx->in[i];
		struct gpu_binding src;

		src = gpu_rec_bind(ctx->g, in->alloc, 0, in->bytes, false);
		if (k->info.bindings[i].readonly || !in->bytes) {
			b[i] = src;
			continue;
		}
		b[i] = i == p->result ? gpu_rec_bind(ctx->g, ctx->out.alloc, 0, in->bytes, true)
				      : gpu_rec_bind(ctx->g, scratch, off[i], in->bytes, true);
		gpu_rec_copy(rec, &src, &b[i]);
	}
	r = kernel_record(rec, k, b, p->push, p->groups);
	if (r < 0)
		return op_fail(ctx, TDP_INTERNAL, "recording kernel '%s' failed (%s)", k->name,
			       strerror(-r));
	return 0;
}

const struct op_def kernel_node_op = {
	.name = "kernel",
	.min_inputs = 0,
	.max_inputs = SPV_MAX_BINDINGS,
	.infer = kn_infer,
	.record = kn_record,
};

/* The binding holding the result: `result` when given, else the last one the
 * kernel may write. */
static int pick_result(struct op_ctx *ctx, const struct kernel *k, const msgpack_object *result)
{
	const struct spv_info *in = &k->info;

	if (result) {
		uint64_t r = result->via.u64;

		if (r >= in->nbindings)
			return op_fail(ctx, TDP_INVALID_ARGUMENT,
				       "result: binding %llu, but kernel '%s' binds %u", (unsigned long long)r,
				       k->name, in->nbindings);
		if (in->bindings[r].readonly)
			return op_fail(ctx, TDP_INVALID_ARGUMENT,
				       "result: binding %llu of kernel '%s' is readonly, so it holds no result",
				       (unsigned long long)r, k->name);
		priv_of(ctx)->result = (uint32_t)r;
		return 0;
	}
	for (unsigned i = in->nbindings; i-- > 0;)
		if (!in->bindings[i].readonly) {
			priv_of(ctx)->result = i;
			return 0;
		}
	return op_fail(ctx, TDP_INVALID_ARGUMENT,
		       "kernel '%s' writes none of its bindings, so as a node it has no result", k->name);
}

int kernel_node_build(struct graph *gr, unsigned i, const msgpack_object *kernel,
		      const msgpack_object *push, const msgpack_object *groups,
		      const msgpack_object *result)
{
	struct node *nd = &gr->nodes[i];
	struct op_ctx *ctx = &nd->ctx;
	struct caller *call = gr->call;
	struct kernel_node_notes *p = priv_of(ctx);
	char name[TDP_MAX_NAME_LEN + 1], why[sizeof(ctx->err.message)], shown[NAMES_SHOWN_MAX];
	struct kernel *k;
	int code;

	memset(p, 0, sizeof(*p));
	if (tdp_obj_strcpy(kernel, name, sizeof(name)) < 0 || !tdp_name_valid(name, strlen(name)))
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "kernel must be a kernel name");
	k = kernel_find(call->d, call->cred.uid, name);
	if (!k)
		return op_fail(ctx, TDP_NOT_FOUND, "uid %u has no kernel named '%s'",
			       (unsigned)call->cred.uid, name);
	if (!groups)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "missing groups (workgroups in x, y, z)");
	if ((code = kernel_check_count(k, ctx->ninputs, why, sizeof(why))) ||
	    (code = kernel_read_groups(ctx->g, groups, "groups", p->groups, why, sizeof(why))) ||
	    (push && (code = kernel_read_push(k, push, p->push, why, sizeof(why)))))
		return op_fail(ctx, code, "%s", why);
	if (pick_result(ctx, k, result) < 0)
		return -1;
	for (unsigned b = 0; b < ctx->ninputs; b++) {
		const char *tname = nd->src[b] >= 0 ? gr->nodes[nd->src[b]].id
						      : lookup_show(call, nd->stored[b]->name, shown);
		char what[32];

		snprintf(what, sizeof(what), "input %u", b);
		code = kernel_check_tensor(ctx->g, k, b, what, tname, ctx->in[b].bytes, why,
					   sizeof(why));
		if (code)
			return op_fail(ctx, code, "%s", why);
		/* As kernel.run: a stored tensor bound writable needs write access,
		 * though here the kernel writes a copy. */
		if (nd->src[b] < 0 && !k->info.bindings[b].readonly) {
			struct tensor *t;

			code = lookup_tensor_why(call, what, nd->stored[b]->name, ACCESS_READ | ACCESS_WRITE, &t, why,
						 sizeof(why));
			if (code)
				return op_fail(ctx, code, "%s (binding %u of kernel '%s' writes)", why, b,
					       k->name);
		}
	}
	p->k = k;
	ctx->def = &kernel_node_op;
	return graph_infer_node(gr, i);
}

uint64_t kernel_node_timeout_ns(const struct graph *gr)
{
	for (unsigned i = 0; i < gr->n; i++)
		if (gr->nodes[i].ctx.def == &kernel_node_op)
			return gr->call->d->cfg.kernel_timeout_ms * 1000000ull;
	return 0;
}

int kernel_node_timeout_fail(struct graph *gr)
{
	char what[TDP_MAX_NAME_LEN + 128];
	unsigned i;

	for (i = 0; i < gr->n && gr->nodes[i].ctx.def != &kernel_node_op; i++)
		;
	if (i == gr->n)
		return td_fail(&gr->call->err, TDP_DEADLINE_EXCEEDED, "the graph ran past its time limit; "
				    "the GPU is now marked lost");
	snprintf(what, sizeof(what), "the graph, with kernel '%s', ran past kernel_timeout (%.1f s); "
		 "the GPU is now marked lost", priv_of(&gr->nodes[i].ctx)->k->name,
		 (double)gr->call->d->cfg.kernel_timeout_ms / 1e3);
	return graph_node_fail(gr, i, TDP_DEADLINE_EXCEEDED, what);
}
