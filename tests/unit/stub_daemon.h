/* A daemon for unit tests: the store, the model registry, the kernel and
 * jobs tables and the config defaults around one stand-in device
 * (tests/fuzz/gpu_stub.c: host memory, dispatches checked but computing
 * nothing), with no socket and no event loop. The engine, autograd and training run on it through a `struct
 * caller`, as they do for a request. Also: a small msgpack builder for the
 * node lists those layers read. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "daemon.h"
#include "gpu/device.h"
#include "store/caller.h"
#include "store/store.h"

#define STUB_HEAP_BYTES ((uint64_t)16 << 20)

struct stub_daemon {
	struct daemon d;
	struct gpu_device gpu;
	struct gpu_device_desc desc;
	uint64_t blocks0;   /* the stub's live blocks before (a failed test leaves some) */
};

/* Set up `sd` (config defaults, an empty store, model registry and kernel
 * table, one stub device of STUB_HEAP_BYTES). Several may live side by
 * side: each is a daemon of its own. Returns 0 or -ENOMEM. */
int stub_daemon_init(struct stub_daemon *sd);

/* Free the jobs table, the kernel table, the store and registry; every
 * device block must be back (the test fails otherwise). */
void stub_daemon_fini(struct stub_daemon *sd);

/* `n` daemons side by side (stub_daemon_init each), in one allocation, or
 * NULL when one cannot be set up. */
struct stub_daemon *stub_daemons_new(unsigned n);

/* stub_daemon_fini each of `n`, last first, and free them. */
void stub_daemons_free(struct stub_daemon *sd, unsigned n);

/* A caller of uid `uid` (gid = uid; uid 1001 is also in group 100). */
struct caller stub_caller(struct stub_daemon *sd, uint32_t uid);

/* Store a tensor of `dtype` and shape `shape` (`rank` sizes) under client
 * text `name` resolved in `owner`'s namespace, owned by `owner` with mode
 * `mode`, its device memory zeroed (or `data`, its bytes, when not NULL).
 * Returns the stored tensor; fails the test on error. */
struct tensor *stub_put(struct stub_daemon *sd, uint32_t owner, const char *name, int dtype,
			unsigned rank, const uint64_t *shape, uint32_t mode, const void *data);

/* The stored tensor of store key "<uid>/<name>", or NULL. */
struct tensor *stub_find(struct stub_daemon *sd, uint32_t uid, const char *name);

/* Device blocks allocated since stub_daemon_init and not freed. */
uint64_t stub_live(const struct stub_daemon *sd);

/* Tensors in the store. */
uint64_t stub_count(struct stub_daemon *sd);

/* Assert that `expr` returns 0, showing caller `call`'s error otherwise. */
#define assert_call_ok(call, expr)                                                   \
	do {                                                                         \
		int r_ = (expr);                                                     \
		if (r_ != 0)                                                         \
			print_error("%d: %s\n", (call)->err.code, (call)->err.message); \
		assert_int_equal(r_, 0);                                             \
	} while (0)

/* ---- building msgpack ---- */

struct mp {
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacked u;
};

/* Start packing into `m`. */
void mp_begin(struct mp *m);

/* Unpack what was packed: the object lives until mp_end. */
const msgpack_object *mp_obj(struct mp *m);

/* Free `m`. */
void mp_end(struct mp *m);

/* Pack a string. */
void mp_str(struct mp *m, const char *s);

/* Pack an array of the strings of NULL-terminated `v`. */
void mp_strs(struct mp *m, const char *const *v);

/* Pack a map of the NULL-terminated "key=value" list `pairs`: a value is a
 * number, true/false, or else a string. */
void mp_kv(struct mp *m, const char *const *pairs);

/* Pack a node map {id, op, inputs[, out][, attrs]}: `out` may be NULL;
 * `attrs` is NULL or a list for mp_kv. */
void mp_node(struct mp *m, const char *id, const char *op, const char *const *inputs, const char *out,
	     const char *const *attrs);

/* Shorthand for a NULL-terminated string array literal. */
#define STRS(...) ((const char *const[]){ __VA_ARGS__, NULL })
