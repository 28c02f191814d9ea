/* One training step: its spec (loss, parameters, optimizer), the graph of
 * forward, backward and update, running it and committing its results. */
#include "train/step.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd/autograd.h"
#include "base/clock.h"
#include "base/env_once.h"
#include "base/loop.h"
#include "daemon.h"
#include "devices.h"
#include "dtype.h"
#include "engine/forward.h"
#include "engine/graph_parse.h"
#include "engine/graph_core.h"
#include "engine/graph_epilogue.h"
#include "engine/graph_fuse.h"
#include "gpu/transfer.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/lookup.h"
#include "store/model.h"
#include "store/names.h"
#include "store/store.h"
#include "train/loss_scale.h"
#include "train/train_parallel.h"

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The index of attr `name` in `def`'s spec, or -1. */
static int attr_index(const struct op_def *def, const char *name, enum op_attr_type type)
{
	for (int k = 0; def->attrs && def->attrs[k].name; k++)
		if (!strcmp(def->attrs[k].name, name))
			return def->attrs[k].type == type ? k : -1;
	return -1;
}

/* Replace the `n` gradient nodes grads[] by views into one f32 vector: each
 * flattened, all concatenated (eight at a time) into node *ret_flat, then
 * sliced and reshaped back, so that whatever reads a gradient after
 * *ret_flat reads the vector (data parallel: train_parallel.h). */
static int emit_flat_grads(struct step_ctx *sc, struct tensor *const *params, int *grads, unsigned n,
			   int *ret_flat)
{
	char pshown[NAMES_SHOWN_MAX];
	int parts[MAX_PARAMS];
	unsigned np = n;
	int64_t off = 0;

	for (unsigned k = 0; k < n; k++) {
		int64_t count = (int64_t)params[k]->count;
		struct graph_attr a = { .name = "shape", .ints = &count, .nints = 1 };

		if (params[k]->dtype != TDP_DTYPE_F32)
			return td_fail(&sc->call->err, TDP_DTYPE_MISMATCH, "data-parallel training needs f32 "
					    "parameters; '%s' is %s", lookup_show(sc->call, params[k]->name, pshown),
					    tdp_dtype_name(params[k]->dtype));
		parts[k] = train_emit(sc, "reshape", &grads[k], NULL, 1, &a, 1);
		if (parts[k] < 0)
			return -1;
	}
	while (np > 1) {
		unsigned out = 0;

		for (unsigned k = 0; k < np; k += OP_MAX_INPUTS) {
			unsigned m = np - k < OP_MAX_INPUTS ? np - k : OP_MAX_INPUTS;

			parts[out] = m == 1 ? parts[k] : train_emit(sc, "concat", &parts[k], NULL, m, NULL, 0);
			if (parts[out++] < 0)
				return -1;
		}
		np = out;
	}
	/* Its own memory: the mean is written into it. */
	if (sc->gr->nodes[parts[0]].ctx.view && (parts[0] = train_emit(sc, "copy", &parts[0], NULL, 1, NULL, 0)) < 0)
		return -1;
	*ret_flat = parts[0];
	for (unsigned k = 0; k < n; k++) {
		int64_t end = off + (int64_t)params[k]->count, dims[TDP_MAX_RANK];
		struct graph_attr sl[2] = { { .name = "starts", .ints = &off, .nints = 1 },
					    { .name = "ends", .ints = &end, .nints = 1 } };
		struct graph_attr sh = { .name = "shape", .ints = dims, .nints = params[k]->rank };
		int piece = train_emit(sc, "slice", ret_flat, NULL, 1, sl, 2);

		for (unsigned d = 0; d < params[k]->rank; d++)
			dims[d] = (int64_t)params[k]->shape[d];
		if (piece < 0 || (grads[k] = train_emit(sc, "reshape", &piece, NULL, 1, &sh, 1)) < 0)
			return -1;
		off = end;
	}
	return 0;
}

/* optimizer.groups (checked to be an array by optimizer_parse): each
 * group's settings and which of the step's parameters it holds. */
static int parse_groups(struct caller *call, const msgpack_object *groups, struct train_spec *spec)
{
	for (uint32_t g = 0; groups && g < groups->via.array.size; g++) {
		const msgpack_object *go = &groups->via.array.ptr[g], *ps;

		if (optimizer_parse_group(call, go, &spec->opt, &spec->gopt[g]) < 0)
			return -1;
		ps = tdp_map_find(go, "params");
		if (!ps || ps->type != MSGPACK_OBJECT_ARRAY || ps->via.array.size == 0)
			return td_fail(&call->err, TDP_INVALID_ARGUMENT,
				       "optimizer.groups[%u].params must name 1 or more of the step's params", g);
		for (uint32_t j = 0; j < ps->via.array.size; j++) {
			const msgpack_object *n = &ps->via.array.ptr[j];
			char name[TDP_MAX_NAME_LEN + 1];
			unsigned k;

			if (n->type != MSGPACK_OBJECT_STR ||
			    names_qualify(call->cred.uid, n->via.str.ptr, n->via.str.size, name, NULL) < 0)
				return td_fail(&call->err, TDP_INVALID_ARGUMENT,
					       "optimizer.groups[%u].params[%u] must be a tensor name", g, j);
			for (k = 0; k < spec->np && strcmp(spec->names[k], name); k++)
				;
			if (k == spec->np)
				return td_fail(&call->err, TDP_INVALID_ARGUMENT, "optimizer.groups[%u].params[%u] "
					       "'%.*s' is not in params", g, j, (int)n->via.str.size, n->via.str.ptr);
			if (spec->group[k])
				return td_fail(&call->err, TDP_INVALID_ARGUMENT, "optimizer.groups[%u].params[%u] "
					       "'%.*s' is in two groups", g, j, (int)n->via.str.size, n->via.str.ptr);
			spec->group[k] = (uint8_t)(g + 1);
		}
	}
	spec->ngroups = groups ? groups->via.array.size : 0;
	return 0;
}
/* Node `node`, or a copy of it when it is stored already (under another
 * name); -1 when `node` is. */
static int stored_copy(struct step_ctx *sc, int node)
{
	if (node < 0 || !sc->gr->nodes[node].has_out)
		return node;
	return train_emit(sc, "copy", &node, NULL, 1, NULL, 0);
}

/* Scale the gradients by spec->grad_scale and, accumulating, add the
 * stored <param>.grad to them; <param>.grad then becomes the sum (without
 * apply) or zeros (the update consumes it). */
static int accumulate_grads(struct step_ctx *sc, const struct train_spec *spec, struct tensor *const *params,
			    int *grads)
{
	for (unsigned k = 0; k < spec->np; k++) {
		struct graph_attr scale = { .name = "scalar", .f = spec->grad_scale };
		char name[TDP_MAX_NAME_LEN + 32];
		struct tensor *stored;
		int ref, have, keep;

		if (spec->grad_scale != 1 && (grads[k] = train_emit(sc, "mul", &grads[k], NULL, 1, &scale, 1)) < 0)
			return -1;
		if (!spec->accumulate)
			continue;
		have = spec->fresh ? 0 : train_state_input(sc, params[k], ".grad", name, &ref, &stored);
		if (spec->fresh)
			snprintf(name, sizeof(name), "%s.grad", params[k]->name);
		if (have < 0)
			return -1;
		if (have) {
			int refs[2] = { -1, grads[k] };
			struct tensor *st[2] = { stored, NULL };

			if ((grads[k] = train_emit(sc, "add", refs, st, 2, NULL, 0)) < 0)
				return -1;
		}
		if (!spec->apply) {
			keep = stored_copy(sc, grads[k]);
		} else {
			int64_t dims[TDP_MAX_RANK];
			struct graph_attr z[2] = { { .name = "shape", .ints = dims, .nints = params[k]->rank },
						   { .name = "dtype", .s = tdp_dtype_name(params[k]->dtype) } };

			for (unsigned d = 0; d < params[k]->rank; d++)
				dims[d] = (int64_t)params[k]->shape[d];
			keep = train_emit(sc, "zeros", NULL, NULL, 0, z, 2);
		}
		if (keep < 0 || train_emit_derived_out(sc, keep, name, params[k]) < 0)
			return -1;
	}
	return 0;
}

/* Set batch_norm node `i`'s `training` attr. */
static void set_training(struct graph *gr, int i, bool train)
{
	struct op_ctx *ctx = &gr->nodes[i].ctx;
	int k = attr_index(ctx->def, "training", ATTR_BOOL);

	if (k >= 0) {
		ctx->attr[k].i = train;
		ctx->attr[k].set = true;
	}
}

int train_spec_precision(struct caller *call, const msgpack_object *precision, struct train_spec *spec)
{
	char why[160];

	if (precision && model_precision_parse(precision, &spec->precision, why, sizeof(why)) < 0)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "%s", why);
	return 0;
}

int train_spec_loss_scale(struct caller *call, const msgpack_object *loss_scale, struct train_spec *spec)
{
	char why[160];

	if (loss_scale && model_loss_scale_parse(loss_scale, &spec->loss_scale, why, sizeof(why)) < 0)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "%s", why);
	return 0;
}

void train_spec_model(struct train_spec *spec, const struct model *m)
{
	spec->precision = m->precision;
	spec->loss_scale = m->loss_scale;
	spec->nstate = m->nstate;
	memcpy(spec->state, m->state, m->nstate * sizeof(m->state[0]));
}

void train_model_mode(struct graph *gr, const struct model *m, bool train)
{
	for (unsigned k = 0; k < m->nstate; k++) {
		int i = forward_find(gr, m->state[k].node);

		if (i >= 0 && gr->nodes[i].ctx.def && !strcmp(gr->nodes[i].ctx.def->name, "batch_norm"))
			set_training(gr, i, train);
	}
}

/* running = (1 - m) * running + m * batch: the node storing it over the
 * running statistic `run` (torch's update). */
static int emit_running(struct step_ctx *sc, struct tensor *run, int batch, double m)
{
	struct graph_attr keep = { .name = "scalar", .f = 1 - m }, take = { .name = "scalar", .f = m };
	int r = -1, a, b;

	a = train_emit(sc, "mul", &r, &run, 1, &keep, 1);
	b = a < 0 ? -1 : train_emit(sc, "mul", &batch, NULL, 1, &take, 1);
	if (b < 0)
		return -1;
	{
		int refs[2] = { a, b };

		r = train_emit(sc, "add", refs, NULL, 2, NULL, 0);
	}
	return r < 0 ? -1 : train_emit_derived_out(sc, r, run->name, run);
}

/* The model's state nodes in train or eval mode; in training steps, the
 * update of their running statistics (batch mean, unbiased batch variance,
 * as torch's BatchNorm). */
static int emit_state(struct step_ctx *sc, const struct train_spec *spec, bool train)
{
	struct graph *gr = sc->gr;

	for (unsigned k = 0; k < spec->nstate; k++) {
		int i = forward_find(gr, spec->state[k].node), xref, mean, var;
		struct tensor *xt, *rm, *rv, *w;
		int64_t axes[TDP_MAX_RANK];
		unsigned rank, n = 0;

		if (i < 0 || !gr->nodes[i].ctx.def || strcmp(gr->nodes[i].ctx.def->name, "batch_norm"))
			return td_fail(&sc->call->err, TDP_INVALID_ARGUMENT, "state: '%s' is no batch_norm node",
				       spec->state[k].node);
		if (gr->nodes[i].ctx.ninputs < 3 || gr->nodes[i].src[1] >= 0 || gr->nodes[i].src[2] >= 0)
			return graph_node_fail(gr, (unsigned)i, TDP_INVALID_ARGUMENT, "a model's state node reads "
					       "its running_mean and running_var from stored tensors");
		set_training(gr, i, train);
		if (!train)
			continue;
		xref = gr->nodes[i].src[0];
		xt = gr->nodes[i].stored[0];
		rm = gr->nodes[i].stored[1];
		rv = gr->nodes[i].stored[2];
		rank = gr->nodes[i].ctx.in[0].rank;
		if (gr->nodes[i].ctx.in[0].count / gr->nodes[i].ctx.in[0].shape[1] < 2)
			return graph_node_fail(gr, (unsigned)i, TDP_INVALID_ARGUMENT,
					       "training mode needs more than 1 value per channel");
		/* The step stores over them: it must be allowed to. */
		if (lookup_tensor(sc->call, "running statistic", rm->name, ACCESS_READ | ACCESS_WRITE, &w) < 0 ||
		    lookup_tensor(sc->call, "running statistic", rv->name, ACCESS_READ | ACCESS_WRITE, &w) < 0)
			return -1;
		for (unsigned d = 0; d < rank; d++)
			if (d != 1)
				axes[n++] = d;
		{
			struct graph_attr am = { .name = "axis", .ints = axes, .nints = n };
			struct graph_attr av[2] = { { .name = "axis", .ints = axes, .nints = n },
						    { .name = "correction", .f = 1 } };

			mean = train_emit(sc, "mean", &xref, &xt, 1, &am, 1);
			var = mean < 0 ? -1 : train_emit(sc, "var", &xref, &xt, 1, av, 2);
		}
		if (var < 0 || emit_running(sc, rm, mean, spec->state[k].momentum) < 0 ||
		    emit_running(sc, rv, var, spec->state[k].momentum) < 0)
			return -1;
	}
	return 0;
}

int train_spec_parse(struct caller *call, const msgpack_object *loss, const msgpack_object *params,
		     const msgpack_object *opt, const msgpack_object *grads, struct train_spec *spec)
{
	memset(spec, 0, sizeof(*spec));
	spec->opt.kind = OPT_NONE;
	if (opt && optimizer_parse(call, opt, &spec->opt) < 0)
		return -1;
	if (tdp_obj_strcpy(loss, spec->loss, sizeof(spec->loss)) < 0)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "loss must be a node id");
	spec->np = params->via.array.size;
	if (spec->np == 0 || spec->np > MAX_PARAMS)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "params must name 1 to %d tensors", MAX_PARAMS);
	/* Parameter names become store keys here (names.h); derived names
	 * built from them are in the parameter's namespace. */
	for (unsigned k = 0; k < spec->np; k++)
		if (params->via.array.ptr[k].type != MSGPACK_OBJECT_STR ||
		    names_qualify(call->cred.uid, params->via.array.ptr[k].via.str.ptr,
				  params->via.array.ptr[k].via.str.size, spec->names[k], NULL) < 0)
			return td_fail(&call->err, TDP_INVALID_ARGUMENT, "params[%u] must be a tensor name", k);
	spec->grads = grads && grads->via.boolean;
	spec->fuse = -1;
	spec->apply = true;
	spec->grad_scale = 1;
	model_loss_scale_defaults(&spec->loss_scale);
	return opt ? parse_groups(call, tdp_map_find(opt, "groups"), spec) : 0;
}

/* The optimizer's updates of every parameter at `step` (one multi-tensor
 * group) where the step applies one, setting *ret_lr; with precision f16
 * (`ls`, else NULL) each kept only when every gradient is finite and the
 * scaler's state updated, or without an update the scale kept to be read
 * back. Returns 0, or -1 after td_fail. */
static int emit_updates(struct step_ctx *sc, const struct train_spec *spec, struct tensor *const *params,
			const int *grads, int64_t step, struct loss_scale_nodes *ls, double *ret_lr)
{
	struct graph *gr = sc->gr;
	unsigned from = gr->n;

	if (!spec->apply || spec->opt.kind == OPT_NONE) {
		/* Nothing applied: the scale stays (a copy: its own memory to
		 * read back, not a view of the state). */
		if ((ls->new_scale = train_emit(sc, "copy", &ls->scale, NULL, 1, NULL, 0)) < 0)
			return -1;
		gr->nodes[ls->new_scale].keep = true;
		return 0;
	}
	*ret_lr = optimizer_lr_at(&spec->opt, step);
	for (unsigned k = 0; k < spec->np; k++) {
		const struct optimizer *o = spec->group[k] ? &spec->gopt[spec->group[k] - 1] : &spec->opt;

		if (optimizer_emit_update(sc, o, params[k], grads[k], step, optimizer_lr_at(o, step)) < 0)
			return -1;
	}
	if (ls && loss_scale_gate(sc, ls, from) < 0)
		return -1;
	if (optimizer_group_updates(sc, from) < 0)
		return -1;
	return ls ? loss_scale_update(sc, &spec->loss_scale, ls, params[0]) : 0;
}

/* Build one step's graph (feeds, the client's nodes, and with `train` the
 * backward pass and the updates) without running anything. */
static atomic_int no_plan = -1;

int train_build_step(struct caller *call, const struct step_input *in, struct graph *gr, struct step_nodes *ret)
{
	const struct train_spec *spec = in->spec;
	int64_t step = in->step;
	bool train = in->train;
	struct step_ctx sc = { .call = call, .gr = gr };
	char pshown[NAMES_SHOWN_MAX];
	struct tensor *params[MAX_PARAMS];
	int grads[MAX_PARAMS];
	unsigned loss, first, backward_from = 0, backward_end = 0;
	/* precision f16: the loss scaled, the updates kept only when finite */
	bool scaled = train && spec->precision == TDP_DTYPE_F16;
	bool update = spec->apply && spec->opt.kind != OPT_NONE;
	struct loss_scale_nodes ls = { .root = -1, .inv = -1, .skip = -1, .found = -1, .new_scale = -1 };
	double lr = 0;
	int flat = -1;

	gr->call = call;
	/* Products autocast (ops/matmul.c); everything else stays f32. */
	gr->autocast = spec->precision;
	if (feeds_emit(gr, in->feeds) < 0)
		return -1;
	first = gr->n;
	if (graph_parse(gr, in->nodes, in->outputs) < 0)
		return -1;
	train_seed_graph(gr, first, spec->run_seed, step, train);
	if (spec->nstate && in->flat)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "a model with state trains on one device");
	if (emit_state(&sc, spec, train) < 0)
		return -1;
	for (loss = 0; loss < gr->n; loss++)
		if (gr->nodes[loss].id[0] && !strcmp(gr->nodes[loss].id, spec->loss))
			break;
	if (loss == gr->n)
		return td_fail(&call->err, TDP_INVALID_ARGUMENT, "loss names no node id");
	/* Training steps fuse elementwise chains; the loss is read back after the
	 * run. Evaluation reads metric nodes too, so it runs unfused. */
	gr->fuse = train && (spec->fuse < 0 ? graph_fuse_default(call->d->gpus[0]) : spec->fuse);
	gr->nodes[loss].keep = true;
	/* A training step's intermediates share a planned arena (graph_plan.h). */
	gr->plan_memory = train && !ENV_ONCE(no_plan, getenv("TENSORD_NO_MEMORY_PLAN") != NULL);
	/* Matmul epilogues (bias, relu) before autograd, so that the backward
	 * differentiates the fused nodes; `fuse: false` turns them off too. */
	if (train && spec->fuse != 0)
		graph_fuse_epilogues(gr, first);
	if (train) {
		for (unsigned k = 0; k < spec->np; k++) {
			/* A step reads its parameters and stores their updates over them. */
			if (lookup_tensor(call, "parameter", spec->names[k], ACCESS_READ | ACCESS_WRITE,
					  &params[k]) < 0)
				return -1;
			if (!op_dtype_is_float(params[k]->dtype))
				return td_fail(&call->err, TDP_DTYPE_MISMATCH, "parameter '%s' is %s, not a float tensor",
						    lookup_show(call, spec->names[k], pshown), tdp_dtype_name(params[k]->dtype));
			for (unsigned j = 0; j < k; j++)
				if (params[j] == params[k])
					return td_fail(&call->err, TDP_INVALID_ARGUMENT, "parameter '%s' is listed twice",
							    lookup_show(call, spec->names[k], pshown));
			/* A replica's graph reads (and autograd looks for) its own copy. */
			if (!graph_stored(gr, params[k]))
				return td_fail(&call->err, TDP_INTERNAL, "parameter '%s' has no replica",
						    lookup_show(call, spec->names[k], pshown));
			params[k] = graph_stored(gr, params[k]);
		}
		for (unsigned i = 0; i < gr->n; i++)
			for (unsigned k = 0; k < spec->np; k++)
				if (gr->nodes[i].has_out && !strcmp(gr->nodes[i].out_name, spec->names[k]))
					return graph_node_fail(gr, i, TDP_INVALID_ARGUMENT,
							       "stores over a parameter the step updates");
		if (scaled && in->flat)
			return td_fail(&call->err, TDP_INVALID_ARGUMENT, "precision \"f16\" trains on one device");
		if (scaled && loss_scale_begin(&sc, &spec->loss_scale, params[0], loss, &ls) < 0)
			return -1;
		unsigned fwd = gr->n;

		if (autograd_build(gr, scaled ? (unsigned)ls.root : loss, params, spec->np, grads) < 0)
			return -1;
		backward_end = gr->n;
		backward_from = fwd;
		/* relu's backward into the products that make its gradient */
		if (spec->fuse != 0)
			graph_fuse_backward_masks(gr, fwd);
		/* precision f16: the gradients of the scaled loss times 1/scale;
		 * where only the optimizer reads them, inside its kernel. */
		if (scaled && loss_scale_unscale(&sc, &ls, grads, spec->np,
						 update && !(spec->opt.clip_norm > 0) && !spec->grads &&
						 !spec->accumulate && spec->grad_scale == 1) < 0)
			return -1;
		/* Data parallel: the gradients meet in one vector, averaged across
		 * devices between the two halves of the step (train_parallel.h). */
		if (in->flat && emit_flat_grads(&sc, params, grads, spec->np, &flat) < 0)
			return -1;
		if (accumulate_grads(&sc, spec, params, grads) < 0)
			return -1;
		/* Before clipping: a NaN or inf anywhere skips the update. */
		if (scaled && update && loss_scale_check(&sc, &ls, grads, spec->np) < 0)
			return -1;
		if (update && spec->opt.clip_norm > 0 &&
		    optimizer_emit_clip(&sc, spec->opt.clip_norm, grads, spec->np) < 0)
			return -1;
		for (unsigned k = 0; spec->grads && !spec->accumulate && k < spec->np; k++) {
			char name[TDP_MAX_NAME_LEN + 32];

			int node = stored_copy(&sc, grads[k]);

			snprintf(name, sizeof(name), "%s.grad", params[k]->name);
			if (node < 0 || train_emit_derived_out(&sc, node, name, params[k]) < 0)
				return -1;
		}
		if ((update || scaled) && emit_updates(&sc, spec, params, grads, step, scaled ? &ls : NULL, &lr) < 0)
			return -1;
	}
	/* The gradients of inputs that are no parameter are never computed. */
	graph_mark_dead(gr, backward_from, backward_end);
	*ret = (struct step_nodes){ .loss = loss, .flat = flat, .lr = lr, .found = ls.found, .scale = ls.new_scale };
	return 0;
}

/* build_step, then run the graph and read the loss. Nothing is committed:
 * the caller stores results (graph_commit) and frees the graph. */
int train_run_step(struct caller *call, const struct step_input *in, struct graph *gr, struct step_nodes *ret,
		   double *ret_loss_value)
{
	struct step_nodes sn;
	double v;

	if (train_build_step(call, in, gr, &sn) < 0 || graph_check_outputs(gr) < 0 || graph_execute(gr) < 0 ||
	    forward_read_scalar(call, gr, sn.loss, &v) < 0)
		return -1;
	if (in->train && !isfinite(v))
		return td_fail(&call->err, TDP_FAILED_PRECONDITION,
				    "the loss is %s at step %lld; parameters and state are unchanged",
				    isnan(v) ? "NaN" : "infinite", (long long)in->step);
	*ret = sn;
	*ret_loss_value = v;
	return 0;
}

int train_model_check(struct caller *call, const struct model *m)
{
	struct graph gr = { .call = call };
	struct train_spec *spec = malloc(sizeof(*spec));
	struct step_nodes sn;
	int r = -1;

	if (!spec)
		return td_fail(&call->err, TDP_INTERNAL, "out of memory");
	if (train_spec_parse(call, m->loss_obj, m->params_obj, m->optimizer, NULL, spec) < 0)
		goto out;
	train_spec_model(spec, m);
	/* Each input is a zero placeholder of its example dtype and shape. */
	for (unsigned k = 0; k < m->ninputs; k++) {
		const struct model_input *in = &m->inputs[k];
		struct tensor *t = in->has_spec ? NULL : lookup_readable(call, in->name, strlen(in->name));
		int64_t dims[TDP_MAX_RANK] = { 0 };
		struct graph_attr z[2] = { { .name = "shape", .ints = dims },
					   { .name = "dtype", .s = tdp_dtype_name(in->has_spec ? in->dtype : 0) } };
		char why[300];
		int node;

		if (!in->has_spec && !t) {
			td_fail(&call->err, TDP_INVALID_ARGUMENT,
				     "input '%s' is no stored tensor to check the graph with; "
				     "declare it as {\"name\", \"dtype\", \"shape\"}", in->name);
			goto out;
		}
		z[0].nints = in->has_spec ? in->rank : t->rank;
		for (unsigned d = 0; d < z[0].nints; d++)
			dims[d] = (int64_t)(in->has_spec ? in->shape[d] : t->shape[d]);
		if (t)
			z[1].s = tdp_dtype_name(t->dtype);
		node = graph_emit(&gr, "zeros", NULL, NULL, 0, z, 2, why, sizeof(why));
		if (node < 0) {
			td_fail(&call->err, TDP_INVALID_ARGUMENT, "input '%s': %s", in->name, why);
			goto out;
		}
		snprintf(gr.nodes[node].id, sizeof(gr.nodes[node].id), "%s", in->name);
	}
	if (train_build_step(call, &(struct step_input){ .spec = spec, .nodes = m->nodes, .step = 1, .train = true },
			     &gr, &sn) < 0)
		goto out;
	for (unsigned k = 0; k < m->noutputs; k++)
		if (forward_find(&gr, m->outputs[k]) < 0) {
			td_fail(&call->err, TDP_INVALID_ARGUMENT, "outputs[%u] '%s' names no node", k, m->outputs[k]);
			goto out;
		}
	r = 0;
out:
	graph_free(&gr);
	free(spec);
	return r;
}

void train_seed_graph(struct graph *gr, unsigned from, uint64_t run_seed, int64_t step, bool train)
{
	for (unsigned i = from; i < gr->n; i++) {
		struct op_ctx *ctx = &gr->nodes[i].ctx;
		int k;

		if (!ctx->def)
			continue;
		if (train && (k = attr_index(ctx->def, "seed", ATTR_INT)) >= 0) {
			uint64_t s = (uint64_t)ctx->attr[k].i;

			s ^= mix64(run_seed + 0x9e3779b97f4a7c15ull * (uint64_t)step);
			ctx->attr[k].i = (int64_t)mix64(s);
			ctx->attr[k].f = (double)ctx->attr[k].i;
		}
		if (!train && !strcmp(ctx->def->name, "dropout") && (k = attr_index(ctx->def, "p", ATTR_FLOAT)) >= 0) {
			ctx->attr[k].f = 0;
			ctx->attr[k].set = true;
		}
	}
}


