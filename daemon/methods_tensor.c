/* tensor.put, tensor.get, tensor.stat, tensor.list, tensor.delete. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "dtype.h"
#include "gpu/transfer.h"
#include "handlers.h"
#include "pack.h"
#include "params.h"
#include "rpc.h"
#include "status.h"
#include "store.h"
#include "tensor_meta.h"

#define META_ENTRIES 9

/* The metadata entries of `t` (META_ENTRIES key/value pairs), for a map the
 * caller opened. */
static int write_meta_entries(msgpack_packer *pk, const struct tensor *t)
{
	int fail = tdp_pack_cstr(pk, "name") || tdp_pack_strn(pk, t->name, t->name_len) ||
		   tdp_pack_cstr(pk, "dtype") || tdp_pack_cstr(pk, tdp_dtype_name(t->dtype)) ||
		   tdp_pack_cstr(pk, "shape") || msgpack_pack_array(pk, t->rank);

	for (unsigned i = 0; !fail && i < t->rank; i++)
		fail = msgpack_pack_uint64(pk, t->shape[i]);
	return fail ||
	       tdp_pack_cstr(pk, "bytes") || msgpack_pack_uint64(pk, t->bytes) ||
	       tdp_pack_cstr(pk, "owner") || msgpack_pack_uint32(pk, t->owner) ||
	       tdp_pack_cstr(pk, "created") || msgpack_pack_double(pk, (double)t->created_ns / 1e9) ||
	       tdp_pack_cstr(pk, "modified") || msgpack_pack_double(pk, (double)t->modified_ns / 1e9) ||
	       tdp_pack_cstr(pk, "version") || msgpack_pack_uint64(pk, t->version) ||
	       tdp_pack_cstr(pk, "device") || msgpack_pack_uint32(pk, t->device);
}

int tensor_write_meta(msgpack_packer *pk, const struct tensor *t)
{
	return msgpack_pack_map(pk, META_ENTRIES) || write_meta_entries(pk, t);
}

int tensor_write_meta_result(struct request *req, const struct tensor *t)
{
	return tensor_write_meta_result_map(req, t, 0);
}

int tensor_write_meta_result_map(struct request *req, const struct tensor *t, unsigned extra)
{
	if (tdp_write_result_head(req->pk, req->msgid) < 0 ||
	    msgpack_pack_map(req->pk, META_ENTRIES + extra) || write_meta_entries(req->pk, t))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

static int device_error(struct request *req, int r, const char *what)
{
	if (r == -ENODEV)
		return request_fail(req, TDP_DEVICE_LOST, "%s: the GPU was lost", what);
	if (r == -ENOMEM)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "%s: out of memory", what);
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
	    t->count * tdp_dtype_size(t->dtype) > req->d->cfg.max_tensor_bytes)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED,
				    "the tensor is larger than the limit of %llu bytes",
				    (unsigned long long)req->d->cfg.max_tensor_bytes);
	t->bytes = t->count * tdp_dtype_size(t->dtype);
	return 0;
}

/* May this peer replace or delete `t`? */
static bool may_modify(const struct request *req, const struct tensor *t)
{
	return req->uid == 0 || req->uid == t->owner;
}

int method_tensor_put(struct request *req)
{
	struct param p[] = {
		{ "name", PARAM_STR, true, NULL },
		{ "dtype", PARAM_STR, true, NULL },
		{ "shape", PARAM_ARRAY, true, NULL },
		{ "data", PARAM_BIN, true, NULL },
		{ "if_absent", PARAM_BOOL, false, NULL },
	};
	struct daemon *d = req->d;
	struct tensor *t, *old;
	int r;

	if (params_parse(req, p, 5) < 0)
		return -1;
	t = calloc(1, sizeof(*t));
	if (!t)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	r = params_name(req, p[0].value, t->name);
	if (r < 0)
		goto fail;
	t->name_len = (size_t)r;
	t->dtype = tdp_dtype_parse(p[1].value->via.str.ptr, p[1].value->via.str.size);
	if (t->dtype < 0) {
		request_fail(req, TDP_INVALID_ARGUMENT, "unknown dtype (expected f32 f16 bf16 i32 u8)");
		goto fail;
	}
	if (parse_shape(req, p[2].value, t) < 0)
		goto fail;
	if (p[3].value->via.bin.size != t->bytes) {
		request_fail(req, TDP_INVALID_ARGUMENT,
			     "data holds %u bytes but dtype and shape need %llu",
			     p[3].value->via.bin.size, (unsigned long long)t->bytes);
		goto fail;
	}
	old = store_find(d->store, t->name, t->name_len);
	if (old && p[4].value && p[4].value->via.boolean) {
		request_fail(req, TDP_ALREADY_EXISTS, "tensor '%s' already exists", t->name);
		goto fail;
	}
	if (old && !may_modify(req, old)) {
		request_fail(req, TDP_PERMISSION_DENIED, "tensor '%s' belongs to uid %u",
			     t->name, old->owner);
		goto fail;
	}
	if (!old && !store_has_room(d->store)) {
		request_fail(req, TDP_RESOURCE_EXHAUSTED, "the daemon holds its limit of %llu tensors",
			     (unsigned long long)d->cfg.max_tensors);
		goto fail;
	}
	/* The new bytes go to fresh memory, so a failure leaves the old tensor as it was. */
	r = gpu_memory_alloc(d->gpu, t->bytes, &t->alloc);
	if (r == -EFBIG) {
		request_fail(req, TDP_RESOURCE_EXHAUSTED,
			     "%llu bytes is more than the device allocates at once (%llu)",
			     (unsigned long long)t->bytes, (unsigned long long)d->gpu->mem.max_allocation);
		goto fail;
	}
	if (r < 0) {
		device_error(req, r, "allocating device memory");
		goto fail;
	}
	r = gpu_upload(d->gpu, &t->alloc, p[3].value->via.bin.ptr);
	if (r < 0) {
		device_error(req, r, "uploading");
		gpu_memory_free(d->gpu, &t->alloc);
		goto fail;
	}
	t->owner = req->uid;
	t->device = d->gpu->desc.index;
	t->created_ns = t->modified_ns = daemon_now_ns(CLOCK_REALTIME);
	store_put(d->store, t); /* cannot fail: room was checked above */
	return tensor_write_meta_result(req, t);
fail:
	free(t);
	return -1;
}

/* Find the tensor named by the request's "name" (the only parameter). */
static struct tensor *lookup(struct request *req)
{
	struct param p[] = { { "name", PARAM_STR, true, NULL } };
	char name[TDP_MAX_NAME_LEN + 1];
	struct tensor *t;
	int len;

	if (params_parse(req, p, 1) < 0)
		return NULL;
	len = params_name(req, p[0].value, name);
	if (len < 0)
		return NULL;
	t = store_find(req->d->store, name, (size_t)len);
	if (!t)
		request_fail(req, TDP_NOT_FOUND, "no tensor named '%s'", name);
	return t;
}

int method_tensor_get(struct request *req)
{
	struct tensor *t = lookup(req);
	void *dst;
	int r;

	if (!t)
		return -1;
	if (tdp_write_result_head(req->pk, req->msgid) < 0 ||
	    msgpack_pack_map(req->pk, META_ENTRIES + 1) || write_meta_entries(req->pk, t) ||
	    tdp_pack_cstr(req->pk, "data") || msgpack_pack_bin(req->pk, t->bytes))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	/* The bytes go from the device straight into the output buffer. */
	dst = tdp_buf_extend(req->out, t->bytes);
	if (!dst)
		return request_fail(req, TDP_RESOURCE_EXHAUSTED, "out of host memory for %llu bytes",
				    (unsigned long long)t->bytes);
	r = gpu_download(req->d->gpu, &t->alloc, dst);
	if (r < 0)
		return device_error(req, r, "downloading");
	return 0;
}

int method_tensor_stat(struct request *req)
{
	struct tensor *t = lookup(req);

	if (!t)
		return -1;
	return tensor_write_meta_result(req, t);
}

int method_tensor_list(struct request *req)
{
	struct param p[] = { { "prefix", PARAM_STR, false, NULL } };
	struct tensor **list;
	size_t n;
	int fail;

	if (params_parse(req, p, 1) < 0)
		return -1;
	if (p[0].value && p[0].value->via.str.size > TDP_MAX_NAME_LEN)
		return request_fail(req, TDP_INVALID_ARGUMENT, "prefix longer than %d bytes",
				    TDP_MAX_NAME_LEN);
	if (store_list(req->d->store, p[0].value ? p[0].value->via.str.ptr : NULL,
		       p[0].value ? p[0].value->via.str.size : 0, &list, &n) < 0)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	fail = tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 1) ||
	       tdp_pack_cstr(req->pk, "tensors") || msgpack_pack_array(req->pk, (uint32_t)n);
	for (size_t i = 0; !fail && i < n; i++)
		fail = tensor_write_meta(req->pk, list[i]);
	free(list);
	if (fail)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}

int method_tensor_delete(struct request *req)
{
	struct tensor *t = lookup(req);
	char name[TDP_MAX_NAME_LEN + 1];
	uint64_t bytes;
	size_t len;

	if (!t)
		return -1;
	if (!may_modify(req, t))
		return request_fail(req, TDP_PERMISSION_DENIED, "tensor '%s' belongs to uid %u",
				    t->name, t->owner);
	len = t->name_len;
	memcpy(name, t->name, len + 1);
	bytes = t->bytes;
	store_delete(req->d->store, name, len);
	if (tdp_write_result_head(req->pk, req->msgid) < 0 || msgpack_pack_map(req->pk, 3) ||
	    tdp_pack_cstr(req->pk, "name") || tdp_pack_strn(req->pk, name, len) ||
	    tdp_pack_cstr(req->pk, "deleted") || msgpack_pack_true(req->pk) ||
	    tdp_pack_cstr(req->pk, "bytes") || msgpack_pack_uint64(req->pk, bytes))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}
