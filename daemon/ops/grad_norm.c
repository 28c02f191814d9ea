/* Backward rules of layer_norm and rms_norm, composed of ordinary ops (the
 * row statistics are recomputed from x, in x's dtype). Over the normalised
 * trailing dims, with rstd = 1 / sqrt(var + eps) (layer_norm) or
 * 1 / sqrt(mean(x²) + eps) (rms_norm), xhat the normalised x and
 * gy = g · weight:
 *   layer_norm: dx = rstd · (gy − mean(gy) − xhat · mean(gy · xhat))
 *   rms_norm:   dx = rstd · (gy − xhat · mean(gy · xhat))
 *   dweight = g · xhat, dbias = g (the engine sums the leading dims). */
#include <string.h>

#include "grad.h"
#include "grad_rules.h"

/* The mean of `x` over its last `nd` dims, kept as size-1 dims. */
static int mean_rows(struct autograd *ag, int x, unsigned nd)
{
	unsigned rank = ag_tensor(ag, x).rank;
	int64_t axes[TDP_MAX_RANK];
	struct graph_attr a[2] = {
		{ .name = "axis", .ints = axes, .nints = nd },
		{ .name = "keepdims", .b = true },
	};

	for (unsigned k = 0; k < nd; k++)
		axes[k] = (int64_t)(rank - nd + k);
	return ag_emit(ag, "mean", &x, 1, a, 2);
}

/* layer_norm (x, weight?, bias?) and rms_norm (x, weight?). */
int grad_row_norm(struct autograd *ag, unsigned node, int g, int *out)
{
	bool rms = !strcmp(ag_op_name(ag, node), "rms_norm");
	const struct op_attr_value *ndv = ag_attr_of(ag, node, "ndim"), *epsv = ag_attr_of(ag, node, "eps");
	unsigned nin = ag_ninputs(ag, node), nd = ndv->set ? (unsigned)ndv->i : 1;
	double eps = epsv->set ? epsv->f : rms ? 1e-6 : 1e-5;
	int x = ag_input(ag, node, 0), xc = x, var, rstd, xhat, gy, t;

	if (!rms)
		xc = ag_op2(ag, "sub", x, mean_rows(ag, x, nd));
	var = mean_rows(ag, ag_op2(ag, "mul", xc, xc), nd);
	rstd = ag_op1(ag, "rsqrt", ag_scalar(ag, "add", var, eps));
	xhat = ag_op2(ag, "mul", xc, rstd);
	gy = nin > 1 ? ag_op2(ag, "mul", g, ag_input(ag, node, 1)) : g;
	t = ag_op2(ag, "mul", xhat, mean_rows(ag, ag_op2(ag, "mul", gy, xhat), nd));
	t = ag_op2(ag, "sub", gy, t);
	if (!rms)
		t = ag_op2(ag, "sub", t, mean_rows(ag, gy, nd));
	out[0] = ag_op2(ag, "mul", t, rstd);
	if (out[0] < 0)
		return -1;
	if (nin > 1 && (out[1] = ag_op2(ag, "mul", g, xhat)) < 0)
		return -1;
	if (nin > 2)
		out[2] = g;
	return 0;
}
