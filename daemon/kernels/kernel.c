/* The custom-kernel registry and the checks kernel.run and graph kernel
 * nodes share (kernel.h). A daemon's kernels live in one small array of
 * its own (struct kernel_table): at most KERNEL_MAX, looked up by (owner
 * uid, name). */
#include "kernels/kernel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "gpu/device.h"
#include "pack.h"
#include "status.h"

/* A daemon's kernels (d->kernel_table), in no order. */
struct kernel_table {
	struct kernel *k[KERNEL_MAX];
	unsigned n;
};

int kernels_init(struct daemon *d)
{
	d->kernel_table = calloc(1, sizeof(*d->kernel_table));
	return d->kernel_table ? 0 : -ENOMEM;
}

static int find(const struct kernel_table *t, uint32_t owner, const char *name)
{
	for (unsigned i = 0; i < t->n; i++)
		if (t->k[i]->owner == owner && !strcmp(t->k[i]->name, name))
			return (int)i;
	return -1;
}

struct kernel *kernel_find(const struct daemon *d, uint32_t owner, const char *name)
{
	int i = find(d->kernel_table, owner, name);

	return i < 0 ? NULL : d->kernel_table->k[i];
}

unsigned kernel_count(const struct daemon *d)
{
	return d->kernel_table->n;
}

const struct kernel *kernel_at(const struct daemon *d, unsigned i)
{
	return i < d->kernel_table->n ? d->kernel_table->k[i] : NULL;
}

unsigned kernel_count_owner(const struct daemon *d, uint32_t owner, const char *name)
{
	const struct kernel_table *t = d->kernel_table;
	unsigned n = 0;

	for (unsigned i = 0; i < t->n; i++)
		n += t->k[i]->owner == owner && strcmp(t->k[i]->name, name);
	return n;
}

void kernel_free(struct daemon *d, struct kernel *k)
{
	if (!k)
		return;
	for (uint32_t id = 0; id < d->ngpus; id++)
		if (k->pipe[id].pipeline)
			gpu_pipeline_destroy(d->gpus[id], k->pipe[id].pipeline);
	free(k);
}

static void remove_at(struct daemon *d, unsigned i)
{
	struct kernel_table *t = d->kernel_table;

	kernel_free(d, t->k[i]);
	t->k[i] = t->k[--t->n];
	t->k[t->n] = NULL;
}

void kernel_insert(struct daemon *d, struct kernel *k)
{
	struct kernel_table *t = d->kernel_table;
	int idx = find(t, k->owner, k->name);

	if (idx >= 0)
		remove_at(d, (unsigned)idx);
	t->k[t->n++] = k;
}

int kernel_remove(struct daemon *d, uint32_t owner, const char *name)
{
	int idx = find(d->kernel_table, owner, name);

	if (idx < 0)
		return -ENOENT;
	remove_at(d, (unsigned)idx);
	return 0;
}

void kernels_clear(struct daemon *d)
{
	while (d->kernel_table->n)
		remove_at(d, d->kernel_table->n - 1);
}

void kernels_fini(struct daemon *d)
{
	if (!d->kernel_table)
		return;
	kernels_clear(d);
	free(d->kernel_table);
	d->kernel_table = NULL;
}

int kernel_read_dims(const msgpack_object *o, const char *what, uint32_t max, uint32_t out[3],
		     char *why, size_t cap)
{
	const msgpack_object_array *a;

	if (o->type != MSGPACK_OBJECT_ARRAY) {
		snprintf(why, cap, "%s: an array of 1 to 3 integers", what);
		return TDP_INVALID_ARGUMENT;
	}
	a = &o->via.array;
	if (a->size < 1 || a->size > 3) {
		snprintf(why, cap, "%s: 1 to 3 integers, not %u", what, a->size);
		return TDP_INVALID_ARGUMENT;
	}
	for (unsigned k = 0; k < 3; k++) {
		const msgpack_object *v = k < a->size ? &a->ptr[k] : NULL;

		if (!v) {
			out[k] = 1;
			continue;
		}
		if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 > max) {
			snprintf(why, cap, "%s[%u]: an integer 0..%u", what, k, max);
			return TDP_INVALID_ARGUMENT;
		}
		out[k] = (uint32_t)v->via.u64;
	}
	return 0;
}

int kernel_read_groups(const struct gpu_device *g, const msgpack_object *o, const char *what,
		       uint32_t out[3], char *why, size_t cap)
{
	const uint32_t *maxg = g->props.limits.maxComputeWorkGroupCount;
	uint32_t groups[3];
	int code = kernel_read_dims(o, what, UINT32_MAX, groups, why, cap);

	if (code)
		return code;
	for (unsigned i = 0; i < 3; i++)
		if (groups[i] > maxg[i]) {
			snprintf(why, cap, "%s[%u] = %u is more than the device's %u", what, i, groups[i],
				 maxg[i]);
			return TDP_INVALID_ARGUMENT;
		}
	memcpy(out, groups, sizeof(groups));
	return 0;
}

int kernel_read_push(const struct kernel *k, const msgpack_object *o, uint8_t buf[SPV_MAX_PUSH_BYTES],
		     char *why, size_t cap)
{
	const struct spv_info *in = &k->info;

	if (o->type == MSGPACK_OBJECT_BIN) {
		if (o->via.bin.size != in->push_bytes) {
			snprintf(why, cap, "push: %u bytes given, kernel '%s' declares %u", o->via.bin.size,
				 k->name, in->push_bytes);
			return TDP_INVALID_ARGUMENT;
		}
		memcpy(buf, o->via.bin.ptr, o->via.bin.size);
		return 0;
	}
	if (o->type != MSGPACK_OBJECT_MAP) {
		snprintf(why, cap, "push: a map of member to number, or bin");
		return TDP_INVALID_ARGUMENT;
	}
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *key = &o->via.map.ptr[i].key, *v = &o->via.map.ptr[i].val;
		const struct spv_push_member *m = NULL;
		double x;

		if (key->type != MSGPACK_OBJECT_STR) {
			snprintf(why, cap, "push: keys are member names");
			return TDP_INVALID_ARGUMENT;
		}
		for (unsigned j = 0; j < in->npush && !m; j++)
			if (strlen(in->push[j].name) == key->via.str.size &&
			    !memcmp(in->push[j].name, key->via.str.ptr, key->via.str.size))
				m = &in->push[j];
		if (!m) {
			char shown[65];
			size_t n = key->via.str.size < 64 ? key->via.str.size : 64;

			memcpy(shown, key->via.str.ptr, n);
			shown[n] = '\0';
			for (char *c = shown; *c; c++)
				if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
					*c = '?';
			snprintf(why, cap, "push: kernel '%s' has no push constant '%s'", k->name, shown);
			return TDP_INVALID_ARGUMENT;
		}
		if (m->type == SPV_SCALAR_OTHER || m->offset + 4 > in->push_bytes) {
			snprintf(why, cap, "push: '%s' is not a 32-bit scalar; send push as bin", m->name);
			return TDP_INVALID_ARGUMENT;
		}
		if (tdp_obj_number(v, &x) < 0) {
			snprintf(why, cap, "push: '%s' must be a number", m->name);
			return TDP_INVALID_ARGUMENT;
		}
		if (m->type == SPV_SCALAR_F32) {
			float f = (float)x;

			memcpy(buf + m->offset, &f, 4);
		} else if (m->type == SPV_SCALAR_I32) {
			int32_t iv;

			if (x != floor(x) || x < INT32_MIN || x > INT32_MAX) {
				snprintf(why, cap, "push: '%s' is an int; %g does not fit", m->name, x);
				return TDP_INVALID_ARGUMENT;
			}
			iv = (int32_t)x;
			memcpy(buf + m->offset, &iv, 4);
		} else {
			uint32_t uv;

			if (x != floor(x) || x < 0 || x > UINT32_MAX) {
				snprintf(why, cap, "push: '%s' is a uint; %g does not fit", m->name, x);
				return TDP_INVALID_ARGUMENT;
			}
			uv = (uint32_t)x;
			memcpy(buf + m->offset, &uv, 4);
		}
	}
	return 0;
}

int kernel_check_count(const struct kernel *k, unsigned n, char *why, size_t cap)
{
	if (n == k->info.nbindings)
		return 0;
	snprintf(why, cap, "kernel '%s' binds %u storage buffers; %u tensor%s given", k->name,
		 k->info.nbindings, n, n == 1 ? "" : "s");
	return TDP_INVALID_ARGUMENT;
}

int kernel_check_tensor(const struct gpu_device *g, const struct kernel *k, unsigned i,
			const char *what, const char *tname, uint64_t bytes, char *why, size_t cap)
{
	const struct spv_binding *sb = &k->info.bindings[i];
	uint64_t maxrange = g->props.limits.maxStorageBufferRange;

	if (bytes < sb->min_bytes || (sb->stride && (bytes - sb->min_bytes) % sb->stride)) {
		snprintf(why, cap, "%s: tensor '%s' has %llu bytes; binding %u needs %llu%s%.0u", what,
			 tname, (unsigned long long)bytes, i, (unsigned long long)sb->min_bytes,
			 sb->stride ? " plus a multiple of " : "", sb->stride);
		return TDP_SHAPE_MISMATCH;
	}
	if (bytes > maxrange) {
		snprintf(why, cap, "%s: tensor '%s' is larger than the device binds (%llu bytes)", what,
			 tname, (unsigned long long)maxrange);
		return TDP_RESOURCE_EXHAUSTED;
	}
	return 0;
}

int kernel_record(struct gpu_recorder *rec, struct kernel *k, const struct gpu_binding *b,
		  const uint8_t *push, const uint32_t groups[3])
{
	int r = gpu_rec_dispatch_groups(rec, &k->pipe[rec->g->id], b, k->info.nbindings, push, k->info.push_bytes,
					groups);

	if (r == 0)
		k->runs++;
	return r;
}
