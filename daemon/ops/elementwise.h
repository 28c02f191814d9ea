/* The elementwise family's interface beyond its rows (ops/elementwise.c). */
#pragma once

#include "ops/fused.h"
#include "ops/op.h"

/* Describe node `ctx` (an inferred op) for fusion, from its row's `fusion`
 * and its attributes. Returns 0 when a fused kernel computes it bit for bit
 * the same (a row whose fusion kind is not FUSE_NONE, floating dtypes only),
 * -1 otherwise. Implemented by the elementwise family. */
int ew_describe(const struct op_ctx *ctx, struct ew_desc *ret);
