/* The reverse-mode engine: walks the forward nodes from the loss back,
 * calls each op's backward function, and accumulates gradients. The helpers
 * of ops/grad.h that backward functions use live here too. */
#include "autograd/autograd.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "ops/grad.h"
#include "status.h"
#include "store/names.h"

#define MAX_STORED 1024

struct autograd {
	struct graph *gr;
	unsigned nfwd;             /* forward nodes */
	int *grad;                 /* per forward node: gradient ref or AG_NONE */
	bool *needs;               /* per forward node: depends on a parameter */
	struct tensor *stored[MAX_STORED]; /* stored tensors named by refs -2, -3, ... */
	unsigned nstored;
	unsigned current;          /* the forward node being differentiated */
	struct td_error err;       /* the first failure (ag_fail), reported for node `current` */
};

static int stored_ref(struct autograd *ag, struct tensor *t)
{
	for (unsigned i = 0; i < ag->nstored; i++)
		if (ag->stored[i] == t)
			return -(int)i - 2;
	if (ag->nstored == MAX_STORED)
		return -1;
	ag->stored[ag->nstored] = t;
	return -(int)(ag->nstored++) - 2;
}

int ag_fail(struct autograd *ag, unsigned node, const char *fmt, ...)
{
	va_list ap;

	if (td_failed(&ag->err))
		return -1;
	va_start(ap, fmt);
	td_vfail(&ag->err, TDP_INVALID_ARGUMENT, fmt, ap);
	va_end(ap);
	ag->current = node;
	return -1;
}

int ag_emit(struct autograd *ag, const char *op, const int *inputs, unsigned n,
	    const struct graph_attr *attrs, unsigned nattrs)
{
	int src[OP_MAX_INPUTS];
	struct tensor *stored[OP_MAX_INPUTS];
	char why[300];
	int r;

	if (td_failed(&ag->err))
		return -1;
	if (n > OP_MAX_INPUTS)
		return ag_fail(ag, ag->current, "backward: too many operands for '%s'", op);
	for (unsigned k = 0; k < n; k++) {
		if (inputs[k] == -1 || inputs[k] == AG_NONE)
			return ag_fail(ag, ag->current, "backward: a missing operand for '%s'", op);
		src[k] = inputs[k] >= 0 ? inputs[k] : -1;
		stored[k] = inputs[k] >= 0 ? NULL : ag->stored[-inputs[k] - 2];
	}
	r = graph_emit(ag->gr, op, src, stored, n, attrs, nattrs, why, sizeof(why));
	if (r < 0) {
		ag_fail(ag, ag->current, "backward (%s): %s", op, why);
		ag->err.code = TDP_RESOURCE_EXHAUSTED;
		return -1;
	}
	return r;
}

int ag_op1(struct autograd *ag, const char *op, int a)
{
	return ag_emit(ag, op, &a, 1, NULL, 0);
}

int ag_op2(struct autograd *ag, const char *op, int a, int b)
{
	int in[2] = { a, b };

	return ag_emit(ag, op, in, 2, NULL, 0);
}

int ag_scalar(struct autograd *ag, const char *op, int x, double scalar)
{
	struct graph_attr a = { .name = "scalar", .f = scalar };

	return ag_emit(ag, op, &x, 1, &a, 1);
}

int ag_input(struct autograd *ag, unsigned node, unsigned k)
{
	struct node *nd = &ag->gr->nodes[node];
	struct tensor *t;

	if (nd->src[k] >= 0)
		return nd->src[k];
	t = nd->stored[k];
	if (!t)
		return ag_fail(ag, node, "backward: input %u is no stored tensor", k);
	return stored_ref(ag, t);
}

unsigned ag_ninputs(struct autograd *ag, unsigned node)
{
	return ag->gr->nodes[node].ctx.ninputs;
}

int ag_output(struct autograd *ag, unsigned node)
{
	(void)ag;
	return (int)node;
}

struct op_tensor ag_tensor(struct autograd *ag, int ref)
{
	if (ref == -1 || ref == AG_NONE)
		return (struct op_tensor){ .dtype = -1 };
	if (ref >= 0)
		return ag->gr->nodes[ref].ctx.out;
	return graph_stored_input(ag->stored[-ref - 2]);
}

const char *ag_op_name(struct autograd *ag, unsigned node)
{
	return ag->gr->nodes[node].ctx.def->name;
}

const struct op_attr_value *ag_attr_of(struct autograd *ag, unsigned node, const char *name)
{
	return op_attr(&ag->gr->nodes[node].ctx, name);
}

int ag_reshape(struct autograd *ag, int x, unsigned rank, const uint64_t *shape)
{
	int64_t dims[TDP_MAX_RANK];
	struct graph_attr a = { .name = "shape", .ints = dims, .nints = rank };

	for (unsigned d = 0; d < rank; d++)
		dims[d] = (int64_t)shape[d];
	return ag_emit(ag, "reshape", &x, 1, &a, 1);
}

int ag_unbroadcast(struct autograd *ag, int grad, int like)
{
	struct op_tensor g = ag_tensor(ag, grad), l = ag_tensor(ag, like);
	int64_t axes[TDP_MAX_RANK];
	unsigned naxes = 0, lead = g.rank - l.rank;
	struct graph_attr a[2] = {
		{ .name = "axis", .ints = axes },
		{ .name = "keepdims", .b = true },
	};
	int r;

	if (g.rank < l.rank)
		return ag_fail(ag, ag->current, "backward: a gradient of lower rank than its operand");
	for (unsigned d = 0; d < g.rank; d++)
		if (d < lead || (l.shape[d - lead] == 1 && g.shape[d] != 1))
			axes[naxes++] = d;
	if (naxes == 0 && g.rank == l.rank)
		return grad;
	r = grad;
	if (naxes) {
		a[0].nints = naxes;
		r = ag_emit(ag, "sum", &r, 1, a, 2);
		if (r < 0)
			return -1;
	}
	return ag_reshape(ag, r, l.rank, l.shape);
}

int ag_mask_like(struct autograd *ag, int mask, int like)
{
	struct graph_attr a = { .name = "dtype", .s = tdp_dtype_name(ag_tensor(ag, like).dtype) };

	return ag_emit(ag, "cast", &mask, 1, &a, 1);
}

int ag_broadcast_to(struct autograd *ag, int x, int like)
{
	struct op_tensor l = ag_tensor(ag, like);
	int64_t dims[TDP_MAX_RANK];
	struct graph_attr a[2] = {
		{ .name = "shape", .ints = dims, .nints = l.rank },
		{ .name = "dtype", .s = tdp_dtype_name(ag_tensor(ag, x).dtype) },
	};
	int ones;

	for (unsigned d = 0; d < l.rank; d++)
		dims[d] = (int64_t)l.shape[d];
	ones = ag_emit(ag, "ones", NULL, 0, a, 2);
	if (ones < 0)
		return -1;
	return ag_op2(ag, "mul", x, ones);
}

int ag_sum_keep(struct autograd *ag, int x, int64_t axis)
{
	struct graph_attr a[2] = {
		{ .name = "axis", .ints = &axis, .nints = 1 },
		{ .name = "keepdims", .b = true },
	};

	return ag_emit(ag, "sum", &x, 1, a, 2);
}

int ag_reduce(struct autograd *ag, const char *op, int x, const int64_t *axes, unsigned naxes,
	      bool keepdims)
{
	static const int64_t none[1];
	struct graph_attr a[2] = {
		{ .name = "keepdims", .b = keepdims },
		{ .name = "axis", .ints = axes ? axes : none, .nints = axes ? naxes : 0 },
	};

	return ag_emit(ag, op, &x, 1, a, axes ? 2 : 1);
}

int ag_zeros_like(struct autograd *ag, int like)
{
	struct op_tensor l = ag_tensor(ag, like);
	int64_t dims[TDP_MAX_RANK] = { 0 };
	struct graph_attr a[2] = {
		{ .name = "shape", .ints = dims, .nints = l.rank },
		{ .name = "dtype", .s = tdp_dtype_name(l.dtype) },
	};

	for (unsigned d = 0; d < l.rank; d++)
		dims[d] = (int64_t)l.shape[d];
	return ag_emit(ag, "zeros", NULL, 0, a, 2);
}

/* Add `g` into the gradient slot `*slot`. */
static int accumulate(struct autograd *ag, int *slot, int g)
{
	if (*slot == AG_NONE) {
		*slot = g;
		return 0;
	}
	*slot = ag_op2(ag, "add", *slot, g);
	return *slot < 0 ? -1 : 0;
}

static int param_index(struct autograd *ag, unsigned i, unsigned k, struct tensor *const *params,
		       unsigned nparams)
{
	for (unsigned p = 0; p < nparams; p++)
		if (ag->gr->nodes[i].src[k] < 0 && ag->gr->nodes[i].stored[k] == params[p])
			return (int)p;
	return -1;
}

static int report(struct autograd *ag)
{
	return graph_node_fail(ag->gr, ag->current, ag->err.code, ag->err.message);
}

int autograd_build(struct graph *gr, unsigned loss, struct tensor *const *params,
		   unsigned nparams, int *ret_grads)
{
	struct autograd *ag = calloc(1, sizeof(*ag));
	int *pgrad = NULL, r = -1;
	struct op_tensor lt;

	if (!ag)
		return td_fail(&gr->call->err, TDP_INTERNAL, "out of memory");
	ag->gr = gr;
	ag->nfwd = gr->n;
	ag->grad = malloc(gr->n * sizeof(*ag->grad));
	ag->needs = calloc(gr->n, sizeof(*ag->needs));
	pgrad = malloc((nparams ? nparams : 1) * sizeof(*pgrad));
	if (!ag->grad || !ag->needs || !pgrad) {
		td_fail(&gr->call->err, TDP_INTERNAL, "out of memory");
		goto out;
	}
	for (unsigned p = 0; p < nparams; p++)
		pgrad[p] = AG_NONE;
	for (unsigned i = 0; i < ag->nfwd; i++) {
		ag->grad[i] = AG_NONE;
		for (unsigned k = 0; k < gr->nodes[i].ctx.ninputs; k++) {
			int s = gr->nodes[i].src[k];

			if ((s >= 0 && ag->needs[s]) || param_index(ag, i, k, params, nparams) >= 0)
				ag->needs[i] = true;
		}
		/* Integer and u8 results (comparisons, argmax, indices) carry no
		 * gradient: what is computed from them is a constant. */
		if (!op_dtype_is_float(gr->nodes[i].ctx.out.dtype))
			ag->needs[i] = false;
	}
	lt = gr->nodes[loss].ctx.out;
	ag->current = loss;
	if (lt.count != 1 || !op_dtype_is_float(lt.dtype)) {
		ag_fail(ag, loss, "the loss must be a floating scalar, not %s of %llu elements",
			tdp_dtype_name(lt.dtype), (unsigned long long)lt.count);
		r = report(ag);
		goto out;
	}
	if (!ag->needs[loss]) {
		ag_fail(ag, loss, "the loss does not depend on any parameter");
		r = report(ag);
		goto out;
	}
	{
		struct graph_attr a[2] = {
			{ .name = "shape", .nints = 0, .ints = NULL },
			{ .name = "dtype", .s = tdp_dtype_name(lt.dtype) },
		};
		int64_t dims[TDP_MAX_RANK];

		for (unsigned d = 0; d < lt.rank; d++)
			dims[d] = 1;
		a[0].ints = dims;
		a[0].nints = lt.rank;
		ag->grad[loss] = ag_emit(ag, "ones", NULL, 0, a, 2);
	}
	for (unsigned i = loss + 1; i-- > 0 && !td_failed(&ag->err);) {
		struct node *nd = &gr->nodes[i];
		int grads[OP_MAX_INPUTS];
		op_backward_fn bw;
		unsigned nin = nd->ctx.ninputs;

		if (!ag->needs[i] || ag->grad[i] == AG_NONE)
			continue;
		ag->current = i;
		bw = op_backward_find(nd->ctx.def->name);
		if (!bw) {
			ag_fail(ag, i, "%s is not differentiable, but a parameter's gradient flows through it",
				nd->ctx.def->name);
			break;
		}
		for (unsigned k = 0; k < nin; k++)
			grads[k] = AG_NONE;
		if (bw(ag, i, ag->grad[i], grads) < 0)
			break;
		for (unsigned k = 0; k < nin && !td_failed(&ag->err); k++) {
			int s = gr->nodes[i].src[k], p = param_index(ag, i, k, params, nparams), g;

			if (grads[k] == AG_NONE || (s >= 0 ? !ag->needs[s] : p < 0))
				continue;
			g = ag_unbroadcast(ag, grads[k], ag_input(ag, i, k));
			if (g < 0)
				break;
			if (accumulate(ag, s >= 0 ? &ag->grad[s] : &pgrad[p], g) < 0)
				break;
		}
	}
	if (td_failed(&ag->err)) {
		r = report(ag);
		goto out;
	}
	for (unsigned p = 0; p < nparams; p++) {
		if (pgrad[p] == AG_NONE) {
			char shown[NAMES_SHOWN_MAX];

			r = td_fail(&gr->call->err, TDP_INVALID_ARGUMENT, "parameter '%s' does not affect the loss",
					 names_show(gr->call->cred.uid, params[p]->name, shown));
			goto out;
		}
		ret_grads[p] = pgrad[p];
	}
	r = 0;
out:
	free(pgrad);
	free(ag->grad);
	free(ag->needs);
	free(ag);
	return r;
}
