/* Environment switches read once. The daemon's own variables (docs/tensord.8)
 * do not change while it runs, and getenv() walks the whole environment:
 * called for every node recorded, it was 1 % of a small training step's host
 * time on an H100 host. */
#pragma once

#include <stdatomic.h>

/* The value of `expr`, an int >= 0 computed from the environment (typically
 * getenv("TENSORD_...") != NULL), evaluated by the first use only; `slot` is
 * a `static atomic_int` initialised to -1, one per switch. Threads racing on
 * the first use evaluate `expr` alike and store the same value. */
#define ENV_ONCE(slot, expr)                                                             \
	(atomic_load_explicit(&(slot), memory_order_relaxed) >= 0                         \
		 ? atomic_load_explicit(&(slot), memory_order_relaxed)                    \
		 : (atomic_store_explicit(&(slot), (expr), memory_order_relaxed),         \
		    atomic_load_explicit(&(slot), memory_order_relaxed)))
