/* Internal to libtensord: one connection and its request/response machinery.
 *
 * A call is three steps: td_request_begin() starts the request and hands out
 * the packer for its params, td_request_finish() sends it (plus an optional
 * tail of raw bytes, so a tensor payload is written straight from the caller's
 * memory) and reads the reply, td_request_end() releases the reply. Objects
 * from the reply point into the receive buffer and stay valid until then. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "tensord.h"

#define TD_ERROR_MAX 768

struct tensord {
	int fd;
	uint32_t next_msgid;
	uint32_t pending_first;  /* msgid of the oldest request tensord_send() sent */
	size_t npending;         /* requests sent by tensord_send() and not yet read */
	struct tdp_buf out;      /* the request being written */
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
int td_request_begin(struct tensord *td, const char *method, msgpack_packer **ret_pk);

/* Send the request begun by td_request_begin(), followed by `tail_len` raw
 * bytes of `tail` (may be NULL when 0), and wait for its reply. Returns 0 with
 * *ret_result pointing at the result object, -TENSORD_EREMOTE when the daemon
 * answered with an error, or another -errno (sticky when the stream broke). */
int td_request_finish(struct tensord *td, const void *tail, size_t tail_len,
		      const msgpack_object **ret_result);

/* As td_request_begin(), also while pipelined answers are unread (which
 * td_request_begin() refuses with -EBUSY): for tensord_send(). */
int td_request_begin_pipelined(struct tensord *td, const char *method, msgpack_packer **ret_pk);

/* Send the request begun by td_request_begin_pipelined() (tail as in
 * td_request_finish()) without waiting, counting it as pending for
 * tensord_recv(). On success *ret_msgid is its id. A failed write breaks the
 * handle. */
int td_request_send_only(struct tensord *td, const void *tail, size_t tail_len,
			 uint32_t *ret_msgid);

/* Pack the object `o` into a fresh malloc'd buffer: *ret_data (free() it),
 * *ret_len. Returns 0 or -ENOMEM recorded on `td`. */
int td_copy_object(struct tensord *td, const msgpack_object *o, void **ret_data, size_t *ret_len);

/* Release the reply of the last request and buffers grown for it; safe to call
 * when there is none. */
void td_request_end(struct tensord *td);

/* A malloc'd copy of the `n` (> 0) bytes at `p`, which lie inside the current
 * reply. A large payload that is the bulk of the receive buffer is moved to
 * the front of that buffer, which is handed over, instead of being copied
 * into fresh memory: the reply is then released (as td_request_end() would)
 * and its objects must not be used any more. NULL on ENOMEM. */
void *td_take_reply_bytes(struct tensord *td, const void *p, size_t n);

/* Record a failure that leaves the stream usable: sets the message, clears the
 * remote code and returns `err` (a -errno). On a broken handle it changes
 * nothing and returns the sticky error. */
__attribute__((format(printf, 3, 4)))
int td_fail(struct tensord *td, int err, const char *fmt, ...);

/* Parse a tensor metadata map into *ret. Returns 0, or -EPROTO with a reason
 * in `why` when a field is missing or of the wrong type. Keys it does not know
 * (such as `data`) are ignored. */
int td_parse_tensor_info(const msgpack_object *o, struct tensord_tensor_info *ret,
			 char *why, size_t why_len);

/* Whether the `len` bytes at `p` are exactly one msgpack map within the
 * protocol's limits (so they can be spliced into a request as they are). */
bool td_is_one_map(const void *p, size_t len);

/* Check a `device` argument of the public API: an id (>= 0) or
 * TENSORD_DEVICE_ANY. Returns 0, or -EINVAL recorded on `td`. */
int td_check_device(struct tensord *td, int device);

/* Read a caller's options struct (first field `uint32_t size`) into `dst`,
 * which holds the defaults and is `own` bytes (this library's sizeof): copies
 * min(size, own) bytes. Returns 0, or -EINVAL recorded on `td` when `size` is
 * below `first` (the first release's size) or larger than `own` with a
 * nonzero byte beyond it (a field this library does not know). */
int td_read_options(struct tensord *td, const void *opts, size_t first, void *dst, size_t own);
