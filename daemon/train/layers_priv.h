/* What the layer expanders share (layers.c: parsing, the stack and simple
 * layers; layers_nn.c: convolution, normalisation, embedding;
 * layers_attention.c: attention; layers_rnn.c: lstm, gru).
 * Not for use outside train/layers*.c. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/map_check.h"
#include "store/model.h"
#include "train/layers.h"

#define LX_ID (TDP_MAX_NAME_LEN + 1)
#define LX_MAX_PARAMS (MODEL_MAX_PARAMS + 2 * MODEL_MAX_STATE)

/* A tensor's shape as far as the expansion knows it: rank -1 unknown; dim 0
 * (the batch) is -1, other unknown dims too. */
struct shp {
	int rank;
	int64_t d[TDP_MAX_RANK];
	int dtype;
};

struct lx {
	struct caller *call;
	const char *model;
	uint64_t seed;
	int dtype;                  /* of created parameters */
	msgpack_sbuffer nb;         /* the expanded nodes, packed one after another */
	msgpack_packer pk;
	unsigned nnodes, nlayers;
	struct layer_param *p;
	unsigned np;
	unsigned nstate;
	char state[MODEL_MAX_STATE][LX_ID];
	double momentum[MODEL_MAX_STATE];
};

/* One layer being expanded: its path, its map, its checked keys. */
struct layer {
	char path[LX_ID];
	const char *type;
	const msgpack_object *map, *init;
	unsigned depth;
};

/* A node attribute to emit: k with an int ('i'), a double ('f'), a bool
 * ('b'), an int list ('I', v[0..n)) or a string ('s'). */
struct at {
	const char *k;
	char t;
	int64_t i;
	double f;
	const int64_t *v;
	unsigned n;
	const char *s;
};

/* Fail with INVALID_ARGUMENT: "layer 'PATH' (TYPE): ...". Returns -1. */
__attribute__((format(printf, 3, 4)))
int lx_fail(struct lx *x, const struct layer *l, const char *fmt, ...);

/* Check the layer's keys: "type", "name", "init" and `fields` (n). Fills
 * fields[i].value. Returns 0 or -1 after lx_fail. */
int lx_keys(struct lx *x, const struct layer *l, struct map_field *fields, size_t n);

/* A whole number in [lo, hi] (default `def` when absent). */
int lx_uint(struct lx *x, const struct layer *l, const struct map_field *f, uint64_t lo, uint64_t hi,
	    uint64_t def, uint64_t *ret);
/* A number in [lo, hi]. */
int lx_num(struct lx *x, const struct layer *l, const struct map_field *f, double lo, double hi, double def,
	   double *ret);
int lx_bool(struct lx *x, const struct layer *l, const struct map_field *f, bool def, bool *ret);
/* An int or [h, w] in [lo, hi]. */
int lx_pair(struct lx *x, const struct layer *l, const struct map_field *f, uint64_t lo, uint64_t hi,
	    const uint64_t *def, uint64_t ret[2]);

/* Emit node `id` = op(inputs) with attrs. Returns 0 or -1 after td_fail. */
int lx_emit(struct lx *x, const char *id, const char *op, const char *const *in, unsigned nin,
	    const struct at *a, unsigned na);
/* "<path>/<what>" into `id` (LX_ID bytes). */
int lx_id(struct lx *x, const struct layer *l, const char *what, char *id);

/* Declare the layer's parameter (or buffer) `pname` of `rank` dims, with
 * its default initialiser unless the layer's `init` names another; fan_in
 * and fan_out as torch computes them. Writes its tensor name into `name`
 * (LX_ID bytes). Returns 0 or -1 after lx_fail. */
int lx_param(struct lx *x, const struct layer *l, const char *pname, unsigned rank, const uint64_t *shape,
	     enum layer_init_kind kind, double a, bool buffer, char *name);

/* A seed for the random node of the layer: the model's seed and the path. */
int64_t lx_seed(const struct lx *x, const char *path);

/* A linear layer (torch nn.Linear) at `path` on `in` with shape *s. */
int lx_linear(struct lx *x, const struct layer *l, unsigned in_f, unsigned out_f, bool bias, const char *in,
	      struct shp *s);

/* An alias node `id` of node `in` (a free reshape view when the shape is
 * known, else a copy). */
int lx_alias(struct lx *x, const char *id, const char *in, const struct shp *s);

/* Expand a child stack (`layers` array) under l into the nodes ending at
 * *ret_out (LX_ID). */
int lx_stack(struct lx *x, const struct layer *parent, const msgpack_object *arr, const char *in, struct shp *s,
	     char *ret_out);

/* The layer families of layers_nn.c: each returns 1 when it knows
 * l->type (and expanded it, or failed: then -1), 0 when not. */
int lx_nn(struct lx *x, const struct layer *l, const char *in, struct shp *s);

/* attention and transformer_block (layers_attention.c), as lx_nn; other
 * types go on to lx_rnn. */
int lx_attention(struct lx *x, const struct layer *l, const char *in, struct shp *s);

/* lstm and gru (layers_rnn.c), as lx_nn. */
int lx_rnn(struct lx *x, const struct layer *l, const char *in, struct shp *s);
