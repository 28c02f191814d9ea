/* The optimizer ops (optim.c) as the multi-tensor update (optim_multi.c)
 * sees them: their push constants and the record of a whole training
 * step's updates in as few dispatches as possible (issue 16). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct gpu_recorder;
struct op_ctx;

/* Mirrors OptimPush in shaders/optim.comp. */
struct optim_push {
	uint32_t n, op, flags, pad0;
	float wd, beta, mix, lr;
	float bc2_sqrt, eps, decay, pad1;
};
_Static_assert(sizeof(struct optim_push) == 48, "optim_push must mirror OptimPush");

/* The push constants of optimizer op `ctx` (inferred: sgd_buf, sgd_param,
 * adam_m, adam_v or adam_param): every coefficient in double, rounded once
 * to float. */
void optim_fill_push(const struct op_ctx *ctx, struct optim_push *pc);

/* The inputs of optimizer op `ctx` that the update reads: all but the
 * skip flag that a `gated` one takes last. */
unsigned optim_update_inputs(const struct op_ctx *ctx);

/* Whether `ctx` is one of the optimizer ops optim_multi_record takes. */
bool optim_multi_member(const struct op_ctx *ctx);

/* Record the optimizer nodes m[0..n) (in graph order, all on lead's device,
 * their inputs and results allocated; the results of one read only by a
 * later one) as one dispatch of shaders/optim_multi.comp per dtype and
 * per OPTM_SLOTS memory windows: an Adam update's adam_m, adam_v and
 * adam_param as one segment, every other op as one. Where the ops do not
 * form that pattern each records itself. `lead` is the group's last node:
 * failures are reported on it (op_fail). Returns 0 or -1. */
int optim_multi_record(struct op_ctx *lead, struct op_ctx *const *m, unsigned n, struct gpu_recorder *rec);

/* Record the found_inf nodes m[0..n) (in graph order; each after the
 * first chained to the one before: input 0 its result) as one dispatch
 * (optim_multi.comp's OPTM_CHECK segments, one per input) that zeroes the
 * last node's result and sets it to 1.0 where an element of any input is
 * inf or NaN (or an unchained flag input is non-zero); the earlier nodes'
 * results are left unwritten (only later members read them). Failures
 * are reported on `lead`. Returns 0 or -1. */
int optim_check_record(struct op_ctx *lead, struct op_ctx *const *m, unsigned n, struct gpu_recorder *rec);
