/* Internal to libtensord: one connection and its request/response machinery.
 *
 * A call is three steps: tdc_request_begin() starts the request and hands out
 * the packer for its params, tdc_request_finish() sends it (plus an optional
 * tail of raw bytes, so a tensor payload is written straight from the caller's
 * memory) and reads the reply, tdc_request_end() releases the reply. Objects
 * from the reply point into the receive buffer and stay valid until then.
 *
 * Pipelining (tensord_append_*, tensord_send): tdc_request_begin_pipelined()
 * packs after the requests already queued in `out`, tdc_request_queue() adds
 * the request to that queue (no I/O) and remembers what kind of answer it
 * waits for; tdc_flush() writes the queue, tdc_poll_reply() reads what is
 * there without blocking, tdc_take_pending() reads the oldest answer.
 *
 * The socket is non-blocking; a blocking call waits in poll(), each wait
 * bounded by tensord_set_timeout()'s value.
 *
 * Its files: connect.c (handles, connecting and its error messages),
 * conn_io.c (the socket's I/O and reading messages), connection.c (the
 * request/reply core and the pipelined-request queue). */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "buf.h"
#include "tensord.h"

#define TD_ERROR_MAX 768

struct tdp_message;

/* What a pipelined request's answer is parsed into by tensord_next_reply(). */
enum tdc_kind {
	TD_KIND_RAW = 0,      /* tensord_send, tensord_append_raw: the packed result */
	TD_KIND_INFO = 1,     /* tensor.put, tensor.stat: metadata */
	TD_KIND_GET = 2,      /* tensor.get: metadata and data */
	TD_KIND_DELETE = 3,   /* tensor.delete: nothing */
	TD_KIND_OP_STORED = 4, /* op.run with out: metadata */
	TD_KIND_OP_INLINE = 5, /* op.run without out: dtype, shape and data */
};

struct tensord {
	int fd;                  /* -1 unless connected */
	int connect_timeout_ms;  /* tensord_set_connect_timeout(); 0: none */
	int timeout_ms;          /* tensord_set_timeout(); 0: none */
	uint32_t next_msgid;
	uint32_t pending_first;  /* msgid of the oldest unanswered pipelined request */
	size_t npending;         /* pipelined requests (queued or sent) not yet answered */
	uint8_t *kinds;          /* ring of enum tdc_kind, one per pending request */
	size_t kinds_cap, kinds_head;
	struct tdp_buf out;      /* queued pipelined requests not yet written, then the
				    request being packed (from out_mark) */
	size_t out_mark;         /* end of the queued bytes while `building` */
	bool building;           /* a request is being packed after out_mark */
	struct tdp_buf in;       /* received bytes; the reply being read comes first */
	msgpack_packer pk;       /* appends to `out` */
	msgpack_unpacked reply;  /* the last reply, pointing into `in` */
	size_t reply_len;        /* bytes of `in` that the last reply occupies */
	bool have_reply;
	int broken;              /* sticky -errno once the stream is unusable, else 0 */
	int remote_code;         /* code of the last failure if it was remote, else 0 */
	tensord_notify_fn notify; /* tensord_set_notify(); NULL skips notifications */
	void *notify_data;
	struct tdp_buf notify_buf; /* the params map handed to `notify`, repacked */
	bool in_notify;          /* inside `notify`: calls on this handle are refused */
	tensord_progress_fn progress; /* tensord_set_progress(); NULL: none */
	void *progress_data;
	int pass_fd;             /* >= 0: sent with the next request (SCM_RIGHTS), then -1 */
	void *land;              /* tensord_get_into's buffer: a tensor.get payload of at least
				    TD_LAND_MIN bytes is received straight into it (land.h) */
	size_t land_cap;
	uint64_t landed;         /* bytes of the last reply's payload that went into `land`
				    (its bin in `in` then reads empty); 0: none */
	char error[TD_ERROR_MAX];
};

/* Start a request for `method`: fails at once with the sticky error of a
 * broken handle. On success *ret_pk is the packer the caller writes the params
 * array into. */
int tdc_request_begin(struct tensord *td, const char *method, msgpack_packer **ret_pk);

/* Send the request begun by tdc_request_begin(), followed by `tail_len` raw
 * bytes of `tail` (may be NULL when 0), and wait for its reply. Returns 0 with
 * *ret_result pointing at the result object, -TENSORD_EREMOTE when the daemon
 * answered with an error, or another -errno (sticky when the stream broke). */
int tdc_request_finish(struct tensord *td, const void *tail, size_t tail_len,
		       const msgpack_object **ret_result);

/* As tdc_request_begin(), also while pipelined answers are unread (which
 * tdc_request_begin() refuses with -EBUSY): the request is packed after the
 * queued ones. For tensord_append_*() and tensord_send(). */
int tdc_request_begin_pipelined(struct tensord *td, const char *method, msgpack_packer **ret_pk);

/* Queue the request begun by tdc_request_begin_pipelined(), followed by a
 * copy of `tail_len` bytes of `tail`, without any I/O; its answer will be
 * parsed as `kind`. On success *ret_msgid is its id and tensord_pending()
 * counts it. Returns 0 or -ENOMEM (nothing queued). */
int tdc_request_queue(struct tensord *td, const void *tail, size_t tail_len, enum tdc_kind kind,
		      uint32_t *ret_msgid);

/* Write the queued requests. With `wait`, until all are written (reading
 * what the daemon sends meanwhile into the receive buffer, so that neither
 * side waits for the other), each wait bounded by the handle's timeout;
 * without, as much as the socket takes now. Returns 0 when nothing is left, 1
 * when bytes remain (only without `wait`), or a -errno with the handle broken. */
int tdc_flush(struct tensord *td, bool wait);

/* Read what the socket holds without blocking, handing notifications to the
 * callback. Returns 1 when the whole answer to the oldest pending request is
 * in the receive buffer (tdc_take_pending() will not block), 0 when not (or
 * nothing is pending), or a -errno with the handle broken. No reply may be
 * held (tdc_request_end() first). */
int tdc_poll_reply(struct tensord *td);

/* Take the answer to the oldest pending request: unless it is buffered
 * already, write the queue and wait for it. Returns 0 with *ret_result (valid
 * until tdc_request_end()), -TENSORD_EREMOTE for a daemon error, both with the
 * request no longer pending and *ret_msgid, *ret_kind set; -ENOMSG when
 * nothing is pending; another -errno with the handle broken. */
int tdc_take_pending(struct tensord *td, uint32_t *ret_msgid, enum tdc_kind *ret_kind,
		     const msgpack_object **ret_result);

/* Pack the object `o` into a fresh malloc'd buffer: *ret_data (free() it),
 * *ret_len. Returns 0 or -ENOMEM recorded on `td`. */
int tdc_copy_object(struct tensord *td, const msgpack_object *o, void **ret_data, size_t *ret_len);

/* Release the reply of the last request and buffers grown for it; safe to call
 * when there is none. */
void tdc_request_end(struct tensord *td);

/* A malloc'd copy of the `n` (> 0) bytes at `p`, which lie inside the current
 * reply. A large payload that is the bulk of the receive buffer is moved to
 * the front of that buffer, which is handed over, instead of being copied
 * into fresh memory: the reply is then released (as tdc_request_end() would)
 * and its objects must not be used any more. NULL on ENOMEM. */
void *tdc_take_reply_bytes(struct tensord *td, const void *p, size_t n);

/* Record a failure that leaves the stream usable: sets the message, clears the
 * remote code and returns `err` (a -errno). On a broken handle it changes
 * nothing and returns the sticky error. */
__attribute__((format(printf, 3, 4)))
int tdc_fail(struct tensord *td, int err, const char *fmt, ...);

/* Check a tensor name argument: 0, or -EINVAL recorded on `td`. */
int tdc_check_name(struct tensord *td, const char *name);

/* Check that the reply `res` is a tensor metadata map: 0 with *ret_info, or
 * -EPROTO recorded on `td`. */
int tdc_result_info(struct tensord *td, const msgpack_object *res,
		    struct tensord_tensor_info *ret_info);

/* Check a tensor.get answer: 0 with *ret_info and *ret_data (the data bin,
 * pointing into the reply; empty when the payload landed in td->land), or
 * -EPROTO recorded on `td`. */
int tdc_result_get(struct tensord *td, const msgpack_object *res,
		   struct tensord_tensor_info *ret_info, const msgpack_object **ret_data);

/* Check an op.run answer: with `stored` (the request had `out`) metadata,
 * *ret_data NULL; without, the inline dtype, shape and bytes with *ret_data
 * the data bin. 0, or -EPROTO recorded on `td`. */
int tdc_result_op(struct tensord *td, const msgpack_object *res, bool stored,
		  struct tensord_tensor_info *ret_info, const msgpack_object **ret_data);

/* Parse a tensor metadata map into *ret. Returns 0, or -EPROTO with a reason
 * in `why` when a field is missing or of the wrong type. Keys it does not know
 * (such as `data`) are ignored. */
int tdc_parse_tensor_info(const msgpack_object *o, struct tensord_tensor_info *ret,
			  char *why, size_t why_len);

/* Whether the `len` bytes at `p` are exactly one msgpack map within the
 * protocol's limits (so they can be spliced into a request as they are). */
bool tdc_is_one_map(const void *p, size_t len);

/* Check a `device` argument of the public API: an id (>= 0) or
 * TENSORD_DEVICE_ANY. Returns 0, or -EINVAL recorded on `td`. */
int tdc_check_device(struct tensord *td, int device);

/* Read a caller's options struct (first field `uint32_t size`) into `dst`,
 * which holds the defaults and is `own` bytes (this library's sizeof): copies
 * min(size, own) bytes. Returns 0, or -EINVAL recorded on `td` when `size` is
 * below `first` (the first release's size) or larger than `own` with a
 * nonzero byte beyond it (a field this library does not know). */
int tdc_read_options(struct tensord *td, const void *opts, size_t first, void *dst, size_t own);

/* ---- conn_io.c: the socket's I/O, for the request/reply core ---- */

/* Write the `cnt` pieces `iov` (updated as they go), the first write
 * carrying td->pass_fd, adding the bytes written to *ret_done. With `wait`,
 * until all went: while the socket is full, what the daemon sends is read
 * into td->in (it may be waiting for its answers to be read before it reads
 * on); without, until the socket is full. Returns 0 when all went, 1 when
 * bytes remain (only without `wait`), or a -errno with the message recorded
 * (the caller breaks the handle). */
int tdc_write_iov(struct tensord *td, struct iovec *iov, int cnt, bool wait, uint64_t *ret_done);

/* Read messages until the reply to `msgid` (0: none is awaited, any reply is
 * an error), passing notifications other than protocol.error to the callback
 * (or skipping them). On success td->reply holds it and *ret_msg describes it.
 * Otherwise -EAGAIN when `dontwait` and no whole message is there, or a
 * -errno with the message recorded (the caller breaks the handle). */
int tdc_read_reply(struct tensord *td, uint32_t msgid, bool dontwait, struct tdp_message *ret_msg);

/* Copy a notification's or error map's fields into a "NAME: message" text and
 * return its code (TENSORD_INTERNAL when the map gives none). */
int tdc_describe_error_map(const msgpack_object *map, char *dst, size_t cap);
