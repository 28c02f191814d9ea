/* tensor.put, tensor.get, tensor.stat, tensor.list, tensor.delete, tensor.chmod, tensor.copy. */
#include "methods/methods_tensor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "daemon.h"
#include "devices.h"
#include "dtype.h"
#include "gpu/recorder.h"
#include "gpu/transfer.h"
#include "methods/async_request.h"
#include "methods/memfd.h"
#include "methods/tensor_import.h"
#include "methods/tensor_stream.h"
#include "mode.h"
#include "name.h"
#include "pack.h"
#include "persist/checkpoint.h"
#include "rpc.h"
#include "methods/params.h"
#include "status.h"
#include "store/lookup.h"
#include "store/names.h"
#include "store/store.h"

#define META_ENTRIES 11

/* The metadata entries of `t` (META_ENTRIES key/value pairs), for a map the
 * caller opened. */
static int write_meta_entries(const struct request *req, msgpack_packer *pk, const struct tensor *t)
{
	char mode[TDP_MODE_TEXT_MAX], shown[NAMES_SHOWN_MAX];
	int fail = tdp_pack_cstr(pk, "name") || tdp_pack_cstr(pk, lookup_show(&req->call, t->name, shown)) ||
		   tdp_pack_cstr(pk, "dtype") || tdp_pack_cstr(pk, tdp_dtype_name(t->dtype)) ||
		   tdp_pack_cstr(pk, "shape") || msgpack_pack_array(pk, t->rank);

	for (unsigned i = 0; !fail && i < t->rank; i++)
		fail = msgpack_pack_uint64(pk, t->shape[i]);
	return fail ||
	       tdp_pack_cstr(pk, "bytes") || msgpack_pack_uint64(pk, t->bytes) ||
	       tdp_pack_cstr(pk, "owner") || msgpack_pack_uint32(pk, t->owner) ||
	       tdp_pack_cstr(pk, "group") || msgpack_pack_uint32(pk, t->group) ||
	       tdp_pack_cstr(pk, "mode") || tdp_pack_cstr(pk, tdp_mode_format(t->mode, mode)) ||
	       tdp_pack_cstr(pk, "created") || msgpack_pack_double(pk, (double)t->created_ns / 1e9) ||
	       tdp_pack_cstr(pk, "modified") || msgpack_pack_double(pk, (double)t->modified_ns / 1e9) ||
	       tdp_pack_cstr(pk, "version") || msgpack_pack_uint64(pk, t->version) ||
	       tdp_pack_cstr(pk, "device") || msgpack_pack_uint32(pk, t->device);
}

int tensor_write_meta(struct request *req, const struct tensor *t)
{
	return msgpack_pack_map(req->pk, META_ENTRIES) || write_meta_entries(req, req->pk, t);
}

int tensor_pack_name(struct request *req, const struct tensor *t)
{
	char shown[NAMES_SHOWN_MAX];

	return tdp_pack_cstr(req->pk, lookup_show(&req->call, t->name, shown));
}

int tensor_write_meta_result(struct request *req, const struct tensor *t)
{
	return tensor_write_meta_result_map(req, t, 0);
}

int tensor_write_meta_result_map(struct request *req, const struct tensor *t, unsigned extra)
{
	if (tdp_write_result_head(req->pk, req->msgid) < 0 ||
	    msgpack_pack_map(req->pk, META_ENTRIES + extra) || write_meta_entries(req, req->pk, t))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

int tensor_device_error(struct request *req, const struct gpu_device *g, int r, const char *what)
{
	const struct gpu_memory *m = &g->mem;

	if (r == -ENODEV)
		return request_fail(req, TDP_DEVICE_LOST, "%s: the GPU was lost", what);
	if (r == -ETIMEDOUT)
		return request_fail(req, TDP_DEADLINE_EXCEEDED, "%s ran past request_timeout; the GPU "
				    "is now marked lost and will be re-created", what);
	if (r == -ENOMEM)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED,
				    "%s: out of device memory (%llu of %llu bytes taken)", what,
				    (unsigned long long)m->reserved, (unsigned long long)m->limit);
	return request_fail(req, TDP_INTERNAL, "%s failed (%s)", what, strerror(-r));
}

/* Parse the shape array into `t` and compute its sizes; checks rank, element
 * types, overflow and the tensor size limit. */
static int parse_shape(struct request *req, const msgpack_object *shape, struct tensor *t)
{
	if (shape->via.array.size > TDP_MAX_RANK)
		return request_fail(req, TDP_INVALID_ARGUMENT, "rank %u is over the limit of %d",
				    shape->via.array.size, TDP_MAX_RANK);
	t->rank = shape->via.array.size;
	for (unsigned i = 0; i < t->rank; i++)
		if (tdp_obj_uint(&shape->via.array.ptr[i], &t->shape[i]) < 0)
			return request_fail(req, TDP_INVALID_ARGUMENT,
					    "shape[%u] must be a non-negative integer", i);
	if (tdp_shape_count(t->shape, t->rank, tdp_dtype_size(t->dtype), &t->count) < 0 ||
	    t->count * tdp_dtype_size(t->dtype) > req->call.d->cfg.max_tensor_bytes)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED,
				    "the tensor is larger than the limit of %llu bytes",
				    (unsigned long long)req->call.d->cfg.max_tensor_bytes);
	t->bytes = t->count * tdp_dtype_size(t->dtype);
	return 0;
}

/* The passed fd of a put or get: `has_fd` says whether the request named
 * one (`has_offset`: an offset into it); fds that came without, or more than the one named, are an error
 * (docs/protocol.md, "Passing memory"). Returns 0 or request_fail(). */
static int check_fds(struct request *req, bool has_fd, bool has_offset)
{
	if (has_offset && !has_fd)
		return request_fail(req, TDP_INVALID_ARGUMENT, "offset goes with fd");
	if (!has_fd && req->nfds)
		return request_fail(req, TDP_INVALID_ARGUMENT, "%u file descriptor%s came with the "
				    "request but no fd parameter names one", req->nfds,
				    req->nfds == 1 ? "" : "s");
	if (has_fd && req->nfds > 1)
		return request_fail(req, TDP_INVALID_ARGUMENT, "%u file descriptors came with the "
				    "request; it uses one", req->nfds);
	return 0;
}

/* Give `t` (bytes set) fresh memory on `g`. Returns 0 or request_fail(). */
static int alloc_for(struct request *req, struct gpu_device *g, struct tensor *t)
{
	int r = gpu_memory_alloc(g, t->bytes, &t->alloc);

	if (r == -EFBIG)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED,
				    "%llu bytes is more than device %u allocates at once (%llu)",
				    (unsigned long long)t->bytes, g->id,
				    (unsigned long long)gpu_memory_largest(&g->mem));
	if (r < 0)
		return tensor_device_error(req, g, r, "allocating device memory");
	return 0;
}

/* Room for `t` (name and bytes set), replacing `old` (NULL for a new name):
 * the tensor limit and the owner's quota. Returns 0 or request_fail(). */
static int check_room(struct request *req, const struct tensor *t, const struct tensor *old)
{
	struct lookup_output out = { .name = t->name, .bytes = t->bytes };

	if (!old && !store_has_room(req->call.d->store))
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "the daemon holds its limit of %llu tensors "
				    "(max_tensors)", (unsigned long long)req->call.d->cfg.max_tensors);
	return lookup_check_quota(&req->call, &out, 1);
}

/* Whether the caller may store `t` (name and bytes set) now: write access
 * to what holds the name (or the right to create it) and room for it. The
 * holder, or NULL for a new name, goes to *ret_old. Returns 0 or
 * request_fail(). */
static int check_store(struct request *req, const char *what, const struct tensor *t, struct tensor **ret_old)
{
	char why[TDP_MAX_ERROR_MESSAGE];
	struct tensor *old = NULL;
	int code = lookup_tensor_why(&req->call, what, t->name, ACCESS_WRITE, &old, why, sizeof(why));

	if (code == TDP_PERMISSION_DENIED)
		return request_fail(req, code, "%s", why);
	if (check_room(req, t, old) < 0)
		return -1;
	*ret_old = old;
	return 0;
}

/* Store `t` (its memory on `g`, filled) with `mode`, owned by its
 * namespace's owner (names_new_owner); a replacement keeps the old owner,
 * group and mode. The rights and room are checked again here: a put or copy
 * answered later must not store into a name whose rights went away
 * meanwhile (docs/security.md, "Checked at the store"). On failure its
 * memory is freed (not `t`). Returns 0 or request_fail(). */
int tensor_store_new(struct request *req, struct gpu_device *g, struct tensor *t, uint32_t mode)
{
	struct tensor *old;
	int r;

	if (check_store(req, NULL, t, &old) < 0) {
		gpu_memory_free(g, &t->alloc);
		return -1;
	}
	names_new_owner(&req->call.cred, t->name, &t->owner, &t->group);
	t->mode = mode;
	t->created_ns = t->modified_ns = daemon_now_ns(CLOCK_REALTIME);
	r = store_put(req->call.d->store, t);
	if (r < 0) {
		gpu_memory_free(g, &t->alloc);
		return request_fail(req, r == -ENOSPC ? TDP_RESOURCE_EXHAUSTED : TDP_INTERNAL,
				    r == -ENOSPC ? "the daemon holds its limit of tensors" : "out of memory");
	}
	return 0;
}

int method_tensor_put(struct request *req)
{
	param_name name;
	struct param_str dtype;
	const msgpack_object *shape, *data = NULL;
	bool if_absent = false, has_mode, has_device, has_fd, has_offset;
	uint32_t mode = TDP_MODE_PRIVATE, device = 0;
	uint64_t fd = 0, offset = 0;
	const struct param p[] = {
		PARAM_REQ("name", PARAM_TENSOR_KEY, name),
		PARAM_REQ("dtype", PARAM_STR, dtype),
		PARAM_REQ("shape", PARAM_ARRAY, shape),
		PARAM_OPT("data", PARAM_BIN, data),
		PARAM_OPT_GIVEN("fd", PARAM_UINT, fd, has_fd),
		PARAM_OPT_GIVEN("offset", PARAM_UINT, offset, has_offset),
		PARAM_OPT("if_absent", PARAM_BOOL, if_absent),
		PARAM_OPT_GIVEN("mode", PARAM_MODE, mode, has_mode),
		PARAM_OPT_GIVEN("device", PARAM_DEVICE, device, has_device),
	};
	struct daemon *d = req->call.d;
	struct tensor *t, *old = NULL;
	struct gpu_device *g;
	struct memfd_map map = { 0 };
	char why[TDP_MAX_ERROR_MESSAGE], shown[NAMES_SHOWN_MAX];
	int r, code;

	if (PARAMS_PARSE(req, p) < 0 || check_fds(req, has_fd, has_offset) < 0)
		return -1;
	if (!data == !has_fd)
		return request_fail(req, TDP_INVALID_ARGUMENT, "give the bytes as data or as fd, one of them");
	t = calloc(1, sizeof(*t));
	if (!t)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	t->name_len = strlen(name);
	memcpy(t->name, name, t->name_len + 1);
	t->dtype = tdp_dtype_parse(dtype.ptr, dtype.len);
	if (t->dtype < 0) {
		request_fail(req, TDP_INVALID_ARGUMENT, "unknown dtype (expected f32 f16 bf16 i32 u8)");
		goto fail;
	}
	if (parse_shape(req, shape, t) < 0)
		goto fail;
	if (data && data->via.bin.size != t->bytes) {
		request_fail(req, TDP_INVALID_ARGUMENT,
			     "data holds %u bytes but dtype and shape need %llu",
			     data->via.bin.size, (unsigned long long)t->bytes);
		goto fail;
	}
	code = lookup_tensor_why(&req->call, NULL, t->name, ACCESS_WRITE, &old, why, sizeof(why));
	if (code != TDP_NOT_FOUND && if_absent) {
		request_fail(req, TDP_ALREADY_EXISTS, "tensor '%s' already exists", lookup_show(&req->call, t->name, shown));
		goto fail;
	}
	if (check_store(req, NULL, t, &old) < 0)
		goto fail;
	if (old && has_mode && !access_may_chmod(&req->call.cred, old->owner)) {
		request_fail(req, TDP_PERMISSION_DENIED,
			     "only the owner (uid %u) or root may set the mode of '%s'", old->owner,
			     lookup_show(&req->call, t->name, shown));
		goto fail;
	}
	/* A replacement stays where the tensor was unless told otherwise. */
	t->device = has_device ? device : old ? old->device : devices_default(d, req->call.cred.uid, t->bytes);
	g = devices_of(d, t);
	if (has_fd && memfd_map_param(req, fd, offset, t->bytes, false,
				      tensor_import_align(g, t->bytes, true), &map) < 0)
		goto fail;
	/* The new bytes go to fresh memory, so a failure leaves the old tensor as it was. */
	if (alloc_for(req, g, t) < 0)
		goto fail;
	/* The device copies from the memfd itself where it can. */
	if (has_fd && tensor_import_put(req, g, t, &map, mode, has_mode, &r) == TENSOR_IMPORT_TAKEN)
		return r;
	r = gpu_upload(g, &t->alloc, data ? (const void *)data->via.bin.ptr : map.data);
	memfd_unmap(&map);
	if (r < 0) {
		tensor_device_error(req, g, r, "uploading");
		gpu_memory_free(g, &t->alloc);
		goto fail;
	}
	if (tensor_store_new(req, g, t, mode) < 0)
		goto fail;
	if (has_mode)
		t->mode = mode;
	return tensor_write_meta_result(req, t);
fail:
	memfd_unmap(&map);
	free(t);
	return -1;
}

/* Find the tensor named by the request's "name" (the only parameter) for
 * `want` (ACCESS_*). */
static struct tensor *lookup(struct request *req, unsigned want)
{
	param_name name;
	const struct param p[] = { PARAM_REQ("name", PARAM_TENSOR_KEY, name) };
	struct tensor *t;

	if (PARAMS_PARSE(req, p) < 0 || lookup_tensor(&req->call, NULL, name, want, &t) < 0)
		return NULL;
	return t;
}

/* tensor.get with fd: the bytes go into the client's memfd, the answer is
 * the metadata. */
static int get_into_fd(struct request *req, struct tensor *t, uint64_t fd, uint64_t offset)
{
	struct gpu_device *g = devices_of(req->call.d, t);
	struct memfd_map map;
	int r;

	if (memfd_map_param(req, fd, offset, t->bytes, true, tensor_import_align(g, t->bytes, false), &map) < 0)
		return -1;
	if (tensor_import_get(req, g, t, &map, &r) == TENSOR_IMPORT_TAKEN)
		return r;
	r = gpu_download(g, &t->alloc, map.data);
	memfd_unmap(&map);
	if (r < 0)
		return tensor_device_error(req, g, r, "downloading");
	return tensor_write_meta_result(req, t);
}

/* The answer's head up to the data's bin header. Nonzero on failure. */
static int write_get_head(struct request *req, const struct tensor *t)
{
	return tdp_write_result_head(req->pk, req->msgid) < 0 ||
	       msgpack_pack_map(req->pk, META_ENTRIES + 1) || write_meta_entries(req, req->pk, t) ||
	       tdp_pack_cstr(req->pk, "data") || msgpack_pack_bin(req->pk, t->bytes);
}

/* A large get: the head now, the bytes from a device snapshot as the socket
 * drains (tensor_stream.h); without room for a snapshot, the plain way. */
static int get_streamed(struct request *req, struct tensor *t)
{
	struct tensor_stream *s = NULL;
	void *dst;
	int r = tensor_stream_new(req, t, &s);

	if (r < 0)
		return -1;
	if (write_get_head(req, t)) {
		tensor_stream_free(s);
		return request_fail(req, TDP_INTERNAL, "out of memory");
	}
	if (r > 0)
		return tensor_stream_start(req, s);
	dst = tdp_buf_extend(req->out, t->bytes);
	if (!dst)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of host memory for %llu bytes",
				    (unsigned long long)t->bytes);
	r = gpu_download(devices_of(req->call.d, t), &t->alloc, dst);
	return r < 0 ? tensor_device_error(req, devices_of(req->call.d, t), r, "downloading") : 0;
}

int method_tensor_get(struct request *req)
{
	param_name name;
	uint64_t fd = 0, offset = 0;
	bool has_fd, has_offset;
	const struct param p[] = {
		PARAM_REQ("name", PARAM_TENSOR_KEY, name),
		PARAM_OPT_GIVEN("fd", PARAM_UINT, fd, has_fd),
		PARAM_OPT_GIVEN("offset", PARAM_UINT, offset, has_offset),
	};
	struct tensor *t;
	void *dst;
	int r;

	if (PARAMS_PARSE(req, p) < 0 || check_fds(req, has_fd, has_offset) < 0 ||
	    lookup_tensor(&req->call, NULL, name, ACCESS_READ, &t) < 0)
		return -1;
	if (has_fd)
		return get_into_fd(req, t, fd, offset);
	if (t->bytes >= TENSOR_STREAM_MIN)
		return get_streamed(req, t);
	if (tdp_write_result_head(req->pk, req->msgid) < 0 ||
	    msgpack_pack_map(req->pk, META_ENTRIES + 1) || write_meta_entries(req, req->pk, t) ||
	    tdp_pack_cstr(req->pk, "data") || msgpack_pack_bin(req->pk, t->bytes))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	/* The bytes go from the device straight into the output buffer. */
	dst = tdp_buf_extend(req->out, t->bytes);
	if (!dst)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of host memory for %llu bytes",
				    (unsigned long long)t->bytes);
	r = gpu_download(devices_of(req->call.d, t), &t->alloc, dst);
	if (r < 0)
		return tensor_device_error(req, devices_of(req->call.d, t), r, "downloading");
	return 0;
}

int method_tensor_stat(struct request *req)
{
	struct tensor *t = lookup(req, ACCESS_READ);

	if (!t)
		return -1;
	return tensor_write_meta_result(req, t);
}

int method_tensor_list(struct request *req)
{
	struct param_str prefix;
	const struct param p[] = { PARAM_OPT("prefix", PARAM_STR, prefix) };
	char key[TDP_MAX_NAME_LEN + 1];
	struct tensor **list;
	size_t n;
	int fail, kn;

	if (PARAMS_PARSE(req, p) < 0)
		return -1;
	/* A prefix is a name's beginning (possibly empty), in the caller's
	 * namespace or, after "~user/", in that user's (docs/security.md). */
	kn = names_qualify_prefix(req->call.cred.uid, prefix.ptr ? prefix.ptr : "", prefix.len, key);
	if (kn == -ESRCH)
		return request_fail(req, TDP_INVALID_ARGUMENT, "prefix: no such user");
	if (kn < 0)
		return request_fail(req, TDP_INVALID_ARGUMENT,
				    "prefix must be up to %d bytes of A-Z a-z 0-9 . _ : / -, optionally after "
				    "~user/", TDP_MAX_NAME_LEN);
	if (store_list(req->call.d->store, key, (size_t)kn, &req->call.cred, &list, &n) < 0)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	fail = tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 1) ||
	       tdp_pack_cstr(req->pk, "tensors") || msgpack_pack_array(req->pk, (uint32_t)n);
	for (size_t i = 0; !fail && i < n; i++)
		fail = tensor_write_meta(req, list[i]);
	free(list);
	if (fail)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

int method_tensor_delete(struct request *req)
{
	struct tensor *t = lookup(req, ACCESS_WRITE | LOOKUP_EXISTING);
	char name[TDP_MAX_NAME_LEN + 1], shown[NAMES_SHOWN_MAX];
	uint64_t bytes;
	size_t len;

	if (!t)
		return -1;
	len = t->name_len;
	memcpy(name, t->name, len + 1);
	bytes = t->bytes;
	store_delete(req->call.d->store, name, len);
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 3) ||
	    tdp_pack_cstr(req->pk, "name") || tdp_pack_cstr(req->pk, lookup_show(&req->call, name, shown)) ||
	    tdp_pack_cstr(req->pk, "deleted") || msgpack_pack_true(req->pk) ||
	    tdp_pack_cstr(req->pk, "bytes") || msgpack_pack_uint64(req->pk, bytes))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

int method_tensor_chmod(struct request *req)
{
	param_name name;
	uint32_t mode = 0;
	uint64_t group = 0;
	bool has_mode, has_group;
	const struct param p[] = {
		PARAM_REQ("name", PARAM_TENSOR_KEY, name),
		PARAM_OPT_GIVEN("mode", PARAM_MODE, mode, has_mode),
		PARAM_OPT_GIVEN("group", PARAM_UINT, group, has_group),
	};
	char shown[NAMES_SHOWN_MAX];
	struct tensor *t;

	if (PARAMS_PARSE(req, p) < 0)
		return -1;
	if (!has_mode && !has_group)
		return request_fail(req, TDP_INVALID_ARGUMENT, "give a mode, a group or both");
	if (has_group) {
		if (group >= UINT32_MAX)
			return request_fail(req, TDP_INVALID_ARGUMENT, "group %llu is no gid",
					    (unsigned long long)group);
	}
	/* Finding it needs no access: the check is ownership, just below. */
	if (lookup_tensor(&req->call, NULL, name, 0, &t) < 0)
		return -1;
	if (!access_may_chmod(&req->call.cred, t->owner))
		return request_fail(req, TDP_PERMISSION_DENIED,
				    "tensor '%s' belongs to uid %u; only its owner or root may change its mode",
				    lookup_show(&req->call, name, shown), t->owner);
	if (has_group && req->call.cred.uid != 0 && !access_cred_in_group(&req->call.cred, (gid_t)group))
		return request_fail(req, TDP_PERMISSION_DENIED,
				    "uid %u is not in group %llu; only root may give a tensor to a group "
				    "it is not in", (unsigned)req->call.cred.uid, (unsigned long long)group);
	if (has_mode)
		t->mode = mode;
	if (has_group)
		t->group = (uint32_t)group;
	store_mark_dirty(req->call.d->store, t);
	/* Durable at once, so a crash or a device loss never brings back the
	 * access it may revoke (docs/durability.md). */
	checkpoint_tensor_now(req->call.d, t);
	return tensor_write_meta_result(req, t);
}

/* tensor.copy {src, dst, device?}: dst becomes a copy of src on `device`
 * (src's by default); dst == src moves the tensor (docs/devices.md). */
/* A tensor.copy on one device answered when the copy completed
 * (async_request.h): the copy is stored only then. */
struct copy_job {
	struct async_req a;
	struct gpu_recorder rec;
	struct gpu_device *g;
	struct tensor *t;               /* the copy, until stored */
};

static void copy_release(struct async_req *a)
{
	struct copy_job *j = (struct copy_job *)a;

	if (j->t) {
		gpu_memory_free(j->g, &j->t->alloc);
		free(j->t);
	}
	free(j);
}

static int copy_finish(struct async_req *a, struct request *req)
{
	struct copy_job *j = (struct copy_job *)a;
	struct tensor *t = j->t;
	int r = gpu_rec_wait(&j->rec);

	if (r < 0)
		return tensor_device_error(req, j->g, r, "copying");
	/* A replacement (or a move) keeps owner, group and mode. */
	if (tensor_store_new(req, j->g, t, TDP_MODE_PRIVATE) < 0)
		return -1;
	j->t = NULL;
	return tensor_write_meta_result(req, t);
}

/* Copy src into t (allocated on `g`, src's device) with a recording of its
 * own, answered at completion. Returns what the handler returns; t is the
 * job's either way. */
static int copy_async(struct request *req, struct gpu_device *g, const struct tensor *src, struct tensor *t)
{
	struct copy_job *j = calloc(1, sizeof(*j));
	struct gpu_binding sb, db;
	int r;

	if (!j) {
		gpu_memory_free(g, &t->alloc);
		free(t);
		return request_fail(req, TDP_INTERNAL, "out of memory");
	}
	j->a.finish = copy_finish;
	j->a.release = copy_release;
	j->g = g;
	j->t = t;
	r = gpu_rec_begin_async(&j->rec, g);
	if (r == 0) {
		sb = gpu_rec_bind(g, &src->alloc, 0, src->bytes, false);
		db = gpu_rec_bind(g, &t->alloc, 0, t->bytes, true);
		gpu_rec_copy(&j->rec, &sb, &db);
		if ((r = gpu_rec_submit(&j->rec)) == 0)
			return async_req_run_rec(req, &j->a, &j->rec); /* frees j */
	}
	tensor_device_error(req, g, r, "copying");
	copy_release(&j->a);
	return -1;
}

int method_tensor_copy(struct request *req)
{
	param_name src_name, dst_name;
	uint32_t device = 0;
	bool has_device;
	const struct param p[] = {
		PARAM_REQ("src", PARAM_TENSOR_KEY, src_name),
		PARAM_REQ("dst", PARAM_TENSOR_KEY, dst_name),
		PARAM_OPT_GIVEN("device", PARAM_DEVICE, device, has_device),
	};
	struct daemon *d = req->call.d;
	struct tensor *src, *old = NULL, *t;
	struct gpu_device *g;
	int r;

	if (PARAMS_PARSE(req, p) < 0 || lookup_tensor(&req->call, "src", src_name, ACCESS_READ, &src) < 0)
		return -1;
	t = calloc(1, sizeof(*t));
	if (!t)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	t->name_len = strlen(dst_name);
	memcpy(t->name, dst_name, t->name_len + 1);
	t->bytes = src->bytes;
	if (check_store(req, "dst", t, &old) < 0)
		goto fail;
	t->dtype = src->dtype;
	t->rank = src->rank;
	memcpy(t->shape, src->shape, sizeof(t->shape));
	t->count = src->count;
	t->bytes = src->bytes;
	t->device = has_device ? device : src->device;
	g = devices_of(d, t);
	if (alloc_for(req, g, t) < 0)
		goto fail;
	/* On one device the copy is the device's own work: the loop does not
	 * wait for it (between devices it goes through host memory, waited). */
	if (g == devices_of(d, src) && t->bytes && async_req_possible(req))
		return copy_async(req, g, src, t);
	r = gpu_copy(devices_of(d, src), &src->alloc, g, &t->alloc);
	if (r < 0) {
		tensor_device_error(req, g, r, "copying");
		gpu_memory_free(g, &t->alloc);
		goto fail;
	}
	/* A replacement (or a move) keeps owner, group and mode. */
	if (tensor_store_new(req, g, t, TDP_MODE_PRIVATE) < 0)
		goto fail;
	return tensor_write_meta_result(req, t);
fail:
	free(t);
	return -1;
}
