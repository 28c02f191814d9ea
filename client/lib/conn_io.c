/* libtensord's socket I/O: waiting in poll() within the handle's timeout,
 * non-blocking writes of requests (with a passed fd and progress), framing
 * the messages read (a large tensor.get payload landing in the caller's
 * buffer), notifications handed to the callback, and the reply awaited. */
#include "connection.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "land.h"
#include "wire_limits.h"
#include "methods.h"
#include "pack.h"
#include "rpc.h"
#include "scan.h"
#include "status.h"

/* Read at least this much at a time; a reply's declared size raises it. */
#define READ_CHUNK ((size_t)64 << 10)
/* With a progress callback, requests are written in pieces this large. */
#define PROGRESS_CHUNK ((size_t)1 << 20)

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

/* Wait until the socket is ready for `events`, at most the handle's timeout
 * (none when 0). Returns the poll revents, or a -errno with the message
 * recorded (-ETIMEDOUT when the time passed; `what` says what did not come). */
static int wait_fd(struct tensord *td, short events, const char *what)
{
	struct pollfd p = { .fd = td->fd, .events = events };
	struct timespec t0, t1;
	int left = td->timeout_ms > 0 ? td->timeout_ms : -1;

	if (td->timeout_ms > 0)
		clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = poll(&p, 1, left);

		if (n > 0)
			return p.revents;
		if (n == 0)
			return tdc_fail(td, -ETIMEDOUT,
				        "timed out: %s within %d ms (tensord_set_timeout()); the "
				        "connection is closed", what, td->timeout_ms);
		if (errno != EINTR) {
			int r = -errno;

			return tdc_fail(td, r, "waiting for the daemon: %s", strerror(-r));
		}
		if (td->timeout_ms > 0) {
			long long ms;

			clock_gettime(CLOCK_MONOTONIC, &t1);
			ms = (long long)(t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
			left = ms >= td->timeout_ms ? 0 : td->timeout_ms - (int)ms;
		}
	}
}

/* Receive what the socket holds now into td->in (no reply may be held: the
 * buffer may move). Sets *eof when the daemon closed the stream. */
static int absorb_input(struct tensord *td, bool *eof)
{
	ssize_t n;

	if (tdp_buf_reserve(&td->in, READ_CHUNK) < 0)
		return tdc_fail(td, -ENOMEM, "out of memory");
	for (;;) {
		n = recv(td->fd, td->in.data + td->in.end, td->in.cap - td->in.end, MSG_DONTWAIT);
		if (n >= 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		n = -errno;
		return tdc_fail(td, (int)n, "reading from the daemon: %s", strerror((int)-n));
	}
	if (n == 0)
		*eof = true;
	td->in.end += (size_t)n;
	return 0;
}

static bool explain_close(struct tensord *td);

int tdc_write_iov(struct tensord *td, struct iovec *iov, int cnt, bool wait, uint64_t *ret_done)
{
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)cnt };
	uint64_t total = 0, sent = 0;
	bool eof = false;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;

	for (int i = 0; i < cnt; i++)
		total += iov[i].iov_len;
	while (msg.msg_iovlen > 0 && msg.msg_iov[0].iov_len == 0) {
		msg.msg_iov++;
		msg.msg_iovlen--;
	}
	while (msg.msg_iovlen > 0) {
		struct iovec piece[2];
		struct msghdr part = msg;
		ssize_t n;
		size_t done;
		int r;

		/* With progress to show, write a piece at a time. */
		if (td->progress) {
			size_t left = PROGRESS_CHUNK;

			part.msg_iov = piece;
			part.msg_iovlen = 0;
			for (size_t i = 0; i < msg.msg_iovlen && i < 2 && left > 0; i++) {
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
		n = sendmsg(td->fd, &part, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (!wait)
					return 1;
				r = wait_fd(td, eof ? POLLOUT : POLLOUT | POLLIN,
					    "the daemon took no byte of the requests and sent none");
				if (r < 0)
					return r;
				if ((r & POLLIN) && !eof && (r = absorb_input(td, &eof)) < 0)
					return r;
				continue;
			}
			r = -errno;
			/* The daemon may have said why before closing. */
			if ((r == -EPIPE || r == -ECONNRESET) && explain_close(td))
				return -EPROTO;
			return tdc_fail(td, r, "writing to the daemon: %s", strerror(-r));
		}
		td->pass_fd = -1;
		sent += (uint64_t)n;
		*ret_done += (uint64_t)n;
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

/* Receive into the `cap` (> 0) bytes at `dst`. Returns how many came (> 0),
 * -EAGAIN when `dontwait` and none is there, or a -errno with the message
 * recorded (-ECONNRESET when the daemon closed the stream). Without
 * `dontwait` it waits for bytes, at most the handle's timeout each time. */
static ssize_t recv_some(struct tensord *td, uint8_t *dst, size_t cap, bool dontwait)
{
	for (;;) {
		ssize_t n = recv(td->fd, dst, cap, MSG_DONTWAIT);
		int r;

		if (n > 0)
			return n;
		if (n == 0) {
			tdc_fail(td, -ECONNRESET, "the daemon closed the connection");
			return -ECONNRESET;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			if (dontwait)
				return -EAGAIN;
			if ((r = wait_fd(td, POLLIN, "no answer from the daemon")) < 0)
				return r;
			continue;
		}
		r = -errno;
		tdc_fail(td, r, "reading from the daemon: %s", strerror(-r));
		return r;
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
		ssize_t n = recv_some(td, dst + have, (size_t)(size - have), false);

		if (n < 0)
			return n;
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

/* Frame one whole message at the head of td->in, reading as needed (waiting
 * at most the handle's timeout each time). Returns its length, -EAGAIN when
 * `dontwait` and no complete message is there, or a -errno with the handle
 * not yet marked broken. With td->land set (and
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
			tdc_fail(td, -EPROTO, "%s", scan_error(r));
			return -EPROTO;
		}
		if (may_land) {
			size_t at, len_at;
			uint64_t size;
			unsigned len_bytes;

			r = tdc_land_find(tdp_buf_head(&td->in), len, &at, &size, &len_at, &len_bytes);
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
			tdc_fail(td, -ENOMEM, "out of memory for a %llu-byte reply",
				 (unsigned long long)s.need);
			return -ENOMEM;
		}
		n = recv_some(td, td->in.data + td->in.end, td->in.cap - td->in.end, dontwait);
		if (n < 0)
			return n;
		td->in.end += (size_t)n;
		if (td->progress && s.need >= PROGRESS_CHUNK)
			report_progress(td, TENSORD_TRANSFER_RECEIVE, tdp_buf_len(&td->in),
					s.need > tdp_buf_len(&td->in) ? s.need : tdp_buf_len(&td->in));
	}
}

int tdc_describe_error_map(const msgpack_object *map, char *dst, size_t cap)
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

static bool is_protocol_error(const struct tdp_message *m)
{
	return m->type == TDP_MSG_NOTIFY && m->method_len == strlen(TDP_NOTIFY_PROTOCOL_ERROR) &&
	       memcmp(m->method, TDP_NOTIFY_PROTOCOL_ERROR, m->method_len) == 0;
}

int tdc_read_reply(struct tensord *td, uint32_t msgid, bool dontwait, struct tdp_message *ret_msg)
{
	char why[128];

	for (;;) {
		struct tdp_message m;
		ssize_t len = read_message(td, dontwait);

		if (len < 0)
			return (int)len;
		if (tdp_unpack(&td->reply, tdp_buf_head(&td->in), (size_t)len) < 0)
			return tdc_fail(td, -EPROTO, "reply could not be decoded");
		if (tdp_message_parse(&td->reply.data, &m, why, sizeof(why)) < 0)
			return tdc_fail(td, -EPROTO, "malformed reply: %s", why);
		if (m.type == TDP_MSG_NOTIFY) {
			if (is_protocol_error(&m)) {
				char text[TD_ERROR_MAX - 32];

				tdc_describe_error_map(m.params, text, sizeof(text));
				return tdc_fail(td, -EPROTO, "daemon closed the stream: %s", text);
			}
			/* Progress and log events: the caller's, if it asked for them. */
			deliver_notification(td, &m);
			tdp_buf_consume(&td->in, (size_t)len);
			continue;
		}
		if (m.type != TDP_MSG_RESPONSE)
			return tdc_fail(td, -EPROTO, "the daemon sent a request");
		if (msgid == 0)
			return tdc_fail(td, -EPROTO, "reply to request %u, which no request awaits",
				        m.msgid);
		if (m.msgid != msgid)
			return tdc_fail(td, -EPROTO, "reply to request %u while waiting for %u",
				        m.msgid, msgid);
		td->have_reply = true;
		td->reply_len = (size_t)len;
		*ret_msg = m;
		return 0;
	}
}

/* After a failed write: whether the daemon said why it closed the stream (a
 * protocol.error notification among what it sent before); that is then the
 * message. Consumes what it reads: the handle is about to break. */
static bool explain_close(struct tensord *td)
{
	char why[128];

	if (td->have_reply)
		return false;
	for (;;) {
		struct tdp_message m;
		ssize_t len = read_message(td, true);

		if (len < 0)
			return false;
		if (tdp_unpack(&td->reply, tdp_buf_head(&td->in), (size_t)len) < 0 ||
		    tdp_message_parse(&td->reply.data, &m, why, sizeof(why)) < 0)
			return false;
		if (is_protocol_error(&m)) {
			char text[TD_ERROR_MAX - 32];

			tdc_describe_error_map(m.params, text, sizeof(text));
			tdc_fail(td, -EPROTO, "daemon closed the stream: %s", text);
			return true;
		}
		tdp_buf_consume(&td->in, (size_t)len);
	}
}
