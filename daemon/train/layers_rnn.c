/* Recurrent layers: lstm and gru (torch's nn.LSTM / nn.GRU with one layer,
 * unidirectional, batch_first), unrolled over the T steps of the input's
 * declared shape [N, T, input_size] into matmul, add, sub, mul, sigmoid,
 * tanh, slice and concat nodes (docs/training.md, "Recurrent layers").
 *
 * The input projection of every step is one product, `<p>/xp` = x @
 * weight_ih^T (+ biases through matmul's bias input), [N, T, G·H] with the
 * gates in torch's order (lstm: i f g o; gru: r z n); each step slices its
 * row [N, 1, G·H] out of it and adds h_{t-1} @ weight_hh^T. The states stay
 * [N, 1, H], so the per-step products fold into one matrix product, and the
 * output is the concatenation of the h_t along dim 1. h_0 = c_0 = 0, so
 * step 0 skips its recurrent product. Parameters: torch's names and
 * layouts (weight_ih_l0 [G·H, I], weight_hh_l0 [G·H, H], bias_ih_l0 and
 * bias_hh_l0 [G·H]), all U(±1/√H). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/caller.h"
#include "train/layers_priv.h"

#define MAX_SIZE (1u << 20)

/* One recurrent layer being unrolled. */
struct rnn {
	struct lx *x;
	const struct layer *l;
	int64_t steps, hid;
	bool bias;
	bool zero;   /* T = 1: step 0 reads a state of zeros, `<p>/zero` (else weight_hh would not affect the loss) */
	char wih[LX_ID], whh[LX_ID], bih[LX_ID], bhh[LX_ID];
	char xp[LX_ID];
};

/* "<path>/<what><t>" (t < 0: no number) into `id`. */
static int rid(struct rnn *r, const char *what, int64_t t, char *id)
{
	char w[32];

	if (t < 0)
		snprintf(w, sizeof(w), "%.15s", what);
	else
		snprintf(w, sizeof(w), "%.15s%u", what, (unsigned)t);
	return lx_id(r->x, r->l, w, id);
}

static int op1(struct rnn *r, const char *id, const char *op, const char *a)
{
	return lx_emit(r->x, id, op, &a, 1, NULL, 0);
}

static int op2(struct rnn *r, const char *id, const char *op, const char *a, const char *b)
{
	const char *in[2] = { a, b };

	return lx_emit(r->x, id, op, in, 2, NULL, 0);
}

/* `id` = in[..., k·H : (k + n)·H] (the last axis): n gates from gate k. */
static int gate(struct rnn *r, const char *id, const char *in, int64_t k, int64_t n)
{
	int64_t b = k * r->hid, e = (k + n) * r->hid, ax = -1;
	struct at a[3] = { { "starts", 'I', .v = &b, .n = 1 }, { "ends", 'I', .v = &e, .n = 1 },
			   { "axes", 'I', .v = &ax, .n = 1 } };

	return lx_emit(r->x, id, "slice", &in, 1, a, 3);
}

/* `<p>/x<t>` = step t of the projection: xp[:, t:t+1]. */
static int step_in(struct rnn *r, int64_t t, char *id)
{
	int64_t e = t + 1, ax = 1;
	struct at a[3] = { { "starts", 'I', .v = &t, .n = 1 }, { "ends", 'I', .v = &e, .n = 1 },
			   { "axes", 'I', .v = &ax, .n = 1 } };
	const char *in = r->xp;

	return rid(r, "x", t, id) < 0 ? -1 : lx_emit(r->x, id, "slice", &in, 1, a, 3);
}

/* The id of state `what` (h or c) before step t. */
static int prev(struct rnn *r, const char *what, int64_t t, char *id)
{
	return t > 0 ? rid(r, what, t - 1, id) : rid(r, "zero", -1, id);
}

/* `<p>/hh<t>` = h_{t-1} @ weight_hh^T (+ bias_hh when `with_bias`). */
static int recur(struct rnn *r, int64_t t, bool with_bias, char *id)
{
	char h[LX_ID];
	const char *in[3] = { h, r->whh, r->bhh };
	struct at tb = { "transpose_b", 'b', .i = 1 };

	if (prev(r, "h", t, h) < 0 || rid(r, "hh", t, id) < 0)
		return -1;
	return lx_emit(r->x, id, "matmul", in, with_bias ? 3 : 2, &tb, 1);
}

/* The parameters (gates·H rows) and `<p>/xp`; lstm folds both biases into
 * the projection (`<p>/b` = bias_ih + bias_hh), gru only bias_ih (its
 * bias_hh's n part is gated by r). */
static int project(struct rnn *r, const char *in, unsigned gates, uint64_t in_f, bool lstm)
{
	uint64_t wi[2] = { gates * (uint64_t)r->hid, in_f }, wh[2] = { wi[0], (uint64_t)r->hid }, bs[1] = { wi[0] };
	double bound = 1.0 / sqrt((double)r->hid);
	char bsum[LX_ID];
	const char *mi[3] = { in, r->wih, r->bih };
	struct at tb = { "transpose_b", 'b', .i = 1 };

	if (lx_param(r->x, r->l, "weight_ih_l0", 2, wi, INIT_UNIFORM, bound, false, r->wih) < 0 ||
	    lx_param(r->x, r->l, "weight_hh_l0", 2, wh, INIT_UNIFORM, bound, false, r->whh) < 0 ||
	    (r->bias && (lx_param(r->x, r->l, "bias_ih_l0", 1, bs, INIT_UNIFORM, bound, false, r->bih) < 0 ||
			 lx_param(r->x, r->l, "bias_hh_l0", 1, bs, INIT_UNIFORM, bound, false, r->bhh) < 0)))
		return -1;
	if (r->bias && lstm) {
		if (rid(r, "b", -1, bsum) < 0 || op2(r, bsum, "add", r->bih, r->bhh) < 0)
			return -1;
		mi[2] = bsum;
	}
	if (rid(r, "xp", -1, r->xp) < 0)
		return -1;
	return lx_emit(r->x, r->xp, "matmul", mi, r->bias ? 3 : 2, &tb, 1);
}

/* `<p>/zero` = 0 · xp[..., :H]: the zero state [N, 1, H] of a model whose
 * batch is not fixed (no zeros op can take the shape). */
static int zeros(struct rnn *r)
{
	char zs[LX_ID], z[LX_ID];
	const char *pzs = zs;
	struct at a = { "scalar", 'f', .f = 0 };

	if (rid(r, "zs", -1, zs) < 0 || rid(r, "zero", -1, z) < 0 || gate(r, zs, r->xp, 0, 1) < 0)
		return -1;
	return lx_emit(r->x, z, "mul", &pzs, 1, &a, 1);
}

/* One lstm step: gates = x_t + h_{t-1} W_hh^T; i f o = σ(·), g = tanh(·);
 * c_t = f c_{t-1} + i g; h_t = o tanh(c_t). Step 0 (h = c = 0) skips the
 * product and f, unless T = 1. */
static int lstm_step(struct rnn *r, int64_t t)
{
	char xt[LX_ID], hh[LX_ID], z[LX_ID], s[LX_ID], i[LX_ID], f[LX_ID], o[LX_ID], gp[LX_ID], g[LX_ID];
	char ig[LX_ID], fc[LX_ID], c[LX_ID], cp[LX_ID], tc[LX_ID], h[LX_ID];
	const char *gates = xt, *cell = ig;
	bool rec = t > 0 || r->zero;

	if (step_in(r, t, xt) < 0)
		return -1;
	if (rec) {
		if (recur(r, t, false, hh) < 0 || rid(r, "z", t, z) < 0 || op2(r, z, "add", xt, hh) < 0)
			return -1;
		gates = z;
	}
	/* without a product before it, c_0 = i g: that product is `<p>/c0`, which step 1 reads */
	if (rid(r, "s", t, s) < 0 || rid(r, "i", t, i) < 0 || rid(r, "o", t, o) < 0 || rid(r, "gp", t, gp) < 0 ||
	    rid(r, "g", t, g) < 0 || rid(r, rec ? "ig" : "c", t, ig) < 0 || rid(r, "tc", t, tc) < 0 ||
	    rid(r, "h", t, h) < 0 ||
	    op1(r, s, "sigmoid", gates) < 0 || gate(r, i, s, 0, 1) < 0 || gate(r, o, s, 3, 1) < 0 ||
	    gate(r, gp, gates, 2, 1) < 0 || op1(r, g, "tanh", gp) < 0 || op2(r, ig, "mul", i, g) < 0)
		return -1;
	if (rec) {
		if (rid(r, "f", t, f) < 0 || rid(r, "fc", t, fc) < 0 || rid(r, "c", t, c) < 0 ||
		    prev(r, "c", t, cp) < 0 || gate(r, f, s, 1, 1) < 0 || op2(r, fc, "mul", f, cp) < 0 ||
		    op2(r, c, "add", fc, ig) < 0)
			return -1;
		cell = c;
	}
	return op1(r, tc, "tanh", cell) < 0 ? -1 : op2(r, h, "mul", o, tc);
}

/* One gru step (torch's equations): r z = σ(x_t + h W_hh^T + b_hh)[r z];
 * n = tanh(x_n + r (h W_hn^T + b_hn)); h_t = n + z (h_{t-1} − n). At
 * step 0 (h = 0) the recurrent product is b_hh alone (`bhn` its n part),
 * unless T = 1. */
static int gru_step(struct rnn *r, int64_t t, const char *bhn)
{
	char xt[LX_ID], hh[LX_ID], a[LX_ID], rzp[LX_ID], rz[LX_ID], rg[LX_ID], zg[LX_ID], xn[LX_ID], hn[LX_ID];
	char rh[LX_ID], np[LX_ID], n[LX_ID], d[LX_ID], zd[LX_ID], hp[LX_ID], h[LX_ID];
	const char *sum = xt, *hnv = NULL, *npre = xn;
	bool rec = t > 0 || r->zero;

	if (step_in(r, t, xt) < 0 || rid(r, "a", t, a) < 0)
		return -1;
	if (rec) {
		if (recur(r, t, r->bias, hh) < 0 || op2(r, a, "add", xt, hh) < 0 || rid(r, "hn", t, hn) < 0 ||
		    gate(r, hn, hh, 2, 1) < 0)
			return -1;
		sum = a;
		hnv = hn;
	} else if (r->bias) {
		if (op2(r, a, "add", xt, r->bhh) < 0)
			return -1;
		sum = a;
		hnv = bhn;
	}
	if (rid(r, "rzp", t, rzp) < 0 || rid(r, "rz", t, rz) < 0 || rid(r, "r", t, rg) < 0 ||
	    rid(r, "z", t, zg) < 0 || rid(r, "xn", t, xn) < 0 || rid(r, "rh", t, rh) < 0 || rid(r, "np", t, np) < 0 ||
	    rid(r, "n", t, n) < 0 || rid(r, "zd", t, zd) < 0 || rid(r, "h", t, h) < 0 ||
	    gate(r, rzp, sum, 0, 2) < 0 || op1(r, rz, "sigmoid", rzp) < 0 || gate(r, rg, rz, 0, 1) < 0 ||
	    gate(r, zg, rz, 1, 1) < 0 || gate(r, xn, xt, 2, 1) < 0)
		return -1;
	if (hnv) {
		if (op2(r, rh, "mul", rg, hnv) < 0 || op2(r, np, "add", xn, rh) < 0)
			return -1;
		npre = np;
	}
	if (op1(r, n, "tanh", npre) < 0)
		return -1;
	if (!rec) /* h_0 = n − z n */
		return op2(r, zd, "mul", zg, n) < 0 ? -1 : op2(r, h, "sub", n, zd);
	if (prev(r, "h", t, hp) < 0 || rid(r, "d", t, d) < 0 || op2(r, d, "sub", hp, n) < 0 ||
	    op2(r, zd, "mul", zg, d) < 0)
		return -1;
	return op2(r, h, "add", n, zd);
}

/* Level `lv` node k of the output's concat tree: level 0 is h_k. */
static int tree_id(struct rnn *r, unsigned lv, int64_t k, char *id)
{
	char w[24];

	if (lv == 0)
		return rid(r, "h", k, id);
	snprintf(w, sizeof(w), "cat%u_", lv);
	return rid(r, w, k, id);
}

/* `<p>` = the h_t concatenated along dim 1 ([N, T, H]), 8 at a time (concat
 * takes up to 8 inputs); or, without return_sequences, h_{T-1} as [N, H]. */
static int collect(struct rnn *r, bool sequences, struct shp *s)
{
	char ids[8][LX_ID], id[LX_ID];
	const char *in[8];
	int64_t n = r->steps;
	unsigned lv = 0;
	struct at ax = { "axis", 'i', .i = 1 };

	s->rank = sequences ? 3 : 2;
	s->d[0] = -1;
	s->d[1] = sequences ? r->steps : r->hid;
	s->d[2] = r->hid;
	s->dtype = r->x->dtype;
	if (!sequences || n == 1) {
		int64_t sh[3] = { -1, sequences ? 1 : r->hid, r->hid };
		struct at a = { "shape", 'I', .v = sh, .n = sequences ? 3u : 2u };
		const char *last = id;

		return tree_id(r, 0, n - 1, id) < 0 ? -1 : lx_emit(r->x, r->l->path, "reshape", &last, 1, &a, 1);
	}
	for (; n > 1; n = (n + 7) / 8, lv++) {
		for (int64_t k = 0; k < (n + 7) / 8; k++) {
			unsigned m = 0;

			for (int64_t j = 8 * k; j < n && j < 8 * k + 8; j++, m++) {
				if (tree_id(r, lv, j, ids[m]) < 0)
					return -1;
				in[m] = ids[m];
			}
			if (n <= 8)
				strcpy(id, r->l->path);
			else if (tree_id(r, lv + 1, k, id) < 0)
				return -1;
			if (lx_emit(r->x, id, "concat", in, m, &ax, 1) < 0)
				return -1;
		}
	}
	return 0;
}

/* lstm and gru: keys, the input's shape [N, T, input_size] (T known, at
 * most LAYERS_MAX_RNN_STEPS), the unrolled steps, the output. */
static int layer_rnn(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "input_size", MAP_UINT, true, NULL }, { "hidden_size", MAP_UINT, true, NULL },
				 { "bias", MAP_BOOL, false, NULL }, { "batch_first", MAP_BOOL, false, NULL },
				 { "return_sequences", MAP_BOOL, false, NULL } };
	bool lstm = !strcmp(l->type, "lstm"), batch_first, sequences;
	struct rnn r = { .x = x, .l = l };
	uint64_t in_f, hid;
	char bhn[LX_ID];

	if (lx_keys(x, l, f, 5) < 0 || lx_uint(x, l, &f[0], 1, MAX_SIZE, 0, &in_f) < 0 ||
	    lx_uint(x, l, &f[1], 1, MAX_SIZE, 0, &hid) < 0 || lx_bool(x, l, &f[2], true, &r.bias) < 0 ||
	    lx_bool(x, l, &f[3], true, &batch_first) < 0 || lx_bool(x, l, &f[4], true, &sequences) < 0)
		return -1;
	if (!batch_first)
		return lx_fail(x, l, "batch_first must be true: the batch is dim 0 of every tensord model "
			       "(torch's default is false; permute [T, N, I] data to [N, T, I])");
	if (s->rank != 3 || s->d[1] < 0)
		return lx_fail(x, l, "needs an input [N, T, %llu] with T known (declare the model's input shape)",
			       (unsigned long long)in_f);
	if (s->d[2] >= 0 && (uint64_t)s->d[2] != in_f)
		return lx_fail(x, l, "input_size is %llu but the input's last dim is %lld", (unsigned long long)in_f,
			       (long long)s->d[2]);
	if (s->d[1] < 1 || s->d[1] > LAYERS_MAX_RNN_STEPS)
		return lx_fail(x, l, "the sequence length T is %lld; an unrolled %s takes 1 to %d steps (its "
			       "training graph must fit one step's %d nodes): split longer sequences into chunks",
			       (long long)s->d[1], l->type, LAYERS_MAX_RNN_STEPS, TDP_MAX_GRAPH_NODES);
	r.steps = s->d[1];
	r.hid = (int64_t)hid;
	r.zero = r.steps == 1;
	if (project(&r, in, lstm ? 4 : 3, in_f, lstm) < 0)
		return -1;
	if (!lstm && r.bias && !r.zero && (rid(&r, "bhn", -1, bhn) < 0 || gate(&r, bhn, r.bhh, 2, 1) < 0))
		return -1;
	if (r.zero && zeros(&r) < 0)
		return -1;
	for (int64_t t = 0; t < r.steps; t++)
		if ((lstm ? lstm_step(&r, t) : gru_step(&r, t, bhn)) < 0)
			return -1;
	return collect(&r, sequences, s);
}

/* The registry of this family: one row per layer type. */
static const struct {
	const char *type;
	int (*expand)(struct lx *x, const struct layer *l, const char *in, struct shp *s);
} rnn_layers[] = {
	{ "lstm", layer_rnn },
	{ "gru", layer_rnn },
};

int lx_rnn(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	for (size_t k = 0; k < sizeof(rnn_layers) / sizeof(rnn_layers[0]); k++)
		if (!strcmp(l->type, rnn_layers[k].type))
			return rnn_layers[k].expand(x, l, in, s) < 0 ? -1 : 1;
	return 0;
}
