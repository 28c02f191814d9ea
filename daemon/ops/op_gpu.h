/* What an op's record uses to reach the GPU (op_gpu.c): its tensors'
 * bindings, its pipelines, its dispatches, with failures through op_fail. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gpu/pipeline.h"
#include "gpu/recorder.h"

struct op_ctx;
struct op_tensor;

/* The storage-buffer binding of tensor `t` (all of it). Fails with
 * RESOURCE_EXHAUSTED when it is larger than the device binds at once. */
int op_bind(struct op_ctx *ctx, const struct op_tensor *t, bool write, struct gpu_binding *ret);

/* The pipeline of shader "<family>.<variant>". */
int op_pipeline(struct op_ctx *ctx, const char *family, const char *variant,
		const struct gpu_pipeline **ret);

/* gpu_rec_dispatch, with failures reported through op_fail. */
int op_dispatch(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_pipeline *p,
		const struct gpu_binding *b, unsigned nb, const void *push, uint32_t push_size,
		uint64_t invocations, uint32_t local_size);
