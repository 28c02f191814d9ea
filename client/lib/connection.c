/* libtensord's request/reply core: errors and the sticky broken state,
 * starting, sending and ending a request, the pipelined-request queue and
 * taking its answers (the socket's I/O is conn_io.c, connecting connect.c). */
#include "connection.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "rpc.h"
#include "status.h"

/* Buffers are kept between calls (fresh pages cost a fault each, which
 * dominates repeated large transfers) unless they grew past this. */
#define KEEP_BUFFER ((size_t)256 << 20)
/* A reply payload at least this big is handed over in place, not copied. */
#define HANDOVER_MIN ((size_t)1 << 20)

__attribute__((format(printf, 2, 0)))
static void set_message(struct tensord *td, const char *fmt, va_list ap)
{
	vsnprintf(td->error, sizeof(td->error), fmt, ap);
}

int tdc_fail(struct tensord *td, int err, const char *fmt, ...)
{
	va_list ap;

	/* A dead handle keeps reporting what killed it. */
	if (td->broken)
		return td->broken;
	va_start(ap, fmt);
	set_message(td, fmt, ap);
	va_end(ap);
	td->remote_code = 0;
	return err;
}

/* The stream can no longer be trusted: close the socket and make every later
 * call fail with `err` and the message already recorded. */
static int mark_broken(struct tensord *td, int err)
{
	td->remote_code = 0;
	td->broken = err;
	if (td->fd >= 0) {
		close(td->fd);
		td->fd = -1;
	}
	return err;
}

const char *tensord_last_error(const struct tensord *td)
{
	return td ? td->error : "";
}

int tensord_error_code(const struct tensord *td)
{
	return td ? td->remote_code : 0;
}

const char *tensord_error_name(int code)
{
	return tdp_status_name(code);
}

void tensord_set_notify(struct tensord *td, tensord_notify_fn fn, void *userdata)
{
	if (!td)
		return;
	td->notify = fn;
	td->notify_data = fn ? userdata : NULL;
}

void tensord_set_progress(struct tensord *td, tensord_progress_fn fn, void *userdata)
{
	if (!td)
		return;
	td->progress = fn;
	td->progress_data = fn ? userdata : NULL;
}

const char *tensord_version(void)
{
	return TENSORD_VERSION;
}

uint32_t tensord_version_number(void)
{
	unsigned major = 0, minor = 0, patch = 0;

	/* TENSORD_VERSION is meson's project version, "MAJOR.MINOR.PATCH". */
	if (sscanf(TENSORD_VERSION, "%u.%u.%u", &major, &minor, &patch) < 1)
		return 0;
	return major * 10000u + minor * 100u + patch;
}

int tdc_read_options(struct tensord *td, const void *opts, size_t first, void *dst, size_t own)
{
	const uint8_t *b = opts;
	uint32_t size;

	memcpy(&size, opts, sizeof(size));
	if (size < first)
		return tdc_fail(td, -EINVAL, "options size %u is below %zu: set it with *_OPTIONS_INIT",
			        size, first);
	for (size_t i = own; i < size; i++)
		if (b[i])
			return tdc_fail(td, -EINVAL, "options set a field unknown to libtensord %s",
				        TENSORD_VERSION);
	memcpy(dst, opts, size < own ? size : own);
	return 0;
}

int tdc_request_begin(struct tensord *td, const char *method, msgpack_packer **ret_pk)
{
	/* A blocking call would read the answer of a pipelined request. */
	if (!td->broken && td->npending > 0)
		return tdc_fail(td, -EBUSY,
			        "%zu pipelined requests unanswered: take their answers first "
			        "(tensord_next_reply(), tensord_recv())", td->npending);
	return tdc_request_begin_pipelined(td, method, ret_pk);
}

int tdc_request_begin_pipelined(struct tensord *td, const char *method, msgpack_packer **ret_pk)
{
	if (td->broken)
		return td->broken;
	/* The reply being waited for is still unread in td->in: a call from the
	 * callback would lose it. */
	if (td->in_notify)
		return tdc_fail(td, -EBUSY, "called from a notification callback of the same handle");
	tdc_request_end(td);
	/* Packed after the queued requests; cut back there if it is not queued. */
	td->out_mark = tdp_buf_len(&td->out);
	td->building = true;
	if (tdp_write_request_head(&td->pk, td->next_msgid, method) < 0)
		return tdc_fail(td, -ENOMEM, "out of memory");
	*ret_pk = &td->pk;
	return 0;
}

void tdc_request_end(struct tensord *td)
{
	td->land = NULL;
	td->landed = 0;
	if (td->have_reply) {
		tdp_buf_consume(&td->in, td->reply_len);
		td->have_reply = false;
		td->reply_len = 0;
	}
	msgpack_unpacked_destroy(&td->reply);
	msgpack_unpacked_init(&td->reply);
	tdp_buf_shrink(&td->in, KEEP_BUFFER);
	if (td->building) {
		td->out.end = td->out.start + td->out_mark;
		td->building = false;
	}
	if (tdp_buf_len(&td->out) == 0) {
		td->out.start = td->out.end = 0;
		tdp_buf_shrink(&td->out, KEEP_BUFFER);
	}
}

void *tdc_take_reply_bytes(struct tensord *td, const void *p, size_t n)
{
	uint8_t *data, *shrunk;

	if (n < HANDOVER_MIN || !td->have_reply || tdp_buf_len(&td->in) != td->reply_len) {
		data = malloc(n);
		if (data)
			memcpy(data, p, n);
		return data;
	}
	data = td->in.data;
	memmove(data, p, n);
	td->in.data = NULL;
	td->in.cap = td->in.start = td->in.end = 0;
	td->have_reply = false;
	td->reply_len = 0;
	tdc_request_end(td);
	shrunk = realloc(data, n);
	return shrunk ? shrunk : data;
}

static uint32_t next_id(uint32_t id)
{
	return id == UINT32_MAX ? 1 : id + 1;
}

/* Write the request in td->out (nothing else is queued: a blocking call)
 * plus the tail; on success *ret_msgid is its id. A failure breaks the
 * handle. */
static int send_request(struct tensord *td, const void *tail, size_t tail_len, uint32_t *ret_msgid)
{
	struct iovec iov[2] = {
		{ .iov_base = tdp_buf_head(&td->out), .iov_len = tdp_buf_len(&td->out) },
		{ .iov_base = (void *)tail, .iov_len = tail_len },
	};
	uint32_t msgid = td->next_msgid;
	uint64_t done = 0;
	int r;

	td->next_msgid = next_id(td->next_msgid);
	td->building = false;
	r = tdc_write_iov(td, iov, 2, true, &done);
	td->pass_fd = -1;
	td->out.start = td->out.end = 0;
	if (r < 0)
		return mark_broken(td, r);
	*ret_msgid = msgid;
	return 0;
}

/* Grow the ring of pending kinds to hold one more. */
static int kinds_reserve(struct tensord *td)
{
	uint8_t *k;
	size_t cap;

	if (td->npending < td->kinds_cap)
		return 0;
	cap = td->kinds_cap ? td->kinds_cap * 2 : 64;
	k = malloc(cap);
	if (!k)
		return -ENOMEM;
	for (size_t i = 0; i < td->npending; i++)
		k[i] = td->kinds[(td->kinds_head + i) % td->kinds_cap];
	free(td->kinds);
	td->kinds = k;
	td->kinds_cap = cap;
	td->kinds_head = 0;
	return 0;
}

int tdc_request_queue(struct tensord *td, const void *tail, size_t tail_len, enum tdc_kind kind,
		      uint32_t *ret_msgid)
{
	uint32_t msgid = td->next_msgid;

	if ((tail_len > 0 && tdp_buf_append(&td->out, tail, tail_len) < 0) || kinds_reserve(td) < 0)
		return tdc_fail(td, -ENOMEM, "out of memory for a request of %zu bytes",
			        tdp_buf_len(&td->out) - td->out_mark);
	td->kinds[(td->kinds_head + td->npending) % td->kinds_cap] = (uint8_t)kind;
	if (td->npending == 0)
		td->pending_first = msgid;
	td->npending++;
	td->next_msgid = next_id(msgid);
	td->building = false;
	*ret_msgid = msgid;
	return 0;
}

int tdc_flush(struct tensord *td, bool wait)
{
	struct iovec iov;
	uint64_t done = 0;
	int r;

	if (td->broken)
		return td->broken;
	tdc_request_end(td);
	if (tdp_buf_len(&td->out) == 0)
		return 0;
	iov.iov_base = tdp_buf_head(&td->out);
	iov.iov_len = tdp_buf_len(&td->out);
	r = tdc_write_iov(td, &iov, 1, wait, &done);
	if (r < 0)
		return mark_broken(td, r);
	tdp_buf_consume(&td->out, (size_t)done);
	if (r == 0)
		tdp_buf_shrink(&td->out, KEEP_BUFFER);
	return r;
}

int tdc_poll_reply(struct tensord *td)
{
	struct tdp_message m;
	int r;

	if (td->broken)
		return td->broken;
	r = tdc_read_reply(td, td->npending > 0 ? td->pending_first : 0, true, &m);
	if (r == -EAGAIN)
		return 0;
	if (r < 0)
		return mark_broken(td, r);
	/* Complete: leave it in td->in for tdc_take_pending(). */
	td->have_reply = false;
	td->reply_len = 0;
	msgpack_unpacked_destroy(&td->reply);
	msgpack_unpacked_init(&td->reply);
	return 1;
}

/* Read the answer to `msgid`: 0 with *ret_result, -TENSORD_EREMOTE, or a
 * -errno with the handle broken. */
static int finish_reply(struct tensord *td, uint32_t msgid, const msgpack_object **ret_result)
{
	struct tdp_message m;
	int r;

	r = tdc_read_reply(td, msgid, false, &m);
	if (r < 0)
		return mark_broken(td, r);
	if (m.error->type != MSGPACK_OBJECT_NIL) {
		if (m.error->type != MSGPACK_OBJECT_MAP) {
			tdc_fail(td, -EPROTO, "malformed reply: error is not a map");
			return mark_broken(td, -EPROTO);
		}
		td->remote_code = tdc_describe_error_map(m.error, td->error, sizeof(td->error));
		return -TENSORD_EREMOTE;
	}
	*ret_result = m.result;
	return 0;
}

int tdc_request_finish(struct tensord *td, const void *tail, size_t tail_len,
		       const msgpack_object **ret_result)
{
	uint32_t msgid;
	int r;

	if ((r = send_request(td, tail, tail_len, &msgid)) < 0)
		return r;
	return finish_reply(td, msgid, ret_result);
}

int tdc_copy_object(struct tensord *td, const msgpack_object *o, void **ret_data, size_t *ret_len)
{
	struct tdp_buf out = { 0 };
	msgpack_packer opk;

	msgpack_packer_init(&opk, &out, tdp_buf_msgpack_write);
	if (msgpack_pack_object(&opk, *o)) {
		tdp_buf_free(&out);
		return tdc_fail(td, -ENOMEM, "out of memory");
	}
	/* A fresh buffer starts at offset 0, so its storage is the result. */
	*ret_data = out.data;
	*ret_len = tdp_buf_len(&out);
	return 0;
}

int tdc_take_pending(struct tensord *td, uint32_t *ret_msgid, enum tdc_kind *ret_kind,
		     const msgpack_object **ret_result)
{
	const msgpack_object *res = NULL;
	uint32_t msgid;
	int r;

	if (td->broken)
		return td->broken;
	if (td->in_notify)
		return tdc_fail(td, -EBUSY, "called from a notification callback of the same handle");
	if (td->npending == 0)
		return tdc_fail(td, -ENOMSG, "no pipelined request is unanswered");
	tdc_request_end(td);
	/* An answer there already is taken without writing (which could block). */
	if ((r = tdc_poll_reply(td)) < 0)
		return r;
	if (r == 0 && (r = tdc_flush(td, true)) < 0)
		return r;
	msgid = td->pending_first;
	r = finish_reply(td, msgid, &res);
	if (r < 0 && r != -TENSORD_EREMOTE)
		return r;
	*ret_kind = (enum tdc_kind)td->kinds[td->kinds_head];
	td->kinds_head = (td->kinds_head + 1) % td->kinds_cap;
	td->pending_first = next_id(msgid);
	td->npending--;
	*ret_msgid = msgid;
	if (r == 0)
		*ret_result = res;
	return r;
}
