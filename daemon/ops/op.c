/* The op registry: every family's table, lookup by name, and the helpers all
 * ops share. */
#include "ops/op.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "gpu/device.h"
#include "ops/op.h"
#include "status.h"

static const struct op_def *const families[] = {
	op_defs_elementwise,
	op_defs_layout, op_defs_create,
	op_defs_linalg, op_defs_conv,
	op_defs_conv_grad,
	op_defs_loss,
	op_defs_reduce, op_defs_norm,
	op_defs_optim,
	op_defs_index,
	op_defs_sort, op_defs_mask,
};

static const struct op_def *all_ops[256];
static size_t nall;

static void collect(void)
{
	if (nall)
		return;
	for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++)
		for (const struct op_def *d = families[f]; d->name; d++)
			if (nall < sizeof(all_ops) / sizeof(all_ops[0]))
				all_ops[nall++] = d;
}

const struct op_def *op_find(const char *name, size_t len)
{
	collect();
	for (size_t i = 0; i < nall; i++)
		if (strlen(all_ops[i]->name) == len && memcmp(all_ops[i]->name, name, len) == 0)
			return all_ops[i];
	return NULL;
}

const struct op_def *const *op_all(size_t *ret_count)
{
	collect();
	*ret_count = nall;
	return all_ops;
}

int op_fail(struct op_ctx *ctx, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	td_vfail(&ctx->err, code, fmt, ap);
	va_end(ap);
	return -1;
}

const struct op_attr_value *op_attr(const struct op_ctx *ctx, const char *name)
{
	for (unsigned i = 0; ctx->def->attrs && ctx->def->attrs[i].name; i++)
		if (!strcmp(ctx->def->attrs[i].name, name))
			return &ctx->attr[i];
	return NULL;
}

int op_scratch_alloc(struct op_ctx *ctx, uint64_t bytes, struct gpu_alloc **ret)
{
	struct op_scratch *s = &ctx->scratch;
	int r;

	if (s->n == sizeof(s->allocs) / sizeof(s->allocs[0]))
		return op_fail(ctx, TDP_INTERNAL, "too many scratch buffers");
	r = gpu_memory_alloc(ctx->g, bytes, &s->allocs[s->n]);
	if (r < 0)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "out of device memory for %llu scratch bytes",
			       (unsigned long long)bytes);
	*ret = &s->allocs[s->n++];
	return 0;
}

int op_tensor_sizes(struct op_tensor *t)
{
	if (tdp_shape_count(t->shape, t->rank, tdp_dtype_size(t->dtype), &t->count) < 0)
		return -EOVERFLOW;
	t->bytes = t->count * tdp_dtype_size(t->dtype);
	return 0;
}

int op_axis(struct op_ctx *ctx, int64_t axis, unsigned rank, const char *what)
{
	/* A scalar has one position to name, as in NumPy: 0 or -1. */
	int64_t n = rank ? rank : 1, a = axis < 0 ? axis + n : axis;

	if (a < 0 || a >= n)
		return op_fail(ctx, TDP_INVALID_ARGUMENT, "%s %lld is out of range for rank %u",
			       what, (long long)axis, rank);
	return (int)a;
}

bool op_dtype_is_float(int dtype)
{
	return dtype == TDP_DTYPE_F32 || dtype == TDP_DTYPE_F16 || dtype == TDP_DTYPE_BF16;
}
