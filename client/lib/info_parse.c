/* libtensord: tensor metadata maps → struct tensord_tensor_info.
 *
 * The daemon is trusted to be well-behaved but not to be bug-free: every field
 * is type-checked, and a wrong type is an -EPROTO, never a crash. name, dtype
 * and shape are required; the other fields default to 0 when absent. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "errorf.h"
#include "connection.h"
#include "dtype.h"
#include "wire_limits.h"
#include "pack.h"

static int get_uint(const msgpack_object *map, const char *key, uint64_t max, uint64_t *ret,
		    char *why, size_t why_len)
{
	const msgpack_object *o = tdp_map_find(map, key);
	uint64_t v;

	if (!o) {
		*ret = 0;
		return 0;
	}
	if (tdp_obj_uint(o, &v) < 0 || v > max)
		return tdp_errorf(why, why_len, -EPROTO, "metadata field '%s' is not an integer in range", key);
	*ret = v;
	return 0;
}

static int get_time(const msgpack_object *map, const char *key, double *ret, char *why,
		    size_t why_len)
{
	const msgpack_object *o = tdp_map_find(map, key);

	if (!o) {
		*ret = 0;
		return 0;
	}
	switch (o->type) {
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		*ret = o->via.f64;
		return 0;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		*ret = (double)o->via.u64;
		return 0;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		*ret = (double)o->via.i64;
		return 0;
	default:
		return tdp_errorf(why, why_len, -EPROTO, "metadata field '%s' is not a number", key);
	}
}

int tdc_parse_tensor_info(const msgpack_object *o, struct tensord_tensor_info *ret,
			  char *why, size_t why_len)
{
	struct tensord_tensor_info info;
	const msgpack_object *f;
	uint64_t v;
	int r, dtype;

	memset(&info, 0, sizeof(info));
	if (!o || o->type != MSGPACK_OBJECT_MAP)
		return tdp_errorf(why, why_len, -EPROTO, "tensor metadata is not a map");

	f = tdp_map_find(o, "name");
	if (!f || tdp_obj_strcpy(f, info.name, sizeof(info.name)) < 0)
		return tdp_errorf(why, why_len, -EPROTO, "metadata field 'name' is missing or not a short string");

	f = tdp_map_find(o, "dtype");
	if (!f || f->type != MSGPACK_OBJECT_STR)
		return tdp_errorf(why, why_len, -EPROTO, "metadata field 'dtype' is missing or not a string");
	dtype = tdp_dtype_parse(f->via.str.ptr, f->via.str.size);
	if (dtype < 0)
		return tdp_errorf(why, why_len, -EPROTO, "unknown dtype '%.*s' in metadata",
			   (int)(f->via.str.size > 16 ? 16 : f->via.str.size), f->via.str.ptr);
	info.dtype = (enum tensord_dtype)dtype;

	f = tdp_map_find(o, "shape");
	if (!f || f->type != MSGPACK_OBJECT_ARRAY)
		return tdp_errorf(why, why_len, -EPROTO, "metadata field 'shape' is missing or not an array");
	if (f->via.array.size > TENSORD_MAX_RANK)
		return tdp_errorf(why, why_len, -EPROTO, "shape of rank %u exceeds %d", f->via.array.size,
			   TENSORD_MAX_RANK);
	info.rank = f->via.array.size;
	for (uint32_t i = 0; i < info.rank; i++)
		if (tdp_obj_uint(&f->via.array.ptr[i], &info.shape[i]) < 0)
			return tdp_errorf(why, why_len, -EPROTO, "shape holds a value that is no size");

	if ((r = get_uint(o, "bytes", UINT64_MAX, &info.bytes, why, why_len)) < 0 ||
	    (r = get_uint(o, "version", UINT64_MAX, &info.version, why, why_len)) < 0 ||
	    (r = get_time(o, "created", &info.created, why, why_len)) < 0 ||
	    (r = get_time(o, "modified", &info.modified, why, why_len)) < 0)
		return r;
	if ((r = get_uint(o, "owner", UINT32_MAX, &v, why, why_len)) < 0)
		return r;
	info.owner = (uint32_t)v;
	if ((r = get_uint(o, "device", UINT32_MAX, &v, why, why_len)) < 0)
		return r;
	info.device = (uint32_t)v;
	/* group and mode came with access control; a daemon without it has neither. */
	snprintf(info.mode, sizeof(info.mode), "%s", "");
	if (tdp_map_find(o, "group")) {
		if ((r = get_uint(o, "group", UINT32_MAX, &v, why, why_len)) < 0)
			return r;
		info.group = (uint32_t)v;
	}
	f = tdp_map_find(o, "mode");
	if (f && tdp_obj_strcpy(f, info.mode, sizeof(info.mode)) < 0)
		return tdp_errorf(why, why_len, -EPROTO, "metadata field 'mode' is not a short string");
	if (!tdp_map_find(o, "bytes")) {
		uint64_t count;

		if (tdp_shape_count(info.shape, info.rank, tdp_dtype_size(dtype), &count) < 0)
			return tdp_errorf(why, why_len, -EPROTO, "shape overflows");
		info.bytes = count * tdp_dtype_size(dtype);
	}
	*ret = info;
	return 0;
}
