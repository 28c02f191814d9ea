#include "store/model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "errorf.h"
#include "name.h"
#include "pack.h"
#include "rpc.h"

struct models {
	struct model *head;
	uint32_t count, max;
	uint64_t next_serial;
};

/* A packer target that refuses to grow past MODEL_MAX_DEF_BYTES. */
struct bounded {
	struct tdp_buf *b;
	bool over;
};

static int bounded_write(void *data, const char *p, size_t n)
{
	struct bounded *bw = data;

	if (tdp_buf_len(bw->b) + n > MODEL_MAX_DEF_BYTES) {
		bw->over = true;
		return -1;
	}
	return tdp_buf_append(bw->b, p, n) < 0 ? -1 : 0;
}

static int name_list(const msgpack_object *arr, unsigned max, const char *what,
		     char (**ret)[TDP_MAX_NAME_LEN + 1], unsigned *ret_n, bool distinct, char *why,
		     size_t why_len)
{
	/* params name tensors: a client may qualify them (~user/name), as
	 * everywhere a tensor is named (docs/security.md, "Names"). */
	bool refs = !strcmp(what, "params");
	char (*names)[TDP_MAX_NAME_LEN + 1];
	unsigned n = arr->via.array.size;

	if (n > max)
		return tdp_errorf(why, why_len, -EINVAL, "%s: at most %u names", what, max);
	names = calloc(n ? n : 1, sizeof(*names));
	if (!names)
		return -ENOMEM;
	for (unsigned k = 0; k < n; k++) {
		const msgpack_object *o = &arr->via.array.ptr[k];

		if (o->type != MSGPACK_OBJECT_STR || o->via.str.size > TDP_MAX_NAME_LEN ||
		    !(refs ? tdp_ref_valid(o->via.str.ptr, o->via.str.size, false)
			   : tdp_name_valid(o->via.str.ptr, o->via.str.size))) {
			free(names);
			return tdp_errorf(why, why_len, -EINVAL,
					  "%s[%u] must be a name (1-%d bytes of A-Z a-z 0-9 . _ : / -%s)", what, k,
					  TDP_MAX_NAME_LEN, refs ? ", after ~USER/ for another user's" : "");
		}
		memcpy(names[k], o->via.str.ptr, o->via.str.size);
		names[k][o->via.str.size] = '\0';
		for (unsigned j = 0; distinct && j < k; j++)
			if (!strcmp(names[j], names[k])) {
				int r = tdp_errorf(why, why_len, -EINVAL, "%s: '%s' is listed twice", what, names[k]);

				free(names);
				return r;
			}
	}
	*ret = names;
	*ret_n = n;
	return 0;
}

static int parse_input(const msgpack_object *o, unsigned k, struct model_input *in, char *why,
		       size_t why_len)
{
	const msgpack_object *name = o, *dtype = NULL, *shape = NULL;

	memset(in, 0, sizeof(*in));
	if (o->type == MSGPACK_OBJECT_MAP) {
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			const msgpack_object *key = &o->via.map.ptr[i].key;

			if (!tdp_obj_str_eq(key, "name") && !tdp_obj_str_eq(key, "dtype") &&
			    !tdp_obj_str_eq(key, "shape"))
				return tdp_errorf(why, why_len, -EINVAL,
						  "inputs[%u]: a map has only name, dtype and shape", k);
		}
		name = tdp_map_find(o, "name");
		dtype = tdp_map_find(o, "dtype");
		shape = tdp_map_find(o, "shape");
		if (!name || !dtype || !shape)
			return tdp_errorf(why, why_len, -EINVAL, "inputs[%u]: a map needs name, dtype and shape", k);
	}
	if (name->type != MSGPACK_OBJECT_STR || !tdp_name_valid(name->via.str.ptr, name->via.str.size))
		return tdp_errorf(why, why_len, -EINVAL,
				  "inputs[%u] must be a name (1-%d bytes of A-Z a-z 0-9 . _ : / -) "
				  "or {name, dtype, shape}", k, TDP_MAX_NAME_LEN);
	memcpy(in->name, name->via.str.ptr, name->via.str.size);
	if (!dtype)
		return 0;
	in->dtype = dtype->type == MSGPACK_OBJECT_STR ? tdp_dtype_parse(dtype->via.str.ptr, dtype->via.str.size) : -1;
	if (in->dtype < 0)
		return tdp_errorf(why, why_len, -EINVAL, "inputs[%u].dtype must be f32 f16 bf16 i32 or u8", k);
	if (shape->type != MSGPACK_OBJECT_ARRAY || shape->via.array.size > TDP_MAX_RANK)
		return tdp_errorf(why, why_len, -EINVAL, "inputs[%u].shape must be up to %d sizes", k,
				  TDP_MAX_RANK);
	in->rank = shape->via.array.size;
	for (unsigned d = 0; d < in->rank; d++)
		if (tdp_obj_uint(&shape->via.array.ptr[d], &in->shape[d]) < 0 || in->shape[d] > INT32_MAX)
			return tdp_errorf(why, why_len, -EINVAL, "inputs[%u].shape[%u] must be a size", k, d);
	in->has_spec = true;
	return 0;
}

/* The node of `nodes` whose id is `id`, or NULL. */
static const msgpack_object *node_by_id(const msgpack_object *nodes, const char *id)
{
	for (uint32_t i = 0; i < nodes->via.array.size; i++) {
		const msgpack_object *nid = tdp_map_find(&nodes->via.array.ptr[i], "id");

		if (nid && nid->type == MSGPACK_OBJECT_STR && nid->via.str.size == strlen(id) &&
		    !memcmp(nid->via.str.ptr, id, nid->via.str.size))
			return &nodes->via.array.ptr[i];
	}
	return NULL;
}

/* `state`: batch_norm node ids, or {node, momentum} maps (model_state). */
static int parse_state(struct model *m, const msgpack_object *st, char *why, size_t why_len)
{
	if (st->type != MSGPACK_OBJECT_ARRAY || st->via.array.size > MODEL_MAX_STATE)
		return tdp_errorf(why, why_len, -EINVAL, "state must be an array of up to %d batch_norm node ids",
				  MODEL_MAX_STATE);
	for (uint32_t k = 0; k < st->via.array.size; k++) {
		const msgpack_object *o = &st->via.array.ptr[k], *id = o, *mom = NULL, *nd, *op, *in;
		struct model_state *s = &m->state[k];

		s->momentum = 0.1;
		if (o->type == MSGPACK_OBJECT_MAP) {
			for (uint32_t i = 0; i < o->via.map.size; i++)
				if (!tdp_obj_str_eq(&o->via.map.ptr[i].key, "node") &&
				    !tdp_obj_str_eq(&o->via.map.ptr[i].key, "momentum"))
					return tdp_errorf(why, why_len, -EINVAL, "state[%u]: a map has node and momentum", k);
			id = tdp_map_find(o, "node");
			mom = tdp_map_find(o, "momentum");
		}
		if (!id || tdp_obj_strcpy(id, s->node, sizeof(s->node)) < 0 || !s->node[0])
			return tdp_errorf(why, why_len, -EINVAL, "state[%u] must be a node id or {node, momentum}", k);
		if (mom) {
			int64_t i;

			if (mom->type == MSGPACK_OBJECT_FLOAT32 || mom->type == MSGPACK_OBJECT_FLOAT64)
				s->momentum = mom->via.f64;
			else if (tdp_obj_int(mom, &i) == 0)
				s->momentum = (double)i;
			else
				s->momentum = -1;
			if (!(s->momentum >= 0 && s->momentum <= 1))
				return tdp_errorf(why, why_len, -EINVAL, "state[%u].momentum must be 0 to 1", k);
		}
		for (uint32_t j = 0; j < k; j++)
			if (!strcmp(m->state[j].node, s->node))
				return tdp_errorf(why, why_len, -EINVAL, "state: '%s' is listed twice", s->node);
		nd = node_by_id(m->nodes, s->node);
		op = nd ? tdp_map_find(nd, "op") : NULL;
		in = nd ? tdp_map_find(nd, "inputs") : NULL;
		if (!op || !tdp_obj_str_eq(op, "batch_norm") || !in || in->type != MSGPACK_OBJECT_ARRAY ||
		    in->via.array.size < 3)
			return tdp_errorf(why, why_len, -EINVAL, "state[%u] '%s' must name a batch_norm node with "
					  "inputs x, running_mean, running_var", k, s->node);
		for (unsigned j = 0; j < 2; j++) {
			const msgpack_object *b = &in->via.array.ptr[1 + j];

			if (b->type != MSGPACK_OBJECT_STR || !tdp_name_valid(b->via.str.ptr, b->via.str.size))
				return tdp_errorf(why, why_len, -EINVAL, "state[%u] '%s': running_mean and running_var "
						  "must be stored tensors", k, s->node);
			memcpy(s->buffer[j], b->via.str.ptr, b->via.str.size);
			s->buffer[j][b->via.str.size] = '\0';
		}
	}
	m->nstate = st->via.array.size;
	return 0;
}

int model_precision_parse(const msgpack_object *o, int *ret, char *why, size_t why_len)
{
	if (!o || (!tdp_obj_str_eq(o, "f32") && !tdp_obj_str_eq(o, "bf16") && !tdp_obj_str_eq(o, "f16")))
		return tdp_errorf(why, why_len, -EINVAL, "precision must be \"f32\", \"bf16\" or \"f16\"");
	*ret = tdp_obj_str_eq(o, "bf16") ? TDP_DTYPE_BF16 : tdp_obj_str_eq(o, "f16") ? TDP_DTYPE_F16 : TDP_DTYPE_F32;
	return 0;
}

void model_loss_scale_defaults(struct model_loss_scale *ret)
{
	*ret = (struct model_loss_scale){ .init = 65536.0, .growth = 2.0, .backoff = 0.5, .interval = 2000 };
}

int model_loss_scale_parse(const msgpack_object *o, struct model_loss_scale *ls, char *why, size_t why_len)
{
	static const char *const keys[] = { "init", "growth_factor", "backoff_factor", "growth_interval" };
	struct model_loss_scale v = *ls;
	double *dst[3] = { &v.init, &v.growth, &v.backoff }, iv = (double)v.interval;

	if (!o || o->type != MSGPACK_OBJECT_MAP)
		return tdp_errorf(why, why_len, -EINVAL, "loss_scale must be a map");
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *key = &o->via.map.ptr[i].key;
		size_t k;

		for (k = 0; k < 4 && !tdp_obj_str_eq(key, keys[k]); k++)
			;
		if (k == 4)
			return tdp_errorf(why, why_len, -EINVAL, "loss_scale: unknown key (init, growth_factor, "
					  "backoff_factor, growth_interval)");
		if (tdp_obj_number(&o->via.map.ptr[i].val, k < 3 ? dst[k] : &iv) < 0)
			return tdp_errorf(why, why_len, -EINVAL, "loss_scale.%s must be a number", keys[k]);
	}
	/* As GradScaler's checks; the scale is an f32 on the GPU. */
	if (!(v.init > 0 && v.init <= 3.4e38) || !(v.growth > 1 && v.growth <= 65536) ||
	    !(v.backoff > 0 && v.backoff < 1))
		return tdp_errorf(why, why_len, -EINVAL, "loss_scale: init must be > 0 (an f32), growth_factor "
				  "> 1 (at most 65536), backoff_factor in (0, 1)");
	if (!(iv >= 1 && iv <= MODEL_LOSS_SCALE_MAX_INTERVAL) || iv != (double)(int64_t)iv)
		return tdp_errorf(why, why_len, -EINVAL, "loss_scale.growth_interval must be an integer from 1 "
				  "to %d", MODEL_LOSS_SCALE_MAX_INTERVAL);
	v.interval = (int64_t)iv;
	*ls = v;
	return 0;
}

/* Check the parts of a decoded definition and point the model's fields at them. */
static int parse_def(struct model *m, char *why, size_t why_len)
{
	static const char *const keys[] = { "nodes", "loss", "params", "inputs", "outputs", "optimizer", "state",
					    "given", "param_layer", "precision", "loss_scale" };
	const msgpack_object *def = &m->u.data, *inputs, *outputs, *state;
	int r;

	if (def->type != MSGPACK_OBJECT_MAP)
		return tdp_errorf(why, why_len, -EINVAL, "the definition must be a map");
	for (uint32_t i = 0; i < def->via.map.size; i++) {
		bool known = false;

		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			known = known || tdp_obj_str_eq(&def->via.map.ptr[i].key, keys[k]);
		if (!known)
			return tdp_errorf(why, why_len, -EINVAL, "the definition has an unknown key");
	}
	m->nodes = tdp_map_find(def, "nodes");
	m->loss_obj = tdp_map_find(def, "loss");
	m->params_obj = tdp_map_find(def, "params");
	m->optimizer = tdp_map_find(def, "optimizer");
	inputs = tdp_map_find(def, "inputs");
	outputs = tdp_map_find(def, "outputs");
	if (!m->nodes || m->nodes->type != MSGPACK_OBJECT_ARRAY || m->nodes->via.array.size == 0 ||
	    m->nodes->via.array.size > TDP_MAX_GRAPH_NODES)
		return tdp_errorf(why, why_len, -EINVAL, "nodes must be an array of 1 to %d nodes",
				  TDP_MAX_GRAPH_NODES);
	for (uint32_t i = 0; i < m->nodes->via.array.size; i++) {
		const msgpack_object *nd = &m->nodes->via.array.ptr[i];

		if (nd->type != MSGPACK_OBJECT_MAP)
			return tdp_errorf(why, why_len, -EINVAL, "node %u must be a map {id, op, inputs, attrs}", i);
		if (tdp_map_find(nd, "out"))
			return tdp_errorf(why, why_len, -EINVAL,
					  "node %u has an 'out': a model's nodes store nothing "
					  "(model.predict stores outputs with its own 'out')", i);
	}
	if (!m->loss_obj || tdp_obj_strcpy(m->loss_obj, m->loss, sizeof(m->loss)) < 0 || !m->loss[0])
		return tdp_errorf(why, why_len, -EINVAL, "loss must be a node id");
	if (!m->params_obj || m->params_obj->type != MSGPACK_OBJECT_ARRAY || m->params_obj->via.array.size == 0)
		return tdp_errorf(why, why_len, -EINVAL, "params must name 1 to %d tensors", MODEL_MAX_PARAMS);
	r = name_list(m->params_obj, MODEL_MAX_PARAMS, "params", &m->params, &m->nparams, true, why, why_len);
	if (r < 0)
		return r;
	if (m->optimizer && m->optimizer->type != MSGPACK_OBJECT_MAP)
		return tdp_errorf(why, why_len, -EINVAL, "optimizer must be a map");
	if (inputs) {
		if (inputs->type != MSGPACK_OBJECT_ARRAY || inputs->via.array.size > MODEL_MAX_INPUTS)
			return tdp_errorf(why, why_len, -EINVAL, "inputs must be an array of up to %d inputs",
					  MODEL_MAX_INPUTS);
		m->ninputs = inputs->via.array.size;
		for (unsigned k = 0; k < m->ninputs; k++) {
			if ((r = parse_input(&inputs->via.array.ptr[k], k, &m->inputs[k], why, why_len)) < 0)
				return r;
			for (unsigned j = 0; j < k; j++)
				if (!strcmp(m->inputs[j].name, m->inputs[k].name))
					return tdp_errorf(why, why_len, -EINVAL, "inputs: '%s' is listed twice",
							  m->inputs[k].name);
			if (model_has_param(m, m->inputs[k].name))
				return tdp_errorf(why, why_len, -EINVAL, "'%s' is both an input and a parameter",
						  m->inputs[k].name);
		}
	}
	if (outputs) {
		if (outputs->type != MSGPACK_OBJECT_ARRAY)
			return tdp_errorf(why, why_len, -EINVAL, "outputs must be an array of node ids");
		r = name_list(outputs, MODEL_MAX_OUTPUTS, "outputs", &m->outputs, &m->noutputs, true, why,
			      why_len);
		if (r < 0)
			return r;
	}
	/* A layer model (train/layers.h): the definition as the client gave
	 * it, and each parameter's layer path ("" for a raw one). */
	m->given = tdp_map_find(def, "given");
	m->param_layer = tdp_map_find(def, "param_layer");
	if (m->given && m->given->type != MSGPACK_OBJECT_MAP)
		return tdp_errorf(why, why_len, -EINVAL, "given must be a map");
	if (m->param_layer && (m->param_layer->type != MSGPACK_OBJECT_ARRAY ||
			       m->param_layer->via.array.size != m->nparams))
		return tdp_errorf(why, why_len, -EINVAL, "param_layer must list one layer per parameter");
	for (uint32_t k = 0; m->param_layer && k < m->nparams; k++)
		if (m->param_layer->via.array.ptr[k].type != MSGPACK_OBJECT_STR)
			return tdp_errorf(why, why_len, -EINVAL, "param_layer[%u] must be a string", k);
	m->precision = TDP_DTYPE_F32;
	if (tdp_map_find(def, "precision") &&
	    (r = model_precision_parse(tdp_map_find(def, "precision"), &m->precision, why, why_len)) < 0)
		return r;
	model_loss_scale_defaults(&m->loss_scale);
	if (tdp_map_find(def, "loss_scale") &&
	    (r = model_loss_scale_parse(tdp_map_find(def, "loss_scale"), &m->loss_scale, why, why_len)) < 0)
		return r;
	state = tdp_map_find(def, "state");
	return state ? parse_state(m, state, why, why_len) : 0;
}

int model_new(const char *name, const msgpack_object *def, struct model **ret, char *why, size_t why_len)
{
	struct bounded bw;
	msgpack_packer pk;
	struct model *m;
	int r;

	if (!tdp_name_valid(name, strlen(name)))
		return tdp_errorf(why, why_len, -EINVAL, "invalid model name");
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	strcpy(m->name, name);
	msgpack_unpacked_init(&m->u);
	bw = (struct bounded){ .b = &m->def };
	msgpack_packer_init(&pk, &bw, bounded_write);
	if (msgpack_pack_object(&pk, *def)) {
		r = bw.over ? tdp_errorf(why, why_len, -EFBIG, "the definition is over %u bytes packed",
					 MODEL_MAX_DEF_BYTES)
			    : -ENOMEM;
		goto fail;
	}
	if (tdp_unpack(&m->u, tdp_buf_head(&m->def), tdp_buf_len(&m->def)) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	if ((r = parse_def(m, why, why_len)) < 0)
		goto fail;
	*ret = m;
	return 0;
fail:
	model_free(m);
	return r;
}

void model_free(struct model *m)
{
	if (!m)
		return;
	msgpack_unpacked_destroy(&m->u);
	tdp_buf_free(&m->def);
	free(m->params);
	free(m->outputs);
	free(m);
}

const void *model_definition(const struct model *m, size_t *ret_len)
{
	*ret_len = tdp_buf_len(&m->def);
	return tdp_buf_head(&m->def);
}

bool model_has_input(const struct model *m, const char *id)
{
	for (unsigned k = 0; k < m->ninputs; k++)
		if (!strcmp(m->inputs[k].name, id))
			return true;
	return false;
}

bool model_has_param(const struct model *m, const char *name)
{
	for (unsigned k = 0; k < m->nparams; k++)
		if (!strcmp(m->params[k], name))
			return true;
	return false;
}

struct models *models_new(uint32_t max)
{
	struct models *ms = calloc(1, sizeof(*ms));

	if (ms) {
		ms->max = max;
		ms->next_serial = 1;
	}
	return ms;
}

void models_free(struct models *ms)
{
	if (!ms)
		return;
	while (ms->head) {
		struct model *m = ms->head;

		ms->head = m->next;
		model_free(m);
	}
	free(ms);
}

struct model *models_find(struct models *ms, const char *name)
{
	for (struct model *m = ms->head; m; m = m->next)
		if (!strcmp(m->name, name))
			return m;
	return NULL;
}

struct model *models_find_serial(struct models *ms, const char *name, uint64_t serial)
{
	struct model *m = models_find(ms, name);

	return m && m->serial == serial ? m : NULL;
}

bool models_has_room(const struct models *ms)
{
	return ms->count < ms->max;
}

uint32_t models_count_owner(const struct models *ms, uint32_t owner)
{
	uint32_t n = 0;

	for (const struct model *m = ms->head; m; m = m->next)
		n += m->owner == owner;
	return n;
}

int models_put(struct models *ms, struct model *m)
{
	struct model **pp;

	for (pp = &ms->head; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->name, m->name))
			break;
	if (!*pp && !models_has_room(ms))
		return -ENOSPC;
	m->serial = ms->next_serial++;
	if (*pp) {
		struct model *old = *pp;

		m->next = old->next;
		*pp = m;
		model_free(old);
	} else {
		m->next = ms->head;
		ms->head = m;
		ms->count++;
	}
	return 0;
}

int models_delete(struct models *ms, const char *name)
{
	for (struct model **pp = &ms->head; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->name, name)) {
			struct model *m = *pp;

			*pp = m->next;
			ms->count--;
			model_free(m);
			return 0;
		}
	return -ENOENT;
}

static int by_name(const void *a, const void *b)
{
	return strcmp((*(struct model *const *)a)->name, (*(struct model *const *)b)->name);
}

int models_list(struct models *ms, struct model ***ret_list, size_t *ret_count)
{
	struct model **list = NULL;
	size_t n = 0;

	if (ms->count) {
		list = malloc(ms->count * sizeof(*list));
		if (!list)
			return -ENOMEM;
		for (struct model *m = ms->head; m; m = m->next)
			list[n++] = m;
		qsort(list, n, sizeof(*list), by_name);
	}
	*ret_list = list;
	*ret_count = n;
	return 0;
}
