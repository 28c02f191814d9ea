/* Models: a named training graph (nodes, loss, parameters, data inputs,
 * default outputs, optimizer) defined once and used by train.step,
 * train.run, model.evaluate and model.predict, with its step count.
 *
 * The registry is a small table behind this API so that persistence (to the
 * state dir) can be added without touching the methods: a model's whole
 * definition is one packed msgpack map (model_definition()). */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "ops/op.h"
#include "wire_limits.h"

/* Limits checked before anything is allocated for a definition. */
#define MODEL_MAX_MODELS 1024
#define MODEL_MAX_PARAMS 256
#define MODEL_MAX_INPUTS OP_MAX_INPUTS
#define MODEL_MAX_OUTPUTS 64
#define MODEL_MAX_DEF_BYTES (4u << 20)
#define MODEL_MAX_STEP INT32_MAX
#define MODEL_MAX_STATE 64

/* A batch_norm node whose running statistics (its stored inputs 1 and 2)
 * belong to the model: updated by training steps, used in eval mode. */
struct model_state {
	char node[TDP_MAX_NAME_LEN + 1];
	double momentum;           /* torch's: new = (1 - m) * running + m * batch */
	char buffer[2][TDP_MAX_NAME_LEN + 1]; /* running mean and var, as the node names them */
};

/* A data input: its name and, when the definition gave one, an example
 * dtype and shape (used to check the graph when no tensor of that name is
 * stored). */
struct model_input {
	char name[TDP_MAX_NAME_LEN + 1];
	bool has_spec;
	int dtype;
	unsigned rank;
	uint64_t shape[TDP_MAX_RANK];
};

/* Dynamic loss scaling of precision "f16" (docs/training.md, "Mixed
 * precision"): torch.cuda.amp.GradScaler's settings. */
struct model_loss_scale {
	double init;               /* the first scale (2^16) */
	double growth;             /* growth_factor (2) */
	double backoff;            /* backoff_factor (0.5) */
	int64_t interval;          /* growth_interval (2000) */
};

#define MODEL_LOSS_SCALE_MAX_INTERVAL (1 << 24)

struct model {
	char name[TDP_MAX_NAME_LEN + 1];
	uint64_t serial;            /* unique per definition: a replaced model gets a new one */
	uint32_t owner;             /* uid */
	int64_t created_ns, modified_ns; /* CLOCK_REALTIME */
	int64_t step;               /* the last step trained (0: none) */
	struct tdp_buf def;         /* the packed definition map */
	msgpack_unpacked u;         /* def decoded; the fields below point into it */
	const msgpack_object *nodes;     /* array */
	const msgpack_object *optimizer; /* map or NULL */
	const msgpack_object *loss_obj;  /* str */
	const msgpack_object *params_obj; /* array of str */
	/* A layer model (model.define with `layers`, train/layers.h): the
	 * definition as given, and each parameter's layer path ("" for a raw
	 * one); NULL for a graph model. */
	const msgpack_object *given, *param_layer;
	char loss[TDP_MAX_NAME_LEN + 1];
	unsigned nparams;
	char (*params)[TDP_MAX_NAME_LEN + 1];
	unsigned ninputs;
	struct model_input inputs[MODEL_MAX_INPUTS];
	unsigned noutputs;
	char (*outputs)[TDP_MAX_NAME_LEN + 1];
	unsigned nstate;
	struct model_state state[MODEL_MAX_STATE];
	/* `precision` of the definition (autocast: TDP_DTYPE_F32 off,
	 * TDP_DTYPE_BF16 or TDP_DTYPE_F16), used by its steps, evaluation and
	 * prediction. */
	int precision;
	/* `loss_scale` of the definition over GradScaler's defaults. */
	struct model_loss_scale loss_scale;
	/* train.steps of it submitted and not finished (async_request.h):
	 * another connection's step waits meanwhile (methods_train.c). */
	uint32_t steps_pending;
	struct model *next;         /* the registry's chain */
};

struct models;

/* An empty registry of at most `max` models. NULL on ENOMEM. */
struct models *models_new(uint32_t max);

/* Free every model and the registry; NULL is accepted. */
void models_free(struct models *ms);

/* GradScaler's defaults into *ret. */
void model_loss_scale_defaults(struct model_loss_scale *ret);

/* A `loss_scale` map ({init?, growth_factor?, backoff_factor?,
 * growth_interval?}) over the settings in *ls (written only on success).
 * Returns 0, or -EINVAL with the reason in `why`. */
int model_loss_scale_parse(const msgpack_object *o, struct model_loss_scale *ls, char *why, size_t why_len);

/* A `precision` value (str "f32", "bf16" or "f16") as the autocast dtype
 * into *ret (TDP_DTYPE_F32: off). Returns 0, or -EINVAL
 * with the reason in `why`. */
int model_precision_parse(const msgpack_object *o, int *ret, char *why, size_t why_len);

/* Check the definition map `def` ({nodes, loss, params, inputs?, outputs?,
 * optimizer?, state?, given?, param_layer?, precision?, loss_scale?}) for its
 * structure and limits (not against the store: see
 * train_model_check) and build a model named `name` holding a packed copy.
 * Returns 0 with *ret (free with model_free unless handed to models_put), or
 * -EINVAL with the reason in `why`, or -ENOMEM / -EFBIG (definition over
 * MODEL_MAX_DEF_BYTES). */
int model_new(const char *name, const msgpack_object *def, struct model **ret, char *why,
	      size_t why_len);

/* Free a model that is not in a registry; NULL is accepted. */
void model_free(struct model *m);

/* The packed definition map and its length. */
const void *model_definition(const struct model *m, size_t *ret_len);

/* Whether `id` is one of the model's declared inputs. */
bool model_has_input(const struct model *m, const char *id);

/* Whether `name` is one of the model's parameters. */
bool model_has_param(const struct model *m, const char *name);

/* The model named `name`, or NULL. */
struct model *models_find(struct models *ms, const char *name);

/* The model named `name` if it still has `serial` (not replaced), or NULL. */
struct model *models_find_serial(struct models *ms, const char *name, uint64_t serial);

/* Insert `m` (owned by the registry from now on), replacing and freeing a
 * model of the same name. Gives `m` a fresh serial. Returns 0, or -ENOSPC
 * when a new name would exceed the limit (`m` is then still the caller's). */
int models_put(struct models *ms, struct model *m);

/* Models owned by uid `owner` (user_max_models, docs/security.md). */
uint32_t models_count_owner(const struct models *ms, uint32_t owner);

/* Whether one more name fits. */
bool models_has_room(const struct models *ms);

/* Remove and free the model named `name`. Returns 0 or -ENOENT. */
int models_delete(struct models *ms, const char *name);

/* Every model, sorted by name: *ret_list is a malloc'd array of *ret_count
 * pointers into the registry, valid until it changes (free() the array;
 * NULL when empty). Returns 0 or -ENOMEM. */
int models_list(struct models *ms, struct model ***ret_list, size_t *ret_count);
