/* Layer families beyond the simple ones (layers.c): convolution (conv2d,
 * conv1d as a conv2d of height 1) and
 * pooling, normalisation (batch_norm with its running statistics as model
 * state, layer_norm, rms_norm) and embedding; attention and the transformer
 * block are in layers_attention.c. Each expands into the ops docs/ops.md
 * lists. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/caller.h"
#include "train/layers_priv.h"

#define MAX_SIZE (1u << 24)

/* The spatial output size of a window k, stride s, padding p over n. */
static int64_t out_size(int64_t n, uint64_t k, uint64_t s, uint64_t p)
{
	if (n < 0)
		return -1;
	if (n + 2 * (int64_t)p < (int64_t)k)
		return -2;
	return (n + 2 * (int64_t)p - (int64_t)k) / (int64_t)s + 1;
}

/* Shape [N, C, H, W] after a window over H, W: checks rank 4 and that
 * the window fits. */
static int window_shape(struct lx *x, const struct layer *l, struct shp *s, const uint64_t k[2],
			const uint64_t st[2], const uint64_t pad[2], int64_t channels)
{
	int64_t h, w;

	if (s->rank >= 0 && s->rank != 4)
		return lx_fail(x, l, "needs an input [N, C, H, W], not rank %d", s->rank);
	if (s->rank < 0)
		return 0;
	h = out_size(s->d[2], k[0], st[0], pad[0]);
	w = out_size(s->d[3], k[1], st[1], pad[1]);
	if (h == -2 || w == -2)
		return lx_fail(x, l, "the window %llux%llu does not fit the input %lldx%lld",
			       (unsigned long long)k[0], (unsigned long long)k[1], (long long)s->d[2],
			       (long long)s->d[3]);
	s->d[1] = channels >= 0 ? channels : s->d[1];
	s->d[2] = h;
	s->d[3] = w;
	return 0;
}

static int layer_conv2d(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = {
		{ "in_channels", MAP_UINT, true, NULL }, { "out_channels", MAP_UINT, true, NULL },
		{ "kernel_size", MAP_ARRAY, true, NULL }, { "stride", MAP_ARRAY, false, NULL },
		{ "padding", MAP_ARRAY, false, NULL }, { "bias", MAP_BOOL, false, NULL },
	};
	static const uint64_t one[2] = { 1, 1 }, zero[2] = { 0, 0 };
	uint64_t ci, co, k[2], st[2], pad[2], ws[4], bs[1];
	char w[LX_ID], b[LX_ID];
	const char *ins[3] = { in, w, b };
	bool bias;
	double bound;
	struct at a[2] = { { "stride", 'I', .n = 2 }, { "padding", 'I', .n = 2 } };
	int64_t sv[2], pv[2];

	/* kernel_size, stride and padding may be ints: map_check sees arrays. */
	for (unsigned i = 2; i < 5; i++)
		f[i].type = MAP_NUMBER;
	for (unsigned i = 2; i < 5; i++) {
		const msgpack_object *o = tdp_map_find(l->map, f[i].key);

		if (o && o->type == MSGPACK_OBJECT_ARRAY)
			f[i].type = MAP_ARRAY;
	}
	if (lx_keys(x, l, f, 6) < 0 || lx_uint(x, l, &f[0], 1, MAX_SIZE, 0, &ci) < 0 ||
	    lx_uint(x, l, &f[1], 1, MAX_SIZE, 0, &co) < 0 || lx_pair(x, l, &f[2], 1, 1024, NULL, k) < 0 ||
	    lx_pair(x, l, &f[3], 1, 1024, one, st) < 0 || lx_pair(x, l, &f[4], 0, 1024, zero, pad) < 0 ||
	    lx_bool(x, l, &f[5], true, &bias) < 0)
		return -1;
	if (s->rank == 4 && s->d[1] >= 0 && (uint64_t)s->d[1] != ci)
		return lx_fail(x, l, "in_channels is %llu but its input has %lld channels", (unsigned long long)ci,
			       (long long)s->d[1]);
	if (window_shape(x, l, s, k, st, pad, (int64_t)co) < 0)
		return -1;
	ws[0] = co, ws[1] = ci, ws[2] = k[0], ws[3] = k[1];
	bs[0] = co;
	bound = 1.0 / sqrt((double)(ci * k[0] * k[1]));
	if (lx_param(x, l, "weight", 4, ws, INIT_UNIFORM, bound, false, w) < 0 ||
	    (bias && lx_param(x, l, "bias", 1, bs, INIT_UNIFORM, bound, false, b) < 0))
		return -1;
	sv[0] = (int64_t)st[0], sv[1] = (int64_t)st[1], pv[0] = (int64_t)pad[0], pv[1] = (int64_t)pad[1];
	a[0].v = sv;
	a[1].v = pv;
	s->dtype = x->dtype;
	return lx_emit(x, l->path, "conv2d", ins, bias ? 3 : 2, a, 2);
}

/* conv1d (torch's nn.Conv1d) through conv2d over a height of 1: `<p>/x4` =
 * x [N, C, L] viewed [-1, C, 1, L], `<p>/w4` = weight [O, C, K] (torch's
 * layout, so a state dict loads as it is) viewed [O, C, 1, K], `<p>/y4` =
 * conv2d(x4, w4, bias) with stride [1, s] and padding [0, p], and `<p>` its
 * view [-1, O, L']. The views are free; autograd reshapes the weight's
 * gradient back. */
static int layer_conv1d(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = {
		{ "in_channels", MAP_UINT, true, NULL }, { "out_channels", MAP_UINT, true, NULL },
		{ "kernel_size", MAP_UINT, true, NULL }, { "stride", MAP_UINT, false, NULL },
		{ "padding", MAP_UINT, false, NULL }, { "bias", MAP_BOOL, false, NULL },
	};
	uint64_t ci, co, k, st, pad, ws[3], bs[1];
	char w[LX_ID], b[LX_ID], x4[LX_ID], w4[LX_ID], y4[LX_ID];
	const char *ins[3] = { x4, w4, b }, *px = in, *pw = w, *py = y4;
	int64_t sv[2] = { 1, 1 }, pv[2] = { 0, 0 }, xs[4], wv[4], ys[3], len;
	struct at a[2] = { { "stride", 'I', .v = sv, .n = 2 }, { "padding", 'I', .v = pv, .n = 2 } };
	struct at rx = { "shape", 'I', .v = xs, .n = 4 }, rw = { "shape", 'I', .v = wv, .n = 4 };
	struct at ry = { "shape", 'I', .v = ys, .n = 3 };
	bool bias;

	if (lx_keys(x, l, f, 6) < 0 || lx_uint(x, l, &f[0], 1, MAX_SIZE, 0, &ci) < 0 ||
	    lx_uint(x, l, &f[1], 1, MAX_SIZE, 0, &co) < 0 || lx_uint(x, l, &f[2], 1, 1024, 0, &k) < 0 ||
	    lx_uint(x, l, &f[3], 1, 1024, 1, &st) < 0 || lx_uint(x, l, &f[4], 0, 1024, 0, &pad) < 0 ||
	    lx_bool(x, l, &f[5], true, &bias) < 0)
		return -1;
	if (s->rank != 3 || s->d[1] < 0 || s->d[2] < 0)
		return lx_fail(x, l, "needs an input [N, C, L] with C and L known (declare the model's input shape)");
	if ((uint64_t)s->d[1] != ci)
		return lx_fail(x, l, "in_channels is %llu but its input has %lld channels", (unsigned long long)ci,
			       (long long)s->d[1]);
	len = out_size(s->d[2], k, st, pad);
	if (len == -2)
		return lx_fail(x, l, "the kernel %llu does not fit the input's length %lld with padding %llu",
			       (unsigned long long)k, (long long)s->d[2], (unsigned long long)pad);
	ws[0] = co, ws[1] = ci, ws[2] = k;
	bs[0] = co;
	if (lx_param(x, l, "weight", 3, ws, INIT_UNIFORM, 1.0 / sqrt((double)(ci * k)), false, w) < 0 ||
	    (bias && lx_param(x, l, "bias", 1, bs, INIT_UNIFORM, 1.0 / sqrt((double)(ci * k)), false, b) < 0) ||
	    lx_id(x, l, "x4", x4) < 0 || lx_id(x, l, "w4", w4) < 0 || lx_id(x, l, "y4", y4) < 0)
		return -1;
	xs[0] = -1, xs[1] = (int64_t)ci, xs[2] = 1, xs[3] = s->d[2];
	wv[0] = (int64_t)co, wv[1] = (int64_t)ci, wv[2] = 1, wv[3] = (int64_t)k;
	ys[0] = -1, ys[1] = (int64_t)co, ys[2] = len;
	sv[1] = (int64_t)st;
	pv[1] = (int64_t)pad;
	if (lx_emit(x, x4, "reshape", &px, 1, &rx, 1) < 0 || lx_emit(x, w4, "reshape", &pw, 1, &rw, 1) < 0 ||
	    lx_emit(x, y4, "conv2d", ins, bias ? 3 : 2, a, 2) < 0)
		return -1;
	s->d[1] = (int64_t)co;
	s->d[2] = len;
	s->dtype = x->dtype;
	return lx_emit(x, l->path, "reshape", &py, 1, &ry, 1);
}

static int layer_pool(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "kernel_size", MAP_NUMBER, true, NULL }, { "stride", MAP_NUMBER, false, NULL } };
	static const uint64_t zero[2] = { 0, 0 };
	uint64_t k[2], st[2];
	int64_t kv[2], sv[2];
	struct at a[2] = { { "kernel_size", 'I', .v = kv, .n = 2 }, { "stride", 'I', .v = sv, .n = 2 } };

	for (unsigned i = 0; i < 2; i++) {
		const msgpack_object *o = tdp_map_find(l->map, f[i].key);

		if (o && o->type == MSGPACK_OBJECT_ARRAY)
			f[i].type = MAP_ARRAY;
	}
	if (lx_keys(x, l, f, 2) < 0 || lx_pair(x, l, &f[0], 1, 1024, NULL, k) < 0 ||
	    lx_pair(x, l, &f[1], 1, 1024, k, st) < 0 || window_shape(x, l, s, k, st, zero, -1) < 0)
		return -1;
	kv[0] = (int64_t)k[0], kv[1] = (int64_t)k[1], sv[0] = (int64_t)st[0], sv[1] = (int64_t)st[1];
	return lx_emit(x, l->path, l->type, &in, 1, a, 2);
}

/* batch_norm: weight, bias, and running_mean/running_var as model state. */
static int layer_batch_norm(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "num_features", MAP_UINT, true, NULL }, { "eps", MAP_NUMBER, false, NULL },
				 { "momentum", MAP_NUMBER, false, NULL } };
	uint64_t c, sh[1];
	double eps, mom;
	char w[LX_ID], b[LX_ID], rm[LX_ID], rv[LX_ID];
	const char *ins[5] = { in, rm, rv, w, b };
	struct at a = { "eps", 'f', .f = 0 };

	if (lx_keys(x, l, f, 3) < 0 || lx_uint(x, l, &f[0], 1, MAX_SIZE, 0, &c) < 0 ||
	    lx_num(x, l, &f[1], 0, 1, 1e-5, &eps) < 0 || lx_num(x, l, &f[2], 0, 1, 0.1, &mom) < 0)
		return -1;
	if (s->rank >= 0 && (s->rank < 2 || (s->d[1] >= 0 && (uint64_t)s->d[1] != c)))
		return lx_fail(x, l, "num_features is %llu: the input needs rank 2 or more with that many channels "
			       "in dim 1", (unsigned long long)c);
	if (x->nstate >= MODEL_MAX_STATE)
		return lx_fail(x, l, "a model has at most %d batch_norm layers", MODEL_MAX_STATE);
	sh[0] = c;
	if (lx_param(x, l, "weight", 1, sh, INIT_ONES, 0, false, w) < 0 ||
	    lx_param(x, l, "bias", 1, sh, INIT_ZEROS, 0, false, b) < 0 ||
	    lx_param(x, l, "running_mean", 1, sh, INIT_ZEROS, 0, true, rm) < 0 ||
	    lx_param(x, l, "running_var", 1, sh, INIT_ONES, 0, true, rv) < 0)
		return -1;
	strcpy(x->state[x->nstate], l->path);
	x->momentum[x->nstate++] = mom;
	a.f = eps;
	s->dtype = x->dtype;
	return lx_emit(x, l->path, "batch_norm", ins, 5, &a, 1);
}

/* layer_norm and rms_norm over the last dim. */
static int layer_norm(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "normalized_shape", MAP_UINT, true, NULL }, { "eps", MAP_NUMBER, false, NULL } };
	bool rms = !strcmp(l->type, "rms_norm");
	uint64_t d, sh[1];
	double eps;
	char w[LX_ID], b[LX_ID];
	const char *ins[3] = { in, w, b };
	struct at a[2] = { { "eps", 'f', .f = 0 }, { "ndim", 'i', .i = 1 } };

	if (lx_keys(x, l, f, 2) < 0 || lx_uint(x, l, &f[0], 1, MAX_SIZE, 0, &d) < 0 ||
	    lx_num(x, l, &f[1], 0, 1, rms ? 1e-6 : 1e-5, &eps) < 0)
		return -1;
	if (s->rank == 0 || (s->rank > 0 && s->d[s->rank - 1] >= 0 && (uint64_t)s->d[s->rank - 1] != d))
		return lx_fail(x, l, "normalized_shape is %llu but the input's last dim is %lld",
			       (unsigned long long)d, s->rank > 0 ? (long long)s->d[s->rank - 1] : 0LL);
	sh[0] = d;
	if (lx_param(x, l, "weight", 1, sh, INIT_ONES, 0, false, w) < 0 ||
	    (!rms && lx_param(x, l, "bias", 1, sh, INIT_ZEROS, 0, false, b) < 0))
		return -1;
	a[0].f = eps;
	s->dtype = x->dtype;
	return lx_emit(x, l->path, l->type, ins, rms ? 2 : 3, a, 2);
}

static int layer_embedding(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "num_embeddings", MAP_UINT, true, NULL },
				 { "embedding_dim", MAP_UINT, true, NULL } };
	uint64_t v, d, sh[2];
	char w[LX_ID];
	const char *ins[2] = { w, in };

	if (lx_keys(x, l, f, 2) < 0 || lx_uint(x, l, &f[0], 1, MAX_SIZE, 0, &v) < 0 ||
	    lx_uint(x, l, &f[1], 1, MAX_SIZE, 0, &d) < 0)
		return -1;
	if (s->dtype >= 0 && s->dtype != TDP_DTYPE_I32)
		return lx_fail(x, l, "reads i32 indices, its input is %s", tdp_dtype_name(s->dtype));
	if (s->rank >= TDP_MAX_RANK)
		return lx_fail(x, l, "the input has too many dims");
	sh[0] = v, sh[1] = d;
	if (lx_param(x, l, "weight", 2, sh, INIT_NORMAL, 1.0, false, w) < 0)
		return -1;
	if (s->rank >= 0)
		s->d[s->rank++] = (int64_t)d;
	s->dtype = x->dtype;
	return lx_emit(x, l->path, "embedding", ins, 2, NULL, 0);
}

/* pos_embedding (GPT's learned positions): `<p>/pos` = the first T rows of
 * weight [max_len, dim] (T the input's second-last dim), `<p>` = x + them. */
static int layer_pos_embedding(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "max_len", MAP_UINT, true, NULL }, { "dim", MAP_UINT, true, NULL } };
	int64_t zero[1] = { 0 }, end[1];
	struct at a[2] = { { "starts", 'I', .v = zero, .n = 1 }, { "ends", 'I', .v = end, .n = 1 } };
	char w[LX_ID], pos[LX_ID];
	const char *sl[1] = { w }, *sum[2] = { in, pos };
	uint64_t len, d, sh[2];

	if (lx_keys(x, l, f, 2) < 0 || lx_uint(x, l, &f[0], 1, MAX_SIZE, 0, &len) < 0 ||
	    lx_uint(x, l, &f[1], 1, MAX_SIZE, 0, &d) < 0)
		return -1;
	if (s->rank < 2 || s->d[s->rank - 2] < 0 || s->d[s->rank - 1] < 0)
		return lx_fail(x, l, "needs the input's shape [..., T, dim]: give the model's input as {name, dtype, "
			       "shape}");
	if ((uint64_t)s->d[s->rank - 1] != d || (uint64_t)s->d[s->rank - 2] > len)
		return lx_fail(x, l, "the input is [..., %lld, %lld]: it needs T <= max_len %llu and dim %llu",
			       (long long)s->d[s->rank - 2], (long long)s->d[s->rank - 1], (unsigned long long)len,
			       (unsigned long long)d);
	sh[0] = len, sh[1] = d;
	end[0] = s->d[s->rank - 2];
	if (lx_param(x, l, "weight", 2, sh, INIT_NORMAL, 0.02, false, w) < 0 ||
	    (size_t)snprintf(pos, sizeof(pos), "%s/pos", l->path) >= sizeof(pos))
		return -1;
	if (lx_emit(x, pos, "slice", sl, 1, a, 2) < 0)
		return -1;
	return lx_emit(x, l->path, "add", sum, 2, NULL, 0);
}

int lx_nn(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	int r;

	if (!strcmp(l->type, "conv2d"))
		r = layer_conv2d(x, l, in, s);
	else if (!strcmp(l->type, "conv1d"))
		r = layer_conv1d(x, l, in, s);
	else if (!strcmp(l->type, "max_pool2d") || !strcmp(l->type, "avg_pool2d"))
		r = layer_pool(x, l, in, s);
	else if (!strcmp(l->type, "batch_norm"))
		r = layer_batch_norm(x, l, in, s);
	else if (!strcmp(l->type, "layer_norm") || !strcmp(l->type, "rms_norm"))
		r = layer_norm(x, l, in, s);
	else if (!strcmp(l->type, "embedding"))
		r = layer_embedding(x, l, in, s);
	else if (!strcmp(l->type, "pos_embedding"))
		r = layer_pos_embedding(x, l, in, s);
	else
		return lx_attention(x, l, in, s);
	return r < 0 ? -1 : 1;
}
