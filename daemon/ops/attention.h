/* What the layers above ask of the fused attention op (ops/attention.c)
 * before they expand into it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* Loop iterations one invocation of attention.comp runs over `other` rows
 * of the other side with head dim hd (UINT64_MAX when hd is not
 * supported); the op refuses a pass past OP_LOOP_BUDGET. */
uint64_t attention_loop_iters(uint64_t hd, uint64_t other);

/* Whether attention, and its backward, take q [N, t, hd] with k, v
 * [N, s, hd]: 1 <= hd <= 128 and both directions' loops within
 * OP_LOOP_BUDGET. */
bool attention_supported(uint64_t hd, uint64_t t, uint64_t s);
