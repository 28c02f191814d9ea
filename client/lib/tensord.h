/* libtensord: the C client of tensord (see docs/protocol.md, docs/c-api.md).
 *
 * A `struct tensord` is one connection. Calls block until the daemon answers
 * (each wait bounded by tensord_set_timeout()); the pipelined calls
 * (tensord_append_*, tensord_next_reply) queue requests and take answers in
 * order, and with tensord_fd(), tensord_flush() and tensord_consume_input()
 * drive the connection from a poll() loop without blocking.
 * A handle is not thread-safe: use one per thread, or lock around it.
 *
 * Every call that can fail returns an int: >= 0 on success, -errno on failure.
 * When the daemon answered with an error, the return value is
 * -TENSORD_EREMOTE and tensord_error_code() gives the protocol's code
 * (TENSORD_NOT_FOUND, ...). tensord_last_error() gives a readable message for
 * any failure. Once the stream is broken (the daemon closed it, a read or write
 * failed, a reply could not be parsed, a timeout) every later call fails with
 * the same error: the handle is dead; free it, or reconnect it with
 * tensord_open(). Out-parameters are written only on success. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TENSORD_EXPORT __attribute__((visibility("default")))
#else
#define TENSORD_EXPORT
#endif

/* The version of this header, equal to the project's version in meson.build
 * (tests/client/test_client_api.c checks that). Compare with tensord_version() to
 * tell the header a program was built with from the library it runs with. */
#define TENSORD_VERSION_MAJOR 0
#define TENSORD_VERSION_MINOR 1
#define TENSORD_VERSION_PATCH 0
#define TENSORD_VERSION_STRING "0.1.0"
/* One number for #if tests: MAJOR * 10000 + MINOR * 100 + PATCH. */
#define TENSORD_VERSION_NUMBER \
	(TENSORD_VERSION_MAJOR * 10000 + TENSORD_VERSION_MINOR * 100 + TENSORD_VERSION_PATCH)

/* Returned (negated) when the daemon answered with an error map. */
#define TENSORD_EREMOTE 1000

/* Error codes of the protocol (docs/protocol.md, "Errors"). */
enum tensord_code {
	TENSORD_OK = 0,
	TENSORD_CANCELLED = 1,
	TENSORD_INVALID_ARGUMENT = 3,
	TENSORD_DEADLINE_EXCEEDED = 4,
	TENSORD_NOT_FOUND = 5,
	TENSORD_ALREADY_EXISTS = 6,
	TENSORD_PERMISSION_DENIED = 7,
	TENSORD_RESOURCE_EXHAUSTED = 8,
	TENSORD_FAILED_PRECONDITION = 9,
	TENSORD_UNIMPLEMENTED = 12,
	TENSORD_INTERNAL = 13,
	TENSORD_UNAVAILABLE = 14,
	TENSORD_SHAPE_MISMATCH = 100,
	TENSORD_DTYPE_MISMATCH = 101,
	TENSORD_DEVICE_LOST = 102,
	TENSORD_PROTOCOL = 103,
};

enum tensord_dtype {
	TENSORD_F32 = 0,
	TENSORD_F16 = 1,
	TENSORD_BF16 = 2,
	TENSORD_I32 = 3,
	TENSORD_U8 = 4,
	TENSORD_DTYPE_COUNT
};

#define TENSORD_MAX_RANK 8
#define TENSORD_MAX_NAME_LEN 255

/* Metadata of one tensor, as `tensor.stat` returns it. */
struct tensord_tensor_info {
	char name[TENSORD_MAX_NAME_LEN + 1];
	enum tensord_dtype dtype;
	uint32_t rank;
	uint64_t shape[TENSORD_MAX_RANK];
	uint64_t bytes;
	uint32_t owner;     /* uid */
	double created;     /* Unix time, seconds */
	double modified;
	uint64_t version;
	uint32_t device;    /* id of the device holding it (docs/devices.md) */
	uint32_t group;     /* gid the group-* modes refer to */
	char mode[64];      /* "private", "group-read", "group-write,world-read"... */
};

struct tensord;

/* Connect to the daemon at `path`; NULL means tensord_default_socket's. On
 * success *ret owns the connection. On failure there is no handle to ask
 * why: use tensord_new() and tensord_open() for a message naming the path
 * tried and what to do (and for a connect timeout). */
TENSORD_EXPORT int tensord_connect(const char *path, struct tensord **ret);

/* A handle that is not connected yet, for settings that apply to connecting
 * (tensord_set_connect_timeout()) and for a readable reason when connecting
 * fails; tensord_open() connects it. Every call other than tensord_open(),
 * the setters and tensord_free() fails with -ENOTCONN until then. Returns
 * NULL only when out of memory. */
TENSORD_EXPORT struct tensord *tensord_new(void);

/* Connect `td` to the daemon at `path` (NULL: tensord_default_socket's).
 * Returns 0, or -errno (-ENOENT, -ECONNREFUSED, -EACCES, -ETIMEDOUT past the
 * connect timeout, ...) with tensord_last_error() naming the path tried,
 * where it came from ($TENSORD_SOCKET, the default) and a hint, among them
 * the per-user socket $XDG_RUNTIME_DIR/tensord/tensord.sock; the handle then
 * stays unconnected (every call fails with that error). Also reconnects a
 * handle whose stream broke (a timeout, the daemon gone): unanswered
 * requests and unread answers are dropped, settings and callbacks kept.
 * -EISCONN on a handle that is connected and working. */
TENSORD_EXPORT int tensord_open(struct tensord *td, const char *path);

/* Give up connecting after `timeout_ms` milliseconds (0: no limit, the
 * default; below 0: -EINVAL). A connect to a Unix socket waits only while
 * the daemon's queue of connections not yet accepted is full; then
 * tensord_open() fails with -ETIMEDOUT. */
TENSORD_EXPORT int tensord_set_connect_timeout(struct tensord *td, int timeout_ms);

/* Bound every wait of a blocking call (and of tensord_next_reply(),
 * tensord_recv(), tensord_send()) to `timeout_ms` milliseconds (0: no limit,
 * the default; below 0: -EINVAL): when the daemon takes no byte of a request
 * and sends none for that long, the call fails with -ETIMEDOUT and a message
 * saying so, and the handle breaks (the answer may still come; the stream's
 * position is lost), as a Python client's timeout does; tensord_open()
 * reconnects it. The time is not the call's total: a long transfer or a
 * train.run that keeps sending progress notifications goes on. Applies from
 * the next wait on. */
TENSORD_EXPORT int tensord_set_timeout(struct tensord *td, int timeout_ms);

/* The socket a client uses when none is named: $TENSORD_SOCKET when set and
 * not empty; else, for a user other than root whose $XDG_RUNTIME_DIR holds
 * tensord/tensord.sock (the socket of a daemon that user runs), that one;
 * else /run/tensord/tensord.sock (the system service's). The path is
 * written to `buf` (`cap` bytes, truncated to fit) and returned. */
TENSORD_EXPORT const char *tensord_default_socket(char *buf, size_t cap);

/* The version of the library running ("0.1.0"), which may be newer than the
 * header a program was compiled with (TENSORD_VERSION_STRING). */
TENSORD_EXPORT const char *tensord_version(void);

/* The same as one number, like TENSORD_VERSION_NUMBER. */
TENSORD_EXPORT uint32_t tensord_version_number(void);

/* Close the connection and free the handle; NULL is accepted. */
TENSORD_EXPORT void tensord_free(struct tensord *td);

/* A readable message for the last failure on this handle ("" if none). */
TENSORD_EXPORT const char *tensord_last_error(const struct tensord *td);

/* The protocol error code of the last remote error, else 0. */
TENSORD_EXPORT int tensord_error_code(const struct tensord *td);

/* The name of a protocol error code ("NOT_FOUND" for TENSORD_NOT_FOUND, as
 * the wire and docs/protocol.md spell it), or NULL for a code tensord does
 * not use. Like strerror() for the codes of tensord_error_code(). */
TENSORD_EXPORT const char *tensord_error_name(int code);

/* The wire name of a dtype ("f32", ...), or NULL when out of range. */
TENSORD_EXPORT const char *tensord_dtype_name(enum tensord_dtype dtype);

/* Parse a dtype name; returns the dtype or -EINVAL. */
TENSORD_EXPORT int tensord_dtype_parse(const char *name);

/* Bytes per element of `dtype` (0 when out of range). */
TENSORD_EXPORT size_t tensord_dtype_size(enum tensord_dtype dtype);

/* `ping`: on success, if `version` is not NULL, copies the daemon's version
 * string (NUL-terminated, truncated to `version_len`). */
TENSORD_EXPORT int tensord_ping(struct tensord *td, char *version, size_t version_len);

/* Any method, with raw msgpack: `params` (`params_len` bytes) is one packed
 * msgpack map, or NULL for none. On success *ret_result is a malloc'd buffer
 * holding the packed result object (free() it) and *ret_len its size. */
TENSORD_EXPORT int tensord_call_raw(struct tensord *td, const char *method,
				    const void *params, size_t params_len,
				    void **ret_result, size_t *ret_len);

/* Receives a notification `[2, method, [params]]` that arrived while a call
 * on the handle waited for its response. `method` is NUL-terminated;
 * `params` is the packed msgpack of the params map (`len` bytes), or NULL
 * with `len` 0 when the notification had no params. Both are valid only
 * during the callback. The callback must not call into the same handle
 * (such calls fail with -EBUSY; tensord_free() is forbidden); it may use
 * other handles. */
typedef void (*tensord_notify_fn)(void *userdata, const char *method, const void *params_msgpack,
				  size_t len);

/* Route notifications to `fn` (called with `userdata`); NULL turns that off.
 * While any call waits for its response, every notification except
 * `protocol.error` goes to `fn` in the order received and the wait goes on;
 * without a callback they are skipped. `protocol.error` always ends the
 * call with -EPROTO and a dead handle. Notifications are advisory: one the
 * library cannot hand over (out of memory, a method name over the
 * protocol's length limit) is dropped. */
TENSORD_EXPORT void tensord_set_notify(struct tensord *td, tensord_notify_fn fn, void *userdata);

/* Direction of a transfer reported to a progress callback. */
enum tensord_transfer {
	TENSORD_TRANSFER_SEND = 0,    /* a request being written to the daemon */
	TENSORD_TRANSFER_RECEIVE = 1, /* a reply being read from the daemon */
	TENSORD_TRANSFER_COUNT
};

/* Receives the progress of one message: `done` of `total` bytes. For a reply,
 * `total` is the size known so far (the whole message once the header of its
 * tensor data arrived). The callback must not call into the same handle. */
typedef void (*tensord_progress_fn)(void *userdata, enum tensord_transfer dir, uint64_t done,
				    uint64_t total);

/* Report the bytes of every request written and every reply read to `fn`
 * (called with `userdata`); NULL turns that off. While a callback is set,
 * requests are written in chunks of at most 1 MiB so that progress shows; the
 * last call of a message has `done` == `total`. For progress bars on large
 * tensors (tensorctl put/get). */
TENSORD_EXPORT void tensord_set_progress(struct tensord *td, tensord_progress_fn fn,
					 void *userdata);

/* `info`, returned as raw msgpack like tensord_call_raw(). */
TENSORD_EXPORT int tensord_info_raw(struct tensord *td, void **ret_result, size_t *ret_len);

/* For the `device` argument of the calls below: no device asked for, the
 * daemon chooses (docs/devices.md). Any other value is a device id, as
 * info's `devices[].id` and a tensor's `device` give it. */
#define TENSORD_DEVICE_ANY (-1)

/* `tensor.put`: store `len` bytes of `data` as `name`. `ret_info` may be NULL. */
TENSORD_EXPORT int tensord_put(struct tensord *td, const char *name, enum tensord_dtype dtype,
			       uint32_t rank, const uint64_t *shape, const void *data, size_t len,
			       struct tensord_tensor_info *ret_info);

/* Options of tensord_put_opts(). Start from TENSORD_PUT_OPTIONS_INIT, which
 * sets `size` (later releases may add fields at the end: the library reads
 * `size` bytes, and refuses with -EINVAL a `size` smaller than the first
 * release's or larger than its own with nonzero bytes it does not know). */
struct tensord_put_options {
	uint32_t size;      /* sizeof(struct tensord_put_options) */
	int device;         /* a device id, or TENSORD_DEVICE_ANY (see tensord_put_on()) */
	const char *mode;   /* NULL: "private" for a new tensor, a replaced one keeps its
			     * mode; else as tensord_chmod()'s (only the owner may) */
	bool if_absent;     /* fail with TENSORD_ALREADY_EXISTS instead of replacing */
};

#define TENSORD_PUT_OPTIONS_INIT \
	{ sizeof(struct tensord_put_options), TENSORD_DEVICE_ANY, NULL, false }

/* `tensor.put` with options: as tensord_put(); `opts` NULL means the
 * defaults of TENSORD_PUT_OPTIONS_INIT. */
TENSORD_EXPORT int tensord_put_opts(struct tensord *td, const char *name,
				    enum tensord_dtype dtype, uint32_t rank,
				    const uint64_t *shape, const void *data, size_t len,
				    const struct tensord_put_options *opts,
				    struct tensord_tensor_info *ret_info);

/* Deprecated, a thin wrapper to be removed in a later release: use
 * tensord_put_opts() with `.device`.
 * `tensor.put` on device `device`: as tensord_put(), storing the tensor on
 * the device with that id, or, with TENSORD_DEVICE_ANY, where the daemon
 * chooses (a new tensor: the device with the most free memory; a replaced
 * one: where it was). A device id the daemon does not have is its
 * INVALID_ARGUMENT; a value below -1 is -EINVAL, refused before sending. */
TENSORD_EXPORT int tensord_put_on(struct tensord *td, const char *name, enum tensord_dtype dtype,
				  uint32_t rank, const uint64_t *shape, const void *data,
				  size_t len, int device, struct tensord_tensor_info *ret_info);

/* `tensor.get`: on success *ret_data is a malloc'd copy of the data (free() it;
 * NULL for a zero-size tensor) and *ret_len its length. `ret_info` may be NULL. */
TENSORD_EXPORT int tensord_get(struct tensord *td, const char *name,
			       struct tensord_tensor_info *ret_info, void **ret_data,
			       size_t *ret_len);

/* `tensor.get` into the caller's buffer `buf` of `cap` bytes: no allocation
 * per call, the fast path for repeated reads. -ENOBUFS (nothing written) when
 * the tensor is larger than `cap`; tensord_stat() tells its size. */
TENSORD_EXPORT int tensord_get_into(struct tensord *td, const char *name,
				    struct tensord_tensor_info *ret_info, void *buf, size_t cap,
				    size_t *ret_len);

/* Passing memory (docs/c-api.md, docs/protocol.md "Passing memory"): the
 * bytes travel in a memory file sent along with SCM_RIGHTS, not through the
 * socket. The caller keeps `fd` (close it when done). */

/* `tensor.put` of the bytes at `offset` of the memfd `fd` (as many as dtype
 * and shape say), which must be sealed with F_SEAL_SHRINK and F_SEAL_WRITE
 * (tensord_memfd() makes one). Otherwise as tensord_put_opts(). */
TENSORD_EXPORT int tensord_put_fd(struct tensord *td, const char *name,
				  enum tensord_dtype dtype, uint32_t rank, const uint64_t *shape,
				  int fd, uint64_t offset, const struct tensord_put_options *opts,
				  struct tensord_tensor_info *ret_info);

/* `tensor.get` into the memfd `fd` at `offset`: it must be sealed with
 * F_SEAL_SHRINK and not against writing, and its pages from `offset` for
 * the tensor's bytes (tensord_stat() says how many) in memory, made by the
 * caller (written or touched, not only fallocate()d; tensord_memfd(NULL,
 * len) does it), else the daemon answers INVALID_ARGUMENT. On success the bytes are in the file (mmap or pread
 * it) and `ret_info` (may be NULL) says how many. */
TENSORD_EXPORT int tensord_get_fd(struct tensord *td, const char *name, int fd, uint64_t offset,
				  struct tensord_tensor_info *ret_info);

/* A new memfd (O_CLOEXEC) for the calls above: with `data`, a copy of its
 * `len` bytes sealed for tensord_put_fd(); with `data` NULL, `len` bytes of
 * zeros (every page touched) sealed only against shrinking, for
 * tensord_get_fd().
 * Returns 0 with *ret_fd set (close() it), or -errno. */
TENSORD_EXPORT int tensord_memfd(const void *data, size_t len, int *ret_fd);

/* `tensor.stat`. */
TENSORD_EXPORT int tensord_stat(struct tensord *td, const char *name,
				struct tensord_tensor_info *ret_info);

/* `tensor.list`: `prefix` may be NULL. On success *ret_list is a malloc'd
 * array of *ret_count entries (free() it; NULL when empty). */
TENSORD_EXPORT int tensord_list(struct tensord *td, const char *prefix,
				struct tensord_tensor_info **ret_list, size_t *ret_count);

/* `tensor.copy`: copy the stored tensor `src` into a tensor `dst` on device
 * `device` (TENSORD_DEVICE_ANY: `src`'s device). Between devices the bytes go
 * through the daemon's host memory. `dst` equal to `src` moves the tensor,
 * keeping its owner, group and mode; an existing `dst` is replaced (it needs
 * write permission). *ret_info (may be NULL) receives `dst`'s metadata, whose
 * `device` says where it lives. */
TENSORD_EXPORT int tensord_copy(struct tensord *td, const char *src, const char *dst, int device,
				struct tensord_tensor_info *ret_info);

/* `tensor.delete`. */
TENSORD_EXPORT int tensord_delete(struct tensord *td, const char *name);

/* `tensor.chmod`: set the mode of tensor `name` ("private", or a comma list
 * of group-read, group-write, world-read, world-write; NULL leaves it) and
 * its group (`group` >= 0; -1 leaves it). Only the owner or root may.
 * *ret_info (may be NULL) receives the new metadata. */
TENSORD_EXPORT int tensord_chmod(struct tensord *td, const char *name, const char *mode,
				 int64_t group, struct tensord_tensor_info *ret_info);

/* `op.run`: run op `op` (docs/ops.md) on the `ninputs` stored tensors named
 * in `inputs`. `attrs` is NULL, or `attrs_len` bytes holding one packed
 * msgpack map of the op's attributes ({"reduction": "sum"}).
 *
 * With `out` set, the result is stored under that name and *ret_info (may be
 * NULL) receives its metadata; ret_data and ret_len may then be NULL, and if
 * given are set to NULL and 0. With `out` NULL, the result comes back:
 * *ret_data is a malloc'd copy of its bytes (free() it; NULL for a zero-size
 * result), *ret_len their count, and *ret_info (may be NULL) its dtype, rank,
 * shape and bytes, other fields zero and name "". */
TENSORD_EXPORT int tensord_op_run(struct tensord *td, const char *op, size_t ninputs,
				  const char *const *inputs, const void *attrs, size_t attrs_len,
				  const char *out, struct tensord_tensor_info *ret_info,
				  void **ret_data, size_t *ret_len);

/* Options of tensord_op_run_opts(); `size` as in tensord_put_options. */
struct tensord_op_run_options {
	uint32_t size;      /* sizeof(struct tensord_op_run_options) */
	int device;         /* a device id, or TENSORD_DEVICE_ANY (see tensord_op_run_on()) */
};

#define TENSORD_OP_RUN_OPTIONS_INIT \
	{ sizeof(struct tensord_op_run_options), TENSORD_DEVICE_ANY }

/* `op.run` with options: as tensord_op_run(); `opts` NULL means the defaults
 * of TENSORD_OP_RUN_OPTIONS_INIT. */
TENSORD_EXPORT int tensord_op_run_opts(struct tensord *td, const char *op, size_t ninputs,
				       const char *const *inputs, const void *attrs,
				       size_t attrs_len, const char *out,
				       const struct tensord_op_run_options *opts,
				       struct tensord_tensor_info *ret_info, void **ret_data,
				       size_t *ret_len);

/* Deprecated, a thin wrapper to be removed in a later release: use
 * tensord_op_run_opts() with `.device`.
 * `op.run` on device `device`: as tensord_op_run(). The op runs where its
 * inputs live, which must then be `device`; inputs on different devices, or
 * on another device than `device`, are the daemon's FAILED_PRECONDITION
 * (tensord never copies between devices by itself: tensord_copy() does). An
 * op without inputs runs on `device`. TENSORD_DEVICE_ANY leaves it to the
 * inputs (or the daemon). A value below -1 is -EINVAL. */
TENSORD_EXPORT int tensord_op_run_on(struct tensord *td, const char *op, size_t ninputs,
				     const char *const *inputs, const void *attrs,
				     size_t attrs_len, const char *out, int device,
				     struct tensord_tensor_info *ret_info, void **ret_data,
				     size_t *ret_len);

/* `graph.run` with raw msgpack, like tensord_call_raw(): `params` (`len`
 * bytes) is one packed map {"nodes": [...], "outputs": [...]?}; on success
 * *ret_result is the malloc'd packed result {"outputs": ..., "stored": ...}
 * (free() it) and *ret_len its size. */
TENSORD_EXPORT int tensord_graph_run_raw(struct tensord *td, const void *params, size_t len,
					 void **ret_result, size_t *ret_len);

/* `train.step` with raw msgpack, like tensord_call_raw(): `params` (`len`
 * bytes) is one packed map {"nodes", "loss", "params", "optimizer"?, ...}
 * (docs/protocol.md); on success *ret_result is the malloc'd packed result
 * {"loss", "step", "lr", "outputs", "stored"} (free() it) and *ret_len its
 * size. */
TENSORD_EXPORT int tensord_train_step_raw(struct tensord *td, const void *params, size_t len,
					  void **ret_result, size_t *ret_len);

/* `train.run` with raw msgpack, like tensord_call_raw(): `params` (`len`
 * bytes) is one packed map {"nodes", "loss", "params", "data",
 * "batch_size", ...} (docs/protocol.md). The call blocks for the whole run;
 * meanwhile the daemon's `train.progress` and `train.eval` notifications go
 * to the callback set with tensord_set_notify(). The daemon cancels the run
 * when the connection closes (the process ends, say). On success *ret_result is the malloc'd packed
 * result {"steps", "epochs", "loss", "seconds", "samples_per_s", "stopped",
 * "eval"} (free() it) and *ret_len its size; "devices": [id, ...] in the
 * params trains data-parallel on those devices, and the result then also
 * has "devices" and "replica_max_diff" (docs/devices.md). */
TENSORD_EXPORT int tensord_train_run_raw(struct tensord *td, const void *params, size_t len,
					 void **ret_result, size_t *ret_len);

/* `model.define` with raw msgpack, like tensord_call_raw(): `params` (`len`
 * bytes) is one packed map {"name", "nodes", "loss", "params", "inputs"?,
 * "outputs"?, "optimizer"?, "step"?, "replace"?} (docs/protocol.md). On
 * success *ret_result is the malloc'd packed result (the model.stat map;
 * free() it) and *ret_len its size. Train a defined model with
 * tensord_train_step_raw()/tensord_train_run_raw() and {"model": name}. */
TENSORD_EXPORT int tensord_model_define_raw(struct tensord *td, const void *params, size_t len,
					    void **ret_result, size_t *ret_len);

/* `model.list`: the packed result {"models": [...]}, like tensord_call_raw(). */
TENSORD_EXPORT int tensord_model_list_raw(struct tensord *td, void **ret_result, size_t *ret_len);

/* `model.stat {name}`: the packed result {"name", "step", "definition",
 * "params", "state", ...}, like tensord_call_raw(). */
TENSORD_EXPORT int tensord_model_stat_raw(struct tensord *td, const char *name, void **ret_result,
					  size_t *ret_len);

/* `model.delete {name, tensors}`: with `tensors` nonzero the parameters and
 * their optimizer state are deleted too. */
TENSORD_EXPORT int tensord_model_delete(struct tensord *td, const char *name, int tensors);

/* `model.evaluate` with raw msgpack: `params` is one packed map {"model",
 * "data", "metrics"?, "batch_size"?}; the packed result is {"loss",
 * "metrics", "samples", "batches"}. */
TENSORD_EXPORT int tensord_model_evaluate_raw(struct tensord *td, const void *params, size_t len,
					      void **ret_result, size_t *ret_len);

/* `model.predict` with raw msgpack: `params` is one packed map {"model",
 * "inputs", "outputs"?, "out"?}; the packed result is {"outputs",
 * "stored"} as graph.run's. */
TENSORD_EXPORT int tensord_model_predict_raw(struct tensord *td, const void *params, size_t len,
					     void **ret_result, size_t *ret_len);

/* Pipelining (docs/c-api.md, "Pipelining"): queue requests back to back and
 * take their answers later, as hiredis's redisAppendCommand()/redisGetReply()
 * or libpq's pipeline mode. The daemon executes the requests of one
 * connection in the order sent and answers in that order.
 *
 * The tensord_append_*() calls check their arguments as the blocking calls
 * do (an invalid one is refused before anything is queued), pack the request
 * into the handle's output queue (copying a put's data) and do no I/O. On
 * success *ret_msgid (may be NULL) is its message id and tensord_pending()
 * counts it. tensord_flush() writes the queue without blocking;
 * tensord_next_reply() and tensord_recv() write what is still queued before
 * they wait for an answer.
 *
 * While requests are pending (tensord_pending() > 0) the blocking calls of
 * the handle fail at once with -EBUSY and a message saying so: take the
 * answers first. They do not drain them, which would hide errors. */

/* Queue `tensor.put`, as tensord_put_opts() (`opts` NULL: the defaults).
 * The answer is the put tensor's metadata. */
TENSORD_EXPORT int tensord_append_put(struct tensord *td, const char *name,
				      enum tensord_dtype dtype, uint32_t rank,
				      const uint64_t *shape, const void *data, size_t len,
				      const struct tensord_put_options *opts, uint32_t *ret_msgid);

/* Queue `tensor.get {name}`; the answer is its metadata and data. */
TENSORD_EXPORT int tensord_append_get(struct tensord *td, const char *name, uint32_t *ret_msgid);

/* Queue `tensor.stat {name}`; the answer is its metadata. */
TENSORD_EXPORT int tensord_append_stat(struct tensord *td, const char *name, uint32_t *ret_msgid);

/* Queue `tensor.delete {name}`; the answer carries nothing. */
TENSORD_EXPORT int tensord_append_delete(struct tensord *td, const char *name,
					 uint32_t *ret_msgid);

/* Queue `op.run`, arguments as tensord_op_run_opts() (`opts` NULL: the
 * defaults). With `out` the answer is the stored result's metadata; without,
 * the result itself (dtype, shape, bytes and data). */
TENSORD_EXPORT int tensord_append_op_run(struct tensord *td, const char *op, size_t ninputs,
					 const char *const *inputs, const void *attrs,
					 size_t attrs_len, const char *out,
					 const struct tensord_op_run_options *opts,
					 uint32_t *ret_msgid);

/* Queue any method with raw msgpack `params` as tensord_call_raw() takes
 * them; the answer is the packed result. */
TENSORD_EXPORT int tensord_append_raw(struct tensord *td, const char *method, const void *params,
				      size_t params_len, uint32_t *ret_msgid);

/* Take the answer to the oldest pending request into what the blocking call
 * of its kind returns: `ret_info` (may be NULL) the metadata of a put, stat,
 * get or op.run (for an inline op.run result its dtype, rank, shape and
 * bytes, other fields zero, name ""; all zero for a delete or a raw call);
 * *ret_data a malloc'd copy of the tensor data of a get or an inline op.run
 * result, or the packed result of tensord_append_raw()/tensord_send() (free()
 * it; NULL when there is none or it is empty; `ret_data` NULL discards it)
 * and *ret_len (may be NULL) its length.
 * Unless the answer is already buffered (tensord_consume_input() returned
 * 1: then this does no I/O and never blocks), it writes the queued requests
 * and waits for the answer (bounded by tensord_set_timeout()).
 * A daemon error for that request is -TENSORD_EREMOTE with
 * tensord_error_code() as for any call. Whenever the answer was used up
 * (success, -TENSORD_EREMOTE, or -EPROTO/-ENOMEM for that answer alone; in
 * every case tensord_pending() went down by one) *ret_msgid (may be NULL) is
 * the request's id: the one exception to "out-parameters only on success".
 * -ENOMSG when nothing is pending. Other failures break the handle. */
TENSORD_EXPORT int tensord_next_reply(struct tensord *td, uint32_t *ret_msgid,
				      struct tensord_tensor_info *ret_info, void **ret_data,
				      size_t *ret_len);

/* tensord_append_raw() followed by writing the whole queue (blocking, while
 * reading what the daemon answers meanwhile, so neither side stalls; each
 * wait bounded by tensord_set_timeout()). The same as before there were
 * append calls. */
TENSORD_EXPORT int tensord_send(struct tensord *td, const char *method, const void *params,
				size_t params_len, uint32_t *ret_msgid);

/* Take the answer to the oldest pending request as raw msgpack, whatever
 * call queued it: on success *ret_result is the malloc'd packed result
 * (free() it) and *ret_len its size. Otherwise as tensord_next_reply(). */
TENSORD_EXPORT int tensord_recv(struct tensord *td, uint32_t *ret_msgid, void **ret_result,
				size_t *ret_len);

/* The number of pipelined requests (queued or sent) not yet answered
 * through tensord_next_reply() or tensord_recv() (0 for NULL). */
TENSORD_EXPORT size_t tensord_pending(const struct tensord *td);

/* Event-loop integration (docs/c-api.md, "Event loops"). The socket is
 * non-blocking and close-on-exec; poll it, never read or write it.
 *
 * tensord_fd(): the socket, for poll()/epoll, or -errno (-ENOTCONN before
 * tensord_open(), the sticky error of a broken handle). It stays the same
 * until the handle is reconnected or freed. */
TENSORD_EXPORT int tensord_fd(const struct tensord *td);

/* Write as much of the queued requests as the socket takes now, never
 * blocking. Returns 0 when the queue is empty, 1 when bytes are left (the
 * socket is full: poll for POLLOUT and call it again), or -errno with the
 * handle broken. */
TENSORD_EXPORT int tensord_flush(struct tensord *td);

/* Read what the socket holds now, never blocking; notifications go to the
 * tensord_set_notify() callback. Returns 1 when the whole answer to the
 * oldest pending request has arrived (take it with tensord_next_reply() or
 * tensord_recv(), which then do no I/O; call again for the next one), 0
 * when it has not (poll for POLLIN; also with nothing pending), or -errno
 * with the handle broken (-ECONNRESET: the daemon closed the connection). */
TENSORD_EXPORT int tensord_consume_input(struct tensord *td);

#ifdef __cplusplus
}
#endif
