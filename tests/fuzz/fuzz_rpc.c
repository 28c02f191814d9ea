/* libFuzzer harness for the wire reader shared by daemon and client
 * (proto/scan.c, proto/rpc.c): the input is a byte stream as a peer would
 * send it, read the way daemon/serve/conn.c reads it.
 *
 * Besides "no crash, no leak, no undefined behaviour" it checks properties:
 * - Resumability: feeding the stream in pieces (every byte for short inputs,
 *   uneven slices for long ones) reaches the same verdict and size as feeding
 *   it at once, and every "need more" names more bytes than were given and no
 *   more than the object turns out to have.
 * - Agreement: an object the bounded scanner accepts, msgpack-c decodes, using
 *   exactly the bytes the scanner counted (otherwise the daemon would answer
 *   "undecodable message" to input its own scanner let through).
 * - Limits: nothing accepted is larger, deeper or holds more objects than the
 *   limits allow (checked with tight limits too).
 * - Writers: for a request the daemon can parse, an error response and a
 *   result head written for its msgid read back as a response to that msgid. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "buf.h"
#include "methods.h"
#include "rpc.h"
#include "utf8.h"
#include "scan.h"
#include "status.h"
#include "wire_limits.h"

#define CHECK(cond)                                                                 \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                    \
		}                                                                   \
	} while (0)

static const struct tdp_scan_limits tight = { .max_bytes = 96, .max_depth = 4, .max_objects = 24 };

/* Depth and object count of a decoded object, to hold it against the limits. */
static void measure(const msgpack_object *o, unsigned depth, unsigned *max_depth, uint64_t *objects)
{
	(*objects)++;
	if (o->type == MSGPACK_OBJECT_ARRAY || o->type == MSGPACK_OBJECT_MAP) {
		if (depth + 1 > *max_depth)
			*max_depth = depth + 1;
	}
	if (o->type == MSGPACK_OBJECT_ARRAY) {
		for (uint32_t i = 0; i < o->via.array.size; i++)
			measure(&o->via.array.ptr[i], depth + 1, max_depth, objects);
	} else if (o->type == MSGPACK_OBJECT_MAP) {
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			measure(&o->via.map.ptr[i].key, depth + 1, max_depth, objects);
			measure(&o->via.map.ptr[i].val, depth + 1, max_depth, objects);
		}
	}
}

/* Scan one object at once; returns the verdict, size in *ret_pos. */
static int scan_whole(const uint8_t *p, size_t n, const struct tdp_scan_limits *lim, uint64_t *ret_pos)
{
	struct tdp_scanner s;
	int r;

	tdp_scanner_reset(&s);
	r = tdp_scanner_feed(&s, p, n, lim);
	*ret_pos = s.pos;
	if (r == 0)
		CHECK(s.need > n);
	return r;
}

/* Scan the same object in pieces and compare with the one-shot verdict. */
static void scan_pieces(const uint8_t *p, size_t n, const struct tdp_scan_limits *lim, int whole,
			uint64_t whole_pos)
{
	struct tdp_scanner s;
	size_t given = 0, step = 1;
	int r = 0;

	tdp_scanner_reset(&s);
	while (given < n) {
		given += step;
		if (given > n)
			given = n;
		if (n > 512)
			step = step * 3 + 1; /* uneven slices, few calls */
		r = tdp_scanner_feed(&s, p, given, lim);
		if (r != 0)
			break;
		CHECK(s.need > given);
		if (whole == 1)
			CHECK(s.need <= whole_pos);
	}
	if (n == 0)
		r = tdp_scanner_feed(&s, p, 0, lim);
	if (whole == 1) {
		CHECK(r == 1);
		CHECK(s.pos == whole_pos);
	} else if (whole == 0) {
		CHECK(r == 0);
	} else {
		/* A refusal may come earlier, from a lower bound, but never turns
		 * into an acceptance. */
		CHECK(r == whole);
	}
}

/* Write an error and a result head for `msgid` and read them back. */
static void check_writers(uint32_t msgid, const char *why)
{
	struct tdp_buf out = { 0 };
	msgpack_packer pk;
	size_t off = 0;

	msgpack_packer_init(&pk, &out, tdp_buf_msgpack_write);
	CHECK(tdp_write_error(&pk, msgid, TDP_INVALID_ARGUMENT, why) == 0);
	CHECK(tdp_write_result_head(&pk, msgid) == 0);
	CHECK(msgpack_pack_nil(&pk) == 0);
	for (int k = 0; k < 2; k++) {
		struct tdp_scanner s;
		struct tdp_message m;
		msgpack_unpacked u;
		char err[128];

		tdp_scanner_reset(&s);
		CHECK(tdp_scanner_feed(&s, out.data + off, out.end - off, &tdp_scan_default_limits) == 1);
		msgpack_unpacked_init(&u);
		CHECK(tdp_unpack(&u, out.data + off, s.pos) == 0);
		CHECK(tdp_message_parse(&u.data, &m, err, sizeof(err)) == 0);
		CHECK(m.type == TDP_MSG_RESPONSE && m.msgid == msgid);
		CHECK((m.error->type == MSGPACK_OBJECT_NIL) == (k == 1));
		msgpack_unpacked_destroy(&u);
		off += s.pos;
	}
	CHECK(off == out.end);
	tdp_buf_free(&out);
}

static void check_message(const uint8_t *p, size_t n)
{
	msgpack_unpacked u;
	struct tdp_message m;
	char why[200];
	uint32_t msgid;
	unsigned depth = 0;
	uint64_t objects = 0;

	msgpack_unpacked_init(&u);
	CHECK(tdp_unpack(&u, p, n) == 0);
	measure(&u.data, 0, &depth, &objects);
	CHECK(depth <= TDP_MAX_DEPTH);
	CHECK(objects <= TDP_MAX_OBJECTS);
	if (tdp_message_parse(&u.data, &m, why, sizeof(why)) == 0) {
		CHECK(m.type >= TDP_MSG_REQUEST && m.type <= TDP_MSG_NOTIFY);
		if (m.type == TDP_MSG_NOTIFY && m.method_len == 0) {
			/* Any client notification is accepted (issue 29): one whose
			 * method is no valid name reads as "". */
			CHECK(m.method && !m.method[0]);
			CHECK(!m.params || m.params->type == MSGPACK_OBJECT_MAP);
		} else if (m.type != TDP_MSG_RESPONSE) {
			CHECK(m.method_len >= 1 && m.method_len <= TDP_MAX_METHOD_LEN);
			CHECK(tdp_utf8_valid(m.method, m.method_len));
			CHECK((const uint8_t *)m.method >= p && (const uint8_t *)m.method + m.method_len <= p + n);
			CHECK(!m.params || m.params->type == MSGPACK_OBJECT_MAP);
		}
		if (m.type == TDP_MSG_REQUEST) {
			CHECK(tdp_message_request_id(&u.data, &msgid) == 0 && msgid == m.msgid);
			check_writers(m.msgid, "a reason");
		}
	} else {
		CHECK(memchr(why, '\0', sizeof(why)) != NULL && why[0]);
		/* What the daemon answers to a malformed request. */
		if (tdp_message_request_id(&u.data, &msgid) == 0)
			check_writers(msgid, why);
	}
	msgpack_unpacked_destroy(&u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;

	/* Tight limits: the same properties, and nothing accepted breaks them. */
	{
		uint64_t pos;
		int r = scan_whole(data, size, &tight, &pos);

		scan_pieces(data, size, &tight, r, pos);
		if (r == 1) {
			msgpack_unpacked u;
			unsigned depth = 0;
			uint64_t objects = 0;

			CHECK(pos <= tight.max_bytes);
			msgpack_unpacked_init(&u);
			CHECK(tdp_unpack(&u, data, pos) == 0);
			measure(&u.data, 0, &depth, &objects);
			CHECK(depth <= tight.max_depth && objects <= tight.max_objects);
			msgpack_unpacked_destroy(&u);
		}
	}
	/* The protocol's limits, message after message, as the daemon reads. */
	while (off < size) {
		uint64_t pos;
		int r = scan_whole(data + off, size - off, &tdp_scan_default_limits, &pos);

		scan_pieces(data + off, size - off, &tdp_scan_default_limits, r, pos);
		if (r != 1)
			break;
		CHECK(pos >= 1 && pos <= size - off);
		check_message(data + off, pos);
		off += pos;
	}
	return 0;
}
