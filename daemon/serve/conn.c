#include "serve/conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "daemon.h"
#include "methods.h"
#include "rpc.h"
#include "methods/request.h"
#include "serve/server.h"
#include "status.h"

/* Read at most this much per wake-up before serving, so one fast sender
 * cannot starve the others. */
#define READ_BUDGET ((size_t)16 << 20)
#define READ_CHUNK ((size_t)64 << 10)
/* TURN_BUDGET: at most this many requests per turn; the rest wait until the
 * other clients with work had a turn (server_resume_later). */
#define TURN_BUDGET DAEMON_TURN_BUDGET
/* Buffers larger than this are given back to the system once the connection
 * has been idle for IDLE_TRIM_NS: a client moving big tensors keeps its
 * buffers (fresh pages cost a fault each), an idle one does not hold memory. */
#define KEEP_BUFFER ((size_t)1 << 20)
#define IDLE_TRIM_NS ((int64_t)2000000000)
/* A streamed answer gets its next part once less than this waits. */
#define STREAM_LOW ((size_t)4 << 20)
/* The send buffer asked for while a streamed answer is sent from its
 * window (grow_send_buffer); 0: leave it as it is. */
#ifndef STREAM_SNDBUF
#define STREAM_SNDBUF (4 << 20)
#endif

static void conn_event(void *data, uint32_t events);

/* Close the passed fds up to stream offset `upto` (all: UINT64_MAX). */
static void drop_fds(struct conn *c, uint64_t upto)
{
	unsigned k = 0;

	while (k < c->nfds && c->fds[k].pos <= upto)
		close(c->fds[k++].fd);
	memmove(c->fds, c->fds + k, (c->nfds - k) * sizeof(c->fds[0]));
	c->nfds -= k;
}

struct conn *conn_new(struct daemon *d, int fd, const struct access_cred *cred)
{
	struct conn *c = calloc(1, sizeof(*c));

	/* The ring keeps the size it was made with, whatever a reload does. */
	if (c) {
		c->qcap = (uint32_t)d->cfg.max_inflight;
		c->queue = calloc(c->qcap, sizeof(*c->queue));
	}
	if (!c || !c->queue) {
		free(c);
		close(fd);
		return NULL;
	}
	c->d = d;
	c->src = (struct loop_source){ .fd = fd, .fn = conn_event, .data = c };
	c->cred = *cred;
	c->uid = cred->uid;
	c->pid = cred->pid;
	{
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);

		c->unix_peer = getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_UNIX;
	}
	tdp_scanner_reset(&c->scan);
	c->last_active_ns = c->drained_ns = c->input_ns = daemon_now_ns(CLOCK_MONOTONIC);
	if (loop_add(d->loop, &c->src, EPOLLIN | EPOLLRDHUP) < 0) {
		close(fd);
		free(c->queue);
		free(c);
		return NULL;
	}
	return c;
}

void conn_close(struct conn *c)
{
	if (c->dead)
		return;
	if (c->deferred) {
		c->deferred->cancel(c->deferred);
		c->deferred = NULL;
	}
	if (c->batched) {
		request_conn_closed(c->d, c);
		c->batched = 0;
		c->batch_held = false;
	}
	loop_remove(c->d->loop, &c->src);
	close(c->src.fd);
	c->src.fd = -1;
	c->dead = true;
	drop_fds(c, UINT64_MAX);
	tdp_buf_free(&c->in);
	tdp_buf_free(&c->out);
	if (c->zone)
		msgpack_zone_free(c->zone);
	c->zone = NULL;
	c->nqueued = 0;
	c->scanned = 0;
}

void conn_free(struct conn *c)
{
	if (!c)
		return;
	conn_close(c);
	free(c->queue);
	free(c);
}

/* The stream cannot be parsed any further: say why, then close after flushing. */
static void stream_error(struct conn *c, int code, const char *why)
{
	msgpack_packer pk;

	log_info("closing connection of pid %d (uid %u): %s", (int)c->pid, (unsigned)c->uid, why);
	c->d->metrics.protocol_errors++;
	msgpack_packer_init(&pk, &c->out, tdp_buf_msgpack_write);
	tdp_write_error_notification(&pk, TDP_NOTIFY_PROTOCOL_ERROR, code, why);
	c->closing = true;
	c->in_base += tdp_buf_len(&c->in);
	tdp_buf_consume(&c->in, tdp_buf_len(&c->in));
	/* Its memory goes now, not when the connection is freed after the
	 * loop's batch: connections refused in one batch (user_max_buffer_bytes,
	 * every connection's bytes there at the first read) would hold theirs
	 * together, no longer counted. */
	tdp_buf_shrink(&c->in, 0);
	drop_fds(c, UINT64_MAX);
	c->nqueued = 0;
	c->scanned = 0;
}

static void scan_error(struct conn *c, int r)
{
	char why[160];

	switch (r) {
	case -EMSGSIZE:
		snprintf(why, sizeof(why), "message larger than the limit of %llu bytes",
			 (unsigned long long)c->d->cfg.max_message_bytes);
		stream_error(c, TDP_RESOURCE_EXHAUSTED, why);
		break;
	case -E2BIG:
		snprintf(why, sizeof(why), "message holds more than %llu objects",
			 (unsigned long long)TDP_MAX_OBJECTS);
		stream_error(c, TDP_RESOURCE_EXHAUSTED, why);
		break;
	case -ETOOMANYREFS:
		snprintf(why, sizeof(why), "more than %d file descriptors with one message",
			 CONN_MAX_FDS_PER_SEND);
		stream_error(c, TDP_RESOURCE_EXHAUSTED, why);
		break;
	case -ELOOP:
		snprintf(why, sizeof(why), "message nested deeper than %d", TDP_MAX_DEPTH);
		stream_error(c, TDP_PROTOCOL, why);
		break;
	default:
		stream_error(c, TDP_PROTOCOL, "bytes that are not msgpack");
		break;
	}
}

/* Parse one message of `n` bytes at `p` into `obj`, its objects in `zone`
 * (an empty one: a connection reuses one, so a request costs no malloc;
 * str and bin objects point into `p`). Returns whether it is one whole
 * msgpack object. */
static bool unpack(msgpack_zone *zone, const uint8_t *p, size_t n, msgpack_object *obj)
{
	size_t off = 0;

	return msgpack_unpack((const char *)p, n, &off, zone, obj) == MSGPACK_UNPACK_SUCCESS && off == n;
}

/* The zone of handle_message goes back to the connection, emptied: what
 * a large message took beyond its first chunk (MSGPACK_ZONE_CHUNK_SIZE) is
 * freed now, not held by an idle connection. One that closed meanwhile, or
 * whose nested call kept one, frees it. */
static void zone_done(struct conn *c, msgpack_zone *zone)
{
	if (!zone)
		return;
	if (c->dead || c->zone) {
		msgpack_zone_free(zone);
	} else {
		msgpack_zone_clear(zone);
		c->zone = zone;
	}
}

/* Serve one complete message of `n` bytes at `p`. Returns 0, REQUEST_HOLD
 * when it was held (not served: it stays queued until the connection's
 * batched op.runs were answered), or -ENOMEM when the connection must be
 * closed. */
static int handle_message(struct conn *c, const uint8_t *p, size_t n)
{
	int fds[CONN_MAX_FDS];
	unsigned nfds = 0;
	msgpack_zone *zone = c->zone;
	msgpack_object obj;
	msgpack_packer pk;
	struct tdp_message m;
	char why[200];
	uint32_t msgid;
	bool unpacked, parsed;
	int r = 0;

	/* Taken while in use: a nested call for this connection makes its own. */
	c->zone = NULL;
	if (!zone && !(zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE)))
		return -ENOMEM;
	msgpack_packer_init(&pk, &c->out, tdp_buf_msgpack_write);
	/* Its fds: those whose recvmsg() ended inside its bytes. */
	drop_fds(c, c->in_base);
	while (nfds < c->nfds && c->fds[nfds].pos <= c->in_base + n) {
		fds[nfds] = c->fds[nfds].fd;
		nfds++;
	}
	unpacked = unpack(zone, p, n, &obj);
	parsed = unpacked && tdp_message_parse(&obj, &m, why, sizeof(why)) == 0;
	/* Behind batched op.runs of the connection, what is not a request
	 * writes at once (an error, a protocol.error): the batch is closed
	 * first, and it waits while that runs (a request: request_dispatch). */
	if (c->batched && !(parsed && m.type == TDP_MSG_REQUEST)) {
		request_batch_close(c->d);
		if (c->batched) {
			zone_done(c, zone);
			return REQUEST_HOLD;
		}
	}
	if (!unpacked) {
		stream_error(c, TDP_PROTOCOL, "undecodable message");
	} else if (!parsed) {
		if (tdp_message_request_id(&obj, &msgid) == 0)
			r = tdp_write_error(&pk, msgid, TDP_PROTOCOL, why);
		else
			stream_error(c, TDP_PROTOCOL, why);
	} else if (m.type == TDP_MSG_REQUEST) {
		struct request req = {
			.call = { .d = c->d, .cred = c->cred },
			.conn = c,
			.msgid = m.msgid,
			.params = m.params,
			.pk = &pk,
			.out = &c->out,
			.fds = fds,
			.nfds = nfds,
		};

		r = request_dispatch(&req, m.method, m.method_len);
		if (r == REQUEST_HOLD) {
			/* Held: served again later, fds and all. */
			zone_done(c, zone);
			return REQUEST_HOLD;
		}
	} else if (m.type == TDP_MSG_NOTIFY) {
		/* tensord defines no client notifications: ignored, whatever the
		 * method (docs/protocol.md); the connection goes on. */
		char name[65];
		uint32_t len = m.method_len < 64 ? m.method_len : 64;

		for (uint32_t i = 0; i < len; i++)
			name[i] = (unsigned char)m.method[i] < 0x20 || (unsigned char)m.method[i] >= 0x7f ?
				  '?' : m.method[i];
		name[len] = '\0';
		if (!m.method_len)
			snprintf(name, sizeof(name), "(no name)");
		log_debug("uid %u: notification '%s' ignored", (unsigned)c->uid, name);
	} else {
		/* Clients answer no requests: the peer is not speaking this protocol. */
		stream_error(c, TDP_PROTOCOL, "clients send requests, not responses");
	}
	zone_done(c, zone);
	/* Claimed or not, the message's fds are done with. */
	drop_fds(c, c->in_base + n);
	return r;
}

/* Find the complete messages after those already queued, while the queue
 * has room: they are the connection's in-flight requests. A broken stream is
 * noted and reported once the requests before it were answered. */
static void scan_input(struct conn *c)
{
	struct tdp_scan_limits lim = tdp_scan_default_limits;
	uint32_t cap = c->qcap;

	lim.max_bytes = c->d->cfg.max_message_bytes;
	while (c->nqueued < cap && !c->scan_err) {
		size_t len = tdp_buf_len(&c->in);
		int r;

		if (len == c->scanned)
			break;
		r = tdp_scanner_feed(&c->scan, tdp_buf_head(&c->in) + c->scanned, len - c->scanned, &lim);
		if (r == 0)
			break;
		if (r < 0) {
			c->scan_err = r;
			break;
		}
		c->queue[(c->qhead + c->nqueued) % cap] = c->scan.pos;
		c->nqueued++;
		c->scanned += c->scan.pos;
		tdp_scanner_reset(&c->scan);
	}
}

enum turn {
	TURN_IDLE,      /* nothing (more) to serve now */
	TURN_BACKLOG,   /* stopped: too much output waits */
	TURN_YIELD,     /* stopped: the turn's budget is spent, requests remain */
};

/* Serve the queued requests, in order, while output is not backed up, until
 * *served reaches TURN_BUDGET. */
static enum turn process(struct conn *c, unsigned *served)
{
	uint32_t cap = c->qcap;

	/* A running job answers its request last; later ones wait for it, as
	 * they wait for a running batch of its op.runs. */
	while (!c->closing && !c->deferred && !c->batch_held && server_serving(c->d->server)) {
		uint64_t n;
		int r;

		if (conn_backlogged(c))
			return TURN_BACKLOG;
		scan_input(c);
		if (c->nqueued == 0) {
			/* The stream's end is told after every answer before it. */
			if (c->scan_err && c->batched)
				request_batch_close(c->d);
			if (c->scan_err && !c->batched)
				scan_error(c, c->scan_err);
			break;
		}
		if (*served >= TURN_BUDGET)
			return TURN_YIELD;
		n = c->queue[c->qhead];
		r = handle_message(c, tdp_buf_head(&c->in), n);
		if (r < 0) {
			log_error("out of memory answering pid %d; closing its connection", (int)c->pid);
			conn_close(c);
			return TURN_IDLE;
		}
		if (r == REQUEST_HOLD)
			break; /* held: its batch answers first, then kicks it */
		(*served)++;
		if (c->closing)
			break; /* a broken stream: stream_error dropped the input */
		c->qhead = (c->qhead + 1) % cap;
		c->nqueued--;
		c->scanned -= n;
		c->in_base += n;
		tdp_buf_consume(&c->in, n);
	}
	return TURN_IDLE;
}

/* Whether the connection should read more: not while its in-flight queue is
 * full or its output backed up (that is the throttle: the client's writes
 * then wait in its own socket buffer). */
static bool wants_input(const struct conn *c)
{
	/* max_input_bytes: queued requests beyond it wait in the client's socket
	 * (the message after them may still grow to max_message_bytes). */
	/* Passed fds wait in the socket while the connection holds many: the
	 * queued requests own them and free them as they are served. */
	return !c->peer_closed && !c->closing && !c->scan_err &&
	       c->nqueued < c->qcap && !conn_backlogged(c) &&
	       c->nfds + CONN_MAX_FDS_PER_SEND <= CONN_MAX_FDS &&
	       (c->nqueued == 0 || c->scanned < c->d->cfg.max_input_bytes);
}

/* Whether the connection holds the start of a message not complete yet. */
static bool partial_input(const struct conn *c)
{
	return tdp_buf_len(&c->in) > c->scanned || c->scan.pos > 0;
}

/* user_max_buffer_bytes: the bytes the uid's connections buffer (input and
 * output), `others` of them on its other connections, are over the limit:
 * close this one, the one that grew. Returns whether it did. */
static bool over_user_buffer(struct conn *c, uint64_t others)
{
	uint64_t cap = c->d->cfg.user_max_buffer_bytes, mine, total;
	char why[200];

	if (!cap)
		return false;
	mine = tdp_buf_len(&c->in) + tdp_buf_len(&c->out);
	total = others + mine;
	if (total <= cap)
		return false;
	log_warning("disconnecting pid %d (uid %u): the uid's connections buffer %llu bytes "
		    "(user_max_buffer_bytes %llu)", (int)c->pid, (unsigned)c->uid,
		    (unsigned long long)total, (unsigned long long)cap);
	snprintf(why, sizeof(why), "uid %u's connections buffer more than %llu bytes "
		 "(user_max_buffer_bytes)", (unsigned)c->uid, (unsigned long long)cap);
	stream_error(c, TDP_RESOURCE_EXHAUSTED, why);
	return true;
}

/* Take the fds of SCM_RIGHTS messages in `msg` into the connection's queue,
 * the stream up to `pos` read. Returns false (all of them closed) when there
 * were more than the limits allow. */
static bool take_fds(struct conn *c, struct msghdr *msg, uint64_t pos)
{
	bool ok = !(msg->msg_flags & MSG_CTRUNC);

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
		size_t n;
		int fd;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (!ok || !c->unix_peer || c->nfds >= CONN_MAX_FDS) {
				close(fd);
				ok = false;
				continue;
			}
			c->fds[c->nfds++] = (struct conn_fd){ .fd = fd, .pos = pos };
		}
	}
	return ok;
}

/* How many of the passed fds came with bytes after stream offset `pos`. */
static unsigned fds_after(const struct conn *c, uint64_t pos)
{
	unsigned n = 0;

	for (unsigned i = c->nfds; i > 0 && c->fds[i - 1].pos > pos; i--)
		n++;
	return n;
}

/* recv() into `buf`, taking passed fds along on a Unix socket. */
static ssize_t recv_some(struct conn *c, void *buf, size_t len)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(CONN_MAX_FDS_PER_SEND * sizeof(int))];
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t k;

	if (c->unix_peer) {
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
	}
	k = recvmsg(c->src.fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (k <= 0 || !c->unix_peer)
		return k;
	/* Too many: the requests before are answered, then the stream ends
	 * with the reason (scan_error). */
	if (!take_fds(c, &msg, c->in_base + tdp_buf_len(&c->in) + (uint64_t)k) && !c->scan_err)
		c->scan_err = -ETOOMANYREFS;
	return k;
}

/* Read what the socket has, up to READ_BUDGET. Returns 0 or -errno (fatal). */
static int read_input(struct conn *c)
{
	size_t budget = READ_BUDGET;
	uint64_t others = c->d->cfg.user_max_buffer_bytes ?
			  server_user_buffered(c->d->server, c->uid, c) : 0;

	while (budget > 0 && wants_input(c)) {
		size_t len = tdp_buf_len(&c->in) - c->scanned, chunk = READ_CHUNK;
		ssize_t k;

		/* Reading a large bin: take bigger bites, but never grow the buffer
		 * past twice what actually arrived. */
		if (c->scan.need > len) {
			size_t want = c->scan.need - len, grow = len > READ_CHUNK ? len : READ_CHUNK;

			chunk = want < grow ? want : grow;
			if (chunk < READ_CHUNK)
				chunk = READ_CHUNK;
		}
		if (tdp_buf_reserve(&c->in, chunk) < 0)
			return -ENOMEM;
		k = recv_some(c, c->in.data + c->in.end, c->in.cap - c->in.end);
		if (k > 0) {
			c->in.end += (size_t)k;
			c->d->metrics.bytes_in += (uint64_t)k;
			c->input_ns = daemon_now_ns(CLOCK_MONOTONIC);
			if (over_user_buffer(c, others))
				return 0;
			budget = (size_t)k < budget ? budget - (size_t)k : 0;
			scan_input(c);
			/* The bytes past the queued messages are one message that is
			 * not complete: it may own CONN_MAX_FDS_PER_SEND fds. */
			if (c->nqueued < c->qcap && !c->scan_err &&
			    fds_after(c, c->in_base + c->scanned) > CONN_MAX_FDS_PER_SEND)
				c->scan_err = -ETOOMANYREFS;
			continue;
		}
		if (k == 0) {
			c->peer_closed = true;
			return 0;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -errno;
	}
	return 0;
}

/* The bytes of a streamed answer's part shown outside the output
 * (request_deferred.window): sent after the output. */
static size_t window_len(const struct conn *c)
{
	return c->deferred ? c->deferred->window_len : 0;
}

/* Bytes waiting to be sent. */
static size_t unsent(const struct conn *c)
{
	return tdp_buf_len(&c->out) + window_len(c);
}

/* Write queued output, then a streamed answer's window, until the socket is
 * full. Returns 0 or -errno. */
static int flush_output(struct conn *c)
{
	while (unsent(c) > 0) {
		bool win = tdp_buf_len(&c->out) == 0;
		struct request_deferred *def = c->deferred;
		ssize_t k;

		/* Parts of a device lost meanwhile are not read, let alone sent. */
		if (win && def->window_gone && def->window_gone(def))
			return -ENODEV;
		k = send(c->src.fd, win ? def->window : tdp_buf_head(&c->out),
				 win ? def->window_len : tdp_buf_len(&c->out), MSG_NOSIGNAL | MSG_DONTWAIT);

		if (k > 0) {
			if (win) {
				def->window += k;
				def->window_len -= (size_t)k;
			} else {
				tdp_buf_consume(&c->out, (size_t)k);
			}
			c->d->metrics.bytes_out += (uint64_t)k;
			c->drained_ns = daemon_now_ns(CLOCK_MONOTONIC);
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		return k < 0 ? -errno : -EPIPE;
	}
	return 0;
}

/* Whether an answer written in parts (request_deferred.more, a streamed
 * tensor.get) can take its next part now. */
static bool stream_wants(const struct conn *c)
{
	return c->deferred && c->deferred->more && !c->deferred->window_len &&
	       tdp_buf_len(&c->out) < STREAM_LOW;
}

#if STREAM_SNDBUF
/* A streamed answer's window goes straight from the owner's memory into
 * the socket: a larger send buffer (up to net.core.wmem_max, which the
 * kernel applies) means fewer wake-ups per byte while the client reads. */
static void grow_send_buffer(struct conn *c)
{
	int want = STREAM_SNDBUF, have = 0;
	socklen_t len = sizeof(have);

	c->sndbuf_grown = true;
	if (getsockopt(c->src.fd, SOL_SOCKET, SO_SNDBUF, &have, &len) == 0 && have < want &&
	    setsockopt(c->src.fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want)) < 0)
		log_debug("SO_SNDBUF %d: %s", want, strerror(errno));
}
#endif

/* Add parts to such an answer while it can take them, the socket takes
 * them and *budget lasts; *stalled when none was ready (the owner wakes the
 * connection once one is: request_wake). Returns -1 when the connection
 * was closed. */
static int pump(struct conn *c, size_t *budget, bool *stalled)
{
	*stalled = false;
	while (stream_wants(c) && *budget > 0) {
		struct request_deferred *def = c->deferred;
		size_t before = unsent(c);
		int r = def->more(def);

		if (r < 0) {
			log_warning("closing the connection of pid %d (uid %u) in the middle of an "
				    "answer: %s", (int)c->pid, (unsigned)c->uid, strerror(-r));
			conn_close(c);
			return -1;
		}
		if (r > 0)
			c->deferred = NULL;
#if STREAM_SNDBUF
		if (c->deferred && c->deferred->window_len && !c->sndbuf_grown)
			grow_send_buffer(c);
#endif
		if (unsent(c) > before) {
			size_t n = unsent(c) - before;

			*budget = n < *budget ? *budget - n : 0;
		} else if (r == 0) {
			*stalled = true;
			break;
		}
		if (flush_output(c) < 0) {
			conn_close(c);
			return -1;
		}
	}
	return 0;
}

/* Serve, flush and set the epoll interest after anything happened. */
static void conn_settle(struct conn *c)
{
	size_t budget = READ_BUDGET; /* streamed bytes per turn */
	unsigned served = 0;
	bool stalled;
	enum turn turn;
	uint32_t want;

	do {
		if (pump(c, &budget, &stalled) < 0)
			return;
		turn = process(c, &served);
		if (c->dead)
			return;
		if (flush_output(c) < 0) {
			conn_close(c);
			return;
		}
	} while ((turn == TURN_BACKLOG && !conn_backlogged(c)) ||
		 (stream_wants(c) && budget > 0 && !stalled));
	/* The turn's share spent with a stream that could go on: after the
	 * other clients, like a turn's requests. */
	if (stream_wants(c) && !stalled && turn != TURN_YIELD)
		turn = TURN_YIELD;

	if (unsent(c) == 0) {
		c->drained_ns = daemon_now_ns(CLOCK_MONOTONIC);
		if (!c->deferred && !c->batched &&
		    (c->closing || (c->peer_closed && c->nqueued == 0 && !c->scan_err))) {
			conn_close(c);
			return;
		}
	}
	/* One with op.runs in a batch is served again once they were answered
	 * (request_batch_kick): no wake-up now, which would only keep the loop
	 * from waiting for that batch itself (methods/op_batch.c). */
	if (turn == TURN_YIELD && !c->resume && !c->batched) {
		c->resume = true;
		server_resume_later(c->d->server);
	}
	want = 0;
	if (wants_input(c))
		want |= EPOLLIN | EPOLLRDHUP;
	if (unsent(c) > 0)
		want |= EPOLLOUT;
	if (loop_modify(c->d->loop, &c->src, want) < 0)
		conn_close(c);
}

void conn_kick(struct conn *c)
{
	if (!c->dead)
		conn_settle(c);
	/* Called outside the connection's own events (a completion's answer, a
	 * job's notification): the op.runs it batched are submitted before the
	 * caller goes on, which may commit or free what they read. */
	request_batch_close(c->d);
}

void conn_serve(struct conn *c)
{
	if (!c->dead)
		conn_settle(c);
}

void conn_resume(struct conn *c)
{
	c->resume = false;
	if (!c->dead)
		conn_settle(c);
}

bool conn_backlogged(const struct conn *c)
{
	return tdp_buf_len(&c->out) >= c->d->cfg.max_output_backlog;
}

bool conn_source(const struct loop_source *src)
{
	return src->fn == conn_event;
}

static void conn_event(void *data, uint32_t events)
{
	struct conn *c = data;
	int r;

	if (c->dead)
		return;
	c->last_active_ns = daemon_now_ns(CLOCK_MONOTONIC);
	if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && !c->peer_closed && !c->closing) {
		r = read_input(c);
		if (r < 0) {
			if (r == -ENOMEM)
				log_error("out of memory reading from pid %d", (int)c->pid);
			conn_close(c);
			return;
		}
	}
	/* A peer that hung up while its job runs: cancel the job. One that
	 * only stopped sending still reads a streamed answer. */
	if (c->deferred && ((c->peer_closed && !c->deferred->more) || (events & (EPOLLHUP | EPOLLERR)))) {
		conn_close(c);
		return;
	}
	conn_settle(c);
}

/* Whether bytes wait in the socket, not read yet (the loop was busy). */
static bool input_waiting(const struct conn *c)
{
	int n = 0;

	return ioctl(c->src.fd, FIONREAD, &n) == 0 && n > 0;
}

void conn_tick(struct conn *c, int64_t now_ns)
{
	uint64_t limit = c->d->cfg.stall_timeout;

	if (c->dead)
		return;
	/* Output waits only once the socket buffer is full: the client reads
	 * nothing, whether or not the backlog reached max_output_backlog. */
	if (limit && unsent(c) > 0 && now_ns - c->drained_ns >= (int64_t)limit * 1000000000) {
		log_warning("disconnecting pid %d (uid %u): %zu bytes of responses unread for %llu s "
			    "(max_output_backlog %llu, stall_timeout %llu)", (int)c->pid, (unsigned)c->uid,
			    unsent(c), (unsigned long long)((now_ns - c->drained_ns) / 1000000000),
			    (unsigned long long)c->d->cfg.max_output_backlog, (unsigned long long)limit);
		conn_close(c);
		return;
	}
	limit = c->d->cfg.input_timeout;
	if (limit && partial_input(c) && wants_input(c) &&
	    now_ns - c->input_ns >= (int64_t)limit * 1000000000 && !input_waiting(c)) {
		log_warning("disconnecting pid %d (uid %u): a message started %zu bytes ago got no "
			    "byte for %llu s (input_timeout %llu)", (int)c->pid, (unsigned)c->uid,
			    tdp_buf_len(&c->in) - c->scanned,
			    (unsigned long long)((now_ns - c->input_ns) / 1000000000),
			    (unsigned long long)limit);
		conn_close(c);
		return;
	}
	if (now_ns - c->last_active_ns < IDLE_TRIM_NS)
		return;
	tdp_buf_shrink(&c->in, KEEP_BUFFER);
	tdp_buf_shrink(&c->out, KEEP_BUFFER);
}
