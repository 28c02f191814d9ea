/* What the integration programs (test_integration_*.c) share: the daemon they
 * run against, libtensord and raw-socket helpers, and the survivors check.
 *
 * Each program starts one tensord (integration_start), puts two tensors that
 * must outlive every test, runs its cmocka group with test_survivors last,
 * and stops the daemon (integration_finish), which must exit 0 on SIGTERM
 * with a client still connected. */
#pragma once

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <msgpack.h>

#include "buf.h"
#include "daemon_fixture.h"
#include "scan.h"
#include "tensord.h"

/* The daemon of this program (started by integration_start). */
extern struct daemon_fixture D;

/* A msgpack map packed for tensord_call_raw(). */
struct params {
	msgpack_sbuffer sb;
	msgpack_packer pk;
};

/* A raw connection: a blocking socket and what was read from it. */
struct raw {
	int fd;
	struct tdp_buf in;
	struct tdp_scanner scan;
};

/* One message read from a raw connection. */
struct rmsg {
	uint8_t *bytes;
	msgpack_unpacked u;
	const msgpack_object *o;
};

/* `n` pseudo-random bytes from `seed` (splitmix64), the same for a seed. */
void fill_random(void *p, size_t n, uint64_t seed);

/* Seconds of CLOCK_REALTIME. */
double wall_now(void);

/* Sleep `ms` milliseconds. */
void sleep_ms(int ms);

/* A libtensord connection to D; fails the test when none. */
struct tensord *td_open(void);

/* Fail the test with tensord's error when `r` < 0. */
void check_ok(struct tensord *td, int r, const char *what);

/* Fail unless `r` is -TENSORD_EREMOTE with status `code` and a message. */
void expect_remote(struct tensord *td, int r, int code, const char *what);

/* Check a tensor's metadata: name, dtype, shape, bytes, owner (us), version
 * and plausible times. */
void check_info(const struct tensord_tensor_info *in, const char *name,
		enum tensord_dtype dtype, uint32_t rank, const uint64_t *shape,
		uint64_t version);

/* Start a params map of `nkeys` keys. */
void params_init(struct params *p, uint32_t nkeys);

/* Pack a string (fails the test on error). */
void pstr(msgpack_packer *pk, const char *s);

/* Call `method` with the packed map and free it; returns tensord_call_raw's result. */
int call_params(struct tensord *td, const char *method, struct params *p);

/* Pack a tensor.put params map: name, dtype, shape (nshape dims), `data_len`
 * bytes of data, and one extra key when `extra` is set. */
void pack_put(struct params *p, const char *name, const char *dtype,
	      const uint64_t *shape, unsigned nshape, const void *data, size_t data_len,
	      const char *extra);

/* Connect a raw socket to D (fails the test when it cannot). */
void raw_open(struct raw *r);

/* Close a raw socket and free what it buffered. */
void raw_close(struct raw *r);

/* Send all `n` bytes (fails the test on error). */
void raw_send(struct raw *r, const void *p, size_t n);

/* Free a message raw_recv filled (and zero it). */
void rmsg_free(struct rmsg *m);

/* Read the next message: 1 with *m filled, 0 on a clean end of stream (EOF or
 * ECONNRESET, which Linux reports when the daemon closed with bytes of ours
 * unread), -ETIMEDOUT, or -EPROTO when the stream ends inside a message or
 * is no msgpack. */
int raw_recv(struct raw *r, struct rmsg *m, int timeout_ms);

/* Expect the next message to be a response to `msgid`; returns its error
 * object (nil on success) and points *result at the result. */
const msgpack_object *expect_response(struct raw *r, struct rmsg *m, uint32_t msgid,
				      const msgpack_object **result);

/* Check an error map {code, name, message} with status `code`. */
void check_error_object(const msgpack_object *e, int code);

/* The code of an error map (fails the test when it has none). */
int error_code_of(const msgpack_object *e);

/* Expect the protocol.error notification with one of the codes, then the end
 * of the stream. */
void expect_broken_stream(struct raw *r, int code1, int code2, const char *what);

/* Start a request [0, msgid, method, [ {map of nkeys ...; nkeys < 0 packs []. */
void req_begin(msgpack_packer *pk, uint32_t msgid, const char *method, int nkeys);

/* A ping on a fresh connection must succeed: the daemon still serves. */
void ping_ok(void);

/* The unsigned int under `key` of a map (fails the test otherwise). */
uint64_t map_uint(const msgpack_object *map, const char *key);

/* The value under `key` of a map, of msgpack type `type` (a float64 request
 * takes a float32 too; fails the test otherwise). */
const msgpack_object *map_get(const msgpack_object *map, const char *key, int type);

/* The test every program runs last: the tensors integration_start put are
 * intact and the daemon alive. */
void test_survivors(void **state);

/* Start tensord (SIGPIPE ignored) and put the survivors. 0, or -1 with the
 * reason and the daemon's log printed. */
int integration_start(void);

/* Count a dead daemon as a failure, print the log when anything failed, stop
 * tensord with a client connected (it must exit 0). Returns main's status
 * for `failed` (cmocka's count of failed tests). */
int integration_finish(int failed);
