/* Helpers shared by the benchmark programs; see bench_util.h. */
#include "bench_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tensord.h"

double bench_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double bench_percentile(const double *sorted, size_t n, double p)
{
	size_t rank = (size_t)ceil(p * (double)n);

	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return sorted[rank - 1];
}

double bench_mean(const double *v, size_t n)
{
	double sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += v[i];
	return sum / (double)n;
}

double bench_median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int bench_unix_connect(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	memcpy(addr.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

int bench_write_all(int fd, const void *data, size_t len)
{
	const char *p = data;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

const char *bench_socket_path(const char *path)
{
	const char *env;

	if (path)
		return path;
	env = getenv("TENSORD_SOCKET");
	return env && *env ? env : "/run/tensord/tensord.sock";
}

int bench_wait_for_socket(const char *path, unsigned wait_s)
{
	double deadline = bench_now_s() + wait_s;
	int fd;

	for (;;) {
		fd = bench_unix_connect(path);
		if (fd >= 0) {
			close(fd);
			return 0;
		}
		if ((fd != -ENOENT && fd != -ECONNREFUSED) || bench_now_s() >= deadline)
			return fd;
		nanosleep(&(struct timespec){ .tv_nsec = 50 * 1000 * 1000 }, NULL);
	}
}

int bench_parse_uint(const char *s, unsigned min, unsigned max, unsigned *ret)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
		return -EINVAL;
	*ret = (unsigned)v;
	return 0;
}

const msgpack_object *bench_map_get(const msgpack_object *map, const char *key)
{
	size_t klen = strlen(key);

	if (map->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (uint32_t i = 0; i < map->via.map.size; i++) {
		const msgpack_object_kv *kv = &map->via.map.ptr[i];
		if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == klen &&
		    memcmp(kv->key.via.str.ptr, key, klen) == 0)
			return &kv->val;
	}
	return NULL;
}

void bench_device_name(struct tensord *td, char *out, size_t out_len)
{
	void *raw = NULL;
	size_t raw_len = 0, off = 0;
	msgpack_unpacked msg;
	const msgpack_object *devs;

	snprintf(out, out_len, "?");
	if (tensord_info_raw(td, &raw, &raw_len) < 0)
		return;
	msgpack_unpacked_init(&msg);
	if (msgpack_unpack_next(&msg, raw, raw_len, &off) == MSGPACK_UNPACK_SUCCESS &&
	    (devs = bench_map_get(&msg.data, "devices")) && devs->type == MSGPACK_OBJECT_ARRAY) {
		for (uint32_t i = 0; i < devs->via.array.size; i++) {
			const msgpack_object *dev = &devs->via.array.ptr[i];
			const msgpack_object *active = bench_map_get(dev, "active");
			const msgpack_object *name = bench_map_get(dev, "name");
			if (active && active->type == MSGPACK_OBJECT_BOOLEAN && active->via.boolean &&
			    name && name->type == MSGPACK_OBJECT_STR) {
				snprintf(out, out_len, "%.*s", (int)name->via.str.size,
					 name->via.str.ptr);
				break;
			}
		}
	}
	msgpack_unpacked_destroy(&msg);
	free(raw);
}

int bench_pack_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n) ? -ENOMEM : 0;
}

/* The message of a response's error map, for reports. */
static void error_message(const msgpack_object *e, char *err, size_t err_len)
{
	const msgpack_object *name = bench_map_get(e, "name");
	const msgpack_object *msg = bench_map_get(e, "message");

	if (!err || err_len == 0)
		return;
	snprintf(err, err_len, "%.*s: %.*s",
		 name && name->type == MSGPACK_OBJECT_STR ? (int)name->via.str.size : 1,
		 name && name->type == MSGPACK_OBJECT_STR ? name->via.str.ptr : "?",
		 msg && msg->type == MSGPACK_OBJECT_STR ? (int)msg->via.str.size : 1,
		 msg && msg->type == MSGPACK_OBJECT_STR ? msg->via.str.ptr : "?");
}

/* Reads responses from `fd` until `count` arrived; each must be a success. */
int bench_read_responses(int fd, msgpack_unpacker *u, unsigned count, char *err, size_t err_len)
{
	msgpack_unpacked msg;
	unsigned got = 0;
	int r = 0;

	msgpack_unpacked_init(&msg);
	while (got < count) {
		msgpack_unpack_return ur = msgpack_unpacker_next(u, &msg);
		if (ur == MSGPACK_UNPACK_SUCCESS) {
			const msgpack_object *o = &msg.data;
			if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 4 ||
			    o->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
			    o->via.array.ptr[0].via.u64 != 1) {
				if (err && err_len)
					snprintf(err, err_len, "a message that is no response");
				r = -EPROTO;
				break;
			}
			if (o->via.array.ptr[2].type != MSGPACK_OBJECT_NIL) {
				error_message(&o->via.array.ptr[2], err, err_len);
				r = -EPROTO;
				break;
			}
			got++;
			continue;
		}
		if (ur != MSGPACK_UNPACK_CONTINUE) {
			if (err && err_len)
				snprintf(err, err_len, "the reply is no msgpack");
			r = -EPROTO;
			break;
		}
		if (!msgpack_unpacker_reserve_buffer(u, 64 * 1024)) {
			r = -ENOMEM;
			break;
		}
		ssize_t n = recv(fd, msgpack_unpacker_buffer(u), msgpack_unpacker_buffer_capacity(u), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : -ECONNRESET;
			break;
		}
		msgpack_unpacker_buffer_consumed(u, (size_t)n);
	}
	msgpack_unpacked_destroy(&msg);
	return r;
}

int bench_pipelined(const char *path, const void *batch, size_t batch_len, unsigned depth,
		    unsigned total, double *ret_ops_per_s, char *err, size_t err_len)
{
	msgpack_unpacker u;
	unsigned done = 0;
	double t0;
	int fd, r;

	if (depth == 0)
		return -EINVAL;
	fd = bench_unix_connect(path);
	if (fd < 0)
		return fd;
	if (!msgpack_unpacker_init(&u, MSGPACK_UNPACKER_INIT_BUFFER_SIZE)) {
		close(fd);
		return -ENOMEM;
	}
	/* Warm-up batch, then the timed ones. */
	r = bench_write_all(fd, batch, batch_len);
	if (r >= 0)
		r = bench_read_responses(fd, &u, depth, err, err_len);
	t0 = bench_now_s();
	while (r >= 0 && done < total) {
		r = bench_write_all(fd, batch, batch_len);
		if (r >= 0)
			r = bench_read_responses(fd, &u, depth, err, err_len);
		done += depth;
	}
	if (r >= 0)
		*ret_ops_per_s = (double)done / (bench_now_s() - t0);
	msgpack_unpacker_destroy(&u);
	close(fd);
	return r;
}

void bench_json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

void bench_json_number(double v)
{
	if (isnan(v) || isinf(v))
		printf("null");
	else
		printf("%.10g", v);
}
