/* kernel.create, kernel.run, kernel.list, kernel.delete (docs/kernels.md).
 *
 * A kernel is a client's compute shader, compiled (GLSL, through glslang) or
 * taken as SPIR-V, reflected (spirv_reflect.c) and built into a pipeline on
 * the layout every op shares, kept under (owner uid, name). kernel.run binds
 * stored tensors to its storage buffers in order and dispatches it alone in
 * one submission with a time limit. */
#include "methods_kernel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "devices.h"
#include "glsl_compile.h"
#include "gpu/pipeline.h"
#include "gpu/recorder.h"
#include "lookup.h"
#include "name.h"
#include "pack.h"
#include "params.h"
#include "rpc.h"
#include "spirv_reflect.h"
#include "spirv_validate.h"
#include "status.h"
#include "store.h"

#define KERNEL_MAX 256          /* kernels in the daemon, all owners together */
#define KERNEL_MAX_PER_USER 64

struct kernel {
	char name[TDP_MAX_NAME_LEN + 1];
	uint32_t owner;
	struct gpu_pipeline pipe[GPU_MAX_DEVICES]; /* one per device; .shader points at name */
	struct spv_info info;
	uint64_t spirv_bytes;
	int64_t created_ns;
	uint64_t runs;
};

static struct kernel *kernels[KERNEL_MAX];
static unsigned nkernels;

static int find(uint32_t owner, const char *name)
{
	for (unsigned i = 0; i < nkernels; i++)
		if (kernels[i]->owner == owner && !strcmp(kernels[i]->name, name))
			return (int)i;
	return -1;
}

static void kernel_free(struct daemon *d, struct kernel *k)
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
	kernel_free(d, kernels[i]);
	kernels[i] = kernels[--nkernels];
	kernels[nkernels] = NULL;
}

void kernels_fini(struct daemon *d)
{
	while (nkernels)
		remove_at(d, nkernels - 1);
}

/* Root, or a member of the configured kernel_group. */
static bool may_create(const struct request *req)
{
	int64_t g = req->d->cfg.kernel_group;

	return req->cred.uid == 0 || (g >= 0 && access_cred_in_group(&req->cred, (gid_t)g));
}

static const char *scalar_name(enum spv_scalar t)
{
	switch (t) {
	case SPV_SCALAR_F32: return "f32";
	case SPV_SCALAR_I32: return "i32";
	case SPV_SCALAR_U32: return "u32";
	default: return "other";
	}
}

/* The description of `k` as a map (kernel.create's result, kernel.list's entries). */
static int write_kernel(msgpack_packer *pk, const struct kernel *k)
{
	const struct spv_info *in = &k->info;
	int fail = msgpack_pack_map(pk, 8) ||
		   tdp_pack_cstr(pk, "name") || tdp_pack_cstr(pk, k->name) ||
		   tdp_pack_cstr(pk, "owner") || msgpack_pack_uint32(pk, k->owner) ||
		   tdp_pack_cstr(pk, "entry") || tdp_pack_cstr(pk, in->entry) ||
		   tdp_pack_cstr(pk, "local_size") || msgpack_pack_array(pk, 3) ||
		   msgpack_pack_uint32(pk, in->local_size[0]) ||
		   msgpack_pack_uint32(pk, in->local_size[1]) ||
		   msgpack_pack_uint32(pk, in->local_size[2]) ||
		   tdp_pack_cstr(pk, "bindings") || msgpack_pack_array(pk, in->nbindings);

	for (unsigned i = 0; !fail && i < in->nbindings; i++) {
		const struct spv_binding *b = &in->bindings[i];

		fail = msgpack_pack_map(pk, 4) ||
		       tdp_pack_cstr(pk, "binding") || msgpack_pack_uint32(pk, i) ||
		       tdp_pack_cstr(pk, "access") || tdp_pack_cstr(pk, b->readonly ? "read" : "write") ||
		       tdp_pack_cstr(pk, "min_bytes") || msgpack_pack_uint64(pk, b->min_bytes) ||
		       tdp_pack_cstr(pk, "stride") || msgpack_pack_uint32(pk, b->stride);
	}
	fail = fail || tdp_pack_cstr(pk, "push_bytes") || msgpack_pack_uint32(pk, in->push_bytes) ||
	       tdp_pack_cstr(pk, "push") || msgpack_pack_array(pk, in->npush);
	for (unsigned i = 0; !fail && i < in->npush; i++) {
		const struct spv_push_member *m = &in->push[i];

		fail = msgpack_pack_map(pk, 3) ||
		       tdp_pack_cstr(pk, "name") || tdp_pack_cstr(pk, m->name) ||
		       tdp_pack_cstr(pk, "offset") || msgpack_pack_uint32(pk, m->offset) ||
		       tdp_pack_cstr(pk, "type") || tdp_pack_cstr(pk, scalar_name(m->type));
	}
	return fail || tdp_pack_cstr(pk, "spirv_bytes") || msgpack_pack_uint64(pk, k->spirv_bytes);
}

/* Read `n` (1..3) non-negative integers of array `o` into out[3] (missing: 1). */
static int read_dims(struct request *req, const msgpack_object *o, const char *what,
		     uint32_t max, uint32_t out[3])
{
	const msgpack_object_array *a = &o->via.array;

	if (a->size < 1 || a->size > 3)
		return request_fail(req, TDP_INVALID_ARGUMENT, "%s: 1 to 3 integers, not %u", what,
				    a->size);
	for (unsigned k = 0; k < 3; k++) {
		const msgpack_object *v = k < a->size ? &a->ptr[k] : NULL;

		if (!v) {
			out[k] = 1;
			continue;
		}
		if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 > max)
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "%s[%u]: an integer 0..%u", what, k, max);
		out[k] = (uint32_t)v->via.u64;
	}
	return 0;
}

int method_kernel_create(struct request *req)
{
	struct param spec[] = {
		{ "name", PARAM_STR, true, NULL },
		{ "glsl", PARAM_STR, false, NULL },
		{ "spirv", PARAM_BIN, false, NULL },
		{ "entry", PARAM_STR, false, NULL },
		{ "workgroup", PARAM_ARRAY, false, NULL },
	};
	char name[TDP_MAX_NAME_LEN + 1], entry[SPV_MAX_NAME] = "main";
	char why[TDP_MAX_ERROR_MESSAGE - 64];
	char preamble[128];
	uint32_t wg[3], *words = NULL;
	size_t nwords = 0;
	struct kernel *k = NULL;
	char *src = NULL;
	int idx, r, owned = 0;

	if (params_parse(req, spec, sizeof(spec) / sizeof(spec[0])) < 0 ||
	    params_name(req, spec[0].value, name) < 0)
		return -1;
	if (!may_create(req))
		return request_fail(req, TDP_PERMISSION_DENIED,
				    "uid %u may not create kernels (root and the members of "
				    "kernel_group may; see docs/security.md)", (unsigned)req->cred.uid);
	if (!spec[1].value == !spec[2].value)
		return request_fail(req, TDP_INVALID_ARGUMENT, "give exactly one of glsl and spirv");
	if (spec[3].value) {
		const msgpack_object_str *e = &spec[3].value->via.str;

		if (!e->size || e->size >= sizeof(entry) || memchr(e->ptr, '\0', e->size))
			return request_fail(req, TDP_INVALID_ARGUMENT, "entry: 1-%zu bytes",
					    sizeof(entry) - 1);
		memcpy(entry, e->ptr, e->size);
		entry[e->size] = '\0';
	}
	if (spec[4].value && read_dims(req, spec[4].value, "workgroup", 1024, wg) < 0)
		return -1;
	if (spec[4].value && (!wg[0] || !wg[1] || !wg[2]))
		return request_fail(req, TDP_INVALID_ARGUMENT, "workgroup: sizes must be at least 1");
	for (unsigned i = 0, n = 0; i < nkernels; i++)
		if (kernels[i]->owner == req->cred.uid && strcmp(kernels[i]->name, name) &&
		    ++n >= KERNEL_MAX_PER_USER)
			return request_fail(req, TDP_RESOURCE_EXHAUSTED,
					    "uid %u already has %d kernels", (unsigned)req->cred.uid,
					    KERNEL_MAX_PER_USER);
	if (find(req->cred.uid, name) < 0 && nkernels >= KERNEL_MAX)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "the daemon holds %d kernels",
				    KERNEL_MAX);

	if (spec[1].value) {
		const msgpack_object_str *s = &spec[1].value->via.str;

		if (s->size > GLSL_MAX_SOURCE || memchr(s->ptr, '\0', s->size))
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "glsl: at most %zu bytes without NUL", GLSL_MAX_SOURCE);
		src = malloc(s->size + 1);
		if (!src)
			return request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of memory");
		memcpy(src, s->ptr, s->size);
		src[s->size] = '\0';
		if (spec[4].value)
			snprintf(preamble, sizeof(preamble),
				 "layout(local_size_x = %u, local_size_y = %u, local_size_z = %u) in;\n",
				 wg[0], wg[1], wg[2]);
		r = glsl_compile(src, spec[4].value ? preamble : NULL, &words, &nwords, why,
				 sizeof(why));
		free(src);
		if (r == -ENOMEM)
			return request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of memory");
		if (r < 0)
			return request_fail(req, r == -EINVAL ? TDP_INVALID_ARGUMENT : TDP_INTERNAL,
					    "glsl does not compile: %s", why);
		owned = 1;
	} else {
		const msgpack_object_bin *b = &spec[2].value->via.bin;

		if (b->size % 4 || b->size / 4 > SPV_MAX_WORDS)
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "spirv: a whole number of 32-bit words, at most %zu",
					    SPV_MAX_WORDS);
		/* Aligned copy: the bin sits anywhere in the message. */
		nwords = b->size / 4;
		words = malloc(nwords ? b->size : 4);
		if (!words)
			return request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of memory");
		memcpy(words, b->ptr, b->size);
		owned = 1;
	}
	k = calloc(1, sizeof(*k));
	if (!k) {
		r = request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	r = spirv_validate(words, nwords, why, sizeof(why));
	if (r == 0)
		r = spv_reflect(words, nwords, entry, &k->info, why, sizeof(why));
	if (r < 0) {
		r = request_fail(req, r == -ENOMEM ? TDP_RESOURCE_EXHAUSTED : TDP_INVALID_ARGUMENT,
				 "%s", r == -ENOMEM ? "out of memory" : why);
		goto out;
	}
	if (spec[2].value && spec[4].value &&
	    memcmp(wg, k->info.local_size, sizeof(wg)) != 0) {
		r = request_fail(req, TDP_INVALID_ARGUMENT,
				 "workgroup %u %u %u differs from the module's local size %u %u %u",
				 wg[0], wg[1], wg[2], k->info.local_size[0], k->info.local_size[1],
				 k->info.local_size[2]);
		goto out;
	}
	/* Built for every device, so it runs wherever its tensors are. */
	for (uint32_t id = 0; r >= 0 && id < req->d->ngpus; id++) {
		r = gpu_pipeline_build(req->d->gpus[id], words, nwords * 4, k->info.entry,
				       &k->pipe[id].pipeline);
		k->pipe[id].shader = k->name;
	}
	if (r < 0) {
		r = request_fail(req, r == -ENODEV ? TDP_DEVICE_LOST :
				 r == -ENOMEM ? TDP_RESOURCE_EXHAUSTED : TDP_INVALID_ARGUMENT,
				 "the driver rejected the module (%s)", strerror(-r));
		goto out;
	}
	snprintf(k->name, sizeof(k->name), "%s", name);
	k->owner = req->cred.uid;
	k->spirv_bytes = nwords * 4;
	k->created_ns = daemon_now_ns(CLOCK_REALTIME);
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || write_kernel(req->pk, k)) {
		r = request_fail(req, TDP_INTERNAL, "out of memory");
		goto out;
	}
	idx = find(k->owner, name);
	if (idx >= 0)
		remove_at(req->d, (unsigned)idx);
	kernels[nkernels++] = k;
	k = NULL;
	r = 0;
out:
	kernel_free(req->d, k);
	if (owned)
		free(words);
	return r;
}

/* Fill the push-constant bytes from `o`: a map of member name to number, or
 * bin of exactly the block's size. */
static int read_push(struct request *req, const struct kernel *k, const msgpack_object *o,
		     uint8_t *buf)
{
	const struct spv_info *in = &k->info;

	if (o->type == MSGPACK_OBJECT_BIN) {
		if (o->via.bin.size != in->push_bytes)
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "push: %u bytes given, kernel '%s' declares %u",
					    o->via.bin.size, k->name, in->push_bytes);
		memcpy(buf, o->via.bin.ptr, o->via.bin.size);
		return 0;
	}
	if (o->type != MSGPACK_OBJECT_MAP)
		return request_fail(req, TDP_INVALID_ARGUMENT, "push: a map of member to number, or bin");
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *key = &o->via.map.ptr[i].key, *v = &o->via.map.ptr[i].val;
		const struct spv_push_member *m = NULL;
		double x;

		if (key->type != MSGPACK_OBJECT_STR)
			return request_fail(req, TDP_INVALID_ARGUMENT, "push: keys are member names");
		for (unsigned j = 0; j < in->npush && !m; j++)
			if (strlen(in->push[j].name) == key->via.str.size &&
			    !memcmp(in->push[j].name, key->via.str.ptr, key->via.str.size))
				m = &in->push[j];
		if (!m)
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "push: kernel '%s' has no push constant '%.*s'", k->name,
					    (int)(key->via.str.size > 64 ? 64 : key->via.str.size),
					    key->via.str.ptr);
		if (m->type == SPV_SCALAR_OTHER || m->offset + 4 > in->push_bytes)
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "push: '%s' is not a 32-bit scalar; send push as bin",
					    m->name);
		if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
		    v->type != MSGPACK_OBJECT_NEGATIVE_INTEGER &&
		    v->type != MSGPACK_OBJECT_FLOAT32 && v->type != MSGPACK_OBJECT_FLOAT64)
			return request_fail(req, TDP_INVALID_ARGUMENT, "push: '%s' must be a number",
					    m->name);
		x = params_number(v);
		if (m->type == SPV_SCALAR_F32) {
			float f = (float)x;

			memcpy(buf + m->offset, &f, 4);
		} else if (m->type == SPV_SCALAR_I32) {
			int32_t iv;

			if (x != floor(x) || x < INT32_MIN || x > INT32_MAX)
				return request_fail(req, TDP_INVALID_ARGUMENT,
						    "push: '%s' is an int; %g does not fit", m->name, x);
			iv = (int32_t)x;
			memcpy(buf + m->offset, &iv, 4);
		} else {
			uint32_t uv;

			if (x != floor(x) || x < 0 || x > UINT32_MAX)
				return request_fail(req, TDP_INVALID_ARGUMENT,
						    "push: '%s' is a uint; %g does not fit", m->name, x);
			uv = (uint32_t)x;
			memcpy(buf + m->offset, &uv, 4);
		}
	}
	return 0;
}

int method_kernel_run(struct request *req)
{
	struct param spec[] = {
		{ "name", PARAM_STR, true, NULL },
		{ "tensors", PARAM_ARRAY, true, NULL },
		{ "push", PARAM_MAP, false, NULL },
		{ "groups", PARAM_ARRAY, true, NULL },
	};
	struct daemon *d = req->d;
	struct gpu_device *g = NULL;
	const uint32_t *maxg;
	uint64_t maxrange;
	struct gpu_binding b[SPV_MAX_BINDINGS];
	struct tensor *t[SPV_MAX_BINDINGS];
	uint8_t push[SPV_MAX_PUSH_BYTES] = { 0 };
	char name[TDP_MAX_NAME_LEN + 1], what[32];
	const msgpack_object_array *ta;
	struct gpu_recorder rec;
	uint32_t groups[3];
	struct kernel *k;
	int64_t t0, now;
	int idx, r;

	/* push may also be bin: look for it before params_parse types it. */
	if (req->params && req->params->type == MSGPACK_OBJECT_MAP)
		for (uint32_t i = 0; i < req->params->via.map.size; i++) {
			const msgpack_object_kv *kv = &req->params->via.map.ptr[i];

			if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == 4 &&
			    !memcmp(kv->key.via.str.ptr, "push", 4) && kv->val.type == MSGPACK_OBJECT_BIN)
				spec[2].type = PARAM_BIN;
		}
	if (params_parse(req, spec, sizeof(spec) / sizeof(spec[0])) < 0 ||
	    params_name(req, spec[0].value, name) < 0)
		return -1;
	idx = find(req->cred.uid, name);
	if (idx < 0)
		return request_fail(req, TDP_NOT_FOUND, "uid %u has no kernel named '%s'",
				    (unsigned)req->cred.uid, name);
	k = kernels[idx];
	if (read_dims(req, spec[3].value, "groups", UINT32_MAX, groups) < 0)
		return -1;
	/* The device of the tensors (checked below), else the first. */
	g = d->gpus[0];
	if (spec[1].value->via.array.size > 0 && spec[1].value->via.array.ptr[0].type == MSGPACK_OBJECT_STR) {
		struct tensor *first = lookup_readable(req, spec[1].value->via.array.ptr[0].via.str.ptr,
						       spec[1].value->via.array.ptr[0].via.str.size);

		if (first)
			g = devices_of(d, first);
	}
	maxg = g->props.limits.maxComputeWorkGroupCount;
	maxrange = g->props.limits.maxStorageBufferRange;
	for (unsigned i = 0; i < 3; i++)
		if (groups[i] > maxg[i])
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "groups[%u] = %u is more than the device's %u", i,
					    groups[i], maxg[i]);
	ta = &spec[1].value->via.array;
	if (ta->size != k->info.nbindings)
		return request_fail(req, TDP_INVALID_ARGUMENT,
				    "kernel '%s' binds %u storage buffers; %u tensors given", name,
				    k->info.nbindings, ta->size);
	if (spec[2].value && read_push(req, k, spec[2].value, push) < 0)
		return -1;
	for (unsigned i = 0; i < ta->size; i++) {
		const struct spv_binding *sb = &k->info.bindings[i];
		char tname[TDP_MAX_NAME_LEN + 1];

		snprintf(what, sizeof(what), "tensors[%u]", i);
		if (ta->ptr[i].type != MSGPACK_OBJECT_STR ||
		    !tdp_name_valid(ta->ptr[i].via.str.ptr, ta->ptr[i].via.str.size))
			return request_fail(req, TDP_INVALID_ARGUMENT, "%s: not a valid tensor name",
					    what);
		memcpy(tname, ta->ptr[i].via.str.ptr, ta->ptr[i].via.str.size);
		tname[ta->ptr[i].via.str.size] = '\0';
		if (lookup_tensor(req, what, tname,
				  sb->readonly ? ACCESS_READ : ACCESS_READ | ACCESS_WRITE, &t[i]) < 0)
			return -1;
		if (t[i]->bytes < sb->min_bytes ||
		    (sb->stride && (t[i]->bytes - sb->min_bytes) % sb->stride))
			return request_fail(req, TDP_SHAPE_MISMATCH,
					    "%s: tensor '%s' has %llu bytes; binding %u needs %llu%s%u",
					    what, tname, (unsigned long long)t[i]->bytes, i,
					    (unsigned long long)sb->min_bytes,
					    sb->stride ? " plus a multiple of " : "", sb->stride);
		if (t[i]->bytes > maxrange)
			return request_fail(req, TDP_RESOURCE_EXHAUSTED,
					    "%s: tensor '%s' is larger than the device binds (%llu bytes)",
					    what, tname, (unsigned long long)maxrange);
		if (devices_of(d, t[i]) != g)
			return request_fail(req, TDP_FAILED_PRECONDITION,
					    "%s: tensor '%s' is on device %u, tensors[0] on device %u; a kernel's "
					    "tensors must be on one device (move one with tensor.copy)",
					    what, tname, t[i]->device, g->id);
		b[i] = gpu_rec_bind(g, &t[i]->alloc, 0, t[i]->bytes, !sb->readonly);
	}
	t0 = daemon_now_ns(CLOCK_MONOTONIC);
	r = gpu_rec_begin(&rec, g);
	if (r == 0) {
		rec.timeout_ns = d->cfg.kernel_timeout_ms * 1000000ull;
		r = gpu_rec_dispatch_groups(&rec, &k->pipe[g->id], b, ta->size, push, k->info.push_bytes,
					    groups);
		if (r < 0)
			gpu_rec_abort(&rec);
		else
			r = gpu_rec_submit_wait(&rec);
	}
	if (r == -ETIMEDOUT)
		return request_fail(req, TDP_DEADLINE_EXCEEDED,
				    "kernel '%s' ran past kernel_timeout (%.1f s); the GPU is now "
				    "marked lost", name, (double)d->cfg.kernel_timeout_ms / 1e3);
	if (r == -ENODEV)
		return request_fail(req, TDP_DEVICE_LOST, "the GPU was lost");
	if (r < 0)
		return request_fail(req, TDP_INTERNAL, "dispatch failed (%s)", strerror(-r));
	now = daemon_now_ns(CLOCK_REALTIME);
	for (unsigned i = 0; i < ta->size; i++)
		if (!k->info.bindings[i].readonly) {
			t[i]->modified_ns = now;
			t[i]->version++;
		}
	k->runs++;
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 3) ||
	    tdp_pack_cstr(req->pk, "name") || tdp_pack_cstr(req->pk, name) ||
	    tdp_pack_cstr(req->pk, "groups") || msgpack_pack_array(req->pk, 3) ||
	    msgpack_pack_uint32(req->pk, groups[0]) || msgpack_pack_uint32(req->pk, groups[1]) ||
	    msgpack_pack_uint32(req->pk, groups[2]) ||
	    tdp_pack_cstr(req->pk, "seconds") ||
	    msgpack_pack_double(req->pk, (double)(daemon_now_ns(CLOCK_MONOTONIC) - t0) / 1e9))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

int method_kernel_list(struct request *req)
{
	struct param spec[] = { { "prefix", PARAM_STR, false, NULL } };
	const msgpack_object_str *pre = NULL;
	unsigned n = 0;
	int fail;

	if (params_parse(req, spec, 1) < 0)
		return -1;
	if (spec[0].value)
		pre = &spec[0].value->via.str;
#define LISTED(k) ((k)->owner == req->cred.uid && \
		   (!pre || (strlen((k)->name) >= pre->size && !memcmp((k)->name, pre->ptr, pre->size))))
	for (unsigned i = 0; i < nkernels; i++)
		n += LISTED(kernels[i]);
	fail = tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 1) ||
	       tdp_pack_cstr(req->pk, "kernels") || msgpack_pack_array(req->pk, n);
	for (unsigned i = 0; !fail && i < nkernels; i++)
		if (LISTED(kernels[i]))
			fail = write_kernel(req->pk, kernels[i]);
#undef LISTED
	return fail ? request_fail(req, TDP_INTERNAL, "out of memory") : 0;
}

int method_kernel_delete(struct request *req)
{
	struct param spec[] = { { "name", PARAM_STR, true, NULL } };
	char name[TDP_MAX_NAME_LEN + 1];
	int idx;

	if (params_parse(req, spec, 1) < 0 || params_name(req, spec[0].value, name) < 0)
		return -1;
	idx = find(req->cred.uid, name);
	if (idx < 0)
		return request_fail(req, TDP_NOT_FOUND, "uid %u has no kernel named '%s'",
				    (unsigned)req->cred.uid, name);
	remove_at(req->d, (unsigned)idx);
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 1) ||
	    tdp_pack_cstr(req->pk, "deleted") || msgpack_pack_true(req->pk))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}
