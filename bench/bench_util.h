/* Helpers shared by the benchmark programs (bench_rpc, bench_gpu): time,
 * statistics, Unix sockets, raw msgpack-RPC pipelining, small msgpack and JSON
 * helpers. Not part of libtensord. */
#pragma once

#include <limits.h> /* before msgpack.h, which needs CHAR_MIN */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

struct tensord;

/* Seconds on CLOCK_MONOTONIC. */
double bench_now_s(void);

/* qsort comparator for doubles, ascending. */
int bench_cmp_double(const void *a, const void *b);

/* Nearest-rank percentile (p in [0, 1]) of an array sorted ascending; n > 0. */
double bench_percentile(const double *sorted, size_t n, double p);

/* Arithmetic mean of n > 0 values. */
double bench_mean(const double *v, size_t n);

/* Median of n > 0 values; sorts `v` in place. */
double bench_median(double *v, size_t n);

/* A connected SOCK_STREAM|SOCK_CLOEXEC Unix socket to `path`, or -errno. */
int bench_unix_connect(const char *path);

/* Writes all `len` bytes (MSG_NOSIGNAL, retrying EINTR); 0 or -errno. */
int bench_write_all(int fd, const void *data, size_t len);

/* `path` if set, else $TENSORD_SOCKET if set, else the system socket. */
const char *bench_socket_path(const char *path);

/* Waits up to `wait_s` seconds until `path` accepts connections: 0 or -errno. */
int bench_wait_for_socket(const char *path, unsigned wait_s);

/* Parses a decimal unsigned integer in [min, max] into *ret; 0 or -EINVAL. */
int bench_parse_uint(const char *s, unsigned min, unsigned max, unsigned *ret);

/* The value of string key `key` in msgpack map `map`; NULL when absent or
 * `map` is no map. */
const msgpack_object *bench_map_get(const msgpack_object *map, const char *key);

/* Copies the name of the device `info` marks active into `out` ("?" when
 * unknown); never fails. */
void bench_device_name(struct tensord *td, char *out, size_t out_len);

/* Packs `s` as a msgpack str; 0 or -ENOMEM. */
int bench_pack_str(msgpack_packer *pk, const char *s);

/* Runs `total` (rounded up to whole batches) requests on a fresh raw
 * connection to `path`, `depth` at a time: `batch` (`batch_len` bytes) holds
 * `depth` packed msgpack-RPC requests, written in one go before their
 * `depth` responses are read; every response must be a success. One batch is
 * sent untimed first. On success *ret_ops_per_s is the request rate. When a
 * response is an error, its message goes to `err` (`err_len` bytes; may be
 * NULL) and the result is -EPROTO. */
int bench_pipelined(const char *path, const void *batch, size_t batch_len, unsigned depth,
		    unsigned total, double *ret_ops_per_s, char *err, size_t err_len);

/* Reads `count` msgpack-RPC responses from `fd` through `u`; each must be a
 * success. 0, -EPROTO (an error response: its message in `err`, which may be
 * NULL) or -errno. */
int bench_read_responses(int fd, msgpack_unpacker *u, unsigned count, char *err, size_t err_len);

/* Prints `s` to stdout as a JSON string literal. */
void bench_json_string(const char *s);

/* Prints `v` to stdout as a JSON number, or null when it is NaN or infinite. */
void bench_json_number(double v);
