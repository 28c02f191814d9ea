#include "errorf.h"
#include "rpc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "wire_limits.h"
#include "methods.h"
#include "pack.h"
#include "status.h"
#include "utf8.h"

int tdp_unpack(msgpack_unpacked *u, const uint8_t *buf, size_t len)
{
	size_t off = 0;
	msgpack_unpack_return r;

	r = msgpack_unpack_next(u, (const char *)buf, len, &off);
	if (r != MSGPACK_UNPACK_SUCCESS || off != len)
		return -EBADMSG;
	return 0;
}

static int get_msgid(const msgpack_object *o, uint32_t *ret)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > UINT32_MAX)
		return -EINVAL;
	*ret = (uint32_t)o->via.u64;
	return 0;
}

/* The params that hold bytes, not text: their bin values stay bin. */
static bool binary_key(const msgpack_object *k)
{
	static const char *const keys[] = { "data", "spirv", "push" };

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (tdp_obj_str_eq(k, keys[i]))
			return true;
	return false;
}

/* A bin that is valid UTF-8 becomes the str it stands for (same layout). */
static void bin_to_str(msgpack_object *o)
{
	if (o->type == MSGPACK_OBJECT_BIN && tdp_utf8_valid(o->via.bin.ptr, o->via.bin.size))
		o->type = MSGPACK_OBJECT_STR;
}

void tdp_params_accept_bin(msgpack_object *o, unsigned depth)
{
	if (depth > TDP_MAX_DEPTH)
		return;
	if (o->type == MSGPACK_OBJECT_ARRAY) {
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			bin_to_str(&o->via.array.ptr[i]);
			tdp_params_accept_bin(&o->via.array.ptr[i], depth + 1);
		}
	} else if (o->type == MSGPACK_OBJECT_MAP) {
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			msgpack_object_kv *kv = &o->via.map.ptr[i];

			bin_to_str(&kv->key);
			if (!binary_key(&kv->key))
				bin_to_str(&kv->val);
			else if (kv->val.type == MSGPACK_OBJECT_STR)
				kv->val.type = MSGPACK_OBJECT_BIN;
			tdp_params_accept_bin(&kv->val, depth + 1);
		}
	}
}

static int get_method(const msgpack_object *o, struct tdp_message *m, char *why, size_t why_len)
{
	/* str, or bin as clients that predate the str/bin split send it. */
	if (o->type != MSGPACK_OBJECT_STR && o->type != MSGPACK_OBJECT_BIN)
		return tdp_errorf(why, why_len, -EPROTO, "method must be a string");
	if (o->via.str.size == 0 || o->via.str.size > TDP_MAX_METHOD_LEN)
		return tdp_errorf(why, why_len, -EPROTO, "method name must be 1..%d bytes", TDP_MAX_METHOD_LEN);
	if (!tdp_utf8_valid(o->via.str.ptr, o->via.str.size))
		return tdp_errorf(why, why_len, -EPROTO, "method name must be UTF-8");
	m->method = o->via.str.ptr;
	m->method_len = o->via.str.size;
	return 0;
}

static int get_params(const msgpack_object *o, struct tdp_message *m, char *why, size_t why_len)
{
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return tdp_errorf(why, why_len, -EPROTO, "params must be an array holding one map");
	if (o->via.array.size == 0) {
		m->params = NULL;
		return 0;
	}
	if (o->via.array.size != 1 || o->via.array.ptr[0].type != MSGPACK_OBJECT_MAP)
		return tdp_errorf(why, why_len, -EPROTO, "params must be an array holding one map");
	m->params = &o->via.array.ptr[0];
	return 0;
}

int tdp_message_parse(const msgpack_object *o, struct tdp_message *ret, char *why, size_t why_len)
{
	struct tdp_message m = { 0 };
	const msgpack_object *a;
	uint32_t n;
	int r;

	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 3)
		return tdp_errorf(why, why_len, -EPROTO, "a message must be an array [type, ...]");
	a = o->via.array.ptr;
	n = o->via.array.size;
	if (a[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[0].via.u64 > TDP_MSG_NOTIFY)
		return tdp_errorf(why, why_len, -EPROTO, "message type must be 0, 1 or 2");
	m.type = (int)a[0].via.u64;
	switch (m.type) {
	case TDP_MSG_REQUEST:
		if (n != 4)
			return tdp_errorf(why, why_len, -EPROTO, "a request must be [0, msgid, method, params]");
		if (get_msgid(&a[1], &m.msgid) < 0)
			return tdp_errorf(why, why_len, -EPROTO, "msgid must be an unsigned 32-bit integer");
		if ((r = get_method(&a[2], &m, why, why_len)) < 0)
			return r;
		if ((r = get_params(&a[3], &m, why, why_len)) < 0)
			return r;
		break;
	case TDP_MSG_RESPONSE:
		if (n != 4)
			return tdp_errorf(why, why_len, -EPROTO, "a response must be [1, msgid, error, result]");
		if (get_msgid(&a[1], &m.msgid) < 0)
			return tdp_errorf(why, why_len, -EPROTO, "msgid must be an unsigned 32-bit integer");
		m.error = &a[2];
		m.result = &a[3];
		break;
	default:
		if (n != 3)
			return tdp_errorf(why, why_len, -EPROTO, "a notification must be [2, method, params]");
		/* A notification is never a reason to close: other msgpack-RPC
		 * clients send their own (pynvim's first message is
		 * nvim_set_client_info with five positional params). Its method
		 * is kept when it reads as one ("" otherwise), its params when
		 * they are one map (NULL otherwise). */
		if (get_method(&a[1], &m, why, why_len) < 0) {
			m.method = "";
			m.method_len = 0;
		}
		if (get_params(&a[2], &m, why, why_len) < 0)
			m.params = NULL;
		break;
	}
	*ret = m;
	return 0;
}

int tdp_message_request_id(const msgpack_object *o, uint32_t *ret_msgid)
{
	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 2)
		return -ENOENT;
	if (o->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
	    o->via.array.ptr[0].via.u64 != TDP_MSG_REQUEST)
		return -ENOENT;
	if (get_msgid(&o->via.array.ptr[1], ret_msgid) < 0)
		return -ENOENT;
	return 0;
}

int tdp_write_request_head(msgpack_packer *pk, uint32_t msgid, const char *method)
{
	if (msgpack_pack_array(pk, 4) || msgpack_pack_uint8(pk, TDP_MSG_REQUEST) ||
	    msgpack_pack_uint32(pk, msgid) || tdp_pack_cstr(pk, method))
		return -ENOMEM;
	return 0;
}

int tdp_write_result_head(msgpack_packer *pk, uint32_t msgid)
{
	if (msgpack_pack_array(pk, 4) || msgpack_pack_uint8(pk, TDP_MSG_RESPONSE) ||
	    msgpack_pack_uint32(pk, msgid) || msgpack_pack_nil(pk))
		return -ENOMEM;
	return 0;
}

int tdp_write_error_map(msgpack_packer *pk, int code, const char *message)
{
	const char *name = tdp_status_name(code);

	if (!name)
		name = "INTERNAL";
	if (msgpack_pack_map(pk, 3) ||
	    tdp_pack_cstr(pk, "code") || msgpack_pack_int(pk, code) ||
	    tdp_pack_cstr(pk, "name") || tdp_pack_cstr(pk, name) ||
	    tdp_pack_cstr(pk, "message") ||
	    tdp_pack_strn(pk, message, strnlen(message, TDP_MAX_ERROR_MESSAGE)))
		return -ENOMEM;
	return 0;
}

int tdp_write_error(msgpack_packer *pk, uint32_t msgid, int code, const char *message)
{
	if (msgpack_pack_array(pk, 4) || msgpack_pack_uint8(pk, TDP_MSG_RESPONSE) ||
	    msgpack_pack_uint32(pk, msgid) || tdp_write_error_map(pk, code, message) ||
	    msgpack_pack_nil(pk))
		return -ENOMEM;
	return 0;
}

int tdp_write_error_notification(msgpack_packer *pk, const char *method, int code,
				 const char *message)
{
	if (msgpack_pack_array(pk, 3) || msgpack_pack_uint8(pk, TDP_MSG_NOTIFY) ||
	    tdp_pack_cstr(pk, method) || msgpack_pack_array(pk, 1) ||
	    tdp_write_error_map(pk, code, message))
		return -ENOMEM;
	return 0;
}
