/* The GPU side every op shares: binding tensors, finding pipelines, dispatching. */
#include "ops/op_gpu.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu/device.h"
#include "gpu/trace.h"
#include "ops/op.h"
#include "status.h"

int op_bind(struct op_ctx *ctx, const struct op_tensor *t, bool write, struct gpu_binding *ret)
{
	uint64_t range = ctx->g->props.limits.maxStorageBufferRange;

	if (t->bytes > range)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED,
			       "a %llu-byte operand is more than this device binds at once (%llu)",
			       (unsigned long long)t->bytes, (unsigned long long)range);
	*ret = gpu_rec_bind(ctx->g, t->alloc, 0, t->bytes, write);
	return 0;
}

int op_pipeline(struct op_ctx *ctx, const char *family, const char *variant,
		const struct gpu_pipeline **ret)
{
	char name[64];
	size_t nf = strlen(family), nv = strlen(variant);
	int r = -ENOENT;

	/* "family.variant", joined without printf (every dispatch asks). */
	if (nf + 1 + nv < sizeof(name)) {
		memcpy(name, family, nf);
		name[nf] = '.';
		memcpy(name + nf + 1, variant, nv + 1);
		r = gpu_pipeline_get(ctx->g, name, ret);
	}
	if (r == -ENOENT)
		return op_fail(ctx, TDP_DTYPE_MISMATCH, "no %s kernel for %s", family, variant);
	if (r < 0)
		return op_fail(ctx, r == -ENODEV ? TDP_DEVICE_LOST : TDP_INTERNAL,
			       "cannot build the %s pipeline", name);
	return 0;
}

/* TENSORD_TRACE_DISPATCHES: "op [in shapes...] -> [out shape]". */
static void trace_label(const struct op_ctx *ctx, struct gpu_recorder *rec)
{
	char buf[96];
	size_t at = 0;

	at += (size_t)snprintf(buf, sizeof(buf), "%s", ctx->def->name);
	for (unsigned k = 0; k <= ctx->ninputs && at < sizeof(buf); k++) {
		const struct op_tensor *t = k < ctx->ninputs ? &ctx->in[k] : &ctx->out;

		at += (size_t)snprintf(buf + at, sizeof(buf) - at, k < ctx->ninputs ? " [" : " -> [");
		for (unsigned d = 0; d < t->rank && at < sizeof(buf); d++)
			at += (size_t)snprintf(buf + at, sizeof(buf) - at, d ? ",%llu" : "%llu",
					       (unsigned long long)t->shape[d]);
		if (at < sizeof(buf))
			at += (size_t)snprintf(buf + at, sizeof(buf) - at, "]");
	}
	gpu_trace_label(rec, buf);
}

int op_dispatch(struct op_ctx *ctx, struct gpu_recorder *rec, const struct gpu_pipeline *p,
		const struct gpu_binding *b, unsigned nb, const void *push, uint32_t push_size,
		uint64_t invocations, uint32_t local_size)
{
	int r;

	if (gpu_trace_on(rec->g))
		trace_label(ctx, rec);
	r = gpu_rec_dispatch(rec, p, b, nb, push, push_size, invocations, local_size);

	if (r == -E2BIG)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "%llu invocations exceed the device's grid",
			       (unsigned long long)invocations);
	if (r < 0)
		return op_fail(ctx, TDP_INTERNAL, "cannot record a dispatch (%s)", strerror(-r));
	return 0;
}
