/* libtensord: the typed calls (ping, info, tensor.*) and dtype helpers. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "connection.h"
#include "dtype.h"
#include "wire_limits.h"
#include "methods.h"
#include "name.h"
#include "pack.h"
#include "scan.h"

_Static_assert((int)TENSORD_F32 == TDP_DTYPE_F32 && (int)TENSORD_F16 == TDP_DTYPE_F16 &&
		       (int)TENSORD_BF16 == TDP_DTYPE_BF16 && (int)TENSORD_I32 == TDP_DTYPE_I32 &&
		       (int)TENSORD_U8 == TDP_DTYPE_U8 && (int)TENSORD_DTYPE_COUNT == TDP_DTYPE_COUNT,
	       "public and wire dtypes must agree");
_Static_assert(TENSORD_MAX_RANK == TDP_MAX_RANK && TENSORD_MAX_NAME_LEN == TDP_MAX_NAME_LEN,
	       "public and wire limits must agree");

const char *tensord_dtype_name(enum tensord_dtype dtype)
{
	return tdp_dtype_name((int)dtype);
}

int tensord_dtype_parse(const char *name)
{
	if (!name)
		return -EINVAL;
	return tdp_dtype_parse(name, strlen(name));
}

size_t tensord_dtype_size(enum tensord_dtype dtype)
{
	return tdp_dtype_size((int)dtype);
}

int tdc_check_device(struct tensord *td, int device)
{
	if (device < TENSORD_DEVICE_ANY)
		return tdc_fail(td, -EINVAL, "invalid device %d (an id from info's devices, or -1 for any)",
			        device);
	return 0;
}

int tdc_check_name(struct tensord *td, const char *name)
{
	if (!name)
		return tdc_fail(td, -EINVAL, "no tensor name given");
	if (!tdp_ref_valid(name, strnlen(name, TDP_MAX_NAME_LEN + 1), false))
		return tdc_fail(td, -EINVAL,
			        "invalid tensor name (1-%d bytes of A-Z a-z 0-9 . _ : / -)",
			        TDP_MAX_NAME_LEN);
	return 0;
}

/* Start `method` with params [{"name": name}]: a blocking call's, or with
 * `pipelined` one to queue. */
static int begin_named_as(struct tensord *td, const char *method, const char *name,
			  unsigned extra_keys, bool pipelined, msgpack_packer **ret_pk)
{
	msgpack_packer *pk;
	int r;

	if ((r = tdc_check_name(td, name)) < 0)
		return r;
	if ((r = pipelined ? tdc_request_begin_pipelined(td, method, &pk)
			   : tdc_request_begin(td, method, &pk)) < 0)
		return r;
	if (msgpack_pack_array(pk, 1) || msgpack_pack_map(pk, 1 + extra_keys) ||
	    tdp_pack_cstr(pk, "name") || tdp_pack_cstr(pk, name))
		return tdc_fail(td, -ENOMEM, "out of memory");
	*ret_pk = pk;
	return 0;
}

static int begin_named(struct tensord *td, const char *method, const char *name,
		       unsigned extra_keys, msgpack_packer **ret_pk)
{
	return begin_named_as(td, method, name, extra_keys, false, ret_pk);
}

int tdc_result_info(struct tensord *td, const msgpack_object *res,
		    struct tensord_tensor_info *ret_info)
{
	char why[160];

	if (tdc_parse_tensor_info(res, ret_info, why, sizeof(why)) < 0)
		return tdc_fail(td, -EPROTO, "malformed reply: %s", why);
	return 0;
}

int tensord_ping(struct tensord *td, char *version, size_t version_len)
{
	const msgpack_object *res, *v;
	msgpack_packer *pk;
	int r;

	if (!td)
		return -EINVAL;
	if ((r = tdc_request_begin(td, TDP_METHOD_PING, &pk)) < 0)
		return r;
	if (msgpack_pack_array(pk, 0)) {
		r = tdc_fail(td, -ENOMEM, "out of memory");
		goto out;
	}
	if ((r = tdc_request_finish(td, NULL, 0, &res)) < 0)
		goto out;
	v = tdp_map_find(res, "version");
	if (res->type != MSGPACK_OBJECT_MAP || (v && v->type != MSGPACK_OBJECT_STR)) {
		r = tdc_fail(td, -EPROTO, "malformed reply to ping");
		goto out;
	}
	if (version && version_len > 0) {
		size_t n = v ? v->via.str.size : 0;

		if (n >= version_len)
			n = version_len - 1;
		if (n)
			memcpy(version, v->via.str.ptr, n);
		version[n] = '\0';
	}
out:
	tdc_request_end(td);
	return r;
}

bool tdc_is_one_map(const void *p, size_t len)
{
	const uint8_t *b = p;
	struct tdp_scanner s;

	if (len == 0 || !((b[0] >= 0x80 && b[0] <= 0x8f) || b[0] == 0xde || b[0] == 0xdf))
		return false;
	tdp_scanner_reset(&s);
	return tdp_scanner_feed(&s, b, len, &tdp_scan_default_limits) == 1 && s.pos == len;
}

/* Check a method name and raw params as tensord_call_raw() takes them. */
static int check_raw_call(struct tensord *td, const char *method, const void *params,
			  size_t params_len)
{
	size_t mlen;

	if (!method)
		return tdc_fail(td, -EINVAL, "missing argument");
	mlen = strnlen(method, TDP_MAX_METHOD_LEN + 1);
	if (mlen == 0 || mlen > TDP_MAX_METHOD_LEN)
		return tdc_fail(td, -EINVAL, "method name must be 1-%d bytes", TDP_MAX_METHOD_LEN);
	if (params && !tdc_is_one_map(params, params_len))
		return tdc_fail(td, -EINVAL, "params must be one packed msgpack map");
	return 0;
}

int tensord_call_raw(struct tensord *td, const char *method, const void *params,
		     size_t params_len, void **ret_result, size_t *ret_len)
{
	const msgpack_object *res;
	msgpack_packer *pk;
	int r;

	if (!td)
		return -EINVAL;
	if (!ret_result || !ret_len)
		return tdc_fail(td, -EINVAL, "missing argument");
	if ((r = check_raw_call(td, method, params, params_len)) < 0)
		return r;
	if ((r = tdc_request_begin(td, method, &pk)) < 0)
		return r;
	if (msgpack_pack_array(pk, params ? 1 : 0)) {
		r = tdc_fail(td, -ENOMEM, "out of memory");
		goto out;
	}
	if ((r = tdc_request_finish(td, params, params ? params_len : 0, &res)) < 0)
		goto out;
	r = tdc_copy_object(td, res, ret_result, ret_len);
out:
	tdc_request_end(td);
	return r;
}

int tensord_append_raw(struct tensord *td, const char *method, const void *params,
		       size_t params_len, uint32_t *ret_msgid)
{
	msgpack_packer *pk;
	uint32_t msgid;
	int r;

	if (!td)
		return -EINVAL;
	if (td->broken)
		return td->broken;
	if ((r = check_raw_call(td, method, params, params_len)) < 0)
		return r;
	if ((r = tdc_request_begin_pipelined(td, method, &pk)) < 0)
		return r;
	if (msgpack_pack_array(pk, params ? 1 : 0)) {
		r = tdc_fail(td, -ENOMEM, "out of memory");
		goto out;
	}
	if ((r = tdc_request_queue(td, params, params ? params_len : 0, TD_KIND_RAW, &msgid)) < 0)
		goto out;
	if (ret_msgid)
		*ret_msgid = msgid;
out:
	tdc_request_end(td);
	return r;
}

int tensord_send(struct tensord *td, const char *method, const void *params, size_t params_len,
		 uint32_t *ret_msgid)
{
	uint32_t msgid;
	int r;

	if ((r = tensord_append_raw(td, method, params, params_len, &msgid)) < 0)
		return r;
	if ((r = tdc_flush(td, true)) < 0)
		return r;
	if (ret_msgid)
		*ret_msgid = msgid;
	return 0;
}

int tensord_info_raw(struct tensord *td, void **ret_result, size_t *ret_len)
{
	return tensord_call_raw(td, TDP_METHOD_INFO, NULL, 0, ret_result, ret_len);
}

int tensord_put(struct tensord *td, const char *name, enum tensord_dtype dtype, uint32_t rank,
		const uint64_t *shape, const void *data, size_t len,
		struct tensord_tensor_info *ret_info)
{
	return tensord_put_opts(td, name, dtype, rank, shape, data, len, NULL, ret_info);
}

int tensord_put_on(struct tensord *td, const char *name, enum tensord_dtype dtype, uint32_t rank,
		   const uint64_t *shape, const void *data, size_t len, int device,
		   struct tensord_tensor_info *ret_info)
{
	struct tensord_put_options o = TENSORD_PUT_OPTIONS_INIT;

	o.device = device;
	return tensord_put_opts(td, name, dtype, rank, shape, data, len, &o, ret_info);
}

/* The size of struct tensord_put_options in its first release. */
#define PUT_OPTIONS_V1 (offsetof(struct tensord_put_options, if_absent) + sizeof(bool))

static int put_common(struct tensord *td, const char *name, enum tensord_dtype dtype,
		      uint32_t rank, const uint64_t *shape, const void *data, size_t len, int fd,
		      uint64_t offset, const struct tensord_put_options *opts,
		      struct tensord_tensor_info *ret_info, uint32_t *ret_queued);

int tensord_put_opts(struct tensord *td, const char *name, enum tensord_dtype dtype,
		     uint32_t rank, const uint64_t *shape, const void *data, size_t len,
		     const struct tensord_put_options *opts, struct tensord_tensor_info *ret_info)
{
	return put_common(td, name, dtype, rank, shape, data, len, -1, 0, opts, ret_info, NULL);
}

int tensord_append_put(struct tensord *td, const char *name, enum tensord_dtype dtype,
		       uint32_t rank, const uint64_t *shape, const void *data, size_t len,
		       const struct tensord_put_options *opts, uint32_t *ret_msgid)
{
	uint32_t msgid;
	int r;

	if ((r = put_common(td, name, dtype, rank, shape, data, len, -1, 0, opts, NULL, &msgid)) < 0)
		return r;
	if (ret_msgid)
		*ret_msgid = msgid;
	return 0;
}

int tensord_put_fd(struct tensord *td, const char *name, enum tensord_dtype dtype,
		   uint32_t rank, const uint64_t *shape, int fd, uint64_t offset,
		   const struct tensord_put_options *opts, struct tensord_tensor_info *ret_info)
{
	if (td && fd < 0)
		return tdc_fail(td, -EBADF, "no file descriptor");
	return put_common(td, name, dtype, rank, shape, NULL, 0, fd, offset, opts, ret_info, NULL);
}

/* tensor.put with the bytes in `data` (fd < 0) or in memfd `fd` at `offset`.
 * With `ret_queued` (and fd < 0) the request is queued with a copy of the
 * data instead (tensord_append_put) and *ret_queued is its id. */
static int put_common(struct tensord *td, const char *name, enum tensord_dtype dtype,
		      uint32_t rank, const uint64_t *shape, const void *data, size_t len, int fd,
		      uint64_t offset, const struct tensord_put_options *opts,
		      struct tensord_tensor_info *ret_info, uint32_t *ret_queued)
{
	struct tensord_put_options o = TENSORD_PUT_OPTIONS_INIT;
	struct tensord_tensor_info info;
	const msgpack_object *res;
	msgpack_packer *pk;
	const char *dname = tdp_dtype_name((int)dtype);
	int r, device;

	if (!td)
		return -EINVAL;
	if (td->broken)
		return td->broken;
	if (opts && (r = tdc_read_options(td, opts, PUT_OPTIONS_V1, &o, sizeof(o))) < 0)
		return r;
	device = o.device;
	if ((r = tdc_check_device(td, device)) < 0)
		return r;
	if (o.mode && strnlen(o.mode, TDP_MAX_NAME_LEN + 1) > TDP_MAX_NAME_LEN)
		return tdc_fail(td, -EINVAL, "mode longer than %d bytes", TDP_MAX_NAME_LEN);
	if (!dname)
		return tdc_fail(td, -EINVAL, "invalid dtype %d", (int)dtype);
	if (rank > TDP_MAX_RANK)
		return tdc_fail(td, -EINVAL, "rank %u exceeds %d", rank, TDP_MAX_RANK);
	if ((rank > 0 && !shape) || (len > 0 && !data))
		return tdc_fail(td, -EINVAL, "missing argument");
	if (len > TDP_MAX_TENSOR_BYTES)
		return tdc_fail(td, -EMSGSIZE, "tensor of %zu bytes exceeds the %llu-byte limit",
			        len, (unsigned long long)TDP_MAX_TENSOR_BYTES);
	if ((r = begin_named_as(td, TDP_METHOD_TENSOR_PUT, name,
				3 + (fd >= 0) + (device >= 0) + !!o.mode + o.if_absent, !!ret_queued,
				&pk)) < 0)
		return r;
	/* data goes last: its bytes are written from the caller's memory. */
	if ((device >= 0 && (tdp_pack_cstr(pk, "device") || msgpack_pack_int(pk, device))) ||
	    (o.mode && (tdp_pack_cstr(pk, "mode") || tdp_pack_cstr(pk, o.mode))) ||
	    (o.if_absent && (tdp_pack_cstr(pk, "if_absent") || msgpack_pack_true(pk))) ||
	    tdp_pack_cstr(pk, "dtype") || tdp_pack_cstr(pk, dname) ||
	    tdp_pack_cstr(pk, "shape") || msgpack_pack_array(pk, rank)) {
		r = tdc_fail(td, -ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < rank; i++)
		if (msgpack_pack_uint64(pk, shape[i])) {
			r = tdc_fail(td, -ENOMEM, "out of memory");
			goto out;
		}
	/* Only the bin header is packed; the payload is written from `data`.
	 * Or the daemon reads it from the memfd sent along (docs/protocol.md). */
	if (fd >= 0 ? tdp_pack_cstr(pk, "fd") || msgpack_pack_uint32(pk, 0) ||
		      tdp_pack_cstr(pk, "offset") || msgpack_pack_uint64(pk, offset) :
		      tdp_pack_cstr(pk, "data") || msgpack_pack_bin(pk, len)) {
		r = tdc_fail(td, -ENOMEM, "out of memory");
		goto out;
	}
	if (ret_queued) {
		r = tdc_request_queue(td, data, len, TD_KIND_INFO, ret_queued);
		goto out;
	}
	td->pass_fd = fd;
	if ((r = tdc_request_finish(td, data, len, &res)) < 0)
		goto out;
	if (ret_info) {
		if ((r = tdc_result_info(td, res, &info)) < 0)
			goto out;
		*ret_info = info;
	}
out:
	td->pass_fd = -1;
	tdc_request_end(td);
	return r;
}

int tdc_result_get(struct tensord *td, const msgpack_object *res,
		   struct tensord_tensor_info *ret_info, const msgpack_object **ret_data)
{
	struct tensord_tensor_info info;
	const msgpack_object *data;
	uint64_t count, got;
	int r;

	if ((r = tdc_result_info(td, res, &info)) < 0)
		return r;
	data = tdp_map_find(res, "data");
	if (!data || data->type != MSGPACK_OBJECT_BIN)
		return tdc_fail(td, -EPROTO, "malformed reply: no data");
	/* A payload that landed in tensord_get_into's buffer left an empty bin. */
	got = td->landed ? td->landed : data->via.bin.size;
	if (tdp_shape_count(info.shape, info.rank, tdp_dtype_size((int)info.dtype), &count) < 0 ||
	    count * tdp_dtype_size((int)info.dtype) != got)
		return tdc_fail(td, -EPROTO, "malformed reply: %llu data bytes do not match the shape",
			        (unsigned long long)got);
	*ret_info = info;
	*ret_data = data;
	return 0;
}

/* Send the tensor.get begun with begin_named() and check its answer
 * (get_reply). */
static int get_result(struct tensord *td, struct tensord_tensor_info *ret_info,
		      const msgpack_object **ret_data)
{
	const msgpack_object *res;
	int r;

	if ((r = tdc_request_finish(td, NULL, 0, &res)) < 0)
		return r;
	return tdc_result_get(td, res, ret_info, ret_data);
}

/* Send `tensor.get` and check the reply: on success *ret_data is its data
 * bin and *ret_info the metadata. The reply stays valid until
 * tdc_request_end(). */
static int get_reply(struct tensord *td, const char *name, struct tensord_tensor_info *ret_info,
		     const msgpack_object **ret_data)
{
	msgpack_packer *pk;
	int r;

	if ((r = begin_named(td, TDP_METHOD_TENSOR_GET, name, 0, &pk)) < 0)
		return r;
	return get_result(td, ret_info, ret_data);
}

int tensord_get(struct tensord *td, const char *name, struct tensord_tensor_info *ret_info,
		void **ret_data, size_t *ret_len)
{
	struct tensord_tensor_info info;
	const msgpack_object *data;
	void *copy = NULL;
	size_t len;
	int r;

	if (!td)
		return -EINVAL;
	if (!ret_data || !ret_len)
		return tdc_fail(td, -EINVAL, "missing argument");
	if ((r = get_reply(td, name, &info, &data)) < 0)
		goto out;
	len = data->via.bin.size;
	if (len > 0) {
		/* May release the reply: `data` is dead after this. */
		copy = tdc_take_reply_bytes(td, data->via.bin.ptr, len);
		if (!copy) {
			r = tdc_fail(td, -ENOMEM, "out of memory for %zu bytes", len);
			goto out;
		}
	}
	if (ret_info)
		*ret_info = info;
	*ret_data = copy;
	*ret_len = len;
out:
	tdc_request_end(td);
	return r;
}

int tensord_get_into(struct tensord *td, const char *name, struct tensord_tensor_info *ret_info,
		     void *buf, size_t cap, size_t *ret_len)
{
	struct tensord_tensor_info info;
	const msgpack_object *data;
	msgpack_packer *pk;
	uint64_t len;
	int r;

	if (!td)
		return -EINVAL;
	if ((!buf && cap) || !ret_len)
		return tdc_fail(td, -EINVAL, "missing argument");
	if ((r = begin_named(td, TDP_METHOD_TENSOR_GET, name, 0, &pk)) < 0)
		return r;
	/* A large payload is received straight into buf (client/land.h). */
	td->land = buf;
	td->land_cap = cap;
	if ((r = get_result(td, &info, &data)) < 0)
		goto out;
	len = td->landed ? td->landed : data->via.bin.size;
	if (len > cap) {
		r = tdc_fail(td, -ENOBUFS, "tensor '%s' holds %llu bytes, the buffer %zu", name,
			     (unsigned long long)len, cap);
		goto out;
	}
	if (len && !td->landed)
		memcpy(buf, data->via.bin.ptr, (size_t)len);
	if (ret_info)
		*ret_info = info;
	*ret_len = (size_t)len;
out:
	tdc_request_end(td);
	return r;
}

int tensord_get_fd(struct tensord *td, const char *name, int fd, uint64_t offset,
		   struct tensord_tensor_info *ret_info)
{
	struct tensord_tensor_info info;
	const msgpack_object *res;
	msgpack_packer *pk;
	int r;

	if (!td)
		return -EINVAL;
	if (fd < 0)
		return tdc_fail(td, -EBADF, "no file descriptor");
	if ((r = begin_named(td, TDP_METHOD_TENSOR_GET, name, 2, &pk)) < 0)
		return r;
	if (tdp_pack_cstr(pk, "fd") || msgpack_pack_uint32(pk, 0) ||
	    tdp_pack_cstr(pk, "offset") || msgpack_pack_uint64(pk, offset)) {
		r = tdc_fail(td, -ENOMEM, "out of memory");
		goto out;
	}
	td->pass_fd = fd;
	if ((r = tdc_request_finish(td, NULL, 0, &res)) < 0 || (r = tdc_result_info(td, res, &info)) < 0)
		goto out;
	if (ret_info)
		*ret_info = info;
out:
	td->pass_fd = -1;
	tdc_request_end(td);
	return r;
}

int tensord_stat(struct tensord *td, const char *name, struct tensord_tensor_info *ret_info)
{
	struct tensord_tensor_info info;
	const msgpack_object *res;
	msgpack_packer *pk;
	int r;

	if (!td)
		return -EINVAL;
	if (!ret_info)
		return tdc_fail(td, -EINVAL, "missing argument");
	if ((r = begin_named(td, TDP_METHOD_TENSOR_STAT, name, 0, &pk)) < 0)
		return r;
	if ((r = tdc_request_finish(td, NULL, 0, &res)) < 0)
		goto out;
	if ((r = tdc_result_info(td, res, &info)) < 0)
		goto out;
	*ret_info = info;
out:
	tdc_request_end(td);
	return r;
}

int tensord_list(struct tensord *td, const char *prefix, struct tensord_tensor_info **ret_list,
		 size_t *ret_count)
{
	struct tensord_tensor_info *list = NULL;
	const msgpack_object *res, *arr;
	msgpack_packer *pk;
	size_t plen = prefix ? strnlen(prefix, TDP_MAX_NAME_LEN + 1) : 0;
	char why[160];
	int r;

	if (!td)
		return -EINVAL;
	if (!ret_list || !ret_count)
		return tdc_fail(td, -EINVAL, "missing argument");
	if (plen > 0 && !tdp_ref_valid(prefix, plen, true))
		return tdc_fail(td, -EINVAL, "invalid prefix (up to %d bytes of A-Z a-z 0-9 . _ : / -)",
			        TDP_MAX_NAME_LEN);
	if ((r = tdc_request_begin(td, TDP_METHOD_TENSOR_LIST, &pk)) < 0)
		return r;
	if (plen > 0 ? (msgpack_pack_array(pk, 1) || msgpack_pack_map(pk, 1) ||
			tdp_pack_cstr(pk, "prefix") || tdp_pack_strn(pk, prefix, plen))
		     : msgpack_pack_array(pk, 0)) {
		r = tdc_fail(td, -ENOMEM, "out of memory");
		goto out;
	}
	if ((r = tdc_request_finish(td, NULL, 0, &res)) < 0)
		goto out;
	arr = tdp_map_find(res, "tensors");
	if (!arr || arr->type != MSGPACK_OBJECT_ARRAY) {
		r = tdc_fail(td, -EPROTO, "malformed reply: no tensor list");
		goto out;
	}
	if (arr->via.array.size > 0) {
		list = calloc(arr->via.array.size, sizeof(*list));
		if (!list) {
			r = tdc_fail(td, -ENOMEM, "out of memory");
			goto out;
		}
	}
	for (uint32_t i = 0; i < arr->via.array.size; i++)
		if (tdc_parse_tensor_info(&arr->via.array.ptr[i], &list[i], why, sizeof(why)) < 0) {
			free(list);
			r = tdc_fail(td, -EPROTO, "malformed reply: %s", why);
			goto out;
		}
	*ret_list = list;
	*ret_count = arr->via.array.size;
out:
	tdc_request_end(td);
	return r;
}

/* Send the request packed so far and read the tensor metadata it answers
 * into *ret_info (if not NULL); ends the request. Returns 0 or -errno. */
static int finish_with_info(struct tensord *td, struct tensord_tensor_info *ret_info)
{
	struct tensord_tensor_info info;
	const msgpack_object *res;
	int r;

	if ((r = tdc_request_finish(td, NULL, 0, &res)) == 0 && (r = tdc_result_info(td, res, &info)) == 0 &&
	    ret_info)
		*ret_info = info;
	tdc_request_end(td);
	return r;
}

int tensord_chmod(struct tensord *td, const char *name, const char *mode, int64_t group,
		  struct tensord_tensor_info *ret_info)
{
	msgpack_packer *pk;
	int r;

	if (!td)
		return -EINVAL;
	if ((!mode && group < 0) || group > (int64_t)UINT32_MAX - 1)
		return tdc_fail(td, -EINVAL, "give a mode, a group (0 to %u) or both", UINT32_MAX - 1);
	if ((r = begin_named(td, TDP_METHOD_TENSOR_CHMOD, name, (mode ? 1 : 0) + (group >= 0 ? 1 : 0),
			     &pk)) < 0)
		return r;
	if ((mode && (tdp_pack_cstr(pk, "mode") || tdp_pack_cstr(pk, mode))) ||
	    (group >= 0 && (tdp_pack_cstr(pk, "group") || msgpack_pack_uint64(pk, (uint64_t)group)))) {
		r = tdc_fail(td, -ENOMEM, "out of memory");
		tdc_request_end(td);
		return r;
	}
	return finish_with_info(td, ret_info);
}

int tensord_copy(struct tensord *td, const char *src, const char *dst, int device,
		 struct tensord_tensor_info *ret_info)
{
	msgpack_packer *pk;
	int r;

	if (!td)
		return -EINVAL;
	if ((r = tdc_check_device(td, device)) < 0)
		return r;
	if ((r = tdc_check_name(td, src)) < 0 || (r = tdc_check_name(td, dst)) < 0)
		return r;
	if ((r = tdc_request_begin(td, TDP_METHOD_TENSOR_COPY, &pk)) < 0)
		return r;
	if (msgpack_pack_array(pk, 1) || msgpack_pack_map(pk, device >= 0 ? 3 : 2) ||
	    tdp_pack_cstr(pk, "src") || tdp_pack_cstr(pk, src) ||
	    tdp_pack_cstr(pk, "dst") || tdp_pack_cstr(pk, dst) ||
	    (device >= 0 && (tdp_pack_cstr(pk, "device") || msgpack_pack_int(pk, device)))) {
		r = tdc_fail(td, -ENOMEM, "out of memory");
		tdc_request_end(td);
		return r;
	}
	return finish_with_info(td, ret_info);
}

int tensord_delete(struct tensord *td, const char *name)
{
	const msgpack_object *res;
	msgpack_packer *pk;
	int r;

	if (!td)
		return -EINVAL;
	if ((r = begin_named(td, TDP_METHOD_TENSOR_DELETE, name, 0, &pk)) < 0)
		return r;
	if ((r = tdc_request_finish(td, NULL, 0, &res)) < 0)
		goto out;
	if (res->type != MSGPACK_OBJECT_MAP)
		r = tdc_fail(td, -EPROTO, "malformed reply to tensor.delete");
out:
	tdc_request_end(td);
	return r;
}

/* Queue `method` {name} for an answer of `kind`. */
static int append_named(struct tensord *td, const char *method, const char *name,
			enum tdc_kind kind, uint32_t *ret_msgid)
{
	msgpack_packer *pk;
	uint32_t msgid;
	int r;

	if (!td)
		return -EINVAL;
	if (td->broken)
		return td->broken;
	if ((r = begin_named_as(td, method, name, 0, true, &pk)) < 0)
		return r;
	if ((r = tdc_request_queue(td, NULL, 0, kind, &msgid)) == 0 && ret_msgid)
		*ret_msgid = msgid;
	tdc_request_end(td);
	return r;
}

int tensord_append_get(struct tensord *td, const char *name, uint32_t *ret_msgid)
{
	return append_named(td, TDP_METHOD_TENSOR_GET, name, TD_KIND_GET, ret_msgid);
}

int tensord_append_stat(struct tensord *td, const char *name, uint32_t *ret_msgid)
{
	return append_named(td, TDP_METHOD_TENSOR_STAT, name, TD_KIND_INFO, ret_msgid);
}

int tensord_append_delete(struct tensord *td, const char *name, uint32_t *ret_msgid)
{
	return append_named(td, TDP_METHOD_TENSOR_DELETE, name, TD_KIND_DELETE, ret_msgid);
}
