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
	int ok;                            /* u8 scalar: every gradient is finite */
	int found;                         /* f32 scalar: 1 when the step is skipped, else 0 */
	int new_scale;                     /* f32 scalar: the scale after the step */
};

/* Read the state derived from parameter `p0` (or `cfg->init` and 0 before
 * the first step: the state is then created by loss_scale_update) and
 * append loss * scale after loss node `loss`, setting *ret. Returns 0, or
 * -1 after td_fail (a state that is not the caller's or not f32 [2]). */
int loss_scale_begin(struct step_ctx *sc, const struct model_loss_scale *cfg, struct tensor *p0, unsigned loss,
		     struct loss_scale_nodes *ret);

/* Multiply the `n` gradient nodes grads[] by 1 / scale, replacing each.
 * Returns 0, or -1 after td_fail. */
int loss_scale_unscale(struct step_ctx *sc, const struct loss_scale_nodes *ls, int *grads, unsigned n);

/* Set ls->ok: whether every element of every gradient grads[] is finite.
 * Returns 0, or -1 after td_fail. */
int loss_scale_check(struct step_ctx *sc, struct loss_scale_nodes *ls, const int *grads, unsigned n);

/* Make every optimizer update appended since node `from` (a parameter's,
 * its state's) store where(ok, update, old value) instead: a skipped step
 * leaves them as they were (a state made by the step is then zeros).
 * Returns 0, or -1 after td_fail. */
int loss_scale_gate(struct step_ctx *sc, const struct loss_scale_nodes *ls, unsigned from);

/* Append GradScaler's update of the state (backoff when skipped, growth
 * after cfg->interval good steps) stored over it, owned as parameter
 * `p0`; sets ls->found and ls->new_scale, both kept for reading back.
 * Returns 0, or -1 after td_fail. */
int loss_scale_update(struct step_ctx *sc, const struct model_loss_scale *cfg, struct loss_scale_nodes *ls,
		      const struct tensor *p0);
