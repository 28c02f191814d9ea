/* The layer form of model.define (docs/training.md, "A model as layers";
 * docs/protocol.md, model.define): a stack of layers expanded into the graph
 * nodes, parameters and state that the graph form names by hand, and the
 * initialisation of the parameters that are not stored yet (layer_init.c). */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "wire_limits.h"

struct caller;

/* Limits, checked before anything grows. */
#define LAYERS_MAX_DEPTH 12   /* the wire allows 32 levels of msgpack nesting: about 14 of layers */
#define LAYERS_MAX_LAYERS 1024   /* layers, nested ones counted */
#define LAYERS_MAX_NODES 3072    /* expanded nodes (raw nodes come on top, up to the graph's 4096) */
/* T of an unrolled lstm/gru: its training step (forward, backward, update;
 * about 50 nodes a time step) must fit the graph's TDP_MAX_GRAPH_NODES, which
 * one lstm of T = 82 fills; 64 leaves room for the model's other layers. */
#define LAYERS_MAX_RNN_STEPS 64

enum layer_init_kind {
	INIT_UNIFORM,   /* U(-a, a) */
	INIT_NORMAL,    /* N(0, a²) */
	INIT_ZEROS,
	INIT_ONES,
};

/* One tensor a layer owns: a parameter (trained) or a buffer (model state). */
struct layer_param {
	char name[TDP_MAX_NAME_LEN + 1];   /* "<model>/<path>.<param>", as the client wrote the model */
	char local[TDP_MAX_NAME_LEN + 1];  /* "<path>.<param>": what seeds its initialiser */
	char layer[TDP_MAX_NAME_LEN + 1];  /* the layer's path */
	bool buffer;
	int dtype;
	unsigned rank;
	uint64_t shape[TDP_MAX_RANK];
	enum layer_init_kind init;
	double a;                           /* bound or standard deviation */
};

/* What an expansion gives: the definition model_new takes (packed map:
 * nodes, params, loss, inputs, outputs, optimizer, state, and `given`, the
 * request's definition as it came, and `param_layer`) and the tensors to
 * initialise. */
struct layers_out {
	msgpack_sbuffer def;
	struct layer_param *p;
	unsigned np;
	uint64_t seed;
};

/* Expand the model.define params `req` (a map with `layers`) of the model
 * the client named `model` (its text as written) into *out (free with
 * layers_out_free, also after a failure). Returns 0, or -1 after td_fail
 * (INVALID_ARGUMENT naming the layer path and key, RESOURCE_EXHAUSTED over
 * a limit). */
int layers_expand(struct caller *call, const msgpack_object *req, const char *model, struct layers_out *out);

void layers_out_free(struct layers_out *out);

/* Check the stored tensors of `p` against their specs: a stored one of
 * another dtype or shape fails (DTYPE_MISMATCH / SHAPE_MISMATCH), one the
 * caller cannot read fails as a lookup does. Sets want[k] for each tensor
 * not stored. Returns 0 or -1 after td_fail. */
int layer_init_check(struct caller *call, const struct layer_param *p, unsigned np, bool *want);

/* Create and initialise on the GPU the tensors `p[k]` with want[k], seeded
 * by `seed` and each one's local name, owned by the caller (quota and
 * namespace rights as any put). All or nothing. Returns 0 or -1 after
 * td_fail. */
int layer_init_create(struct caller *call, const struct layer_param *p, unsigned np, const bool *want,
		      uint64_t seed);

/* Delete the tensors `p[k]` with want[k] (undoing layer_init_create). */
void layer_init_undo(struct caller *call, const struct layer_param *p, unsigned np, const bool *want);

/* The seed of a random draw named `s` (a parameter's local name, a dropout
 * layer's path) in a model seeded `seed`: splitmix64's finaliser over the
 * seed and an FNV-1a hash of `s`, as a non-negative int64. */
int64_t layers_seed(uint64_t seed, const char *s);
