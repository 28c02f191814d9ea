/* Unit tests of the msgpack-RPC framing (proto/rpc.h) and the small tables
 * shared by daemon and client: status codes, dtypes, names, byte buffers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <msgpack.h>

#include "buf.h"
#include "dtype.h"
#include "wire_limits.h"
#include "methods.h"
#include "name.h"
#include "pack.h"
#include "rpc.h"
#include "utf8.h"
#include "scan.h"
#include "status.h"

/* ---- helpers ------------------------------------------------------------ */

/* A packer writing into a tdp_buf, and the decoded object of what it wrote. */
struct msg {
	struct tdp_buf buf;
	msgpack_packer pk;
	msgpack_unpacked u;
	int unpacked;
};

static void msg_init(struct msg *m)
{
	memset(m, 0, sizeof(*m));
	msgpack_packer_init(&m->pk, &m->buf, tdp_buf_msgpack_write);
}

/* Decode what was packed: it must be exactly one object that the scanner
 * accepts with the same length. */
static const msgpack_object *msg_decode(struct msg *m)
{
	struct tdp_scanner s;

	tdp_scanner_reset(&s);
	assert_int_equal(tdp_scanner_feed(&s, tdp_buf_head(&m->buf), tdp_buf_len(&m->buf),
					  &tdp_scan_default_limits), 1);
	assert_int_equal(s.pos, tdp_buf_len(&m->buf));
	msgpack_unpacked_init(&m->u);
	m->unpacked = 1;
	assert_int_equal(tdp_unpack(&m->u, tdp_buf_head(&m->buf), tdp_buf_len(&m->buf)), 0);
	return &m->u.data;
}

static void msg_done(struct msg *m)
{
	if (m->unpacked)
		msgpack_unpacked_destroy(&m->u);
	tdp_buf_free(&m->buf);
}

static void pk_str(msgpack_packer *pk, const char *s)
{
	assert_int_equal(tdp_pack_cstr(pk, s), 0);
}

static int str_is(const msgpack_object *o, const char *s)
{
	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	       memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

/* Parse and expect -EPROTO with a reason and the out-param untouched. */
static void expect_proto_error(struct msg *m, const char *what)
{
	struct tdp_message ret, before;
	char why[256];
	int r;

	memset(&ret, 0xa5, sizeof(ret));
	before = ret;
	why[0] = '\0';
	r = tdp_message_parse(msg_decode(m), &ret, why, sizeof(why));
	if (r != -EPROTO)
		fail_msg("%s: tdp_message_parse returned %d, want -EPROTO", what, r);
	if (why[0] == '\0')
		fail_msg("%s: no reason given", what);
	assert_true(strlen(why) < sizeof(why));
	assert_memory_equal(&ret, &before, sizeof(ret));
}

/* ---- tdp_message_parse -------------------------------------------------- */

static void test_parse_request(void **state)
{
	struct msg m;
	struct tdp_message t;
	char why[128] = "";
	const msgpack_object *v;

	(void)state;
	msg_init(&m);
	msgpack_pack_array(&m.pk, 4);
	msgpack_pack_uint8(&m.pk, 0);
	msgpack_pack_uint32(&m.pk, 7);
	pk_str(&m.pk, "tensor.get");
	msgpack_pack_array(&m.pk, 1);
	msgpack_pack_map(&m.pk, 1);
	pk_str(&m.pk, "name");
	pk_str(&m.pk, "w");
	assert_int_equal(tdp_message_parse(msg_decode(&m), &t, why, sizeof(why)), 0);
	assert_int_equal(t.type, TDP_MSG_REQUEST);
	assert_int_equal(t.msgid, 7);
	assert_int_equal(t.method_len, 10);
	assert_memory_equal(t.method, "tensor.get", 10);
	assert_non_null(t.params);
	assert_int_equal(t.params->type, MSGPACK_OBJECT_MAP);
	v = tdp_map_find(t.params, "name");
	assert_non_null(v);
	assert_true(str_is(v, "w"));
	msg_done(&m);

	/* params [] is no map; the largest msgid; a 64-byte method name */
	msg_init(&m);
	msgpack_pack_array(&m.pk, 4);
	msgpack_pack_uint8(&m.pk, 0);
	msgpack_pack_uint32(&m.pk, UINT32_MAX);
	pk_str(&m.pk, "0123456789012345678901234567890123456789012345678901234567890123");
	msgpack_pack_array(&m.pk, 0);
	assert_int_equal(tdp_message_parse(msg_decode(&m), &t, why, sizeof(why)), 0);
	assert_int_equal(t.type, TDP_MSG_REQUEST);
	assert_int_equal(t.msgid, UINT32_MAX);
	assert_int_equal(t.method_len, TDP_MAX_METHOD_LEN);
	assert_null(t.params);
	msg_done(&m);

	/* msgid 0 and params [{}] */
	msg_init(&m);
	msgpack_pack_array(&m.pk, 4);
	msgpack_pack_uint8(&m.pk, 0);
	msgpack_pack_uint8(&m.pk, 0);
	pk_str(&m.pk, "ping");
	msgpack_pack_array(&m.pk, 1);
	msgpack_pack_map(&m.pk, 0);
	assert_int_equal(tdp_message_parse(msg_decode(&m), &t, why, sizeof(why)), 0);
	assert_int_equal(t.msgid, 0);
	assert_int_equal(t.method_len, 4);
	assert_non_null(t.params);
	assert_int_equal(t.params->via.map.size, 0);
	msg_done(&m);
}

static void test_parse_response_notification(void **state)
{
	struct msg m;
	struct tdp_message t;
	char why[128] = "";

	(void)state;
	msg_init(&m);
	msgpack_pack_array(&m.pk, 4);
	msgpack_pack_uint8(&m.pk, 1);
	msgpack_pack_uint32(&m.pk, 9);
	msgpack_pack_nil(&m.pk);
	msgpack_pack_map(&m.pk, 1);
	pk_str(&m.pk, "pong");
	msgpack_pack_true(&m.pk);
	assert_int_equal(tdp_message_parse(msg_decode(&m), &t, why, sizeof(why)), 0);
	assert_int_equal(t.type, TDP_MSG_RESPONSE);
	assert_int_equal(t.msgid, 9);
	assert_non_null(t.error);
	assert_int_equal(t.error->type, MSGPACK_OBJECT_NIL);
	assert_non_null(t.result);
	assert_int_equal(t.result->type, MSGPACK_OBJECT_MAP);
	assert_non_null(tdp_map_find(t.result, "pong"));
	msg_done(&m);

	msg_init(&m);
	assert_int_equal(tdp_write_error(&m.pk, 12, TDP_NOT_FOUND, "gone"), 0);
	assert_int_equal(tdp_message_parse(msg_decode(&m), &t, why, sizeof(why)), 0);
	assert_int_equal(t.type, TDP_MSG_RESPONSE);
	assert_int_equal(t.msgid, 12);
	assert_int_equal(t.error->type, MSGPACK_OBJECT_MAP);
	assert_int_equal(t.result->type, MSGPACK_OBJECT_NIL);
	msg_done(&m);

	msg_init(&m);
	assert_int_equal(tdp_write_error_notification(&m.pk, TDP_NOTIFY_PROTOCOL_ERROR,
						      TDP_PROTOCOL, "bad byte"), 0);
	assert_int_equal(tdp_message_parse(msg_decode(&m), &t, why, sizeof(why)), 0);
	assert_int_equal(t.type, TDP_MSG_NOTIFY);
	assert_int_equal(t.method_len, strlen(TDP_NOTIFY_PROTOCOL_ERROR));
	assert_memory_equal(t.method, TDP_NOTIFY_PROTOCOL_ERROR, t.method_len);
	assert_non_null(t.params);
	assert_int_equal(t.params->type, MSGPACK_OBJECT_MAP);
	msg_done(&m);
}

/* Any [2, method, params] is a notification (issue 29: pynvim opens with
 * five positional params): a method that is no string reads as "", params
 * that are not one map as NULL. */
static void test_parse_lenient_notifications(void **state)
{
	struct tdp_message t;
	char why[128];
	struct msg m;

	(void)state;
	msg_init(&m);
	msgpack_pack_array(&m.pk, 3);
	msgpack_pack_uint8(&m.pk, 2);
	msgpack_pack_uint8(&m.pk, 5);
	msgpack_pack_array(&m.pk, 0);
	assert_int_equal(tdp_message_parse(msg_decode(&m), &t, why, sizeof(why)), 0);
	assert_int_equal(t.type, TDP_MSG_NOTIFY);
	assert_int_equal(t.method_len, 0);
	assert_non_null(t.method);
	msg_done(&m);

	msg_init(&m);
	msgpack_pack_array(&m.pk, 3);
	msgpack_pack_uint8(&m.pk, 2);
	pk_str(&m.pk, "nvim_set_client_info");
	msgpack_pack_array(&m.pk, 5);
	pk_str(&m.pk, "python3-client");
	msgpack_pack_map(&m.pk, 0);
	pk_str(&m.pk, "remote");
	msgpack_pack_map(&m.pk, 0);
	msgpack_pack_map(&m.pk, 0);
	assert_int_equal(tdp_message_parse(msg_decode(&m), &t, why, sizeof(why)), 0);
	assert_int_equal(t.type, TDP_MSG_NOTIFY);
	assert_int_equal(t.method_len, strlen("nvim_set_client_info"));
	assert_null(t.params);
	msg_done(&m);
}

/* Pack `[type, msgid, method, params]`-like messages with one field spoiled. */
enum spoil {
	SP_MSGID_NEG, SP_MSGID_BIG, SP_MSGID_STR, SP_MSGID_FLOAT, SP_MSGID_NIL,
	SP_METHOD_INT, SP_METHOD_EMPTY, SP_METHOD_LONG, SP_METHOD_BIN,
	SP_PARAMS_MAP, SP_PARAMS_INTS, SP_PARAMS_NONMAP, SP_PARAMS_TWO_MAPS, SP_PARAMS_NIL,
	SP_COUNT
};

static void pack_spoiled_request(msgpack_packer *pk, enum spoil sp)
{
	msgpack_pack_array(pk, 4);
	msgpack_pack_uint8(pk, 0);
	switch (sp) {
	case SP_MSGID_NEG: msgpack_pack_int8(pk, -1); break;
	case SP_MSGID_BIG: msgpack_pack_uint64(pk, (uint64_t)UINT32_MAX + 1); break;
	case SP_MSGID_STR: pk_str(pk, "7"); break;
	case SP_MSGID_FLOAT: msgpack_pack_double(pk, 7.0); break;
	case SP_MSGID_NIL: msgpack_pack_nil(pk); break;
	default: msgpack_pack_uint8(pk, 7); break;
	}
	switch (sp) {
	case SP_METHOD_INT: msgpack_pack_uint8(pk, 42); break;
	case SP_METHOD_EMPTY: pk_str(pk, ""); break;
	case SP_METHOD_LONG:
		pk_str(pk, "01234567890123456789012345678901234567890123456789012345678901234");
		break;
	/* bin is accepted as a method name, but only when it is UTF-8 */
	case SP_METHOD_BIN: msgpack_pack_bin_with_body(pk, "p\xffng", 4); break;
	default: pk_str(pk, "ping"); break;
	}
	switch (sp) {
	case SP_PARAMS_MAP: msgpack_pack_map(pk, 0); break;
	case SP_PARAMS_INTS:
		msgpack_pack_array(pk, 2);
		msgpack_pack_uint8(pk, 1);
		msgpack_pack_uint8(pk, 2);
		break;
	case SP_PARAMS_NONMAP:
		msgpack_pack_array(pk, 1);
		pk_str(pk, "name");
		break;
	case SP_PARAMS_TWO_MAPS:
		msgpack_pack_array(pk, 2);
		msgpack_pack_map(pk, 0);
		msgpack_pack_map(pk, 0);
		break;
	case SP_PARAMS_NIL: msgpack_pack_nil(pk); break;
	default: msgpack_pack_array(pk, 0); break;
	}
}

static void test_parse_bad_requests(void **state)
{
	static const char *const names[SP_COUNT] = {
		"msgid -1", "msgid 2^32", "msgid str", "msgid float", "msgid nil",
		"method int", "method empty", "method 65 bytes", "method bin not UTF-8",
		"params map", "params [1,2]", "params [str]", "params [{},{}]", "params nil",
	};

	(void)state;
	for (int sp = 0; sp < SP_COUNT; sp++) {
		struct msg m;

		msg_init(&m);
		pack_spoiled_request(&m.pk, (enum spoil)sp);
		expect_proto_error(&m, names[sp]);
		msg_done(&m);
	}
}

static void test_parse_bad_shapes(void **state)
{
	struct msg m;

	(void)state;
#define CASE(what, code)                \
	do {                            \
		msg_init(&m);           \
		code;                   \
		expect_proto_error(&m, what); \
		msg_done(&m);           \
	} while (0)

	CASE("not an array", msgpack_pack_map(&m.pk, 0));
	CASE("a string", pk_str(&m.pk, "hello"));
	CASE("empty array", msgpack_pack_array(&m.pk, 0));
	CASE("[0, 1]", { msgpack_pack_array(&m.pk, 2); msgpack_pack_uint8(&m.pk, 0);
			 msgpack_pack_uint8(&m.pk, 1); });
	CASE("request of 3", { msgpack_pack_array(&m.pk, 3); msgpack_pack_uint8(&m.pk, 0);
			       msgpack_pack_uint8(&m.pk, 1); pk_str(&m.pk, "ping"); });
	CASE("request of 5", { msgpack_pack_array(&m.pk, 5); msgpack_pack_uint8(&m.pk, 0);
			       msgpack_pack_uint8(&m.pk, 1); pk_str(&m.pk, "ping");
			       msgpack_pack_array(&m.pk, 0); msgpack_pack_nil(&m.pk); });
	CASE("type 3", { msgpack_pack_array(&m.pk, 4); msgpack_pack_uint8(&m.pk, 3);
			 msgpack_pack_uint8(&m.pk, 1); pk_str(&m.pk, "ping");
			 msgpack_pack_array(&m.pk, 0); });
	CASE("type -1", { msgpack_pack_array(&m.pk, 4); msgpack_pack_int8(&m.pk, -1);
			  msgpack_pack_uint8(&m.pk, 1); pk_str(&m.pk, "ping");
			  msgpack_pack_array(&m.pk, 0); });
	CASE("type str", { msgpack_pack_array(&m.pk, 4); pk_str(&m.pk, "0");
			   msgpack_pack_uint8(&m.pk, 1); pk_str(&m.pk, "ping");
			   msgpack_pack_array(&m.pk, 0); });
	CASE("response of 3", { msgpack_pack_array(&m.pk, 3); msgpack_pack_uint8(&m.pk, 1);
				msgpack_pack_uint8(&m.pk, 1); msgpack_pack_nil(&m.pk); });
	CASE("response msgid -5", { msgpack_pack_array(&m.pk, 4); msgpack_pack_uint8(&m.pk, 1);
				    msgpack_pack_int8(&m.pk, -5); msgpack_pack_nil(&m.pk);
				    msgpack_pack_nil(&m.pk); });
	CASE("notification of 4", { msgpack_pack_array(&m.pk, 4); msgpack_pack_uint8(&m.pk, 2);
				    pk_str(&m.pk, "x"); msgpack_pack_array(&m.pk, 0);
				    msgpack_pack_nil(&m.pk); });
	/* the [0, 7, 42, []] of the integration test */
	CASE("[0, 7, 42, []]", { msgpack_pack_array(&m.pk, 4); msgpack_pack_uint8(&m.pk, 0);
				 msgpack_pack_uint8(&m.pk, 7); msgpack_pack_uint8(&m.pk, 42);
				 msgpack_pack_array(&m.pk, 0); });
#undef CASE
}

/* Method names as bin (clients from before msgpack's str/bin split), in
 * requests and notifications; str that is not UTF-8 is refused like bin. */
static void test_parse_bin_method(void **state)
{
	static const char long_name[TDP_MAX_METHOD_LEN + 1] =
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
	struct tdp_message t;
	char why[128] = "";
	struct msg m;

	(void)state;
	msg_init(&m);
	msgpack_pack_array(&m.pk, 4);
	msgpack_pack_uint8(&m.pk, 0);
	msgpack_pack_uint32(&m.pk, 77);
	msgpack_pack_bin_with_body(&m.pk, "tensor.get", 10);
	msgpack_pack_array(&m.pk, 0);
	assert_int_equal(tdp_message_parse(msg_decode(&m), &t, why, sizeof(why)), 0);
	assert_int_equal(t.type, 0);
	assert_int_equal(t.msgid, 77);
	assert_int_equal(t.method_len, 10);
	assert_memory_equal(t.method, "tensor.get", 10);
	msg_done(&m);

	msg_init(&m);
	msgpack_pack_array(&m.pk, 3);
	msgpack_pack_uint8(&m.pk, 2);
	msgpack_pack_bin_with_body(&m.pk, "nvim_\xc3\xa9v", 8);  /* UTF-8 é */
	msgpack_pack_array(&m.pk, 0);
	assert_int_equal(tdp_message_parse(msg_decode(&m), &t, why, sizeof(why)), 0);
	assert_int_equal(t.type, 2);
	assert_int_equal(t.method_len, 8);
	msg_done(&m);

	/* the same length limit as str: 64 bytes pass, 65 do not */
	for (unsigned len = TDP_MAX_METHOD_LEN; len <= TDP_MAX_METHOD_LEN + 1; len++) {
		msg_init(&m);
		msgpack_pack_array(&m.pk, 4);
		msgpack_pack_uint8(&m.pk, 0);
		msgpack_pack_uint8(&m.pk, 1);
		msgpack_pack_bin_with_body(&m.pk, long_name, len);
		msgpack_pack_array(&m.pk, 0);
		if (len == TDP_MAX_METHOD_LEN)
			assert_int_equal(tdp_message_parse(msg_decode(&m), &t, why, sizeof(why)), 0);
		else
			expect_proto_error(&m, "bin method 65 bytes");
		msg_done(&m);
	}
	/* str that is not UTF-8 (an overlong '/') */
	msg_init(&m);
	msgpack_pack_array(&m.pk, 4);
	msgpack_pack_uint8(&m.pk, 0);
	msgpack_pack_uint8(&m.pk, 1);
	msgpack_pack_str_with_body(&m.pk, "a\xc0\xaf" "b", 4);
	msgpack_pack_array(&m.pk, 0);
	expect_proto_error(&m, "str method not UTF-8");
	msg_done(&m);
}

static void test_utf8_valid(void **state)
{
	static const struct {
		const char *s;
		bool ok;
	} cases[] = {
		{ "", true }, { "ping", true }, { "\xc3\xa9", true }, { "\xe2\x82\xac", true },
		{ "\xf0\x9f\x98\x80", true }, { "\xf4\x8f\xbf\xbf", true },
		{ "\xff", false }, { "\xc0\xaf", false }, { "\xe0\x80\xaf", false },
		{ "\xed\xa0\x80", false }, { "\xf4\x90\x80\x80", false }, { "\xc3", false },
		{ "\xe2\x82", false }, { "\x80", false }, { "a\xc3(", false },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (tdp_utf8_valid(cases[i].s, strlen(cases[i].s)) != cases[i].ok)
			fail_msg("case %zu: want %d", i, cases[i].ok);
}

/* tdp_params_accept_bin: bin keys and text values become str, the byte
 * params (data, spirv, push) become bin, non-UTF-8 bin stays bin. */
static void test_params_accept_bin(void **state)
{
	struct msg m;
	msgpack_object *p;
	const msgpack_object *v, *attrs;

	(void)state;
	msg_init(&m);
	msgpack_pack_map(&m.pk, 6);
	msgpack_pack_bin_with_body(&m.pk, "name", 4);
	msgpack_pack_bin_with_body(&m.pk, "a/b", 3);
	msgpack_pack_bin_with_body(&m.pk, "data", 4);
	msgpack_pack_bin_with_body(&m.pk, "abcd", 4);      /* UTF-8, but bytes */
	msgpack_pack_bin_with_body(&m.pk, "spirv", 5);
	msgpack_pack_str_with_body(&m.pk, "\x03\x02", 2); /* raw client: str */
	msgpack_pack_bin_with_body(&m.pk, "inputs", 6);
	msgpack_pack_array(&m.pk, 2);
	msgpack_pack_bin_with_body(&m.pk, "x", 1);
	msgpack_pack_bin_with_body(&m.pk, "\xff", 1);     /* not UTF-8: stays bin */
	msgpack_pack_bin_with_body(&m.pk, "attrs", 5);
	msgpack_pack_map(&m.pk, 1);
	msgpack_pack_bin_with_body(&m.pk, "dtype", 5);
	msgpack_pack_bin_with_body(&m.pk, "f32", 3);
	msgpack_pack_bin_with_body(&m.pk, "\xfe", 1);     /* a key that is no text */
	msgpack_pack_uint8(&m.pk, 1);
	p = (msgpack_object *)msg_decode(&m);
	tdp_params_accept_bin(p, 0);
	assert_int_equal(p->via.map.ptr[0].key.type, MSGPACK_OBJECT_STR);
	assert_true(str_is(tdp_map_find(p, "name"), "a/b"));
	v = tdp_map_find(p, "data");
	assert_non_null(v);
	assert_int_equal(v->type, MSGPACK_OBJECT_BIN);
	assert_memory_equal(v->via.bin.ptr, "abcd", 4);
	v = tdp_map_find(p, "spirv");
	assert_non_null(v);
	assert_int_equal(v->type, MSGPACK_OBJECT_BIN);
	assert_int_equal(v->via.bin.size, 2);
	v = tdp_map_find(p, "inputs");
	assert_non_null(v);
	assert_true(str_is(&v->via.array.ptr[0], "x"));
	assert_int_equal(v->via.array.ptr[1].type, MSGPACK_OBJECT_BIN);
	attrs = tdp_map_find(p, "attrs");
	assert_non_null(attrs);
	assert_true(str_is(tdp_map_find(attrs, "dtype"), "f32"));
	assert_int_equal(p->via.map.ptr[5].key.type, MSGPACK_OBJECT_BIN);
	msg_done(&m);
}

static void test_parse_why_truncated(void **state)
{
	struct msg m;
	struct tdp_message t;
	char why[8];

	(void)state;
	memset(why, 'Z', sizeof(why));
	msg_init(&m);
	pack_spoiled_request(&m.pk, SP_PARAMS_INTS);
	assert_int_equal(tdp_message_parse(msg_decode(&m), &t, why, 5), -EPROTO);
	assert_int_equal(strlen(why), 4);
	assert_int_equal(why[5], 'Z');
	msg_done(&m);
}

/* ---- tdp_message_request_id --------------------------------------------- */

static void test_request_id(void **state)
{
	struct msg m;
	uint32_t id;

	(void)state;
#define ID(code, want_r, want_id)                                              \
	do {                                                                   \
		msg_init(&m);                                                  \
		code;                                                          \
		id = 0xdeadbeef;                                               \
		assert_int_equal(tdp_message_request_id(msg_decode(&m), &id), want_r); \
		assert_int_equal(id, want_id);                                 \
		msg_done(&m);                                                  \
	} while (0)

	ID({ msgpack_pack_array(&m.pk, 4); msgpack_pack_uint8(&m.pk, 0);
	     msgpack_pack_uint8(&m.pk, 7); msgpack_pack_uint8(&m.pk, 42);
	     msgpack_pack_array(&m.pk, 0); }, 0, 7);
	ID({ msgpack_pack_array(&m.pk, 2); msgpack_pack_uint8(&m.pk, 0);
	     msgpack_pack_uint32(&m.pk, UINT32_MAX); }, 0, UINT32_MAX);
	ID({ msgpack_pack_array(&m.pk, 5); msgpack_pack_uint8(&m.pk, 0);
	     msgpack_pack_uint16(&m.pk, 300); msgpack_pack_nil(&m.pk);
	     msgpack_pack_nil(&m.pk); msgpack_pack_nil(&m.pk); }, 0, 300);
	ID({ msgpack_pack_array(&m.pk, 4); msgpack_pack_uint8(&m.pk, 1);
	     msgpack_pack_uint8(&m.pk, 7); msgpack_pack_nil(&m.pk);
	     msgpack_pack_nil(&m.pk); }, -ENOENT, 0xdeadbeef);
	ID({ msgpack_pack_array(&m.pk, 4); msgpack_pack_uint8(&m.pk, 0);
	     msgpack_pack_int8(&m.pk, -1); msgpack_pack_nil(&m.pk);
	     msgpack_pack_nil(&m.pk); }, -ENOENT, 0xdeadbeef);
	ID({ msgpack_pack_array(&m.pk, 2); msgpack_pack_uint8(&m.pk, 0);
	     msgpack_pack_uint64(&m.pk, 1ull << 32); }, -ENOENT, 0xdeadbeef);
	ID({ msgpack_pack_array(&m.pk, 2); msgpack_pack_uint8(&m.pk, 0);
	     pk_str(&m.pk, "7"); }, -ENOENT, 0xdeadbeef);
	ID({ msgpack_pack_array(&m.pk, 1); msgpack_pack_uint8(&m.pk, 0); }, -ENOENT, 0xdeadbeef);
	ID(msgpack_pack_uint8(&m.pk, 0), -ENOENT, 0xdeadbeef);
	ID({ msgpack_pack_map(&m.pk, 1); msgpack_pack_uint8(&m.pk, 0);
	     msgpack_pack_uint8(&m.pk, 7); }, -ENOENT, 0xdeadbeef);
#undef ID
}

/* ---- writers ------------------------------------------------------------ */

static void check_error_map(const msgpack_object *e, int code, const char *name,
			    const char *message, size_t message_len)
{
	const msgpack_object *v;

	assert_int_equal(e->type, MSGPACK_OBJECT_MAP);
	assert_int_equal(e->via.map.size, 3);
	v = tdp_map_find(e, "code");
	assert_non_null(v);
	assert_int_equal(v->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
	assert_int_equal(v->via.u64, code);
	v = tdp_map_find(e, "name");
	assert_non_null(v);
	assert_true(str_is(v, name));
	v = tdp_map_find(e, "message");
	assert_non_null(v);
	assert_int_equal(v->type, MSGPACK_OBJECT_STR);
	assert_int_equal(v->via.str.size, message_len);
	assert_memory_equal(v->via.str.ptr, message, message_len);
}

static void test_write_error(void **state)
{
	static const uint8_t want[] = {
		0x94, 0x01, 0x07, 0x83,
		0xa4, 'c', 'o', 'd', 'e', 0x05,
		0xa4, 'n', 'a', 'm', 'e', 0xa9, 'N', 'O', 'T', '_', 'F', 'O', 'U', 'N', 'D',
		0xa7, 'm', 'e', 's', 's', 'a', 'g', 'e', 0xa2, 'n', 'o',
		0xc0,
	};
	struct msg m;
	const msgpack_object *o;
	char longmsg[1000];

	(void)state;
	/* exactly [1, 7, {"code": 5, "name": "NOT_FOUND", "message": "no"}, nil] */
	msg_init(&m);
	assert_int_equal(tdp_write_error(&m.pk, 7, TDP_NOT_FOUND, "no"), 0);
	assert_int_equal(tdp_buf_len(&m.buf), sizeof(want));
	assert_memory_equal(tdp_buf_head(&m.buf), want, sizeof(want));
	msg_done(&m);

	/* every code, a large msgid, decoded */
	for (int code = 0; code < 200; code++) {
		const char *name = tdp_status_name(code);

		if (!name || code == TDP_OK)
			continue;
		msg_init(&m);
		assert_int_equal(tdp_write_error(&m.pk, 0xfffffff0u, code, "msg"), 0);
		o = msg_decode(&m);
		assert_int_equal(o->type, MSGPACK_OBJECT_ARRAY);
		assert_int_equal(o->via.array.size, 4);
		assert_int_equal(o->via.array.ptr[0].via.u64, 1);
		assert_int_equal(o->via.array.ptr[1].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
		assert_int_equal(o->via.array.ptr[1].via.u64, 0xfffffff0u);
		check_error_map(&o->via.array.ptr[2], code, name, "msg", 3);
		assert_int_equal(o->via.array.ptr[3].type, MSGPACK_OBJECT_NIL);
		msg_done(&m);
	}

	/* long messages are cut at TDP_MAX_ERROR_MESSAGE bytes */
	memset(longmsg, 'x', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = '\0';
	msg_init(&m);
	assert_int_equal(tdp_write_error(&m.pk, 1, TDP_INVALID_ARGUMENT, longmsg), 0);
	o = msg_decode(&m);
	check_error_map(&o->via.array.ptr[2], TDP_INVALID_ARGUMENT, "INVALID_ARGUMENT", longmsg,
			TDP_MAX_ERROR_MESSAGE);
	msg_done(&m);

	/* the notification form */
	msg_init(&m);
	assert_int_equal(tdp_write_error_notification(&m.pk, "protocol.error",
						      TDP_RESOURCE_EXHAUSTED, "too big"), 0);
	o = msg_decode(&m);
	assert_int_equal(o->type, MSGPACK_OBJECT_ARRAY);
	assert_int_equal(o->via.array.size, 3);
	assert_int_equal(o->via.array.ptr[0].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
	assert_int_equal(o->via.array.ptr[0].via.u64, 2);
	assert_true(str_is(&o->via.array.ptr[1], "protocol.error"));
	assert_int_equal(o->via.array.ptr[2].type, MSGPACK_OBJECT_ARRAY);
	assert_int_equal(o->via.array.ptr[2].via.array.size, 1);
	check_error_map(&o->via.array.ptr[2].via.array.ptr[0], 8, "RESOURCE_EXHAUSTED",
			"too big", 7);
	msg_done(&m);

	/* the bare map */
	msg_init(&m);
	assert_int_equal(tdp_write_error_map(&m.pk, TDP_PROTOCOL, ""), 0);
	check_error_map(msg_decode(&m), 103, "PROTOCOL", "", 0);
	msg_done(&m);
}

static void test_write_heads(void **state)
{
	static const uint8_t want_result[] = { 0x94, 0x01, 0xcd, 0x01, 0x2c, 0xc0, 0x81, 0xa4,
					       'p', 'o', 'n', 'g', 0xc3 };
	static const uint8_t want_request[] = { 0x94, 0x00, 0x2a, 0xa4, 'p', 'i', 'n', 'g', 0x90 };
	struct msg m;
	const msgpack_object *o;
	struct tdp_message t;
	char why[64];

	(void)state;
	msg_init(&m);
	assert_int_equal(tdp_write_result_head(&m.pk, 300), 0);
	msgpack_pack_map(&m.pk, 1);
	pk_str(&m.pk, "pong");
	msgpack_pack_true(&m.pk);
	assert_int_equal(tdp_buf_len(&m.buf), sizeof(want_result));
	assert_memory_equal(tdp_buf_head(&m.buf), want_result, sizeof(want_result));
	o = msg_decode(&m);
	assert_int_equal(tdp_message_parse(o, &t, why, sizeof(why)), 0);
	assert_int_equal(t.type, TDP_MSG_RESPONSE);
	assert_int_equal(t.msgid, 300);
	assert_int_equal(t.error->type, MSGPACK_OBJECT_NIL);
	assert_non_null(tdp_map_find(t.result, "pong"));
	msg_done(&m);

	msg_init(&m);
	assert_int_equal(tdp_write_request_head(&m.pk, 42, "ping"), 0);
	msgpack_pack_array(&m.pk, 0);
	assert_int_equal(tdp_buf_len(&m.buf), sizeof(want_request));
	assert_memory_equal(tdp_buf_head(&m.buf), want_request, sizeof(want_request));
	msg_done(&m);

	/* a full request round trip with the largest msgid */
	msg_init(&m);
	assert_int_equal(tdp_write_request_head(&m.pk, UINT32_MAX, TDP_METHOD_TENSOR_DELETE), 0);
	msgpack_pack_array(&m.pk, 1);
	msgpack_pack_map(&m.pk, 1);
	pk_str(&m.pk, "name");
	pk_str(&m.pk, "a/b");
	o = msg_decode(&m);
	assert_int_equal(tdp_message_parse(o, &t, why, sizeof(why)), 0);
	assert_int_equal(t.type, TDP_MSG_REQUEST);
	assert_int_equal(t.msgid, UINT32_MAX);
	assert_int_equal(t.method_len, strlen("tensor.delete"));
	assert_memory_equal(t.method, "tensor.delete", t.method_len);
	assert_true(str_is(tdp_map_find(t.params, "name"), "a/b"));
	msg_done(&m);
}

/* ---- pack.h helpers ----------------------------------------------------- */

static void test_pack_helpers(void **state)
{
	struct msg m;
	const msgpack_object *o, *v;
	uint64_t u;
	int64_t i;
	char dst[4];

	(void)state;
	msg_init(&m);
	msgpack_pack_map(&m.pk, 6);
	pk_str(&m.pk, "u");
	msgpack_pack_uint64(&m.pk, UINT64_MAX);
	pk_str(&m.pk, "neg");
	msgpack_pack_int64(&m.pk, -5);
	pk_str(&m.pk, "s");
	pk_str(&m.pk, "abc");
	pk_str(&m.pk, "long");
	pk_str(&m.pk, "abcd");
	msgpack_pack_uint8(&m.pk, 1); /* a non-string key is skipped */
	pk_str(&m.pk, "u");
	pk_str(&m.pk, "uu");
	msgpack_pack_double(&m.pk, 1.0);
	o = msg_decode(&m);

	assert_null(tdp_map_find(o, "missing"));
	assert_null(tdp_map_find(o, "U"));
	assert_null(tdp_map_find(NULL, "u"));
	assert_null(tdp_map_find(&o->via.map.ptr[0].val, "u")); /* not a map */

	v = tdp_map_find(o, "u");
	assert_int_equal(tdp_obj_uint(v, &u), 0);
	assert_true(u == UINT64_MAX);
	i = 77;
	assert_int_equal(tdp_obj_int(v, &i), -EINVAL); /* does not fit int64 */
	assert_int_equal(i, 77);

	v = tdp_map_find(o, "neg");
	u = 77;
	assert_int_equal(tdp_obj_uint(v, &u), -EINVAL);
	assert_int_equal(u, 77);
	assert_int_equal(tdp_obj_int(v, &i), 0);
	assert_int_equal(i, -5);

	v = tdp_map_find(o, "s");
	assert_true(tdp_obj_str_eq(v, "abc"));
	assert_false(tdp_obj_str_eq(v, "ab"));
	assert_false(tdp_obj_str_eq(v, "abcd"));
	assert_int_equal(tdp_obj_strcpy(v, dst, sizeof(dst)), 0);
	assert_string_equal(dst, "abc");
	assert_int_equal(tdp_obj_strcpy(tdp_map_find(o, "long"), dst, sizeof(dst)), -ENAMETOOLONG);
	assert_string_equal(dst, "abc");
	assert_int_equal(tdp_obj_strcpy(tdp_map_find(o, "u"), dst, sizeof(dst)), -EINVAL);
	assert_int_equal(tdp_obj_uint(tdp_map_find(o, "uu"), &u), -EINVAL);
	assert_int_equal(tdp_obj_int(NULL, &i), -EINVAL);
	assert_int_equal(tdp_obj_uint(NULL, &u), -EINVAL);
	msg_done(&m);
}

/* ---- status, dtype, shape, name ----------------------------------------- */

static void test_status(void **state)
{
	static const struct {
		int code;
		const char *name;
	} table[] = {
		{ 3, "INVALID_ARGUMENT" }, { 5, "NOT_FOUND" }, { 6, "ALREADY_EXISTS" },
		{ 7, "PERMISSION_DENIED" }, { 8, "RESOURCE_EXHAUSTED" },
		{ 9, "FAILED_PRECONDITION" }, { 12, "UNIMPLEMENTED" }, { 13, "INTERNAL" },
		{ 14, "UNAVAILABLE" }, { 100, "SHAPE_MISMATCH" }, { 101, "DTYPE_MISMATCH" },
		{ 102, "DEVICE_LOST" }, { 103, "PROTOCOL" }, { 4, "DEADLINE_EXCEEDED" },
	};
	static const int not_codes[] = { -1, 2, 10, 11, 15, 16, 99, 104, 1000 };

	(void)state;
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		const char *n = tdp_status_name(table[i].code);

		assert_non_null(n);
		assert_string_equal(n, table[i].name);
		assert_int_equal(tdp_status_from_name(table[i].name, (unsigned)strlen(table[i].name)),
				 table[i].code);
	}
	assert_int_equal(TDP_INVALID_ARGUMENT, 3);
	assert_int_equal(TDP_PROTOCOL, 103);
	for (size_t i = 0; i < sizeof(not_codes) / sizeof(not_codes[0]); i++)
		assert_null(tdp_status_name(not_codes[i]));
	assert_int_equal(tdp_status_from_name("NOPE", 4), -1);
	assert_int_equal(tdp_status_from_name("", 0), -1);
	assert_int_equal(tdp_status_from_name("not_found", 9), -1);
	assert_int_equal(tdp_status_from_name("NOT_FOUN", 8), -1);
	/* only `len` bytes count */
	assert_int_equal(tdp_status_from_name("NOT_FOUND_AND_MORE", 9), TDP_NOT_FOUND);
}

static void test_dtype(void **state)
{
	static const struct {
		const char *name;
		int dtype;
		size_t size;
	} table[] = {
		{ "f32", TDP_DTYPE_F32, 4 }, { "f16", TDP_DTYPE_F16, 2 },
		{ "bf16", TDP_DTYPE_BF16, 2 }, { "i32", TDP_DTYPE_I32, 4 },
		{ "u8", TDP_DTYPE_U8, 1 },
	};
	static const char *const bad[] = { "", "f64", "F32", "f3", "f322", "i8", "bf", "u16",
					   "float32", " f32" };

	(void)state;
	assert_int_equal(TDP_DTYPE_COUNT, 5);
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		assert_int_equal(tdp_dtype_parse(table[i].name, strlen(table[i].name)),
				 table[i].dtype);
		assert_int_equal(tdp_dtype_size(table[i].dtype), table[i].size);
		assert_string_equal(tdp_dtype_name(table[i].dtype), table[i].name);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(tdp_dtype_parse(bad[i], strlen(bad[i])), -EINVAL);
	assert_int_equal(tdp_dtype_parse("f32x", 3), TDP_DTYPE_F32);
	assert_int_equal(tdp_dtype_parse("u8", 1), -EINVAL);
	assert_int_equal(tdp_dtype_size(-1), 0);
	assert_int_equal(tdp_dtype_size(TDP_DTYPE_COUNT), 0);
	assert_null(tdp_dtype_name(-1));
	assert_null(tdp_dtype_name(TDP_DTYPE_COUNT));
}

static void test_shape_count(void **state)
{
	uint64_t c;
	const uint64_t s23[] = { 2, 3 }, s302[] = { 3, 0, 2 };
	const uint64_t big[] = { 1ull << 32, 1ull << 32 };
	const uint64_t b63[] = { 1ull << 32, 1ull << 31 };
	const uint64_t max1[] = { UINT64_MAX };
	const uint64_t zero_big[] = { 0, UINT64_MAX, UINT64_MAX };
	const uint64_t eight[8] = { 2, 2, 2, 2, 2, 2, 2, 2 };

	(void)state;
	c = 99;
	assert_int_equal(tdp_shape_count(NULL, 0, 4, &c), 0);
	assert_int_equal(c, 1);
	assert_int_equal(tdp_shape_count(s23, 2, 4, &c), 0);
	assert_int_equal(c, 6);
	assert_int_equal(tdp_shape_count(s302, 3, 2, &c), 0);
	assert_int_equal(c, 0);
	assert_int_equal(tdp_shape_count(eight, 8, 1, &c), 0);
	assert_int_equal(c, 256);
	assert_int_equal(tdp_shape_count(zero_big, 3, 4, &c), 0);
	assert_int_equal(c, 0);
	assert_int_equal(tdp_shape_count(b63, 2, 1, &c), 0);
	assert_true(c == 1ull << 63);
	assert_int_equal(tdp_shape_count(max1, 1, 1, &c), 0);
	assert_true(c == UINT64_MAX);

	c = 99;
	assert_int_equal(tdp_shape_count(big, 2, 1, &c), -EOVERFLOW);
	assert_int_equal(c, 99);
	assert_int_equal(tdp_shape_count(b63, 2, 2, &c), -EOVERFLOW); /* bytes overflow */
	assert_int_equal(c, 99);
	assert_int_equal(tdp_shape_count(max1, 1, 2, &c), -EOVERFLOW);
	assert_int_equal(c, 99);
}

static void test_name_valid(void **state)
{
	char name[300];
	static const char *const good[] = { "a", "Z", "0", "model/w", "a.b_c:d-e/f", "-", ".",
					    "..", "/", "x:y", "layer.0/weight" };
	static const char *const bad[] = { "a b", "a\tb", "a\nb", "a@b", "a#b", "a\\b", "a,b",
					   "\xc3\xbc", "a\x7f", "a\x80", "a\xff", "\"a\"", "a*", "a?",
					   "a+b", "a=b", "~" };

	(void)state;
	assert_false(tdp_name_valid("", 0));
	assert_false(tdp_name_valid("abc", 0));
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (!tdp_name_valid(good[i], strlen(good[i])))
			fail_msg("name '%s' refused", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (tdp_name_valid(bad[i], strlen(bad[i])))
			fail_msg("name '%s' accepted", bad[i]);
	/* an embedded NUL is no name character */
	assert_false(tdp_name_valid("a\0b", 3));
	/* only `len` bytes count */
	assert_true(tdp_name_valid("abc def", 3));

	memset(name, 'n', sizeof(name));
	assert_true(tdp_name_valid(name, 1));
	assert_true(tdp_name_valid(name, 254));
	assert_true(tdp_name_valid(name, TDP_MAX_NAME_LEN));
	assert_int_equal(TDP_MAX_NAME_LEN, 255);
	assert_false(tdp_name_valid(name, 256));
	assert_false(tdp_name_valid(name, 300));
	/* every byte value: exactly the 67 documented characters pass */
	{
		int n = 0;

		for (int c = 0; c < 256; c++) {
			char ch = (char)c;

			n += tdp_name_valid(&ch, 1);
		}
		assert_int_equal(n, 26 + 26 + 10 + 5);
	}
}

/* ---- tdp_buf ------------------------------------------------------------ */

/* Zero bytes appended to a buffer that never held any (a zero-size tensor's
 * data) is a success, not an out-of-memory. */
static void test_buf_empty_append(void **state)
{
	struct tdp_buf b = { 0 };

	(void)state;
	assert_int_equal(tdp_buf_reserve(&b, 0), 0);
	assert_int_equal(tdp_buf_append(&b, "", 0), 0);
	assert_int_equal(tdp_buf_len(&b), 0);
	assert_int_equal(tdp_buf_append(&b, "ab", 2), 0);
	tdp_buf_consume(&b, 2);
	assert_int_equal(tdp_buf_append(&b, "", 0), 0);
	assert_int_equal(tdp_buf_len(&b), 0);
	tdp_buf_free(&b);
}

static void test_buf(void **state)
{
	struct tdp_buf b = { 0 };
	uint8_t pattern[10000];
	uint8_t *p, *big;
	size_t cap;

	(void)state;
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = (uint8_t)(i * 31 + 7);

	assert_int_equal(tdp_buf_len(&b), 0);
	assert_int_equal(tdp_buf_append(&b, pattern, 10), 0);
	assert_int_equal(tdp_buf_len(&b), 10);
	assert_memory_equal(tdp_buf_head(&b), pattern, 10);

	tdp_buf_consume(&b, 3);
	assert_int_equal(tdp_buf_len(&b), 7);
	assert_memory_equal(tdp_buf_head(&b), pattern + 3, 7);

	/* growing keeps the unconsumed bytes */
	assert_int_equal(tdp_buf_append(&b, pattern + 10, sizeof(pattern) - 10), 0);
	assert_int_equal(tdp_buf_len(&b), sizeof(pattern) - 3);
	assert_memory_equal(tdp_buf_head(&b), pattern + 3, sizeof(pattern) - 3);
	assert_true(b.cap >= b.end);

	/* extend hands out writable room at the end */
	p = tdp_buf_extend(&b, 5);
	assert_non_null(p);
	memcpy(p, "hello", 5);
	assert_int_equal(tdp_buf_len(&b), sizeof(pattern) + 2);
	assert_memory_equal(tdp_buf_head(&b) + sizeof(pattern) - 3, "hello", 5);

	/* consuming everything empties it cheaply */
	tdp_buf_consume(&b, tdp_buf_len(&b));
	assert_int_equal(tdp_buf_len(&b), 0);
	assert_int_equal(b.start, 0);
	assert_int_equal(b.end, 0);
	/* consuming more than there is empties it too */
	assert_int_equal(tdp_buf_append(&b, "abc", 3), 0);
	tdp_buf_consume(&b, 100);
	assert_int_equal(tdp_buf_len(&b), 0);

	/* reserve moves unconsumed bytes to the front instead of growing */
	cap = b.cap;
	assert_true(cap >= 4096);
	big = malloc(cap);
	assert_non_null(big);
	for (size_t i = 0; i < cap; i++)
		big[i] = (uint8_t)(i * 13 + 1);
	assert_int_equal(tdp_buf_append(&b, big, cap - 100), 0);
	tdp_buf_consume(&b, cap - 1000);
	assert_int_equal(tdp_buf_reserve(&b, 2000), 0);
	assert_int_equal(b.cap, cap);
	assert_true(b.cap - b.end >= 2000);
	assert_int_equal(tdp_buf_len(&b), 900);
	assert_memory_equal(tdp_buf_head(&b), big + cap - 1000, 900);

	/* an impossible reservation fails and leaves the contents alone */
	assert_int_equal(tdp_buf_reserve(&b, SIZE_MAX), -ENOMEM);
	assert_int_equal(tdp_buf_reserve(&b, SIZE_MAX / 2 + 2), -ENOMEM);
	assert_null(tdp_buf_extend(&b, SIZE_MAX - 10));
	assert_int_equal(tdp_buf_len(&b), 900);
	assert_memory_equal(tdp_buf_head(&b), big + cap - 1000, 900);
	free(big);

	/* shrink: only when empty and larger than `keep` */
	tdp_buf_shrink(&b, 0);
	assert_int_equal(tdp_buf_len(&b), 900);
	assert_non_null(b.data);
	tdp_buf_consume(&b, 900);
	tdp_buf_shrink(&b, b.cap);
	assert_non_null(b.data);
	tdp_buf_shrink(&b, 16);
	assert_null(b.data);
	assert_int_equal(b.cap, 0);
	assert_int_equal(tdp_buf_len(&b), 0);

	/* still usable; growth stays within a power of two of what was asked */
	assert_int_equal(tdp_buf_reserve(&b, (1u << 20) + 1), 0);
	assert_true(b.cap >= (1u << 20) + 1);
	assert_true(b.cap <= (1u << 21));
	for (size_t i = 0; i < 100000; i++)
		assert_int_equal(tdp_buf_append(&b, &pattern[i % sizeof(pattern)], 1), 0);
	for (size_t i = 0; i < 100000; i++)
		if (tdp_buf_head(&b)[i] != pattern[i % sizeof(pattern)])
			fail_msg("byte %zu differs", i);

	tdp_buf_free(&b);
	assert_null(b.data);
	assert_int_equal(tdp_buf_len(&b), 0);
	tdp_buf_free(&b); /* twice is harmless */
	assert_int_equal(tdp_buf_append(&b, "x", 1), 0);
	assert_int_equal(tdp_buf_len(&b), 1);
	tdp_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_request),
		cmocka_unit_test(test_parse_response_notification),
		cmocka_unit_test(test_parse_lenient_notifications),
		cmocka_unit_test(test_parse_bin_method),
		cmocka_unit_test(test_utf8_valid),
		cmocka_unit_test(test_params_accept_bin),
		cmocka_unit_test(test_parse_bad_requests),
		cmocka_unit_test(test_parse_bad_shapes),
		cmocka_unit_test(test_parse_why_truncated),
		cmocka_unit_test(test_request_id),
		cmocka_unit_test(test_write_error),
		cmocka_unit_test(test_write_heads),
		cmocka_unit_test(test_pack_helpers),
		cmocka_unit_test(test_status),
		cmocka_unit_test(test_dtype),
		cmocka_unit_test(test_shape_count),
		cmocka_unit_test(test_name_valid),
		cmocka_unit_test(test_buf),
		cmocka_unit_test(test_buf_empty_append),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
