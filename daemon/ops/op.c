/* The op registry: every family's table, lookup by name, and the helpers all
 * ops share. */
#include "ops/op.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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
	op_defs_attention,
};

static const struct op_def *all_ops[256];
/* all_ops by (name length, name, registry order): op_find is a binary
 * search (graph building looks up every node's op by name; a linear scan
 * of ~150 names was 7 % of a small training step's host time on an H100
 * host). */
static const struct op_def *by_name[256];
static size_t name_len[256];
static size_t nall;
static pthread_once_t collected = PTHREAD_ONCE_INIT;

/* Order of (length, bytes), as op_find compares. */
static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	if (alen != blen)
		return alen < blen ? -1 : 1;
	return memcmp(a, b, alen);
}

/* qsort's order of indices into all_ops: by name, then registry order. */
static int by_name_cmp(const void *x, const void *y)
{
	size_t i = *(const size_t *)x, j = *(const size_t *)y;
	int c = name_cmp(all_ops[i]->name, strlen(all_ops[i]->name), all_ops[j]->name,
			 strlen(all_ops[j]->name));

	return c ? c : (i < j ? -1 : i > j);
}

static void collect_once(void)
{
	size_t n = 0, idx[sizeof(all_ops) / sizeof(all_ops[0])];

	for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++)
		for (const struct op_def *d = families[f]; d->name; d++)
			if (n < sizeof(all_ops) / sizeof(all_ops[0]))
				all_ops[n++] = d;
	for (size_t i = 0; i < n; i++)
		idx[i] = i;
	qsort(idx, n, sizeof(idx[0]), by_name_cmp);
	for (size_t i = 0; i < n; i++) {
		by_name[i] = all_ops[idx[i]];
		name_len[i] = strlen(by_name[i]->name);
	}
	nall = n;
}

static void collect(void)
{
	pthread_once(&collected, collect_once);
}

const struct op_def *op_find(const char *name, size_t len)
{
	size_t lo = 0, hi;

	collect();
	hi = nall;
	/* The first entry not below the name: the registry's first of it. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (name_cmp(by_name[mid]->name, name_len[mid], name, len) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < nall && name_cmp(by_name[lo]->name, name_len[lo], name, len) == 0)
		return by_name[lo];
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
	/* Callers pass the literal the op's row declares: the linker merges
	 * equal literals, so the pointers compare equal more often than not. */
	for (unsigned i = 0; ctx->def->attrs && ctx->def->attrs[i].name; i++) {
		const char *a = ctx->def->attrs[i].name;

		if (a == name || (a[0] == name[0] && !strcmp(a, name)))
			return &ctx->attr[i];
	}
	return NULL;
}

/* A slice of the graph's scratch pool for `bytes`, taking the pool's memory
 * at its first use. Returns 0, or -ENOSPC (then memory of its own). */
static int scratch_borrow(struct op_ctx *ctx, uint64_t bytes, struct gpu_alloc *ret)
{
	struct op_scratch_pool *p = ctx->scratch.pool;
	uint64_t align = ctx->g->mem.align ? ctx->g->mem.align : 256, slot = (bytes + align - 1) & ~(align - 1);

	if (!p || (p->g && p->g != ctx->g))
		return -ENOSPC;
	if (p->used + slot > p->want)
		p->want = p->used + slot;
	if (!p->mem.block) {
		if (gpu_memory_alloc(ctx->g, p->hint > p->want ? p->hint : p->want, &p->mem) < 0)
			return -ENOSPC;
		p->g = ctx->g;
	}
	if (p->used + slot > p->mem.size) {
		/* Grow: a first step's pool starts at its first node's size. */
		uint64_t size = p->want > 2 * p->mem.size ? p->want : 2 * p->mem.size;
		struct gpu_alloc grown;

		if (p->noutgrown == OP_SCRATCH_OUTGROWN || gpu_memory_alloc(ctx->g, size, &grown) < 0)
			return -ENOSPC;
		p->outgrown[p->noutgrown++] = p->mem;
		p->mem = grown;
		p->used = 0;     /* the node's earlier slices stay in the outgrown block */
	}
	*ret = (struct gpu_alloc){ .block = p->mem.block, .offset = p->mem.offset + p->used, .size = bytes,
				   .reserved = slot };
	p->used += slot;
	return 0;
}

int op_scratch_alloc(struct op_ctx *ctx, uint64_t bytes, struct gpu_alloc **ret)
{
	struct op_scratch *s = &ctx->scratch;
	int r;

	if (s->n == sizeof(s->allocs) / sizeof(s->allocs[0]))
		return op_fail(ctx, TDP_INTERNAL, "too many scratch buffers");
	s->borrowed[s->n] = bytes > 0 && scratch_borrow(ctx, bytes, &s->allocs[s->n]) == 0;
	if (s->borrowed[s->n]) {
		*ret = &s->allocs[s->n++];
		return 0;
	}
	r = gpu_memory_alloc(ctx->g, bytes, &s->allocs[s->n]);
	if (r < 0)
		return op_fail(ctx, TDP_RESOURCE_EXHAUSTED, "out of device memory for %llu scratch bytes",
			       (unsigned long long)bytes);
	*ret = &s->allocs[s->n++];
	return 0;
}

void op_shape_text(const struct op_tensor *t, char *buf, size_t size)
{
	size_t len = 0;

	len += (size_t)snprintf(buf, size, "[");
	for (unsigned d = 0; d < t->rank && len < size; d++)
		len += (size_t)snprintf(buf + len, size - len, "%s%llu", d ? "," : "",
					(unsigned long long)t->shape[d]);
	if (len < size)
		snprintf(buf + len, size - len, "]");
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
