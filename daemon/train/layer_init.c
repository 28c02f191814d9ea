/* Creating a layer model's parameters and buffers on the GPU (docs/training.md,
 * "Initialisers"): one graph of rand/randn/zeros/ones nodes, scaled and
 * shifted with mul/add, each result stored under the tensor's name through
 * the graph's own output path, so quotas and namespace rights apply as for
 * any graph.run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "dtype.h"
#include "engine/graph_core.h"
#include "engine/graph_parse.h"
#include "pack.h"
#include "rpc.h"
#include "status.h"
#include "store/lookup.h"
#include "train/layers.h"
#include "train/step.h"

int layer_init_check(struct caller *call, const struct layer_param *p, unsigned np, bool *want)
{
	char key[TDP_MAX_NAME_LEN + 1], why[TDP_MAX_ERROR_MESSAGE], shown[NAMES_SHOWN_MAX];

	for (unsigned k = 0; k < np; k++) {
		struct tensor *t = NULL;
		bool same = true;
		int code;

		if (lookup_key(call, p[k].name, strlen(p[k].name), key) < 0)
			return -1;
		code = lookup_tensor_why(call, p[k].buffer ? "buffer" : "parameter", key, ACCESS_READ, &t, why,
					 sizeof(why));
		want[k] = code == TDP_NOT_FOUND;
		if (want[k])
			continue;
		if (code != 0)
			return td_fail(&call->err, code, "%s", why);
		lookup_show(call, key, shown);
		if (t->dtype != p[k].dtype)
			return td_fail(&call->err, TDP_DTYPE_MISMATCH, "layer '%s': '%s' is stored as %s, the layer "
				       "needs %s", p[k].layer, shown, tdp_dtype_name(t->dtype), tdp_dtype_name(p[k].dtype));
		same = t->rank == p[k].rank;
		for (unsigned d = 0; same && d < t->rank; d++)
			same = t->shape[d] == p[k].shape[d];
		if (!same)
			return td_fail(&call->err, TDP_SHAPE_MISMATCH, "layer '%s': '%s' is stored with another shape "
				       "than the layer's (rank %u, dim 0 %llu; the layer needs rank %u, dim 0 %llu)",
				       p[k].layer, shown, t->rank, (unsigned long long)(t->rank ? t->shape[0] : 0),
				       p[k].rank, (unsigned long long)(p[k].rank ? p[k].shape[0] : 0));
	}
	return 0;
}

static uint64_t mix64(uint64_t z)
{
	z ^= z >> 30;
	z *= 0xbf58476d1ce4e5b9ull;
	z ^= z >> 27;
	z *= 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

int64_t layers_seed(uint64_t seed, const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return (int64_t)(mix64(seed ^ mix64(h)) >> 1);
}

/* One node {id, op, inputs, attrs: {shape?, seed?, dtype?, scalar?}, out?}. */
static int pack_node(msgpack_packer *pk, const char *id, const char *op, const char *in,
		     const struct layer_param *p, int64_t seed, const double *scalar, bool out)
{
	unsigned na = scalar ? 1 : in ? 0 : 2 + (seed >= 0);
	int fail = msgpack_pack_map(pk, 3 + (na ? 1 : 0) + out) || tdp_pack_cstr(pk, "id") ||
		   tdp_pack_cstr(pk, id) || tdp_pack_cstr(pk, "op") || tdp_pack_cstr(pk, op) ||
		   tdp_pack_cstr(pk, "inputs") || msgpack_pack_array(pk, in ? 1 : 0) || (in && tdp_pack_cstr(pk, in));

	if (!fail && na)
		fail = tdp_pack_cstr(pk, "attrs") || msgpack_pack_map(pk, na);
	if (!fail && scalar)
		fail = tdp_pack_cstr(pk, "scalar") || msgpack_pack_double(pk, *scalar);
	if (!fail && !scalar && !in) {
		fail = tdp_pack_cstr(pk, "shape") || msgpack_pack_array(pk, p->rank);
		for (unsigned d = 0; !fail && d < p->rank; d++)
			fail = msgpack_pack_uint64(pk, p->shape[d]);
		fail = fail || tdp_pack_cstr(pk, "dtype") || tdp_pack_cstr(pk, tdp_dtype_name(p->dtype)) ||
		       (seed >= 0 && (tdp_pack_cstr(pk, "seed") || msgpack_pack_int64(pk, seed)));
	}
	if (!fail && out)
		fail = tdp_pack_cstr(pk, "out") || tdp_pack_cstr(pk, p->name);
	return fail ? -1 : 0;
}

/* The nodes creating p: zeros/ones, or rand·2a − a, or randn·a. */
static int pack_init(msgpack_packer *pk, unsigned k, const struct layer_param *p, uint64_t seed, unsigned *n)
{
	char a[32], b[32], c[32];
	double two = 2 * p->a, neg = -p->a;
	int64_t s = layers_seed(seed, p->local);

	snprintf(a, sizeof(a), "r%u", k);
	snprintf(b, sizeof(b), "s%u", k);
	snprintf(c, sizeof(c), "t%u", k);
	if (p->init == INIT_ZEROS || p->init == INIT_ONES) {
		*n += 1;
		return pack_node(pk, a, p->init == INIT_ZEROS ? "zeros" : "ones", NULL, p, -1, NULL, true);
	}
	if (p->init == INIT_NORMAL) {
		*n += 2;
		if (pack_node(pk, a, "randn", NULL, p, s, NULL, false) < 0)
			return -1;
		return pack_node(pk, b, "mul", a, p, -1, &p->a, true);
	}
	*n += 3;
	if (pack_node(pk, a, "rand", NULL, p, s, NULL, false) < 0 || pack_node(pk, b, "mul", a, p, -1, &two, false) < 0)
		return -1;
	return pack_node(pk, c, "add", b, p, -1, &neg, true);
}

int layer_init_create(struct caller *call, const struct layer_param *p, unsigned np, const bool *want,
		      uint64_t seed)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacked u;
	struct graph gr = { .call = call };
	unsigned n = 0, nwant = 0;
	int r = -1;

	for (unsigned k = 0; k < np; k++)
		nwant += want[k];
	if (!nwant)
		return 0;
	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&u);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	/* The array header is patched below: 3 nodes at most per tensor. */
	if (msgpack_pack_array(&pk, 0xffffffffu))
		goto oom;
	for (unsigned k = 0; k < np; k++)
		if (want[k] && pack_init(&pk, k, &p[k], seed, &n) < 0)
			goto oom;
	sb.data[1] = (char)(n >> 24);
	sb.data[2] = (char)(n >> 16);
	sb.data[3] = (char)(n >> 8);
	sb.data[4] = (char)n;
	if (tdp_unpack(&u, (const uint8_t *)sb.data, sb.size) < 0)
		goto oom;
	if (graph_parse(&gr, &u.data, NULL) == 0 && graph_check_outputs(&gr) == 0 && graph_execute(&gr) == 0 &&
	    graph_commit_all(&gr) == 0)
		r = 0;
	goto out;
oom:
	td_fail(&call->err, TDP_INTERNAL, "out of memory");
out:
	graph_free(&gr);
	msgpack_unpacked_destroy(&u);
	msgpack_sbuffer_destroy(&sb);
	return r;
}

void layer_init_undo(struct caller *call, const struct layer_param *p, unsigned np, const bool *want)
{
	char key[TDP_MAX_NAME_LEN + 1];
	struct td_error keep = call->err;

	for (unsigned k = 0; k < np; k++)
		if (want[k] && lookup_key(call, p[k].name, strlen(p[k].name), key) >= 0)
			store_delete(call->d->store, key, strlen(key));
	call->err = keep;
}
