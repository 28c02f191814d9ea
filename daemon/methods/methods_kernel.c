/* kernel.create, kernel.run, kernel.list, kernel.delete (docs/kernels.md).
 *
 * A kernel is a client's compute shader, compiled (GLSL, through glslang) or
 * taken as SPIR-V, reflected (spirv_reflect.c) and built into a pipeline on
 * the layout every op shares, kept under (owner uid, name) in the registry
 * (kernel.c). kernel.run binds stored tensors to its storage buffers in order
 * and dispatches it alone in one submission with a time limit; a graph.run
 * node does the same inside a graph (kernel_node.c), through the same checks. */
#include "methods/methods_kernel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "daemon.h"
#include "devices.h"
#include "kernels/glsl_compile.h"
#include "kernels/kernel.h"
#include "methods/async_request.h"
#include "methods/kernel_build_job.h"
#include "methods/kernel_compile_job.h"
#include "kernels/spirv_reflect.h"
#include "kernels/spirv_cost.h"
#include "kernels/spirv_validate.h"
#include "name.h"
#include "pack.h"
#include "rpc.h"
#include "methods/params.h"
#include "status.h"
#include "store/lookup.h"
#include "store/names.h"
#include "store/store.h"

/* Root, or a member of the configured kernel_group. */
static bool may_create(const struct request *req)
{
	int64_t g = req->call.d->cfg.kernel_group;

	return req->call.cred.uid == 0 || (g >= 0 && access_cred_in_group(&req->call.cred, (gid_t)g));
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

/* What every device allows (kernels are built for all of them): the least
 * of their compute limits, Int64 only where all have it enabled. */
static void device_limits(const struct daemon *d, struct spv_limits *lim)
{
	memset(lim, 0, sizeof(*lim));
	lim->int64 = d->ngpus > 0;
	for (uint32_t id = 0; id < d->ngpus; id++) {
		const VkPhysicalDeviceLimits *l = &d->gpus[id]->props.limits;

		lim->int64 = lim->int64 && d->gpus[id]->shader_int64;
		for (unsigned k = 0; k < 3; k++)
			if (!id || l->maxComputeWorkGroupSize[k] < lim->max_wg[k])
				lim->max_wg[k] = l->maxComputeWorkGroupSize[k];
		if (!id || l->maxComputeWorkGroupInvocations < lim->max_invocations)
			lim->max_invocations = l->maxComputeWorkGroupInvocations;
		if (!id || l->maxComputeSharedMemorySize < lim->max_shared)
			lim->max_shared = l->maxComputeSharedMemorySize;
	}
}

int kernel_create_finish(struct request *req, const struct kernel_spec *ks, uint32_t *words,
			 size_t nwords)
{
	char why[TDP_MAX_ERROR_MESSAGE - 64];
	struct kernel *k = calloc(1, sizeof(*k));
	struct spv_limits lim;
	int r;

	if (!k) {
		r = request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of memory");
		goto fail;
	}
	device_limits(req->call.d, &lim);
	r = spirv_validate(words, nwords, &lim, why, sizeof(why));
	if (r == 0)
		r = spirv_cost_check(words, nwords, NULL, why, sizeof(why));
	if (r == 0)
		r = spv_reflect(words, nwords, ks->entry, &lim, &k->info, why, sizeof(why));
	if (r < 0) {
		r = request_fail(req, r == -ENOMEM ? TDP_RESOURCE_EXHAUSTED : TDP_INVALID_ARGUMENT,
				 "%s", r == -ENOMEM ? "out of memory" : why);
		goto fail;
	}
	if (ks->from_spirv && ks->has_wg && memcmp(ks->wg, k->info.local_size, sizeof(ks->wg)) != 0) {
		r = request_fail(req, TDP_INVALID_ARGUMENT,
				 "workgroup %u %u %u differs from the module's local size %u %u %u",
				 ks->wg[0], ks->wg[1], ks->wg[2], k->info.local_size[0],
				 k->info.local_size[1], k->info.local_size[2]);
		goto fail;
	}
	for (uint32_t id = 0; id < req->call.d->ngpus; id++)
		k->pipe[id].shader = k->name;
	/* Built for every device, so it runs wherever its tensors are; on a
	 * thread, the loop serving everyone meanwhile (kernel_build_job.c). */
	return kernel_build(req, ks, k, words, nwords);
fail:
	kernel_free(req->call.d, k);
	free(words);
	return r;
}

int kernel_create_store(struct request *req, const struct kernel_spec *ks, struct kernel *k, int r,
			size_t nwords)
{
	if (r < 0) {
		r = request_fail(req, r == -ENODEV ? TDP_DEVICE_LOST :
				 r == -ENOMEM ? TDP_RESOURCE_EXHAUSTED : TDP_INVALID_ARGUMENT,
				 "the driver rejected the module (%s)", strerror(-r));
		goto out;
	}
	/* Checked again: other kernels may have come while this one compiled. */
	if (kernel_count_owner(req->call.d, req->call.cred.uid, ks->name) >= req->call.d->cfg.user_max_kernels ||
	    (!kernel_find(req->call.d, req->call.cred.uid, ks->name) && kernel_count(req->call.d) >= KERNEL_MAX)) {
		r = request_fail(req, TDP_RESOURCE_EXHAUSTED,
				 "uid %u already has %llu kernels (user_max_kernels), or the daemon %d",
				 (unsigned)req->call.cred.uid, (unsigned long long)req->call.d->cfg.user_max_kernels,
				 KERNEL_MAX);
		goto out;
	}
	snprintf(k->name, sizeof(k->name), "%s", ks->name);
	k->owner = req->call.cred.uid;
	k->spirv_bytes = nwords * 4;
	k->created_ns = daemon_now_ns(CLOCK_REALTIME);
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || write_kernel(req->pk, k)) {
		r = request_fail(req, TDP_INTERNAL, "out of memory");
		goto out;
	}
	kernel_insert(req->call.d, k);
	return 0;
out:
	kernel_free(req->call.d, k);
	return r;
}

int kernel_create_compiled(struct request *req, const struct kernel_spec *ks, int r,
			   uint32_t *words, size_t nwords, const char *why)
{
	if (r == -ENOMEM)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of memory");
	if (r == -ETIMEDOUT || r == -E2BIG)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "glsl does not compile: %s", why);
	if (r < 0)
		return request_fail(req, r == -EINVAL ? TDP_INVALID_ARGUMENT : TDP_INTERNAL,
				    "glsl does not compile: %s", why);
	return kernel_create_finish(req, ks, words, nwords);
}

/* kernel.create's parameters into `ks`; *ret_glsl (.ptr NULL when absent) /
 * *ret_spirv (NULL when absent) get the source given. Returns 0 or -1 with
 * request_fail(). */
static int create_params(struct request *req, struct kernel_spec *ks, struct param_str *ret_glsl,
			 const msgpack_object_bin **ret_spirv)
{
	const msgpack_object *spirv, *workgroup;
	struct param_str glsl, entry;
	const struct param p[] = {
		PARAM_REQ("name", PARAM_NAME, ks->name),
		PARAM_OPT("glsl", PARAM_STR, glsl),
		PARAM_OPT("spirv", PARAM_BIN, spirv),
		PARAM_OPT("entry", PARAM_STR, entry),
		PARAM_OPT("workgroup", PARAM_ARRAY, workgroup),
	};
	char why[TDP_MAX_ERROR_MESSAGE - 64];
	int r;

	memset(ks, 0, sizeof(*ks));
	snprintf(ks->entry, sizeof(ks->entry), "main");
	if (PARAMS_PARSE(req, p) < 0)
		return -1;
	if (!may_create(req))
		return request_fail(req, TDP_PERMISSION_DENIED,
				    "uid %u may not create kernels (root and the members of "
				    "kernel_group may; see docs/security.md)", (unsigned)req->call.cred.uid);
	if (!glsl.ptr == !spirv)
		return request_fail(req, TDP_INVALID_ARGUMENT, "give exactly one of glsl and spirv");
	if (entry.ptr) {
		if (!entry.len || entry.len >= sizeof(ks->entry) || memchr(entry.ptr, '\0', entry.len))
			return request_fail(req, TDP_INVALID_ARGUMENT, "entry: 1-%zu bytes",
					    sizeof(ks->entry) - 1);
		memcpy(ks->entry, entry.ptr, entry.len);
		ks->entry[entry.len] = '\0';
	}
	if (workgroup && (r = kernel_read_dims(workgroup, "workgroup", 1024, ks->wg, why,
					       sizeof(why))) != 0)
		return request_fail(req, r, "%s", why);
	if (workgroup && (!ks->wg[0] || !ks->wg[1] || !ks->wg[2]))
		return request_fail(req, TDP_INVALID_ARGUMENT, "workgroup: sizes must be at least 1");
	ks->has_wg = workgroup != NULL;
	ks->from_spirv = spirv != NULL;
	if (kernel_count_owner(req->call.d, req->call.cred.uid, ks->name) >= req->call.d->cfg.user_max_kernels)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED,
				    "uid %u already has %llu kernels (user_max_kernels)",
				    (unsigned)req->call.cred.uid, (unsigned long long)req->call.d->cfg.user_max_kernels);
	if (!kernel_find(req->call.d, req->call.cred.uid, ks->name) && kernel_count(req->call.d) >= KERNEL_MAX)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "the daemon holds %d kernels",
				    KERNEL_MAX);
	*ret_glsl = glsl;
	*ret_spirv = spirv ? &spirv->via.bin : NULL;
	return 0;
}

int method_kernel_create(struct request *req)
{
	char why[TDP_MAX_ERROR_MESSAGE - 64], preamble[128];
	struct param_str glsl = { NULL, 0 };
	const msgpack_object_bin *spirv = NULL;
	struct kernel_spec ks;
	uint32_t *words = NULL;
	size_t nwords = 0;
	char *src;
	int r;

	if (create_params(req, &ks, &glsl, &spirv) < 0)
		return -1;
	if (spirv) {
		if (spirv->size % 4 || spirv->size / 4 > SPV_MAX_WORDS)
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "spirv: a whole number of 32-bit words, at most %zu",
					    SPV_MAX_WORDS);
		/* Aligned copy: the bin sits anywhere in the message. */
		nwords = spirv->size / 4;
		words = malloc(nwords ? spirv->size : 4);
		if (!words)
			return request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of memory");
		memcpy(words, spirv->ptr, spirv->size);
		return kernel_create_finish(req, &ks, words, nwords);
	}
	if (glsl.len > GLSL_MAX_SOURCE || memchr(glsl.ptr, '\0', glsl.len))
		return request_fail(req, TDP_INVALID_ARGUMENT, "glsl: at most %zu bytes without NUL",
				    GLSL_MAX_SOURCE);
	src = malloc(glsl.len + 1);
	if (!src)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of memory");
	memcpy(src, glsl.ptr, glsl.len);
	src[glsl.len] = '\0';
	if (ks.has_wg)
		snprintf(preamble, sizeof(preamble),
			 "layout(local_size_x = %u, local_size_y = %u, local_size_z = %u) in;\n",
			 ks.wg[0], ks.wg[1], ks.wg[2]);
	/* In a child process the loop does not wait for (docs/kernels.md); in
	 * process where there is no child (unit tests, fuzzers). */
	if (glsl_child_exe && req->conn) {
		r = kernel_compile_defer(req, &ks, src, ks.has_wg ? preamble : NULL);
		free(src);
		return r;
	}
	r = glsl_compile_isolated(src, ks.has_wg ? preamble : NULL, GLSL_CHILD_SECONDS, &words,
				  &nwords, why, sizeof(why));
	free(src);
	return kernel_create_compiled(req, &ks, r, words, nwords, why);
}

/* A kernel.run answered when its dispatch completed (async_request.h). */
struct krun_job {
	struct async_req a;
	struct gpu_recorder rec;
	param_name name;
	uint32_t groups[3];
	int64_t t0;
	unsigned n;
	/* The tensors it writes: their names and memory, to mark them
	 * modified at completion if the names still hold that memory. */
	param_name wname[SPV_MAX_BINDINGS];
	struct gpu_alloc walloc[SPV_MAX_BINDINGS];
	unsigned nw;
};

static void krun_release(struct async_req *a)
{
	free(a);
}

/* The dispatch ended: report a failure, else mark the tensors it wrote as
 * modified and answer. */
static int krun_finish(struct async_req *a, struct request *req)
{
	struct krun_job *j = (struct krun_job *)a;
	struct daemon *d = req->call.d;
	int r = gpu_rec_wait(&j->rec);
	int64_t now;

	if (r == -ETIMEDOUT)
		return request_fail(req, TDP_DEADLINE_EXCEEDED,
				    "kernel '%s' ran past kernel_timeout (%.1f s); the GPU is now "
				    "marked lost", j->name, (double)d->cfg.kernel_timeout_ms / 1e3);
	if (r == -ENODEV)
		return request_fail(req, TDP_DEVICE_LOST, "the GPU was lost");
	if (r < 0)
		return request_fail(req, TDP_INTERNAL, "dispatch failed (%s)", strerror(-r));
	now = daemon_now_ns(CLOCK_REALTIME);
	for (unsigned i = 0; i < j->nw; i++) {
		struct tensor *t;

		/* A tensor replaced or deleted meanwhile is another tensor now. */
		if (store_lookup(d->store, j->wname[i], strlen(j->wname[i]), &req->call.cred, 0, &t, NULL) < 0 ||
		    t->alloc.block != j->walloc[i].block || t->alloc.offset != j->walloc[i].offset)
			continue;
		t->modified_ns = now;
		t->version++;
		/* Durable like any write (docs/durability.md). */
		store_mark_dirty(d->store, t);
	}
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 3) ||
	    tdp_pack_cstr(req->pk, "name") || tdp_pack_cstr(req->pk, j->name) ||
	    tdp_pack_cstr(req->pk, "groups") || msgpack_pack_array(req->pk, 3) ||
	    msgpack_pack_uint32(req->pk, j->groups[0]) || msgpack_pack_uint32(req->pk, j->groups[1]) ||
	    msgpack_pack_uint32(req->pk, j->groups[2]) ||
	    tdp_pack_cstr(req->pk, "seconds") ||
	    msgpack_pack_double(req->pk, (double)(daemon_now_ns(CLOCK_MONOTONIC) - j->t0) / 1e9))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

/* Check kernel.run's tensors (names, access, sizes, one device) into `b`
 * and the job's list of written tensors. Returns 0 or request_fail. */
static int krun_bind(struct request *req, struct krun_job *j, const struct kernel *k,
		     const msgpack_object_array *ta, struct gpu_device *g, struct gpu_binding *b)
{
	struct daemon *d = req->call.d;
	char what[32], why[TDP_MAX_ERROR_MESSAGE - 64];
	int r;

	for (unsigned i = 0; i < ta->size; i++) {
		const struct spv_binding *sb = &k->info.bindings[i];
		char tname[TDP_MAX_NAME_LEN + 1], shown[NAMES_SHOWN_MAX];
		struct tensor *t;

		snprintf(what, sizeof(what), "tensors[%u]", i);
		if (ta->ptr[i].type != MSGPACK_OBJECT_STR ||
		    names_qualify(req->call.cred.uid, ta->ptr[i].via.str.ptr, ta->ptr[i].via.str.size, tname,
				  NULL) < 0)
			return request_fail(req, TDP_INVALID_ARGUMENT, "%s: not a valid tensor name",
					    what);
		if (lookup_tensor(&req->call, what, tname,
				  sb->readonly ? ACCESS_READ : ACCESS_READ | ACCESS_WRITE, &t) < 0)
			return -1;
		r = kernel_check_tensor(g, k, i, what, lookup_show(&req->call, tname, shown), t->bytes, why,
					sizeof(why));
		if (r)
			return request_fail(req, r, "%s", why);
		if (devices_of(d, t) != g)
			return request_fail(req, TDP_FAILED_PRECONDITION,
					    "%s: tensor '%s' is on device %u, tensors[0] on device %u; a kernel's "
					    "tensors must be on one device (move one with tensor.copy)",
					    what, lookup_show(&req->call, tname, shown), t->device, g->id);
		b[i] = gpu_rec_bind(g, &t->alloc, 0, t->bytes, !sb->readonly);
		if (!sb->readonly) {
			strcpy(j->wname[j->nw], t->name);
			j->walloc[j->nw++] = t->alloc;
		}
	}
	return 0;
}

int method_kernel_run(struct request *req)
{
	param_name name;
	const msgpack_object *tensors, *push_obj, *groups_obj;
	const struct param p[] = {
		PARAM_REQ("name", PARAM_NAME, name),
		PARAM_REQ("tensors", PARAM_ARRAY, tensors),
		/* a map of members, or raw bytes */
		PARAM_OPT("push", PARAM_MAP_OR_BIN, push_obj),
		PARAM_REQ("groups", PARAM_ARRAY, groups_obj),
	};
	struct daemon *d = req->call.d;
	struct gpu_device *g;
	struct gpu_binding b[SPV_MAX_BINDINGS];
	uint8_t push[SPV_MAX_PUSH_BYTES] = { 0 };
	char why[TDP_MAX_ERROR_MESSAGE - 64];
	const msgpack_object_array *ta;
	struct krun_job *j;
	struct kernel *k;
	int r;

	if (PARAMS_PARSE(req, p) < 0)
		return -1;
	ta = &tensors->via.array;
	k = kernel_find(req->call.d, req->call.cred.uid, name);
	if (!k)
		return request_fail(req, TDP_NOT_FOUND, "uid %u has no kernel named '%s'",
				    (unsigned)req->call.cred.uid, name);
	/* The device of the tensors (each checked below), else the first. */
	g = d->gpus[0];
	if (ta->size > 0 && ta->ptr[0].type == MSGPACK_OBJECT_STR) {
		struct tensor *first = lookup_readable(&req->call, ta->ptr[0].via.str.ptr, ta->ptr[0].via.str.size);

		if (first)
			g = devices_of(d, first);
	}
	j = calloc(1, sizeof(*j));
	if (!j)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	j->a.finish = krun_finish;
	j->a.release = krun_release;
	strcpy(j->name, name);
	if ((r = kernel_read_groups(g, groups_obj, "groups", j->groups, why, sizeof(why))) ||
	    (r = kernel_check_count(k, ta->size, why, sizeof(why))) ||
	    (push_obj && (r = kernel_read_push(k, push_obj, push, why, sizeof(why))))) {
		free(j);
		return request_fail(req, r, "%s", why);
	}
	if (krun_bind(req, j, k, ta, g, b) < 0) {
		free(j);
		return -1;
	}
	j->t0 = daemon_now_ns(CLOCK_MONOTONIC);
	/* Waited for on the loop (cmd[0..1]) unless it may be watched. */
	r = async_req_possible(req) ? gpu_rec_begin_async(&j->rec, g) : gpu_rec_begin(&j->rec, g);
	if (r == 0) {
		j->rec.timeout_ns = d->cfg.kernel_timeout_ms * 1000000ull;
		r = kernel_record(&j->rec, k, b, push, j->groups);
		if (r < 0)
			gpu_rec_abort(&j->rec);
		else if ((r = gpu_rec_submit(&j->rec)) == 0)
			return async_req_run_rec(req, &j->a, &j->rec); /* frees j */
	}
	free(j);
	if (r == -ENODEV)
		return request_fail(req, TDP_DEVICE_LOST, "the GPU was lost");
	return request_fail(req, TDP_INTERNAL, "dispatch failed (%s)", strerror(-r));
}

int method_kernel_list(struct request *req)
{
	struct param_str pre;
	const struct param p[] = { PARAM_OPT("prefix", PARAM_STR, pre) };
	unsigned n = 0;
	int fail;

	if (PARAMS_PARSE(req, p) < 0)
		return -1;
#define LISTED(k) ((k)->owner == req->call.cred.uid && \
		   (!pre.ptr || (strlen((k)->name) >= pre.len && !memcmp((k)->name, pre.ptr, pre.len))))
	for (unsigned i = 0; i < kernel_count(req->call.d); i++)
		n += LISTED(kernel_at(req->call.d, i));
	fail = tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 1) ||
	       tdp_pack_cstr(req->pk, "kernels") || msgpack_pack_array(req->pk, n);
	for (unsigned i = 0; !fail && i < kernel_count(req->call.d); i++)
		if (LISTED(kernel_at(req->call.d, i)))
			fail = write_kernel(req->pk, kernel_at(req->call.d, i));
#undef LISTED
	return fail ? request_fail(req, TDP_INTERNAL, "out of memory") : 0;
}

int method_kernel_delete(struct request *req)
{
	param_name name;
	const struct param p[] = { PARAM_REQ("name", PARAM_NAME, name) };

	if (PARAMS_PARSE(req, p) < 0)
		return -1;
	if (kernel_remove(req->call.d, req->call.cred.uid, name) < 0)
		return request_fail(req, TDP_NOT_FOUND, "uid %u has no kernel named '%s'",
				    (unsigned)req->call.cred.uid, name);
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 1) ||
	    tdp_pack_cstr(req->pk, "deleted") || msgpack_pack_true(req->pk))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}
