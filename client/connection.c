/* libtensord transport: the socket, request writing, reply framing, errors. */
#include "connection.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "land.h"
#include "wire_limits.h"
#include "methods.h"
#include "pack.h"
#include "rpc.h"
#include "scan.h"
#include "status.h"

#define DEFAULT_SOCKET "/run/tensord/tensord.sock"
/* Read at least this much at a time; a reply's declared size raises it. */
#define READ_CHUNK ((size_t)64 << 10)
/* Buffers are kept between calls (fresh pages cost a fault each, which
 * dominates repeated large transfers) unless they grew past this. */
#define KEEP_BUFFER ((size_t)256 << 20)
/* A reply payload at least this big is handed over in place, not copied. */
#define HANDOVER_MIN ((size_t)1 << 20)
/* With a progress callback, requests are written in pieces this large. */
#define PROGRESS_CHUNK ((size_t)1 << 20)

__attribute__((format(printf, 2, 0)))
static void set_message(struct tensord *td, const char *fmt, va_list ap)
{
	vsnprintf(td->error, sizeof(td->error), fmt, ap);
}

int td_fail(struct tensord *td, int err, const char *fmt, ...)
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

const char *tensord_default_socket(char *buf, size_t cap)
{
	const char *env = getenv("TENSORD_SOCKET"), *run = getenv("XDG_RUNTIME_DIR");
	struct stat st;

	if (env && *env) {
		snprintf(buf, cap, "%s", env);
		return buf;
	}
	/* A user's own daemon listens in the user's runtime directory
	 * (tensord(8), --socket); root's is the system service. */
	if (getuid() != 0 && run && *run) {
		snprintf(buf, cap, "%s/tensord/tensord.sock", run);
		if (stat(buf, &st) == 0 && S_ISSOCK(st.st_mode))
			return buf;
	}
	snprintf(buf, cap, "%s", DEFAULT_SOCKET);
	return buf;
}

int tensord_connect(const char *path, struct tensord **ret)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	char fallback[sizeof(addr.sun_path) + 1];
	struct tensord *td;
	size_t len;
	int r;

	if (!ret)
		return -EINVAL;
	if (!path)
		path = tensord_default_socket(fallback, sizeof(fallback));
	len = strlen(path);
	if (len == 0)
		return -EINVAL;
	if (len >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	memcpy(addr.sun_path, path, len + 1);

	td = calloc(1, sizeof(*td));
	if (!td)
		return -ENOMEM;
	td->next_msgid = 1;
	msgpack_packer_init(&td->pk, &td->out, tdp_buf_msgpack_write);
	msgpack_unpacked_init(&td->reply);
	td->pass_fd = -1;
	td->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (td->fd < 0) {
		r = -errno;
		goto fail;
	}
	while (connect(td->fd, (const struct sockaddr *)&addr, sizeof(addr)) < 0) {
		if (errno == EINTR)
			continue;
		r = -errno;
		goto fail;
	}
	*ret = td;
	return 0;

fail:
	tensord_free(td);
	return r;
}

void tensord_free(struct tensord *td)
{
	if (!td)
		return;
	if (td->fd >= 0)
		close(td->fd);
	msgpack_unpacked_destroy(&td->reply);
	tdp_buf_free(&td->in);
	tdp_buf_free(&td->out);
	tdp_buf_free(&td->notify_buf);
	free(td);
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

static void report_progress(struct tensord *td, enum tensord_transfer dir, uint64_t done,
			    uint64_t total)
{
	if (!td->progress)
		return;
	/* Like a notification callback, it must not re-enter the handle. */
	td->in_notify = true;
	td->progress(td->progress_data, dir, done, total);
	td->in_notify = false;
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

size_t tensord_pending(const struct tensord *td)
{
	return td ? td->npending : 0;
}

int td_read_options(struct tensord *td, const void *opts, size_t first, void *dst, size_t own)
{
	const uint8_t *b = opts;
	uint32_t size;

	memcpy(&size, opts, sizeof(size));
	if (size < first)
		return td_fail(td, -EINVAL, "options size %u is below %zu: set it with *_OPTIONS_INIT",
			       size, first);
	for (size_t i = own; i < size; i++)
		if (b[i])
			return td_fail(td, -EINVAL, "options set a field unknown to libtensord %s",
				       TENSORD_VERSION);
	memcpy(dst, opts, size < own ? size : own);
	return 0;
}

int td_request_begin(struct tensord *td, const char *method, msgpack_packer **ret_pk)
{
	/* A blocking call would read the answer of a pipelined request. */
	if (!td->broken && td->npending > 0)
		return td_fail(td, -EBUSY, "%zu pipelined answers unread: tensord_recv() them first",
			       td->npending);
	return td_request_begin_pipelined(td, method, ret_pk);
}

int td_request_begin_pipelined(struct tensord *td, const char *method, msgpack_packer **ret_pk)
{
	if (td->broken)
		return td->broken;
	/* The reply being waited for is still unread in td->in: a call from the
	 * callback would lose it. */
	if (td->in_notify)
		return td_fail(td, -EBUSY, "called from a notification callback of the same handle");
	td_request_end(td);
	td->out.start = td->out.end = 0;
	if (tdp_write_request_head(&td->pk, td->next_msgid, method) < 0)
		return td_fail(td, -ENOMEM, "out of memory");
	*ret_pk = &td->pk;
	return 0;
}

void td_request_end(struct tensord *td)
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
	td->out.start = td->out.end = 0;
	tdp_buf_shrink(&td->out, KEEP_BUFFER);
}

void *td_take_reply_bytes(struct tensord *td, const void *p, size_t n)
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
	td_request_end(td);
	shrunk = realloc(data, n);
	return shrunk ? shrunk : data;
}

/* Write both parts completely; a partial write leaves the stream unusable. */
static int send_all(struct tensord *td, const void *a, size_t alen, const void *b, size_t blen)
{
	struct iovec iov[2] = {
		{ .iov_base = (void *)a, .iov_len = alen },
		{ .iov_base = (void *)b, .iov_len = blen },
	};
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	uint64_t total = (uint64_t)alen + blen, sent = 0;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;

	while (msg.msg_iovlen > 0) {
		struct iovec piece[2];
		struct msghdr part = msg;
		ssize_t n;
		size_t done;

		/* With progress to show, write a piece at a time: a blocking
		 * sendmsg() returns only once it all went. */
		if (td->progress) {
			size_t left = PROGRESS_CHUNK;

			part.msg_iov = piece;
			part.msg_iovlen = 0;
			for (size_t i = 0; i < msg.msg_iovlen && left > 0; i++) {
				piece[i] = msg.msg_iov[i];
				if (piece[i].iov_len > left)
					piece[i].iov_len = left;
				left -= piece[i].iov_len;
				part.msg_iovlen++;
			}
		}
		/* A passed fd goes with the request's first byte (docs/protocol.md). */
		if (td->pass_fd >= 0) {
			struct cmsghdr *cm;

			part.msg_control = ctl.buf;
			part.msg_controllen = sizeof(ctl.buf);
			cm = CMSG_FIRSTHDR(&part);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(cm), &td->pass_fd, sizeof(int));
		}
		n = sendmsg(td->fd, &part, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		td->pass_fd = -1;
		sent += (uint64_t)n;
		report_progress(td, TENSORD_TRANSFER_SEND, sent, total);
		done = (size_t)n;
		while (msg.msg_iovlen > 0 && done >= msg.msg_iov[0].iov_len) {
			done -= msg.msg_iov[0].iov_len;
			msg.msg_iov++;
			msg.msg_iovlen--;
		}
		if (msg.msg_iovlen > 0) {
			msg.msg_iov[0].iov_base = (uint8_t *)msg.msg_iov[0].iov_base + done;
			msg.msg_iov[0].iov_len -= done;
		}
	}
	return 0;
}

static const char *scan_error(int r)
{
	switch (r) {
	case -EMSGSIZE: return "reply larger than the message size limit";
	case -ELOOP: return "reply nested too deeply";
	case -E2BIG: return "reply holds too many objects";
	default: return "reply is not msgpack";
	}
}

/* The message at the head of td->in is a tensor.get answer whose payload
 * (`size` bytes at `at`, `len` of the message in td->in so far) goes into
 * td->land: take what came with the head, receive the rest straight into
 * it, and leave in td->in the message up to the payload with the bin's
 * length zeroed. Returns the message's new length or a -errno. */
static ssize_t land_payload(struct tensord *td, size_t len, size_t at, uint64_t size,
			    size_t len_at, unsigned len_bytes)
{
	uint8_t *head = tdp_buf_head(&td->in), *dst = td->land;
	uint64_t have = len - at;

	memcpy(dst, head + at, (size_t)have);
	while (have < size) {
		ssize_t n = recv(td->fd, dst + have, (size_t)(size - have), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int r = -errno;

			td_fail(td, r, "reading from the daemon: %s", strerror(-r));
			return r;
		}
		if (n == 0) {
			td_fail(td, -ECONNRESET, "the daemon closed the connection");
			return -ECONNRESET;
		}
		have += (uint64_t)n;
		if (td->progress)
			report_progress(td, TENSORD_TRANSFER_RECEIVE, at + have, at + size);
	}
	memset(head + len_at, 0, len_bytes);
	td->in.end = td->in.start + at;
	td->landed = size;
	td->land = NULL;
	return (ssize_t)at;
}

/* Frame one whole message at the head of td->in, reading as needed. Returns
 * its length, -EAGAIN when `dontwait` and no complete message is there, or a
 * -errno with the handle not yet marked broken. With td->land set (and
 * waiting), a tensor.get payload lands there (land_payload). */
static ssize_t read_message(struct tensord *td, bool dontwait)
{
	struct tdp_scanner s;
	bool may_land = td->land && !dontwait;
	int r;

	tdp_scanner_reset(&s);
	for (;;) {
		size_t len = tdp_buf_len(&td->in), want;
		ssize_t n;

		r = tdp_scanner_feed(&s, tdp_buf_head(&td->in), len, &tdp_scan_default_limits);
		if (r == 1) {
			if (td->progress && !dontwait && s.pos >= PROGRESS_CHUNK)
				report_progress(td, TENSORD_TRANSFER_RECEIVE, s.pos, s.pos);
			return (ssize_t)s.pos;
		}
		if (r < 0) {
			td_fail(td, -EPROTO, "%s", scan_error(r));
			return -EPROTO;
		}
		if (may_land) {
			size_t at, len_at;
			uint64_t size;
			unsigned len_bytes;

			r = td_land_find(tdp_buf_head(&td->in), len, &at, &size, &len_at, &len_bytes);
			if (r == 1 && size >= TD_LAND_MIN && size <= td->land_cap && len - at < size)
				return land_payload(td, len, at, size, len_at, len_bytes);
			may_land = r == 0;
		}
		/* The scanner knows how large the message is at least: reserve all
		 * of it at once so a large tensor arrives without regrowing (not
		 * while it may still land in the caller's buffer). */
		want = s.need > len && !may_land ? (size_t)(s.need - len) : 1;
		if (want < READ_CHUNK)
			want = READ_CHUNK;
		if (tdp_buf_reserve(&td->in, want) < 0) {
			td_fail(td, -ENOMEM, "out of memory for a %llu-byte reply",
				(unsigned long long)s.need);
			return -ENOMEM;
		}
		n = recv(td->fd, td->in.data + td->in.end, td->in.cap - td->in.end,
			 dontwait ? MSG_DONTWAIT : 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (dontwait && (errno == EAGAIN || errno == EWOULDBLOCK))
				return -EAGAIN;
			r = -errno;
			td_fail(td, r, "reading from the daemon: %s", strerror(-r));
			return r;
		}
		if (n == 0) {
			td_fail(td, -ECONNRESET, "the daemon closed the connection");
			return -ECONNRESET;
		}
		td->in.end += (size_t)n;
		if (td->progress && s.need >= PROGRESS_CHUNK)
			report_progress(td, TENSORD_TRANSFER_RECEIVE, tdp_buf_len(&td->in),
					s.need > tdp_buf_len(&td->in) ? s.need : tdp_buf_len(&td->in));
	}
}

/* Copy a notification's or error map's fields into a "NAME: message" text and
 * return its code (TENSORD_INTERNAL when the map gives none). */
static int describe_error_map(const msgpack_object *map, char *dst, size_t cap)
{
	const msgpack_object *code = tdp_map_find(map, "code");
	const msgpack_object *name = tdp_map_find(map, "name");
	const msgpack_object *msg = tdp_map_find(map, "message");
	const char *name_s = NULL;
	int64_t c = TDP_INTERNAL;
	int name_len = 0, msg_len = 0;

	if (!code || tdp_obj_int(code, &c) < 0 || c <= 0 || c > INT32_MAX)
		c = TDP_INTERNAL;
	if (name && name->type == MSGPACK_OBJECT_STR) {
		name_s = name->via.str.ptr;
		name_len = name->via.str.size > 64 ? 64 : (int)name->via.str.size;
	} else {
		name_s = tdp_status_name((int)c);
		name_len = name_s ? (int)strlen(name_s) : 0;
	}
	if (!name_s || name_len == 0) {
		name_s = "ERROR";
		name_len = 5;
	}
	if (msg && msg->type == MSGPACK_OBJECT_STR)
		msg_len = msg->via.str.size > TDP_MAX_ERROR_MESSAGE ? TDP_MAX_ERROR_MESSAGE
								    : (int)msg->via.str.size;
	if (msg_len > 0)
		snprintf(dst, cap, "%.*s: %.*s", name_len, name_s, msg_len, msg->via.str.ptr);
	else
		snprintf(dst, cap, "%.*s", name_len, name_s);
	return (int)c;
}

/* Hand a notification to the callback with its params map packed on its
 * own. Notifications are advisory: one that cannot be repacked (ENOMEM) is
 * dropped rather than failing the call that is waiting. */
static void deliver_notification(struct tensord *td, const struct tdp_message *m)
{
	char method[TDP_MAX_METHOD_LEN + 1];
	msgpack_packer pk;
	size_t n;

	/* A name over the protocol's limit is no event anyone asked for. */
	if (!td->notify || m->method_len > TDP_MAX_METHOD_LEN)
		return;
	n = m->method_len;
	memcpy(method, m->method, n);
	method[n] = '\0';
	td->notify_buf.start = td->notify_buf.end = 0;
	if (m->params) {
		msgpack_packer_init(&pk, &td->notify_buf, tdp_buf_msgpack_write);
		if (msgpack_pack_object(&pk, *m->params))
			return;
	}
	td->in_notify = true;
	td->notify(td->notify_data, method, m->params ? tdp_buf_head(&td->notify_buf) : NULL,
		   m->params ? tdp_buf_len(&td->notify_buf) : 0);
	td->in_notify = false;
	td->notify_buf.start = td->notify_buf.end = 0;
	tdp_buf_shrink(&td->notify_buf, READ_CHUNK);
}

/* Read messages until the reply to `msgid`, passing notifications other than
 * protocol.error to the callback (or skipping them). On success td->reply
 * holds it and *ret_msg describes it. */
static int read_reply(struct tensord *td, uint32_t msgid, bool dontwait, struct tdp_message *ret_msg)
{
	char why[128];

	for (;;) {
		struct tdp_message m;
		ssize_t len = read_message(td, dontwait);

		if (len < 0)
			return (int)len;
		if (tdp_unpack(&td->reply, tdp_buf_head(&td->in), (size_t)len) < 0)
			return td_fail(td, -EPROTO, "reply could not be decoded");
		if (tdp_message_parse(&td->reply.data, &m, why, sizeof(why)) < 0)
			return td_fail(td, -EPROTO, "malformed reply: %s", why);
		if (m.type == TDP_MSG_NOTIFY) {
			if (m.method_len == strlen(TDP_NOTIFY_PROTOCOL_ERROR) &&
			    memcmp(m.method, TDP_NOTIFY_PROTOCOL_ERROR, m.method_len) == 0) {
				char text[TD_ERROR_MAX - 32];

				describe_error_map(m.params, text, sizeof(text));
				return td_fail(td, -EPROTO, "daemon closed the stream: %s", text);
			}
			/* Progress and log events: the caller's, if it asked for them. */
			deliver_notification(td, &m);
			tdp_buf_consume(&td->in, (size_t)len);
			continue;
		}
		if (m.type != TDP_MSG_RESPONSE)
			return td_fail(td, -EPROTO, "the daemon sent a request");
		if (m.msgid != msgid)
			return td_fail(td, -EPROTO, "reply to request %u while waiting for %u",
				       m.msgid, msgid);
		td->have_reply = true;
		td->reply_len = (size_t)len;
		*ret_msg = m;
		return 0;
	}
}

/* Write the request in td->out plus the tail; on success *ret_msgid is its
 * id. A failure breaks the handle. */
static int send_request(struct tensord *td, const void *tail, size_t tail_len, uint32_t *ret_msgid)
{
	uint32_t msgid = td->next_msgid;
	struct tdp_message m;
	int r;

	td->next_msgid = td->next_msgid == UINT32_MAX ? 1 : td->next_msgid + 1;
	r = send_all(td, tdp_buf_head(&td->out), tdp_buf_len(&td->out), tail, tail_len);
	td->pass_fd = -1;
	if (r < 0) {
		/* The daemon may have said why before closing: report that (with
		 * pipelined answers unread, the first message is not its reason). */
		if ((r == -EPIPE || r == -ECONNRESET) && td->npending == 0 &&
		    read_reply(td, msgid, true, &m) == -EPROTO)
			return mark_broken(td, -EPROTO);
		td_fail(td, r, "writing to the daemon: %s", strerror(-r));
		return mark_broken(td, r);
	}
	td->out.start = td->out.end = 0;
	*ret_msgid = msgid;
	return 0;
}

int td_request_send_only(struct tensord *td, const void *tail, size_t tail_len,
			 uint32_t *ret_msgid)
{
	uint32_t msgid;
	int r;

	if ((r = send_request(td, tail, tail_len, &msgid)) < 0)
		return r;
	if (td->npending == 0)
		td->pending_first = msgid;
	td->npending++;
	*ret_msgid = msgid;
	return 0;
}

/* Read the answer to `msgid`: 0 with *ret_result, -TENSORD_EREMOTE, or a
 * -errno with the handle broken. */
static int finish_reply(struct tensord *td, uint32_t msgid, const msgpack_object **ret_result)
{
	struct tdp_message m;
	int r;

	r = read_reply(td, msgid, false, &m);
	if (r < 0)
		return mark_broken(td, r);
	if (m.error->type != MSGPACK_OBJECT_NIL) {
		if (m.error->type != MSGPACK_OBJECT_MAP) {
			td_fail(td, -EPROTO, "malformed reply: error is not a map");
			return mark_broken(td, -EPROTO);
		}
		td->remote_code = describe_error_map(m.error, td->error, sizeof(td->error));
		return -TENSORD_EREMOTE;
	}
	*ret_result = m.result;
	return 0;
}

int td_request_finish(struct tensord *td, const void *tail, size_t tail_len,
		      const msgpack_object **ret_result)
{
	uint32_t msgid;
	int r;

	if ((r = send_request(td, tail, tail_len, &msgid)) < 0)
		return r;
	return finish_reply(td, msgid, ret_result);
}

int td_copy_object(struct tensord *td, const msgpack_object *o, void **ret_data, size_t *ret_len)
{
	struct tdp_buf out = { 0 };
	msgpack_packer opk;

	msgpack_packer_init(&opk, &out, tdp_buf_msgpack_write);
	if (msgpack_pack_object(&opk, *o)) {
		tdp_buf_free(&out);
		return td_fail(td, -ENOMEM, "out of memory");
	}
	/* A fresh buffer starts at offset 0, so its storage is the result. */
	*ret_data = out.data;
	*ret_len = tdp_buf_len(&out);
	return 0;
}

int tensord_recv(struct tensord *td, uint32_t *ret_msgid, void **ret_result, size_t *ret_len)
{
	const msgpack_object *res;
	uint32_t msgid;
	int r;

	if (!td)
		return -EINVAL;
	if (td->broken)
		return td->broken;
	if (!ret_result || !ret_len)
		return td_fail(td, -EINVAL, "missing argument");
	if (td->in_notify)
		return td_fail(td, -EBUSY, "called from a notification callback of the same handle");
	if (td->npending == 0)
		return td_fail(td, -ENOMSG, "no request sent with tensord_send() is unanswered");
	td_request_end(td);
	msgid = td->pending_first;
	r = finish_reply(td, msgid, &res);
	if (r < 0 && r != -TENSORD_EREMOTE)
		return r;
	td->pending_first = msgid == UINT32_MAX ? 1 : msgid + 1;
	td->npending--;
	if (r == 0)
		r = td_copy_object(td, res, ret_result, ret_len);
	td_request_end(td);
	if (ret_msgid && (r == 0 || r == -TENSORD_EREMOTE))
		*ret_msgid = msgid;
	return r;
}
