/* The optimizers of a training step (inside train/): optimizer.* parsing and
 * validation, the learning-rate schedule, and the nodes that update each
 * parameter, appended to the step's graph. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

struct graph;
struct graph_attr;
struct caller;
struct tensor;

#define OPT_MAX_GROUPS 16

enum opt_kind { OPT_NONE, OPT_SGD, OPT_ADAM, OPT_ADAMW };

struct optimizer {
	enum opt_kind kind;
	double lr, momentum, dampening, weight_decay, beta1, beta2, eps, clip_norm;
	bool nesterov;
	/* learning-rate schedule */
	char schedule[16];
	double gamma, min_lr;
	int64_t step_size, warmup, total;
};

/* A step's graph while its backward pass and updates are appended. */
struct step_ctx {
	struct caller *call;
	struct graph *gr;
	char why[300];
};

/* Parse and check the `optimizer` map `o` (docs/protocol.md, train.step) into
 * *opt. Returns 0, or -1 after td_fail naming the field. */
int optimizer_parse(struct caller *call, const msgpack_object *o, struct optimizer *opt);

/* Parse parameter group `o` (optimizer.groups[k]): `parent`'s settings
 * with the group's own fields over them (its `params` are the caller's).
 * Returns 0 with *ret set, or -1 after td_fail. */
int optimizer_parse_group(struct caller *call, const msgpack_object *o, const struct optimizer *parent,
			  struct optimizer *ret);

/* The learning rate at `step` (1-based): linear warmup, then the schedule. */
double optimizer_lr_at(const struct optimizer *opt, int64_t step);

/* Append a node by op name; refs >= 0 are nodes, `t` is a stored tensor
 * input where a ref is -1. Returns the node or -1 (td_fail done). */
int train_emit(struct step_ctx *sc, const char *op, const int *refs, struct tensor *const *t, unsigned n,
	       const struct graph_attr *attrs, unsigned nattrs);

/* Mark node `node` to be stored as `name`, a tensor derived from parameter
 * `p` (its state or gradient, in p's namespace): it belongs to p's owner.
 * Returns 0, or -1 after td_fail (name too long). */
int train_emit_derived_out(struct step_ctx *sc, int node, const char *name, const struct tensor *p);

/* The stored tensor `<param><suffix>` derived from `p` (optimizer state,
 * .grad; its name goes to `name`, TDP_MAX_NAME_LEN + 32 bytes): returns 1
 * and sets *ref (-1) and *stored when it exists, 0 when it does not yet,
 * -1 after td_fail when it does not fit the parameter. */
int train_state_input(struct step_ctx *sc, struct tensor *p, const char *suffix, char *name, int *ref,
		      struct tensor **stored);

/* Append the update of parameter `p` whose gradient is node `g` at `step`
 * with learning rate `lr`, reading and storing the optimizer state
 * `<param>.<state>`. Returns 0, or -1 after td_fail. */
int optimizer_emit_update(struct step_ctx *sc, const struct optimizer *opt, struct tensor *p, int g,
			  int64_t step, double lr);

/* Whether a step's updates run as one multi-tensor dispatch (issue 16):
 * unless TENSORD_OPTIM_MULTI=0 is in the daemon's environment. */
bool optimizer_multi_enabled(void);

/* Make the optimizer nodes appended since node `from` (optimizer_emit_update
 * for every parameter) one node group recorded by optim_multi_record: one
 * dispatch for all of them (per dtype, per OPTM_SLOTS memory windows).
 * Nothing when optimizer_multi_enabled() is false or the nodes cannot be
 * grouped (they then run one dispatch each). Returns 0, or -1 after td_fail
 * (out of memory). */
int optimizer_group_updates(struct step_ctx *sc, unsigned from);

/* Scale the `n` gradient nodes grads[] by min(1, clip / (global norm +
 * 1e-6)), replacing each by its scaled node. Returns 0, or -1 after
 * td_fail. */
int optimizer_emit_clip(struct step_ctx *sc, double clip, int *grads, unsigned n);
