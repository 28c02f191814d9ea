/* One training step (inside train/): what train.step and train.run share,
 * building the graph of forward, backward and optimizer updates, running it
 * and committing its results. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/forward.h"
#include "store/model.h"
#include "train/optimizer.h"

#define MAX_PARAMS 256

struct graph;

/* What train.step and train.run share: the loss, the parameters, the
 * optimizer. */
struct train_spec {
	struct optimizer opt;      /* kind OPT_NONE: gradients only */
	char loss[TDP_MAX_NAME_LEN + 1];
	unsigned np;
	char names[MAX_PARAMS][TDP_MAX_NAME_LEN + 1];
	bool grads;                /* store <param>.grad */
	int fuse;                  /* fuse elementwise chains: 1, 0, -1 the device's default */
	/* optimizer.groups: parameter k is updated with gopt[group[k] - 1],
	 * or opt where group[k] is 0 */
	struct optimizer gopt[OPT_MAX_GROUPS];
	unsigned ngroups;
	uint8_t group[MAX_PARAMS];
	/* Gradient accumulation: the step's gradients (times grad_scale) are
	 * added to the stored <param>.grad; without `apply` the parameters are
	 * left alone, with it they are updated from the sum and .grad is
	 * cleared (zeros). */
	bool accumulate, apply;
	bool fresh;                /* accumulating, but over no stored .grad */
	double grad_scale;
	/* Random nodes (ops with a `seed` attr) draw from a stream derived from
	 * their seed, run_seed and the step when training (train_seed_graph). */
	uint64_t run_seed;
	/* A model's state (model.h): its batch_norm nodes run with batch
	 * statistics in training steps, which update their running statistics,
	 * and with the running statistics otherwise. */
	unsigned nstate;
	struct model_state state[MODEL_MAX_STATE];
	/* Mixed precision (docs/training.md): the graph's autocast dtype,
	 * TDP_DTYPE_F32 (off, the default), TDP_DTYPE_BF16 or TDP_DTYPE_F16;
	 * f16 scales the loss dynamically with these settings (loss_scale.h). */
	int precision;
	struct model_loss_scale loss_scale;
};

/* Fill *spec from the request's (or model's) loss, params, optimizer (may be
 * NULL: gradients only) and grads (may be NULL); fuse is -1 (the device's
 * default). Returns 0, or -1 after td_fail. */
int train_spec_parse(struct caller *call, const msgpack_object *loss, const msgpack_object *params,
		     const msgpack_object *opt, const msgpack_object *grads, struct train_spec *spec);

/* The request's `precision` (NULL: absent, *spec keeps its own: the
 * model's, else f32) into spec->precision. Returns 0, or -1 after
 * td_fail(INVALID_ARGUMENT). */
int train_spec_precision(struct caller *call, const msgpack_object *precision, struct train_spec *spec);

/* The request's `loss_scale` map (NULL: absent) over spec->loss_scale (the
 * model's, else GradScaler's defaults). Returns 0, or -1 after
 * td_fail(INVALID_ARGUMENT). */
int train_spec_loss_scale(struct caller *call, const msgpack_object *loss_scale, struct train_spec *spec);

/* Take model `m`'s state (its batch_norm buffers), precision and loss_scale
 * into *spec. */
void train_spec_model(struct train_spec *spec, const struct model *m);

/* Put model `m`'s state nodes present in `gr` in train (batch statistics)
 * or eval mode (running statistics), updating nothing: model.evaluate and
 * model.predict. */
void train_model_mode(struct graph *gr, const struct model *m, bool train);

/* One step to build (train_build_step): what it reads and which step it is. */
struct step_input {
	const struct train_spec *spec;
	const msgpack_object *nodes;     /* the forward nodes (a model's or the request's) */
	const msgpack_object *outputs;   /* node ids returned inline, or NULL */
	const struct feeds *feeds;       /* the minibatch's rows, or NULL */
	int64_t step;                    /* its number: the lr schedule and the RNG */
	bool train;                      /* with the backward pass and the updates */
	bool flat;                       /* data parallel: every gradient in one f32 vector */
};

/* What building a step gave. */
struct step_nodes {
	unsigned loss;                   /* the loss node */
	int flat;                        /* the node of the gradients' vector (step_input.flat) */
	double lr;                       /* the step's learning rate (0 without an optimizer) */
	/* precision f16 (loss_scale.h), else -1: f32 scalar nodes kept for
	 * reading back, 1 when the step's updates were skipped (-1 also in a
	 * step that updates nothing), and the scale after the step */
	int found, scale;
};

/* Build step `in` into `gr` without running anything: the feeds, the
 * nodes and, with in->train, the backward pass and the updates. Sets *ret.
 * Returns 0, or -1 after td_fail; the caller frees `gr` either way. */
int train_build_step(struct caller *call, const struct step_input *in, struct graph *gr, struct step_nodes *ret);

/* train_build_step, then run the graph and read the loss into
 * *ret_loss_value (a training step fails on a non-finite one). Nothing is
 * committed: the caller stores results (graph_commit_all) and frees the
 * graph. Returns 0, or -1 after td_fail. */
int train_run_step(struct caller *call, const struct step_input *in, struct graph *gr, struct step_nodes *ret,
		   double *ret_loss_value);

/* Randomness per step (docs/training.md, "Randomness"): in nodes `from`..
 * of `gr`, with `train` the `seed` attr of every op that declares one
 * becomes a hash of (that seed, run_seed, step), so each step draws a fresh,
 * reproducible stream; without `train` (evaluation, prediction) seeds stay
 * and op `dropout`'s `p` becomes 0 (the identity). Call it before autograd:
 * backward rules then copy the step's seed. */
void train_seed_graph(struct graph *gr, unsigned from, uint64_t run_seed, int64_t step, bool train);

struct model;

/* Check model `m` against the stored tensors as train.step would (graph,
 * shapes, parameters, loss, differentiability, optimizer), with a zero
 * placeholder for each input, without running anything. Returns 0 or
 * -1 with call->err naming the culprit. */
int train_model_check(struct caller *call, const struct model *m);
