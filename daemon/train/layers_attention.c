/* attention (multi-head self-attention, torch's nn.MultiheadAttention
 * arithmetic with separate q, k, v, out projections) and transformer_block
 * (pre-norm: x + attn(ln1(x)), then + mlp(ln2(·))), expanded into matmul,
 * reshape, permute and the fused attention op; with dropout on the
 * probabilities, a head dim the fused op does not take, or `fused: false`,
 * into bmm, softmax, masked_fill and dropout instead. Both need their
 * input's shape [B, T, dim] with T known (the model input's declared
 * shape): the heads are split with reshapes over T. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/attention.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/caller.h"
#include "train/layers_priv.h"

#define MAX_DIM (1u << 20)
/* Without a `fused` key the layers take the fused attention op from this
 * sequence length on: on an H200 the unfused ops were faster at every T
 * tried (128 to 2048; bf16 products on tensor cores), the fused op saving
 * memory that grows with T² (at T 2048, batch 2, 4 blocks of d768: 3.2
 * against 5.4 GiB; docs/training.md). */
#define FUSED_FROM_T 2048

/* A sub-layer of l named `name` (its path l.path + "." + name). */
static int sub_layer(struct lx *x, const struct layer *l, const char *name, const char *type, struct layer *sub)
{
	*sub = (struct layer){ .type = type, .depth = l->depth + 1 };
	if ((size_t)snprintf(sub->path, sizeof(sub->path), "%s.%s", l->path, name) >= sizeof(sub->path))
		return lx_fail(x, l, "the path is too long");
	return 0;
}

/* Node `id` = reshape(in, shape n dims). */
static int reshape(struct lx *x, const char *id, const char *in, const int64_t *shape, unsigned n)
{
	struct at a = { "shape", 'I', .v = shape, .n = n };

	return lx_emit(x, id, "reshape", &in, 1, &a, 1);
}

/* [B, T, D] node `in` -> [B·H, T, hd] node ids "<path>/<p>3". */
static int split_heads(struct lx *x, const struct layer *l, const char *in, const char *p, int64_t t,
		       int64_t h, int64_t hd, char *ret)
{
	static const int64_t perm[4] = { 0, 2, 1, 3 };
	int64_t s4[4] = { -1, t, h, hd }, s3[3] = { -1, t, hd };
	char a[LX_ID], b[LX_ID], what[16];
	struct at pa = { "dims", 'I', .v = perm, .n = 4 };
	const char *pb = a;

	snprintf(what, sizeof(what), "%s4", p);
	if (lx_id(x, l, what, a) < 0)
		return -1;
	snprintf(what, sizeof(what), "%sp", p);
	if (lx_id(x, l, what, b) < 0)
		return -1;
	snprintf(what, sizeof(what), "%s3", p);
	if (lx_id(x, l, what, ret) < 0 || reshape(x, a, in, s4, 4) < 0 || lx_emit(x, b, "permute", &pb, 1, &pa, 1) < 0)
		return -1;
	return reshape(x, ret, b, s3, 3);
}

/* softmax(q kᵀ / √hd, masked) · v of [B·H, T, hd] nodes q3, k3, v3 as the
 * separate ops, into node `cx`: scores, scaled, (ones, mask, masked), att,
 * (drop), then cx itself. */
static int attend_unfused(struct lx *x, const struct layer *l, const char *q3, const char *k3, const char *v3,
			  int64_t t, int64_t hd, bool causal, double p, const char *cx)
{
	int64_t tt[2] = { t, t };
	char sc[LX_ID], sd[LX_ID], on[LX_ID], mk[LX_ID], mf[LX_ID], at[LX_ID], dr[LX_ID];
	const char *cur;
	struct at tb = { "transpose_b", 'b', .i = 1 }, scale = { "scalar", 'f', .f = 1.0 / sqrt((double)hd) };

	if (lx_id(x, l, "scores", sc) < 0 || lx_id(x, l, "scaled", sd) < 0 || lx_id(x, l, "att", at) < 0)
		return -1;
	{
		const char *in2[2] = { q3, k3 };
		const char *psc = sc;

		if (lx_emit(x, sc, "bmm", in2, 2, &tb, 1) < 0 || lx_emit(x, sd, "mul", &psc, 1, &scale, 1) < 0)
			return -1;
	}
	cur = sd;
	if (causal) {
		struct at ones[2] = { { "shape", 'I', .v = tt, .n = 2 }, { "dtype", 's', .s = "u8" } };
		struct at diag = { "diagonal", 'i', .i = 1 }, val = { "value", 'f', .f = -INFINITY };
		const char *pon = on, *in2[2] = { sd, mk };

		if (lx_id(x, l, "ones", on) < 0 || lx_id(x, l, "mask", mk) < 0 || lx_id(x, l, "masked", mf) < 0 ||
		    lx_emit(x, on, "ones", NULL, 0, ones, 2) < 0 || lx_emit(x, mk, "triu", &pon, 1, &diag, 1) < 0 ||
		    lx_emit(x, mf, "masked_fill", in2, 2, &val, 1) < 0)
			return -1;
		cur = mf;
	}
	{
		struct at ax = { "axis", 'i', .i = -1 };

		if (lx_emit(x, at, "softmax", &cur, 1, &ax, 1) < 0)
			return -1;
		cur = at;
	}
	if (p > 0) {
		struct at da[2] = { { "p", 'f', .f = p }, { "seed", 'i', .i = lx_seed(x, at) } };

		if (lx_id(x, l, "drop", dr) < 0 || lx_emit(x, dr, "dropout", &cur, 1, da, 2) < 0)
			return -1;
		cur = dr;
	}
	{
		const char *in2[2] = { cur, v3 };

		return lx_emit(x, cx, "bmm", in2, 2, NULL, 0);
	}
}

/* The attention arithmetic of layer l on `in` [B, T, dim]: the fused
 * attention op when `fused`, dropout is 0 and it takes the head dim and
 * length (ops/attention.h), else attend_unfused. */
static int attend(struct lx *x, const struct layer *l, const char *in, struct shp *s, int64_t dim, int64_t heads,
		  bool causal, bool bias, double p, bool fused)
{
	static const int64_t perm[4] = { 0, 2, 1, 3 };
	int64_t t = s->d[1], hd = dim / heads, c4[4] = { -1, heads, t, hd }, c3[3] = { -1, t, dim };
	struct layer q, k, v, o;
	struct shp sq = *s, sk = *s, sv = *s;
	char q3[LX_ID], k3[LX_ID], v3[LX_ID], cx[LX_ID], c4i[LX_ID], cp[LX_ID], ctx[LX_ID];

	if (sub_layer(x, l, "q", "linear", &q) < 0 || sub_layer(x, l, "k", "linear", &k) < 0 ||
	    sub_layer(x, l, "v", "linear", &v) < 0 || sub_layer(x, l, "out", "linear", &o) < 0 ||
	    lx_linear(x, &q, (unsigned)dim, (unsigned)dim, bias, in, &sq) < 0 ||
	    lx_linear(x, &k, (unsigned)dim, (unsigned)dim, bias, in, &sk) < 0 ||
	    lx_linear(x, &v, (unsigned)dim, (unsigned)dim, bias, in, &sv) < 0 ||
	    split_heads(x, l, q.path, "q", t, heads, hd, q3) < 0 || split_heads(x, l, k.path, "k", t, heads, hd, k3) < 0 ||
	    split_heads(x, l, v.path, "v", t, heads, hd, v3) < 0 || lx_id(x, l, "ctx3", cx) < 0 ||
	    lx_id(x, l, "ctx4", c4i) < 0 || lx_id(x, l, "ctxp", cp) < 0 || lx_id(x, l, "ctx", ctx) < 0)
		return -1;
	if (fused && p <= 0 && attention_supported((uint64_t)hd, (uint64_t)t, (uint64_t)t)) {
		const char *in3[3] = { q3, k3, v3 };
		struct at ca = { "causal", 'b', .i = causal };

		if (lx_emit(x, cx, "attention", in3, 3, &ca, 1) < 0)
			return -1;
	} else if (attend_unfused(x, l, q3, k3, v3, t, hd, causal, p, cx) < 0) {
		return -1;
	}
	{
		const char *pc4 = c4i;
		struct at pa = { "dims", 'I', .v = perm, .n = 4 };

		if (reshape(x, c4i, cx, c4, 4) < 0 || lx_emit(x, cp, "permute", &pc4, 1, &pa, 1) < 0 ||
		    reshape(x, ctx, cp, c3, 3) < 0)
			return -1;
	}
	if (lx_linear(x, &o, (unsigned)dim, (unsigned)dim, bias, ctx, s) < 0)
		return -1;
	return lx_alias(x, l->path, o.path, s);
}

/* The layer's `fused` key (field f), or without one whether T reaches
 * FUSED_FROM_T. */
static int fused_key(struct lx *x, const struct layer *l, struct map_field *f, int64_t t, bool *ret)
{
	if (!f->value) {
		*ret = t >= FUSED_FROM_T;
		return 0;
	}
	return lx_bool(x, l, f, true, ret);
}

/* Check [B, T, dim] with T known. */
static int check_btd(struct lx *x, const struct layer *l, const struct shp *s, uint64_t dim, uint64_t heads)
{
	if (dim % heads)
		return lx_fail(x, l, "dim %llu is not a multiple of heads %llu", (unsigned long long)dim,
			       (unsigned long long)heads);
	if (s->rank != 3 || s->d[1] < 0)
		return lx_fail(x, l, "needs an input [B, T, %llu] with T known (declare the model's input shape)",
			       (unsigned long long)dim);
	if (s->d[2] >= 0 && (uint64_t)s->d[2] != dim)
		return lx_fail(x, l, "dim is %llu but the input's last dim is %lld", (unsigned long long)dim,
			       (long long)s->d[2]);
	return 0;
}

static int layer_attention(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "dim", MAP_UINT, true, NULL }, { "heads", MAP_UINT, true, NULL },
				 { "causal", MAP_BOOL, false, NULL }, { "bias", MAP_BOOL, false, NULL },
				 { "dropout", MAP_NUMBER, false, NULL }, { "fused", MAP_BOOL, false, NULL } };
	uint64_t dim, heads;
	bool causal, bias, fused;
	double p;

	if (lx_keys(x, l, f, 6) < 0 || lx_uint(x, l, &f[0], 1, MAX_DIM, 0, &dim) < 0 ||
	    lx_uint(x, l, &f[1], 1, MAX_DIM, 0, &heads) < 0 || lx_bool(x, l, &f[2], false, &causal) < 0 ||
	    lx_bool(x, l, &f[3], true, &bias) < 0 || lx_num(x, l, &f[4], 0, 1, 0, &p) < 0 ||
	    check_btd(x, l, s, dim, heads) < 0 || fused_key(x, l, &f[5], s->d[1], &fused) < 0)
		return -1;
	return attend(x, l, in, s, (int64_t)dim, (int64_t)heads, causal, bias, p, fused);
}

/* Node `id` = a + b. */
static int add(struct lx *x, const char *id, const char *a, const char *b)
{
	const char *in[2] = { a, b };

	return lx_emit(x, id, "add", in, 2, NULL, 0);
}

/* A layer_norm sub-layer `name` of l over dim. */
static int sub_norm(struct lx *x, const struct layer *l, const char *name, const char *in, int64_t dim,
		    struct layer *sub)
{
	uint64_t sh[1] = { (uint64_t)dim };
	char w[LX_ID], b[LX_ID];
	const char *ins[3] = { in, w, b };
	struct at a[2] = { { "eps", 'f', .f = 1e-5 }, { "ndim", 'i', .i = 1 } };

	if (sub_layer(x, l, name, "layer_norm", sub) < 0 ||
	    lx_param(x, sub, "weight", 1, sh, INIT_ONES, 0, false, w) < 0 ||
	    lx_param(x, sub, "bias", 1, sh, INIT_ZEROS, 0, false, b) < 0)
		return -1;
	return lx_emit(x, sub->path, "layer_norm", ins, 3, a, 2);
}

/* Dropout node `<path>/<what>` of `in` when p > 0; *cur becomes it. */
static int maybe_drop(struct lx *x, const struct layer *l, const char *what, double p, char *id, const char **cur)
{
	struct at da[2] = { { "p", 'f', .f = p }, { "seed", 'i', .i = 0 } };

	if (p <= 0)
		return 0;
	if (lx_id(x, l, what, id) < 0)
		return -1;
	da[1].i = lx_seed(x, id);
	if (lx_emit(x, id, "dropout", cur, 1, da, 2) < 0)
		return -1;
	*cur = id;
	return 0;
}

static int layer_block(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "dim", MAP_UINT, true, NULL }, { "heads", MAP_UINT, true, NULL },
				 { "hidden", MAP_UINT, false, NULL }, { "causal", MAP_BOOL, false, NULL },
				 { "dropout", MAP_NUMBER, false, NULL }, { "fused", MAP_BOOL, false, NULL } };
	uint64_t dim, heads, hidden;
	bool causal, fused;
	double p;
	struct layer ln1, ln2, attn, fc1, fc2, act;
	char res1[LX_ID], d1[LX_ID], d2[LX_ID];
	const char *cur;
	struct shp sa;

	if (lx_keys(x, l, f, 6) < 0 || lx_uint(x, l, &f[0], 1, MAX_DIM, 0, &dim) < 0 ||
	    lx_uint(x, l, &f[1], 1, MAX_DIM, 0, &heads) < 0 || lx_uint(x, l, &f[2], 1, MAX_DIM, 4 * dim, &hidden) < 0 ||
	    lx_bool(x, l, &f[3], false, &causal) < 0 || lx_num(x, l, &f[4], 0, 1, 0, &p) < 0 ||
	    check_btd(x, l, s, dim, heads) < 0 || fused_key(x, l, &f[5], s->d[1], &fused) < 0)
		return -1;
	sa = *s;
	if (sub_norm(x, l, "ln1", in, (int64_t)dim, &ln1) < 0 || sub_layer(x, l, "attn", "attention", &attn) < 0 ||
	    attend(x, &attn, ln1.path, &sa, (int64_t)dim, (int64_t)heads, causal, true, p, fused) < 0)
		return -1;
	cur = attn.path;
	if (maybe_drop(x, l, "drop1", p, d1, &cur) < 0 || lx_id(x, l, "res1", res1) < 0 || add(x, res1, in, cur) < 0 ||
	    sub_norm(x, l, "ln2", res1, (int64_t)dim, &ln2) < 0 || sub_layer(x, l, "mlp.fc1", "linear", &fc1) < 0 ||
	    sub_layer(x, l, "mlp.act", "gelu", &act) < 0 || sub_layer(x, l, "mlp.fc2", "linear", &fc2) < 0)
		return -1;
	sa = *s;
	if (lx_linear(x, &fc1, (unsigned)dim, (unsigned)hidden, true, ln2.path, &sa) < 0)
		return -1;
	cur = fc1.path;
	if (lx_emit(x, act.path, "gelu", &cur, 1, NULL, 0) < 0 ||
	    lx_linear(x, &fc2, (unsigned)hidden, (unsigned)dim, true, act.path, &sa) < 0)
		return -1;
	cur = fc2.path;
	if (maybe_drop(x, l, "drop2", p, d2, &cur) < 0)
		return -1;
	return add(x, l->path, res1, cur);
}

int lx_attention(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	int r;

	if (!strcmp(l->type, "attention"))
		r = layer_attention(x, l, in, s);
	else if (!strcmp(l->type, "transformer_block"))
		r = layer_block(x, l, in, s);
	else
		return lx_rnn(x, l, in, s);
	return r < 0 ? -1 : 1;
}
