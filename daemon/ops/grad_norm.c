/* Backward rules of layer_norm, rms_norm and batch_norm. Over the
 * normalised trailing dims, with rstd = 1 / sqrt(var + eps) (layer_norm) or
 * 1 / sqrt(mean(x²) + eps) (rms_norm), xhat the normalised x and
 * gy = g · weight:
 *   layer_norm: dx = rstd · (gy − mean(gy) − xhat · mean(gy · xhat))
 *   rms_norm:   dx = rstd · (gy − xhat · mean(gy · xhat))
 *   dweight = g · xhat, dbias = g (the engine sums the leading dims).
 * dx is one fused op, layer_norm_grad / rms_norm_grad (norm.c), which
 * recomputes the row statistics from x in f32; xhat is the forward op
 * without weight and bias. batch_norm's training-mode dx is the fused
 * batch_norm_grad (statistics per channel, dim 1, over every other dim); its
 * inference mode (given statistics) is composed of ordinary ops (see
 * grad_batch_norm). */
#include <string.h>

#include "ops/grad.h"
#include "ops/grad_rules.h"

/* layer_norm (x, weight?, bias?) and rms_norm (x, weight?). */
static int row_norm(struct autograd *ag, unsigned node, int g, int *out, bool rms)
{
	const struct op_attr_value *ndv = ag_attr_of(ag, node, "ndim"), *epsv = ag_attr_of(ag, node, "eps");
	unsigned nin = ag_ninputs(ag, node);
	int64_t nd = ndv->set ? ndv->i : 1;
	double eps = epsv->set ? epsv->f : rms ? 1e-6 : 1e-5;
	struct graph_attr a[2] = {
		{ .name = "ndim", .ints = &nd, .nints = 1 },
		{ .name = "eps", .f = eps },
	};
	int x = ag_input(ag, node, 0);
	int in[3] = { g, x, nin > 1 ? ag_input(ag, node, 1) : x };

	out[0] = ag_emit(ag, rms ? "rms_norm_grad" : "layer_norm_grad", in, nin > 1 ? 3 : 2, a, 2);
	if (out[0] < 0)
		return -1;
	if (nin > 1) {
		int xhat = ag_emit(ag, rms ? "rms_norm" : "layer_norm", &x, 1, a, 2);

		if ((out[1] = ag_op2(ag, "mul", g, xhat)) < 0)
			return -1;
	}
	if (nin > 2)
		out[2] = g;
	return 0;
}

int grad_layer_norm(struct autograd *ag, unsigned node, int g, int *out)
{
	return row_norm(ag, node, g, out, false);
}

int grad_rms_norm(struct autograd *ag, unsigned node, int g, int *out)
{
	return row_norm(ag, node, g, out, true);
}

/* A per-channel (C,) tensor as [1, C, 1, ...] of rank `rank`. */
static int channel_view(struct autograd *ag, int v, unsigned rank, uint64_t c)
{
	uint64_t shape[TDP_MAX_RANK];

	for (unsigned d = 0; d < rank; d++)
		shape[d] = d == 1 ? c : 1;
	return ag_reshape(ag, v, rank, shape);
}

/* batch_norm (x, running_mean, running_var, weight?, bias?), per channel c
 * over the axes A = every dim but 1, with w = weight (1 when absent):
 *   training (batch statistics; the running ones are not used, so they get
 *   no gradient): dx is the fused batch_norm_grad (g, x, w?) (norm.c:
 *     rstd · (gy − mean_A(gy) − xhat · mean_A(gy · xhat)), gy = g · w,
 *     xhat = (x − mean_A(x)) · rstd, rstd = 1/sqrt(var_A(x) + eps), biased),
 *     and dweight = sum_A(g · xhat) the fused batch_norm_grad_weight (g, x);
 *   inference: rstd = 1/sqrt(running_var + eps), dx = g · w · rstd,
 *     d running_mean = −sum_A(g · w) · rstd,
 *     d running_var = −0.5 · sum_A(g · w · (x − running_mean)) · rstd³,
 *     dweight = sum_A(g · xhat), xhat = (x − running_mean) · rstd;
 *   both: dbias = sum_A(g). */
int grad_batch_norm(struct autograd *ag, unsigned node, int g, int *out)
{
	const struct op_attr_value *tr = ag_attr_of(ag, node, "training"), *epsv = ag_attr_of(ag, node, "eps");
	bool training = tr->set && tr->i;
	double eps = epsv->set ? epsv->f : 1e-5;
	unsigned nin = ag_ninputs(ag, node);
	int x = ag_input(ag, node, 0);
	struct op_tensor xt = ag_tensor(ag, x);
	int64_t axes[TDP_MAX_RANK];
	unsigned naxes = 0;

	for (unsigned d = 0; d < xt.rank; d++)
		if (d != 1)
			axes[naxes++] = d;
	if (training) {
		struct graph_attr a[1] = { { .name = "eps", .f = eps } };
		int in[3] = { g, x, nin > 3 ? ag_input(ag, node, 3) : x };

		out[0] = ag_emit(ag, "batch_norm_grad", in, nin > 3 ? 3 : 2, a, 1);
		if (nin > 3 && (out[3] = ag_emit(ag, "batch_norm_grad_weight", in, 2, a, 1)) < 0)
			return -1;
	} else {
		int gy = nin > 3 ? ag_op2(ag, "mul", g, channel_view(ag, ag_input(ag, node, 3), xt.rank, xt.shape[1]))
				 : g;
		int rm = channel_view(ag, ag_input(ag, node, 1), xt.rank, xt.shape[1]);
		int rstdc = ag_op1(ag, "rsqrt", ag_scalar(ag, "add", ag_input(ag, node, 2), eps)); /* (C,) */
		int rstd = channel_view(ag, rstdc, xt.rank, xt.shape[1]);
		int xhat, grs;

		xhat = ag_op2(ag, "mul", ag_op2(ag, "sub", x, rm), rstd);
		grs = ag_op2(ag, "mul", gy, rstd);
		out[0] = grs;
		out[1] = ag_op1(ag, "neg", ag_reduce(ag, "sum", grs, axes, naxes, false));
		/* −0.5 · sum(gy · xc) · rstd³ = −0.5 · sum(grs · xhat) · rstd */
		out[2] = ag_reduce(ag, "sum", ag_op2(ag, "mul", grs, xhat), axes, naxes, false);
		out[2] = ag_scalar(ag, "mul", ag_op2(ag, "mul", out[2], rstdc), -0.5);
		if (out[0] < 0 || out[1] < 0 || out[2] < 0)
			return -1;
		if (nin > 3 && (out[3] = ag_reduce(ag, "sum", ag_op2(ag, "mul", g, xhat), axes, naxes, false)) < 0)
			return -1;
	}
	if (out[0] < 0)
		return -1;
	if (nin > 4 && (out[4] = ag_reduce(ag, "sum", g, axes, naxes, false)) < 0)
		return -1;
	return 0;
}
