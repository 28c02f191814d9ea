/* bench_rpc: tensord's request path against Redis's, measured side by side in
 * one run on the same machine (see bench/README.md).
 *
 * For each server it measures, on one connection:
 *   - round-trip latency of a ping (tensord `ping`, Redis PING): p50, p99, mean;
 *   - pipelined pings (DEPTH requests written before reading the replies);
 *   - throughput of storing and loading one large value (tensord `tensor.put`
 *     / `tensor.get` of an f32 tensor, Redis SET / GET of the same bytes).
 * tensord is driven through libtensord (pipelining through a raw msgpack-RPC
 * socket, since the library is blocking); Redis through the tiny RESP client
 * below, over its Unix socket. Times come from CLOCK_MONOTONIC. */
#include <errno.h>
#include <getopt.h>
#include <limits.h> /* before msgpack.h, which needs CHAR_MIN */
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>

#include "bench_util.h"
#include "tensord.h"

#define BENCH_TENSOR_NAME "bench/rpc/blob"
#define BENCH_REDIS_KEY "bench:rpc:blob"

struct options {
	const char *socket_path;
	const char *redis_path;
	bool json;
	bool no_tensord;
	unsigned pings;
	unsigned warmup;
	unsigned reps;
	unsigned depth;
	unsigned pipelined;
	unsigned wait_s;
	size_t bytes;
};

/* What one server scored; NAN where a measurement did not run. */
struct results {
	bool ran;
	char version[64];
	char device[256];
	double ping_p50_us, ping_p99_us, ping_mean_us;
	double pipe_kops;
	double put_gbs, get_gbs;
};

/* Fill `len` bytes with f32 values that survive a round trip bit for bit. */
static void fill_f32(void *data, size_t len)
{
	float *f = data;

	for (size_t i = 0; i < len / sizeof(float); i++)
		f[i] = (float)(i % 1000003) * 0.5f - 7.25f;
}

/* ---- tensord ---------------------------------------------------------- */

/* `total` pings, `depth` in flight at a time, on a raw msgpack-RPC socket;
 * returns thousands of pings per second through *ret_kops. */
static int tensord_pipelined(const char *path, unsigned depth, unsigned total, double *ret_kops)
{
	msgpack_sbuffer sbuf;
	msgpack_packer pk;
	double ops = 0;
	int r = 0;

	msgpack_sbuffer_init(&sbuf);
	msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
	for (unsigned i = 0; r == 0 && i < depth; i++)
		if (msgpack_pack_array(&pk, 4) || msgpack_pack_uint8(&pk, 0) ||
		    msgpack_pack_uint32(&pk, i) || bench_pack_str(&pk, "ping") ||
		    msgpack_pack_array(&pk, 0))
			r = -ENOMEM;
	if (r == 0)
		r = bench_pipelined(path, sbuf.data, sbuf.size, depth, total, &ops, NULL, 0);
	if (r >= 0)
		*ret_kops = ops / 1e3;
	msgpack_sbuffer_destroy(&sbuf);
	return r;
}

static int bench_tensord(const struct options *opt, double *lat, double *reps,
			 void *data, struct results *res)
{
	const char *path = bench_socket_path(opt->socket_path);
	uint64_t shape[1] = { opt->bytes / sizeof(float) };
	struct tensord *td = NULL;
	void *got = NULL;
	int r;

	r = tensord_connect(path, &td);
	if (r < 0) {
		fprintf(stderr, "bench_rpc: cannot connect to tensord at %s: %s\n", path,
			strerror(-r));
		return r;
	}
	r = tensord_ping(td, res->version, sizeof(res->version));
	if (r < 0)
		goto fail;
	bench_device_name(td, res->device, sizeof(res->device));

	for (unsigned i = 0; i < opt->warmup; i++)
		if ((r = tensord_ping(td, NULL, 0)) < 0)
			goto fail;
	for (unsigned i = 0; i < opt->pings; i++) {
		double t0 = bench_now_s();
		if ((r = tensord_ping(td, NULL, 0)) < 0)
			goto fail;
		lat[i] = (bench_now_s() - t0) * 1e6;
	}
	qsort(lat, opt->pings, sizeof(*lat), bench_cmp_double);
	res->ping_p50_us = bench_percentile(lat, opt->pings, 0.50);
	res->ping_p99_us = bench_percentile(lat, opt->pings, 0.99);
	res->ping_mean_us = bench_mean(lat, opt->pings);

	if (opt->depth > 0) {
		r = tensord_pipelined(path, opt->depth, opt->pipelined, &res->pipe_kops);
		if (r < 0) {
			fprintf(stderr, "bench_rpc: tensord pipelined ping: %s\n", strerror(-r));
			goto fail_quiet;
		}
	}

	/* One untimed put and get each, so first-touch allocation is not timed. */
	for (unsigned i = 0; i <= opt->reps; i++) {
		double t0 = bench_now_s();
		r = tensord_put(td, BENCH_TENSOR_NAME, TENSORD_F32, 1, shape, data, opt->bytes, NULL);
		if (r < 0)
			goto fail;
		if (i > 0)
			reps[i - 1] = (double)opt->bytes / (bench_now_s() - t0) / 1e9;
	}
	res->put_gbs = bench_median(reps, opt->reps);

	/* Both sides read into one buffer reused across repetitions, as a
	 * client streaming tensors would. */
	got = malloc(opt->bytes);
	if (!got) {
		r = -ENOMEM;
		goto fail_quiet;
	}
	for (unsigned i = 0; i <= opt->reps; i++) {
		size_t got_len = 0;
		double t0 = bench_now_s(), dt;

		r = tensord_get_into(td, BENCH_TENSOR_NAME, NULL, got, opt->bytes, &got_len);
		dt = bench_now_s() - t0;
		if (r < 0)
			goto fail;
		if (got_len != opt->bytes || memcmp(got, data, opt->bytes) != 0) {
			fprintf(stderr, "bench_rpc: tensor.get returned other bytes than were put\n");
			r = -EIO;
			goto fail_quiet;
		}
		if (i > 0)
			reps[i - 1] = (double)opt->bytes / dt / 1e9;
	}
	res->get_gbs = bench_median(reps, opt->reps);

	r = tensord_delete(td, BENCH_TENSOR_NAME);
	if (r < 0)
		goto fail;
	res->ran = true;
	free(got);
	tensord_free(td);
	return 0;

fail:
	fprintf(stderr, "bench_rpc: tensord: %s\n", tensord_last_error(td));
fail_quiet:
	free(got);
	tensord_free(td);
	return r < 0 ? r : -EIO;
}

/* ---- Redis: a minimal RESP client ------------------------------------- */

struct resp {
	int fd;
	size_t off, len;
	char buf[64 * 1024];
};

/* Reads more bytes into r->buf; fails on EOF. */
static int resp_fill(struct resp *r)
{
	ssize_t n;

	if (r->off > 0) {
		memmove(r->buf, r->buf + r->off, r->len - r->off);
		r->len -= r->off;
		r->off = 0;
	}
	if (r->len == sizeof(r->buf))
		return -EMSGSIZE;
	do
		n = recv(r->fd, r->buf + r->len, sizeof(r->buf) - r->len, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	r->len += (size_t)n;
	return 0;
}

/* One CRLF-terminated line, without the CRLF, NUL-terminated in `line`. */
static int resp_line(struct resp *r, char *line, size_t cap)
{
	for (;;) {
		char *p = memchr(r->buf + r->off, '\n', r->len - r->off);
		if (p) {
			size_t n = (size_t)(p - (r->buf + r->off));
			if (n == 0 || p[-1] != '\r')
				return -EPROTO;
			n--;
			if (n >= cap)
				return -EMSGSIZE;
			memcpy(line, r->buf + r->off, n);
			line[n] = '\0';
			r->off += n + 2;
			return 0;
		}
		int e = resp_fill(r);
		if (e < 0)
			return e;
	}
}

/* Reads a reply that must be the simple string `want` ("+PONG", "+OK"). */
static int resp_expect(struct resp *r, const char *want)
{
	char line[512];
	int e = resp_line(r, line, sizeof(line));

	if (e < 0)
		return e;
	if (strcmp(line, want) != 0) {
		fprintf(stderr, "bench_rpc: redis replied '%s', expected '%s'\n", line, want);
		return -EPROTO;
	}
	return 0;
}

/* Reads a bulk-string reply into `buf` (`cap` bytes); -ENOBUFS when it is larger. */
static int resp_bulk_into(struct resp *r, void *buf, size_t cap, size_t *ret_len)
{
	char line[512], *end, crlf[2];
	unsigned long long n;
	size_t have;
	uint8_t *data = buf;
	int e;

	if ((e = resp_line(r, line, sizeof(line))) < 0)
		return e;
	if (line[0] != '$' || line[1] == '-') {
		fprintf(stderr, "bench_rpc: redis replied '%s', expected a bulk string\n", line);
		return -EPROTO;
	}
	errno = 0;
	n = strtoull(line + 1, &end, 10);
	if (errno || *end)
		return -EPROTO;
	if (n > cap)
		return -ENOBUFS;
	have = r->len - r->off < n ? r->len - r->off : (size_t)n;
	memcpy(data, r->buf + r->off, have);
	r->off += have;
	/* The rest goes straight into the destination, not through r->buf. */
	while (have < n) {
		ssize_t k = recv(r->fd, data + have, (size_t)n - have, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -ECONNRESET;
		have += (size_t)k;
	}
	for (size_t i = 0; i < 2; i++) {
		if (r->off == r->len && (e = resp_fill(r)) < 0)
			return e;
		crlf[i] = r->buf[r->off++];
	}
	if (crlf[0] != '\r' || crlf[1] != '\n')
		return -EPROTO;
	*ret_len = (size_t)n;
	return 0;
}

/* Reads a small bulk-string reply (at most 1 MiB) into a malloc'd buffer. */
static int resp_bulk(struct resp *r, void **ret_data, size_t *ret_len)
{
	size_t cap = (size_t)1 << 20, len;
	void *data = malloc(cap);
	int e;

	if (!data)
		return -ENOMEM;
	e = resp_bulk_into(r, data, cap, &len);
	if (e < 0) {
		free(data);
		return e;
	}
	*ret_data = data;
	*ret_len = len;
	return 0;
}

static int resp_command(struct resp *r, unsigned argc, const char *const *argv,
			const size_t *lens)
{
	char head[128];
	int e, n;

	n = snprintf(head, sizeof(head), "*%u\r\n", argc);
	if ((e = bench_write_all(r->fd, head, (size_t)n)) < 0)
		return e;
	for (unsigned i = 0; i < argc; i++) {
		n = snprintf(head, sizeof(head), "$%zu\r\n", lens[i]);
		if ((e = bench_write_all(r->fd, head, (size_t)n)) < 0 ||
		    (e = bench_write_all(r->fd, argv[i], lens[i])) < 0 ||
		    (e = bench_write_all(r->fd, "\r\n", 2)) < 0)
			return e;
	}
	return 0;
}

static int resp_ping(struct resp *r)
{
	static const char cmd[] = "*1\r\n$4\r\nPING\r\n";
	int e = bench_write_all(r->fd, cmd, sizeof(cmd) - 1);

	return e < 0 ? e : resp_expect(r, "+PONG");
}

static void redis_version(struct resp *r, char *out, size_t out_len)
{
	static const char *const argv[] = { "INFO", "server" };
	static const size_t lens[] = { 4, 6 };
	void *info = NULL;
	size_t len = 0;
	const char *v;

	snprintf(out, out_len, "?");
	if (resp_command(r, 2, argv, lens) < 0 || resp_bulk(r, &info, &len) < 0)
		return;
	/* NUL-terminate over the last byte, a line end anyway. */
	if (len > 0)
		((char *)info)[len - 1] = '\0';
	if (len > 0 && (v = strstr(info, "redis_version:")))
		snprintf(out, out_len, "%.*s", (int)strcspn(v + 14, "\r\n"), v + 14);
	free(info);
}

static int redis_pipelined(struct resp *r, unsigned depth, unsigned total, double *ret_kops)
{
	static const char cmd[] = "*1\r\n$4\r\nPING\r\n";
	size_t cmd_len = sizeof(cmd) - 1;
	char *batch = malloc(cmd_len * depth);
	unsigned done = 0;
	double t0 = 0;
	int e = 0;

	if (!batch)
		return -ENOMEM;
	for (unsigned i = 0; i < depth; i++)
		memcpy(batch + i * cmd_len, cmd, cmd_len);
	/* Round 0 is the warm-up. */
	for (unsigned round = 0; e >= 0 && done < total; round++) {
		if (round == 1)
			t0 = bench_now_s();
		e = bench_write_all(r->fd, batch, cmd_len * depth);
		for (unsigned i = 0; e >= 0 && i < depth; i++)
			e = resp_expect(r, "+PONG");
		if (round > 0)
			done += depth;
	}
	if (e >= 0)
		*ret_kops = (double)done / (bench_now_s() - t0) / 1e3;
	free(batch);
	return e;
}

static int bench_redis(const struct options *opt, double *lat, double *reps,
		       const void *data, struct results *res)
{
	static struct resp r; /* 64 KiB buffer: not on the stack */
	const char *set_argv[] = { "SET", BENCH_REDIS_KEY, data };
	const size_t set_lens[] = { 3, strlen(BENCH_REDIS_KEY), opt->bytes };
	const char *get_argv[] = { "GET", BENCH_REDIS_KEY };
	const size_t get_lens[] = { 3, strlen(BENCH_REDIS_KEY) };
	void *got = NULL;
	int e = 0;

	r.fd = bench_unix_connect(opt->redis_path);
	r.off = r.len = 0;
	if (r.fd < 0) {
		fprintf(stderr, "bench_rpc: cannot connect to redis at %s: %s\n", opt->redis_path,
			strerror(-r.fd));
		return r.fd;
	}
	redis_version(&r, res->version, sizeof(res->version));
	snprintf(res->device, sizeof(res->device), "host memory");

	for (unsigned i = 0; i < opt->warmup; i++)
		if ((e = resp_ping(&r)) < 0)
			goto fail;
	for (unsigned i = 0; i < opt->pings; i++) {
		double t0 = bench_now_s();
		if ((e = resp_ping(&r)) < 0)
			goto fail;
		lat[i] = (bench_now_s() - t0) * 1e6;
	}
	qsort(lat, opt->pings, sizeof(*lat), bench_cmp_double);
	res->ping_p50_us = bench_percentile(lat, opt->pings, 0.50);
	res->ping_p99_us = bench_percentile(lat, opt->pings, 0.99);
	res->ping_mean_us = bench_mean(lat, opt->pings);

	if (opt->depth > 0 && (e = redis_pipelined(&r, opt->depth, opt->pipelined, &res->pipe_kops)) < 0)
		goto fail;

	for (unsigned i = 0; i <= opt->reps; i++) {
		double t0 = bench_now_s();
		if ((e = resp_command(&r, 3, set_argv, set_lens)) < 0 || (e = resp_expect(&r, "+OK")) < 0)
			goto fail;
		if (i > 0)
			reps[i - 1] = (double)opt->bytes / (bench_now_s() - t0) / 1e9;
	}
	res->put_gbs = bench_median(reps, opt->reps);

	got = malloc(opt->bytes);
	if (!got) {
		e = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i <= opt->reps; i++) {
		size_t got_len = 0;
		double t0 = bench_now_s(), dt;

		if ((e = resp_command(&r, 2, get_argv, get_lens)) < 0 ||
		    (e = resp_bulk_into(&r, got, opt->bytes, &got_len)) < 0)
			goto fail;
		dt = bench_now_s() - t0;
		if (got_len != opt->bytes || memcmp(got, data, opt->bytes) != 0) {
			fprintf(stderr, "bench_rpc: redis GET returned other bytes than were SET\n");
			e = -EIO;
			goto fail;
		}
		if (i > 0)
			reps[i - 1] = (double)opt->bytes / dt / 1e9;
	}
	res->get_gbs = bench_median(reps, opt->reps);

	{
		static const char *const del_argv[] = { "DEL", BENCH_REDIS_KEY };
		const size_t del_lens[] = { 3, strlen(BENCH_REDIS_KEY) };
		if ((e = resp_command(&r, 2, del_argv, del_lens)) < 0 || (e = resp_expect(&r, ":1")) < 0)
			goto fail;
	}
	res->ran = true;
	free(got);
	close(r.fd);
	return 0;

fail:
	fprintf(stderr, "bench_rpc: redis: %s\n", strerror(-e));
	free(got);
	close(r.fd);
	return e;
}

/* ---- report ----------------------------------------------------------- */

struct row {
	const char *key;   /* JSON name */
	const char *label; /* table name */
	const char *unit;
	bool lower_is_better;
	size_t offset; /* of the double in struct results */
};

static double row_value(const struct row *row, const struct results *res)
{
	if (!res->ran)
		return NAN;
	return *(const double *)(const void *)((const char *)res + row->offset);
}

static void print_json(const struct options *opt, const struct row *rows, size_t nrows,
		       const struct results *td, const struct results *rd)
{
	const struct results *sides[2] = { td, rd };
	const char *names[2] = { "tensord", "redis" };

	printf("{\n  \"config\": {\"pings\": %u, \"warmup\": %u, \"reps\": %u, "
	       "\"pipeline_depth\": %u, \"pipelined_pings\": %u, \"value_bytes\": %zu},\n",
	       opt->pings, opt->warmup, opt->reps, opt->depth, opt->pipelined, opt->bytes);
	for (size_t s = 0; s < 2; s++) {
		printf("  \"%s\": ", names[s]);
		if (!sides[s]->ran) {
			printf("null,\n");
			continue;
		}
		printf("{\"version\": ");
		bench_json_string(sides[s]->version);
		printf(", \"device\": ");
		bench_json_string(sides[s]->device);
		for (size_t i = 0; i < nrows; i++) {
			printf(", \"%s\": ", rows[i].key);
			bench_json_number(row_value(&rows[i], sides[s]));
		}
		printf("},\n");
	}
	printf("  \"rows\": [\n");
	for (size_t i = 0; i < nrows; i++) {
		double a = row_value(&rows[i], td), b = row_value(&rows[i], rd);
		printf("    {\"workload\": \"%s\", \"unit\": \"%s\", \"tensord\": ", rows[i].key,
		       rows[i].unit);
		bench_json_number(a);
		printf(", \"redis\": ");
		bench_json_number(b);
		printf(", \"ratio_tensord_over_redis\": ");
		bench_json_number(a / b);
		printf(", \"better\": \"%s\"}%s\n", rows[i].lower_is_better ? "lower" : "higher",
		       i + 1 < nrows ? "," : "");
	}
	printf("  ]\n}\n");
}

static void format_value(char *out, size_t out_len, double v)
{
	if (isnan(v))
		snprintf(out, out_len, "-");
	else
		snprintf(out, out_len, "%.2f", v);
}

static void print_table(const struct options *opt, const struct row *rows, size_t nrows,
			const struct results *td, const struct results *rd)
{
	char size[32];

	if (opt->bytes % (1024 * 1024) == 0)
		snprintf(size, sizeof(size), "%zu MiB", opt->bytes / (1024 * 1024));
	else
		snprintf(size, sizeof(size), "%zu B", opt->bytes);
	if (td->ran)
		printf("tensord %s on %s\n", td->version, td->device);
	if (rd->ran)
		printf("redis   %s\n", rd->version);
	printf("%u pings (after %u warm-up), pipelined pings %u deep, %s value, "
	       "median of %u reps\n\n",
	       opt->pings, opt->warmup, opt->depth, size, opt->reps);
	printf("%-30s %-7s %12s %12s %14s\n", "workload", "unit", "tensord", "redis",
	       "tensord/redis");
	printf("%-30s %-7s %12s %12s %14s\n", "------------------------------", "-------",
	       "------------", "------------", "--------------");
	for (size_t i = 0; i < nrows; i++) {
		double a = row_value(&rows[i], td), b = row_value(&rows[i], rd);
		char label[64], va[32], vb[32], ratio[48];

		if (!rows[i].lower_is_better && strstr(rows[i].key, "pipelined") == NULL)
			snprintf(label, sizeof(label), "%s %s", rows[i].label, size);
		else
			snprintf(label, sizeof(label), "%s", rows[i].label);
		format_value(va, sizeof(va), a);
		format_value(vb, sizeof(vb), b);
		if (isnan(a) || isnan(b))
			snprintf(ratio, sizeof(ratio), "-");
		else
			snprintf(ratio, sizeof(ratio), "%.2fx", a / b);
		printf("%-30s %-7s %12s %12s %9s %s\n", label, rows[i].unit, va, vb, ratio,
		       rows[i].lower_is_better ? "(lower is better)" : "(higher is better)");
	}
	printf("\nratio = tensord / redis: below 1.00x tensord is faster on latency rows,\n"
	       "above 1.00x tensord is faster on throughput rows (GB = 1e9 bytes)\n");
}

/* ---- main ------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench_rpc [--socket PATH] [--redis PATH] [--json] [options]\n"
		"  --socket PATH     tensord socket (default $TENSORD_SOCKET, else\n"
		"                    /run/tensord/tensord.sock)\n"
		"  --redis PATH      Unix socket of a redis-server to compare against\n"
		"  --no-tensord      measure Redis only\n"
		"  --json            machine-readable output\n"
		"  --pings N         timed pings (default 20000)\n"
		"  --warmup N        untimed pings first (default 1000)\n"
		"  --reps N          timed put/get repetitions (default 10)\n"
		"  --size MIB        value size in MiB (default 64)\n"
		"  --depth N         pipelined pings in flight, 0 to skip (default 64)\n"
		"  --pipelined N     pipelined pings in all (default 200000)\n"
		"  --wait SEC        wait up to SEC seconds for the sockets to accept\n");
}

int main(int argc, char **argv)
{
	enum { OPT_SOCKET = 256, OPT_REDIS, OPT_JSON, OPT_NO_TENSORD, OPT_PINGS, OPT_WARMUP,
	       OPT_REPS, OPT_SIZE, OPT_DEPTH, OPT_PIPELINED, OPT_WAIT };
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "redis", required_argument, NULL, OPT_REDIS },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "no-tensord", no_argument, NULL, OPT_NO_TENSORD },
		{ "pings", required_argument, NULL, OPT_PINGS },
		{ "warmup", required_argument, NULL, OPT_WARMUP },
		{ "reps", required_argument, NULL, OPT_REPS },
		{ "size", required_argument, NULL, OPT_SIZE },
		{ "depth", required_argument, NULL, OPT_DEPTH },
		{ "pipelined", required_argument, NULL, OPT_PIPELINED },
		{ "wait", required_argument, NULL, OPT_WAIT },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const struct row rows[] = {
		{ "ping_p50_us", "ping p50", "us", true, offsetof(struct results, ping_p50_us) },
		{ "ping_p99_us", "ping p99", "us", true, offsetof(struct results, ping_p99_us) },
		{ "ping_mean_us", "ping mean", "us", true, offsetof(struct results, ping_mean_us) },
		{ "ping_pipelined_kops", "ping pipelined", "kop/s", false,
		  offsetof(struct results, pipe_kops) },
		{ "put_gbs", "put/SET", "GB/s", false, offsetof(struct results, put_gbs) },
		{ "get_gbs", "get/GET", "GB/s", false, offsetof(struct results, get_gbs) },
	};
	struct options opt = {
		.pings = 20000, .warmup = 1000, .reps = 10, .depth = 64, .pipelined = 200000,
		.bytes = (size_t)64 << 20,
	};
	struct results td = { .ran = false }, rd = { .ran = false };
	double *lat = NULL, *reps = NULL;
	void *data = NULL;
	unsigned mib = 64;
	int c, status = 1;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		int e = 0;
		switch (c) {
		case OPT_SOCKET: opt.socket_path = optarg; break;
		case OPT_REDIS: opt.redis_path = optarg; break;
		case OPT_JSON: opt.json = true; break;
		case OPT_NO_TENSORD: opt.no_tensord = true; break;
		case OPT_PINGS: e = bench_parse_uint(optarg, 1, 100000000, &opt.pings); break;
		case OPT_WARMUP: e = bench_parse_uint(optarg, 0, 100000000, &opt.warmup); break;
		case OPT_REPS: e = bench_parse_uint(optarg, 1, 100000, &opt.reps); break;
		case OPT_SIZE: e = bench_parse_uint(optarg, 1, 1024, &mib); opt.bytes = (size_t)mib << 20; break;
		case OPT_DEPTH: e = bench_parse_uint(optarg, 0, 65536, &opt.depth); break;
		case OPT_PIPELINED: e = bench_parse_uint(optarg, 1, 1000000000, &opt.pipelined); break;
		case OPT_WAIT: e = bench_parse_uint(optarg, 0, 3600, &opt.wait_s); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		if (e < 0) {
			fprintf(stderr, "bench_rpc: bad value for --%s: %s\n", longopts[c - OPT_SOCKET].name,
				optarg);
			return 2;
		}
	}
	if (optind != argc || (opt.no_tensord && !opt.redis_path)) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);

	if (opt.wait_s > 0) {
		const char *paths[2] = {
			opt.no_tensord ? NULL : bench_socket_path(opt.socket_path), opt.redis_path
		};
		for (size_t i = 0; i < 2; i++) {
			int e = paths[i] ? bench_wait_for_socket(paths[i], opt.wait_s) : 0;
			if (e < 0) {
				fprintf(stderr, "bench_rpc: %s does not accept connections: %s\n",
					paths[i], strerror(-e));
				return 1;
			}
		}
	}

	lat = calloc(opt.pings, sizeof(*lat));
	reps = calloc(opt.reps, sizeof(*reps));
	data = malloc(opt.bytes);
	if (!lat || !reps || !data) {
		fprintf(stderr, "bench_rpc: out of memory\n");
		goto out;
	}
	fill_f32(data, opt.bytes);

	if (!opt.no_tensord && bench_tensord(&opt, lat, reps, data, &td) < 0)
		goto out;
	if (opt.redis_path && bench_redis(&opt, lat, reps, data, &rd) < 0)
		goto out;

	if (opt.json)
		print_json(&opt, rows, sizeof(rows) / sizeof(rows[0]), &td, &rd);
	else
		print_table(&opt, rows, sizeof(rows) / sizeof(rows[0]), &td, &rd);
	status = 0;
out:
	free(data);
	free(reps);
	free(lat);
	return status;
}
