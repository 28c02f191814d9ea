/* The layer form of model.define (docs/training.md, "A model as layers"):
 * reading the stack, naming, parameters and their initialisers, the simple
 * layers (linear, activations, dropout, softmax, flatten, sequential,
 * residual), the loss map, and the definition handed to model_new. The
 * other families are in layers_nn.c, layers_attention.c and layers_rnn.c. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "name.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/caller.h"
#include "train/layers_priv.h"

int lx_fail(struct lx *x, const struct layer *l, const char *fmt, ...)
{
	char msg[TDP_MAX_ERROR_MESSAGE];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!l)
		return td_fail(&x->call->err, TDP_INVALID_ARGUMENT, "%s", msg);
	return td_fail(&x->call->err, TDP_INVALID_ARGUMENT, "layer '%s' (%s): %s", l->path,
		       l->type ? l->type : "?", msg);
}

int lx_keys(struct lx *x, const struct layer *l, struct map_field *fields, size_t n)
{
	struct map_field all[24] = {
		{ "type", MAP_STR, true, NULL },
		{ "name", MAP_STR, false, NULL },
		{ "init", MAP_MAP, false, NULL },
	};
	struct td_error err = { 0 };

	if (n + 3 > sizeof(all) / sizeof(all[0]))
		return lx_fail(x, l, "too many keys");
	memcpy(all + 3, fields, n * sizeof(*fields));
	if (map_check(l->map, all, n + 3, &err) < 0)
		return lx_fail(x, l, "%s", err.message);
	memcpy(fields, all + 3, n * sizeof(*fields));
	return 0;
}

int lx_uint(struct lx *x, const struct layer *l, const struct map_field *f, uint64_t lo, uint64_t hi,
	    uint64_t def, uint64_t *ret)
{
	uint64_t v = def;

	if (f->value && (tdp_obj_uint(f->value, &v) < 0 || v < lo || v > hi))
		return lx_fail(x, l, "'%s' must be an integer from %llu to %llu", f->key, (unsigned long long)lo,
			       (unsigned long long)hi);
	if (!f->value && f->required)
		return lx_fail(x, l, "missing key '%s'", f->key);
	*ret = v;
	return 0;
}

int lx_num(struct lx *x, const struct layer *l, const struct map_field *f, double lo, double hi, double def,
	   double *ret)
{
	double v = def;

	if (f->value && (tdp_obj_number(f->value, &v) < 0 || !(v >= lo && v <= hi)))
		return lx_fail(x, l, "'%s' must be a number from %g to %g", f->key, lo, hi);
	*ret = v;
	return 0;
}

int lx_bool(struct lx *x, const struct layer *l, const struct map_field *f, bool def, bool *ret)
{
	(void)x;
	(void)l;
	*ret = f->value ? f->value->via.boolean : def;
	return 0;
}

int lx_pair(struct lx *x, const struct layer *l, const struct map_field *f, uint64_t lo, uint64_t hi,
	    const uint64_t *def, uint64_t ret[2])
{
	const msgpack_object *o = f->value;

	if (!o) {
		if (!def)
			return lx_fail(x, l, "missing key '%s'", f->key);
		ret[0] = def[0];
		ret[1] = def[1];
		return 0;
	}
	if (o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 2 &&
	    tdp_obj_uint(&o->via.array.ptr[0], &ret[0]) == 0 && tdp_obj_uint(&o->via.array.ptr[1], &ret[1]) == 0 &&
	    ret[0] >= lo && ret[0] <= hi && ret[1] >= lo && ret[1] <= hi)
		return 0;
	if (tdp_obj_uint(o, &ret[0]) == 0 && ret[0] >= lo && ret[0] <= hi) {
		ret[1] = ret[0];
		return 0;
	}
	return lx_fail(x, l, "'%s' must be an integer or [h, w], each from %llu to %llu", f->key,
		       (unsigned long long)lo, (unsigned long long)hi);
}

static int pack_attr(msgpack_packer *pk, const struct at *a)
{
	if (tdp_pack_cstr(pk, a->k))
		return -1;
	switch (a->t) {
	case 'i':
		return msgpack_pack_int64(pk, a->i);
	case 'f':
		return msgpack_pack_double(pk, a->f);
	case 'b':
		return a->i ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
	case 's':
		return tdp_pack_cstr(pk, a->s);
	default:
		if (msgpack_pack_array(pk, a->n))
			return -1;
		for (unsigned k = 0; k < a->n; k++)
			if (msgpack_pack_int64(pk, a->v[k]))
				return -1;
		return 0;
	}
}

int lx_emit(struct lx *x, const char *id, const char *op, const char *const *in, unsigned nin,
	    const struct at *a, unsigned na)
{
	msgpack_packer *pk = &x->pk;
	int fail;

	if (x->nnodes >= LAYERS_MAX_NODES)
		return td_fail(&x->call->err, TDP_RESOURCE_EXHAUSTED, "layers: more than %d graph nodes",
			       LAYERS_MAX_NODES);
	fail = msgpack_pack_map(pk, na ? 4 : 3) || tdp_pack_cstr(pk, "id") || tdp_pack_cstr(pk, id) ||
	       tdp_pack_cstr(pk, "op") || tdp_pack_cstr(pk, op) || tdp_pack_cstr(pk, "inputs") ||
	       msgpack_pack_array(pk, nin);
	for (unsigned k = 0; !fail && k < nin; k++)
		fail = tdp_pack_cstr(pk, in[k]);
	if (!fail && na)
		fail = tdp_pack_cstr(pk, "attrs") || msgpack_pack_map(pk, na);
	for (unsigned k = 0; !fail && k < na; k++)
		fail = pack_attr(pk, &a[k]);
	if (fail)
		return td_fail(&x->call->err, TDP_INTERNAL, "out of memory");
	x->nnodes++;
	return 0;
}

int lx_id(struct lx *x, const struct layer *l, const char *what, char *id)
{
	if ((size_t)snprintf(id, LX_ID, "%s/%s", l->path, what) >= LX_ID)
		return lx_fail(x, l, "the path is too long for a node id");
	return 0;
}

int64_t lx_seed(const struct lx *x, const char *path)
{
	return layers_seed(x->seed, path);
}

/* A layer's `init` entry for `pname`: a string or {normal: std} /
 * {uniform: bound}, into kind and a (torch's formulas, gain 1). */
static int parse_init(struct lx *x, const struct layer *l, const char *pname, const msgpack_object *o,
		      unsigned rank, double fan_in, double fan_out, enum layer_init_kind *kind, double *a)
{
	if (o->type == MSGPACK_OBJECT_MAP && o->via.map.size == 1) {
		const msgpack_object_kv *kv = &o->via.map.ptr[0];
		double v;

		if (tdp_obj_number(&kv->val, &v) < 0 || !(v >= 0 && v <= 1e6))
			return lx_fail(x, l, "init.%s: the value must be a number from 0 to 1e6", pname);
		if (tdp_obj_str_eq(&kv->key, "normal") || tdp_obj_str_eq(&kv->key, "uniform")) {
			*kind = tdp_obj_str_eq(&kv->key, "normal") ? INIT_NORMAL : INIT_UNIFORM;
			*a = v;
			return 0;
		}
	}
	if (tdp_obj_str_eq(o, "zeros") || tdp_obj_str_eq(o, "ones")) {
		*kind = tdp_obj_str_eq(o, "zeros") ? INIT_ZEROS : INIT_ONES;
		*a = 0;
		return 0;
	}
	if (o->type == MSGPACK_OBJECT_STR && rank < 2 &&
	    (tdp_obj_str_eq(o, "kaiming_uniform") || tdp_obj_str_eq(o, "kaiming_normal") ||
	     tdp_obj_str_eq(o, "xavier_uniform") || tdp_obj_str_eq(o, "xavier_normal")))
		return lx_fail(x, l, "init.%s: fan in and fan out need a tensor of 2 or more dims (torch's rule)",
			       pname);
	if (tdp_obj_str_eq(o, "kaiming_uniform"))
		*kind = INIT_UNIFORM, *a = sqrt(3.0 / fan_in);
	else if (tdp_obj_str_eq(o, "kaiming_normal"))
		*kind = INIT_NORMAL, *a = 1.0 / sqrt(fan_in);
	else if (tdp_obj_str_eq(o, "xavier_uniform"))
		*kind = INIT_UNIFORM, *a = sqrt(6.0 / (fan_in + fan_out));
	else if (tdp_obj_str_eq(o, "xavier_normal"))
		*kind = INIT_NORMAL, *a = sqrt(2.0 / (fan_in + fan_out));
	else
		return lx_fail(x, l, "init.%s must be kaiming_uniform, kaiming_normal, xavier_uniform, "
			       "xavier_normal, zeros, ones, {\"normal\": std} or {\"uniform\": bound}", pname);
	return 0;
}

int lx_param(struct lx *x, const struct layer *l, const char *pname, unsigned rank, const uint64_t *shape,
	     enum layer_init_kind kind, double a, bool buffer, char *name)
{
	struct layer_param *p;
	const msgpack_object *io = l->init && !buffer ? tdp_map_find(l->init, pname) : NULL;
	double fan_in = 1, fan_out = 1, recept = 1;

	if (x->np >= LX_MAX_PARAMS)
		return td_fail(&x->call->err, TDP_INVALID_ARGUMENT, "layers: more than %d parameters",
			       MODEL_MAX_PARAMS);
	p = &x->p[x->np];
	memset(p, 0, sizeof(*p));
	for (unsigned d = 2; d < rank; d++)
		recept *= (double)shape[d];
	if (rank >= 2) {
		fan_in = (double)shape[1] * recept;
		fan_out = (double)shape[0] * recept;
	}
	if (io && parse_init(x, l, pname, io, rank, fan_in, fan_out, &kind, &a) < 0)
		return -1;
	if ((size_t)snprintf(p->name, sizeof(p->name), "%s/%s.%s", x->model, l->path, pname) >= sizeof(p->name) ||
	    !tdp_name_valid(p->name + (p->name[0] == '~' ? 1 : 0), strlen(p->name) - (p->name[0] == '~')))
		return lx_fail(x, l, "the parameter name '%s/%s.%s' is too long or invalid", x->model, l->path,
			       pname);
	if ((size_t)snprintf(p->local, sizeof(p->local), "%s.%s", l->path, pname) >= sizeof(p->local))
		return lx_fail(x, l, "the path is too long");
	strcpy(p->layer, l->path);
	p->buffer = buffer;
	p->dtype = x->dtype;
	p->rank = rank;
	memcpy(p->shape, shape, rank * sizeof(*shape));
	p->init = kind;
	p->a = a;
	strcpy(name, p->name);
	x->np++;
	return 0;
}

/* The layer's init map names only parameters it has. */
static int check_init_keys(struct lx *x, const struct layer *l, unsigned np0)
{
	for (uint32_t i = 0; l->init && i < l->init->via.map.size; i++) {
		const msgpack_object *k = &l->init->via.map.ptr[i].key;
		bool found = false;

		for (unsigned j = np0; j < x->np && !found; j++)
			found = !x->p[j].buffer && !strcmp(x->p[j].layer, l->path) &&
				tdp_obj_str_eq(k, x->p[j].local + strlen(l->path) + 1);
		if (!found)
			return lx_fail(x, l, "init: '%.*s' is none of its parameters",
				       k->type == MSGPACK_OBJECT_STR ? (int)k->via.str.size : 1,
				       k->type == MSGPACK_OBJECT_STR ? k->via.str.ptr : "?");
	}
	return 0;
}

int lx_alias(struct lx *x, const char *id, const char *in, const struct shp *s)
{
	bool known = s->rank >= 1;

	for (int d = 1; d < s->rank; d++)
		known = known && s->d[d] >= 0;
	if (known) {
		struct at a = { "shape", 'I', .v = s->d, .n = (unsigned)s->rank };

		return lx_emit(x, id, "reshape", &in, 1, &a, 1);
	}
	return lx_emit(x, id, "copy", &in, 1, NULL, 0);
}

int lx_linear(struct lx *x, const struct layer *l, unsigned in_f, unsigned out_f, bool bias, const char *in,
	      struct shp *s)
{
	char w[LX_ID], b[LX_ID], mm[LX_ID];
	uint64_t ws[2] = { out_f, in_f }, bs[1] = { out_f };
	double bound = 1.0 / sqrt((double)in_f);
	struct at tb = { "transpose_b", 'b', .i = 1 };

	if (s->rank == 0 || (s->rank > 0 && s->d[s->rank - 1] >= 0 && (uint64_t)s->d[s->rank - 1] != in_f))
		return lx_fail(x, l, "in is %u but its input has %lld features", in_f,
			       s->rank > 0 ? (long long)s->d[s->rank - 1] : 0LL);
	if (lx_param(x, l, "weight", 2, ws, INIT_UNIFORM, bound, false, w) < 0 ||
	    (bias && lx_param(x, l, "bias", 1, bs, INIT_UNIFORM, bound, false, b) < 0))
		return -1;
	if (bias && lx_id(x, l, "mm", mm) < 0)
		return -1;
	{
		const char *mi[2] = { in, w }, *ai[2] = { mm, b };

		if (lx_emit(x, bias ? mm : l->path, "matmul", mi, 2, &tb, 1) < 0 ||
		    (bias && lx_emit(x, l->path, "add", ai, 2, NULL, 0) < 0))
			return -1;
	}
	if (s->rank > 0)
		s->d[s->rank - 1] = out_f;
	s->dtype = x->dtype;
	return 0;
}

static int layer_linear(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "in", MAP_UINT, true, NULL }, { "out", MAP_UINT, true, NULL },
				 { "bias", MAP_BOOL, false, NULL } };
	uint64_t i, o;
	bool bias;

	if (lx_keys(x, l, f, 3) < 0 || lx_uint(x, l, &f[0], 1, 1u << 24, 0, &i) < 0 ||
	    lx_uint(x, l, &f[1], 1, 1u << 24, 0, &o) < 0 || lx_bool(x, l, &f[2], true, &bias) < 0)
		return -1;
	return lx_linear(x, l, (unsigned)i, (unsigned)o, bias, in, s);
}

/* relu gelu tanh sigmoid silu, softmax log_softmax, dropout. */
static int layer_elementwise(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "p", MAP_NUMBER, false, NULL }, { "dim", MAP_NUMBER, false, NULL },
				 { "approximate", MAP_STR, false, NULL } };
	bool drop = !strcmp(l->type, "dropout"), soft = strstr(l->type, "softmax") != NULL;
	bool gelu = !strcmp(l->type, "gelu");
	struct map_field use[1];
	struct at a[2];
	unsigned na = 0;

	use[0] = f[drop ? 0 : soft ? 1 : 2];
	if (lx_keys(x, l, use, drop || soft || gelu ? 1 : 0) < 0)
		return -1;
	if (drop) {
		double p;

		if (lx_num(x, l, &use[0], 0, 1, 0.5, &p) < 0)
			return -1;
		a[na++] = (struct at){ "p", 'f', .f = p };
		a[na++] = (struct at){ "seed", 'i', .i = lx_seed(x, l->path) };
	} else if (soft) {
		int64_t dim = -1;

		if (use[0].value && (tdp_obj_int(use[0].value, &dim) < 0 || dim < -TDP_MAX_RANK ||
				     dim >= TDP_MAX_RANK))
			return lx_fail(x, l, "'dim' must be an integer from %d to %d", -TDP_MAX_RANK,
				       TDP_MAX_RANK - 1);
		a[na++] = (struct at){ "axis", 'i', .i = dim };
	} else if (gelu && use[0].value) {
		if (!tdp_obj_str_eq(use[0].value, "none") && !tdp_obj_str_eq(use[0].value, "tanh"))
			return lx_fail(x, l, "'approximate' must be \"none\" or \"tanh\"");
		a[na++] = (struct at){ "approximate", 's', .s = tdp_obj_str_eq(use[0].value, "tanh") ? "tanh" : "none" };
	}
	(void)s;
	return lx_emit(x, l->path, l->type, &in, 1, a, na);
}

/* leaky_relu: max(x, slope·x) (torch's nn.LeakyReLU, slope 0..1, default
 * 0.01) as `<p>/neg` = mul(x, slope) then `<p>` = maximum(x, `<p>/neg`);
 * identity: `<p>` = copy(x). Both keep the shape. */
static int layer_leaky_identity(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "negative_slope", MAP_NUMBER, false, NULL } };
	bool leaky = !strcmp(l->type, "leaky_relu");
	char neg[TDP_MAX_NAME_LEN + 1];
	const char *pair[2] = { in, neg };
	struct at a;
	double slope;

	(void)s;
	if (lx_keys(x, l, f, leaky ? 1 : 0) < 0)
		return -1;
	if (!leaky)
		return lx_emit(x, l->path, "copy", &in, 1, NULL, 0);
	if (lx_num(x, l, &f[0], 0, 1, 0.01, &slope) < 0)
		return -1;
	if ((size_t)snprintf(neg, sizeof(neg), "%s/neg", l->path) >= sizeof(neg))
		return lx_fail(x, l, "its path is too long");
	a = (struct at){ "scalar", 'f', .f = slope };
	if (lx_emit(x, neg, "mul", &in, 1, &a, 1) < 0)
		return -1;
	return lx_emit(x, l->path, "maximum", pair, 2, NULL, 0);
}

static int layer_flatten(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "start_dim", MAP_UINT, false, NULL } };
	int64_t dims[TDP_MAX_RANK], prod = 1;
	uint64_t start;
	struct at a = { "shape", 'I', .v = dims };

	if (lx_keys(x, l, f, 1) < 0 || lx_uint(x, l, &f[0], 1, TDP_MAX_RANK - 1, 1, &start) < 0)
		return -1;
	if (s->rank < 0)
		return lx_fail(x, l, "needs the input's shape: give the model's input as {name, dtype, shape}");
	if ((int)start >= s->rank)
		return lx_fail(x, l, "start_dim %llu is past the input's %d dims", (unsigned long long)start, s->rank);
	for (int d = 1; d < s->rank; d++)
		if (s->d[d] < 0)
			return lx_fail(x, l, "needs the input's shape: dim %d is unknown", d);
	for (int d = (int)start; d < s->rank; d++)
		prod *= s->d[d];
	dims[0] = -1;
	for (unsigned d = 1; d < start; d++)
		dims[d] = s->d[d];
	dims[start] = prod;
	a.n = (unsigned)start + 1;
	if (lx_emit(x, l->path, "reshape", &in, 1, &a, 1) < 0)
		return -1;
	s->rank = (int)start + 1;
	memcpy(s->d, dims, sizeof(dims));
	return 0;
}

/* sequential: its children; residual: input + its children. */
static int layer_compose(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	struct map_field f[] = { { "layers", MAP_ARRAY, true, NULL } };
	struct shp s0 = *s;
	char last[LX_ID];

	if (lx_keys(x, l, f, 1) < 0 || lx_stack(x, l, f[0].value, in, s, last) < 0)
		return -1;
	if (!strcmp(l->type, "sequential"))
		return lx_alias(x, l->path, last, s);
	{
		const char *ai[2] = { in, last };

		if (s0.rank >= 0 && s->rank >= 0 && s0.rank != s->rank)
			return lx_fail(x, l, "its layers change the rank (%d to %d): the sum needs equal shapes",
				       s0.rank, s->rank);
		for (int d = 1; d < s0.rank && d < s->rank; d++)
			if (s0.d[d] >= 0 && s->d[d] >= 0 && s0.d[d] != s->d[d])
				return lx_fail(x, l, "its layers change dim %d (%lld to %lld): the sum needs "
					       "equal shapes", d, (long long)s0.d[d], (long long)s->d[d]);
		return lx_emit(x, l->path, "add", ai, 2, NULL, 0);
	}
}

static int expand_layer(struct lx *x, const struct layer *l, const char *in, struct shp *s)
{
	static const char *const elementwise[] = { "relu", "gelu", "tanh", "sigmoid", "silu", "softmax",
						   "log_softmax", "dropout" };
	unsigned np0 = x->np;
	int r = -2;

	if (!strcmp(l->type, "linear"))
		r = layer_linear(x, l, in, s);
	else if (!strcmp(l->type, "flatten"))
		r = layer_flatten(x, l, in, s);
	else if (!strcmp(l->type, "leaky_relu") || !strcmp(l->type, "identity"))
		r = layer_leaky_identity(x, l, in, s);
	else if (!strcmp(l->type, "sequential") || !strcmp(l->type, "residual"))
		r = layer_compose(x, l, in, s);
	for (size_t k = 0; r == -2 && k < sizeof(elementwise) / sizeof(elementwise[0]); k++)
		if (!strcmp(l->type, elementwise[k]))
			r = layer_elementwise(x, l, in, s);
	if (r == -2) {
		r = lx_nn(x, l, in, s);
		if (r == 0)
			return lx_fail(x, l, "unknown layer type '%s'", l->type);
		r = r < 0 ? -1 : 0;
	}
	if (r < 0)
		return -1;
	return check_init_keys(x, l, np0);
}

/* The name of child k of `arr` (its "name" or its index) into `name`. */
static int child_name(const msgpack_object *arr, uint32_t k, char *name)
{
	const msgpack_object *n = arr->via.array.ptr[k].type == MSGPACK_OBJECT_MAP
					  ? tdp_map_find(&arr->via.array.ptr[k], "name") : NULL;

	if (!n) {
		snprintf(name, LX_ID, "%u", k);
		return 0;
	}
	if (tdp_obj_strcpy(n, name, LX_ID) < 0 || !tdp_name_valid(name, strlen(name)) || strchr(name, '.') ||
	    strchr(name, '/'))
		return -1;
	return 0;
}

int lx_stack(struct lx *x, const struct layer *parent, const msgpack_object *arr, const char *in, struct shp *s,
	     char *ret_out)
{
	unsigned depth = parent ? parent->depth + 1 : 1;
	const char *where = parent ? parent->path : "layers";
	char cur[LX_ID], name[LX_ID], other[LX_ID];

	if (depth > LAYERS_MAX_DEPTH)
		return lx_fail(x, parent, "layers nest deeper than %d", LAYERS_MAX_DEPTH);
	if (arr->via.array.size == 0)
		return lx_fail(x, parent, "'layers' is empty");
	strcpy(cur, in);
	for (uint32_t k = 0; k < arr->via.array.size; k++) {
		struct layer l = { .map = &arr->via.array.ptr[k], .depth = depth };
		const msgpack_object *type;
		char tname[32];

		if (++x->nlayers > LAYERS_MAX_LAYERS)
			return td_fail(&x->call->err, TDP_RESOURCE_EXHAUSTED, "layers: more than %d layers",
				       LAYERS_MAX_LAYERS);
		if (l.map->type != MSGPACK_OBJECT_MAP)
			return td_fail(&x->call->err, TDP_INVALID_ARGUMENT, "%s[%u]: a layer must be a map {type, ...}",
				       where, k);
		if (child_name(arr, k, name) < 0)
			return td_fail(&x->call->err, TDP_INVALID_ARGUMENT, "%s[%u]: 'name' must be 1-%d bytes of "
				       "A-Z a-z 0-9 _ : - (no . or /)", where, k, TDP_MAX_NAME_LEN);
		for (uint32_t j = 0; j < k; j++)
			if (child_name(arr, j, other) == 0 && !strcmp(other, name))
				return td_fail(&x->call->err, TDP_INVALID_ARGUMENT, "%s[%u]: the name '%s' is taken by "
					       "%s[%u]", where, k, name, where, j);
		if ((size_t)snprintf(l.path, sizeof(l.path), "%s%s%s", parent ? parent->path : "", parent ? "." : "",
				     name) >= sizeof(l.path))
			return td_fail(&x->call->err, TDP_INVALID_ARGUMENT, "%s[%u]: the path is too long", where, k);
		type = tdp_map_find(l.map, "type");
		if (!type || tdp_obj_strcpy(type, tname, sizeof(tname)) < 0)
			return td_fail(&x->call->err, TDP_INVALID_ARGUMENT, "layer '%s': missing or unknown 'type'",
				       l.path);
		l.type = tname;
		l.init = tdp_map_find(l.map, "init");
		if (expand_layer(x, &l, cur, s) < 0)
			return -1;
		strcpy(cur, l.path);
	}
	strcpy(ret_out, cur);
	return 0;
}
