#include "pack.h"

#include <errno.h>
#include <string.h>

int tdp_pack_cstr(msgpack_packer *pk, const char *s)
{
	return tdp_pack_strn(pk, s, strlen(s));
}

int tdp_pack_strn(msgpack_packer *pk, const char *s, size_t n)
{
	return msgpack_pack_str_with_body(pk, s, n);
}

int tdp_pack_u64_array(msgpack_packer *pk, const uint64_t *v, unsigned n)
{
	if (msgpack_pack_array(pk, n))
		return -1;
	for (unsigned d = 0; d < n; d++)
		if (msgpack_pack_uint64(pk, v[d]))
			return -1;
	return 0;
}

bool tdp_obj_str_eq(const msgpack_object *o, const char *s)
{
	size_t n = strlen(s);

	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
	       memcmp(o->via.str.ptr, s, n) == 0;
}

const msgpack_object *tdp_map_find(const msgpack_object *map, const char *key)
{
	if (!map || map->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (uint32_t i = 0; i < map->via.map.size; i++)
		if (tdp_obj_str_eq(&map->via.map.ptr[i].key, key))
			return &map->via.map.ptr[i].val;
	return NULL;
}

int tdp_obj_uint(const msgpack_object *o, uint64_t *ret)
{
	if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return -EINVAL;
	*ret = o->via.u64;
	return 0;
}

int tdp_obj_int(const msgpack_object *o, int64_t *ret)
{
	if (!o)
		return -EINVAL;
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
		*ret = o->via.i64;
		return 0;
	}
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
		*ret = (int64_t)o->via.u64;
		return 0;
	}
	return -EINVAL;
}

int tdp_obj_number(const msgpack_object *o, double *ret)
{
	if (!o)
		return -EINVAL;
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		*ret = (double)o->via.u64;
	else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		*ret = (double)o->via.i64;
	else if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
		*ret = o->via.f64;
	else
		return -EINVAL;
	return 0;
}

int tdp_obj_strcpy(const msgpack_object *o, char *dst, size_t cap)
{
	if (!o || o->type != MSGPACK_OBJECT_STR)
		return -EINVAL;
	if (o->via.str.size >= cap)
		return -ENAMETOOLONG;
	/* A NUL inside would silently cut the string short: "a\0b" is not "a". */
	if (memchr(o->via.str.ptr, '\0', o->via.str.size))
		return -EINVAL;
	memcpy(dst, o->via.str.ptr, o->via.str.size);
	dst[o->via.str.size] = '\0';
	return 0;
}
