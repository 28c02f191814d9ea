/* Dynamic loss scaling of precision "f16" (inside train/; docs/training.md,
 * "Mixed precision"): GradScaler's steps as nodes of a training step's
 * graph, run in its submission, the state a stored f32 tensor
 * `<first param>.loss_scaler` holding [scale, good steps in a row]. */
#pragma once

#include <stdbool.h>

#include "store/model.h"
#include "train/optimizer.h"

struct tensor;

/* The scaler's nodes in one step's graph. */
struct loss_scale_nodes {
	char name[TDP_MAX_NAME_LEN + 32];  /* the state tensor's store key */
	struct tensor *stored;             /* the state, NULL before the first step */
	int scale, good;                   /* its two values as scalar nodes */
	int root;                          /* loss * scale: what autograd differentiates */
	int inv;                           /* f32 scalar 1 / scale */
	bool folded;                       /* the gradients stay scaled: the optimizer multiplies by inv */
	int ok;                            /* u8 scalar: every gradient is finite */
	int skip;                          /* f32 scalar: 1 when not (the step is skipped), else 0 */
	int gate;                          /* what the updates read: skip, or [skip, inv] when folded */
	int found;                         /* f32 scalar: 1 when the step is skipped, else 0 */
	int new_scale;                     /* f32 scalar: the scale after the step */
};

/* Read the state derived from parameter `p0` (or `cfg->init` and 0 before
 * the first step: the state is then created by loss_scale_update) and
 * append loss * scale after loss node `loss`, setting *ret. Returns 0, or
 * -1 after td_fail (a state that is not the caller's or not f32 [2]). */
int loss_scale_begin(struct step_ctx *sc, const struct model_loss_scale *cfg, struct tensor *p0, unsigned loss,
		     struct loss_scale_nodes *ret);

/* Multiply the `n` gradient nodes grads[] by 1 / scale, replacing each;
 * with `fold` (only the optimizer's updates read the gradients) and f32
 * gradients, leave them and set ls->folded instead: found_inf and the
 * optimizer's kernels multiply as they read. Returns 0, or -1 after
 * td_fail. */
int loss_scale_unscale(struct step_ctx *sc, struct loss_scale_nodes *ls, int *grads, unsigned n, bool fold);

/* Set ls->ok: whether every element of every gradient grads[] is finite,
 * and ls->skip, its negation as f32: for f32 gradients one found_inf node
 * per OP_MAX_INPUTS of them, chained and recorded as one dispatch
 * (ops/optim.h, optim_check_record). Returns 0, or -1 after td_fail. */
int loss_scale_check(struct step_ctx *sc, struct loss_scale_nodes *ls, const int *grads, unsigned n);

/* Gate every optimizer update appended since node `from` (a parameter's,
 * its state's) by ls->skip: the update's kernel stores the old value when
 * it is set, so a skipped step leaves them as they were (a state made by
 * the step is then zeros), with no extra dispatch. Before the updates are
 * grouped. Returns 0, or -1 after td_fail. */
int loss_scale_gate(struct step_ctx *sc, const struct loss_scale_nodes *ls, unsigned from);

/* Append GradScaler's update of the state (backoff when skipped, growth
 * after cfg->interval good steps) stored over it, owned as parameter
 * `p0`; sets ls->found and ls->new_scale, both kept for reading back.
 * Returns 0, or -1 after td_fail. */
int loss_scale_update(struct step_ctx *sc, const struct model_loss_scale *cfg, struct loss_scale_nodes *ls,
		      const struct tensor *p0);
