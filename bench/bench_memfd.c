/* memfd vs socket for tensor.put and tensor.get, measured side by side in one
 * run against one tensord (docs/protocol.md, "Passing memory"):
 *
 *   bench_memfd [--socket PATH | --tensord BIN [--config FILE] [--no-import]]
 *               [--mib N] [--reps N] [--json]
 *
 * --tensord starts BIN itself on a socket in a fresh temporary directory
 * (state there, persist = no, the lines of FILE added: `host_mapped = false`
 * sends the copies through the staging path as on a discrete GPU) and stops
 * it at the end; --no-import sets TENSORD_NO_HOST_IMPORT=1 for it (memfd and
 * plain transfers then copy through the staging buffer instead of the device
 * copying the client's pages itself; docs/architecture.md, "Transfers").
 *
 * Paths, each the median of --reps transfers of an N MiB u8 tensor:
 *   put socket   tensord_put(): the bytes written through the socket
 *   put memfd    tensord_memfd() + tensord_put_fd(): the client copies its
 *                buffer into a fresh sealed memfd, the daemon maps it
 *   put memfd*   tensord_put_fd() of a memfd made once: the data already
 *                lives in shared memory (what a memfd-backed array gives)
 *   get socket   tensord_get_into() a buffer
 *   get memfd    tensord_get_fd() into a memfd made once and mapped
 * and the ratios memfd / socket. The untimed warm-up checks every get after
 * every put against the data. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tensord.h>

#include "bench_util.h"

#define NAME "bench_memfd.x"
#define MAX_REPS 100

enum path { PUT_SOCKET, PUT_MEMFD, PUT_MEMFD_READY, GET_SOCKET, GET_MEMFD, PATH_COUNT };

static const char *const path_names[PATH_COUNT] = {
	"put socket", "put memfd", "put memfd (ready)", "get socket", "get memfd",
};
static const char *const path_keys[PATH_COUNT] = {
	"put_socket", "put_memfd", "put_memfd_ready", "get_socket", "get_memfd",
};

struct bench {
	struct tensord *td;
	uint8_t *data, *back, *map;
	size_t len;
	int ready_fd, get_fd;
};

/* One transfer on `p`, its bytes compared with the data when `check`; 0 or
 * a negative error (message printed). */
static int one(struct bench *b, enum path p, bool check)
{
	uint64_t shape[1] = { b->len };
	struct tensord_tensor_info info;
	size_t got = 0;
	int r = 0, fd;

	switch (p) {
	case PUT_SOCKET:
		r = tensord_put(b->td, NAME, TENSORD_U8, 1, shape, b->data, b->len, NULL);
		break;
	case PUT_MEMFD:
		r = tensord_memfd(b->data, b->len, &fd);
		if (r == 0) {
			r = tensord_put_fd(b->td, NAME, TENSORD_U8, 1, shape, fd, 0, NULL, NULL);
			close(fd);
		}
		break;
	case PUT_MEMFD_READY:
		r = tensord_put_fd(b->td, NAME, TENSORD_U8, 1, shape, b->ready_fd, 0, NULL, NULL);
		break;
	case GET_SOCKET:
		r = tensord_get_into(b->td, NAME, &info, b->back, b->len, &got);
		if (r == 0 && (got != b->len || (check && memcmp(b->back, b->data, b->len) != 0)))
			r = -EIO;
		break;
	case GET_MEMFD:
		r = tensord_get_fd(b->td, NAME, b->get_fd, 0, &info);
		if (r == 0 && (info.bytes != b->len || (check && memcmp(b->map, b->data, b->len) != 0)))
			r = -EIO;
		break;
	default:
		r = -EINVAL;
	}
	if (r < 0)
		fprintf(stderr, "bench_memfd: %s: %s\n", path_names[p],
			r == -EIO ? "the bytes came back different" : tensord_last_error(b->td));
	return r;
}

/* A tensord of our own (--tensord). */
struct own_daemon {
	pid_t pid;
	char dir[64], sock[96], conf[96];
};

/* Start `bin` on a socket in a fresh directory, with `extra` (a config file
 * or NULL) appended to its config. 0 with d->sock serving, or -1 (printed). */
static int daemon_start(struct own_daemon *d, const char *bin, const char *extra, bool no_import)
{
	FILE *f, *x;
	char line[512];

	snprintf(d->dir, sizeof(d->dir), "/tmp/bench-memfd-XXXXXX");
	if (!mkdtemp(d->dir)) {
		perror("bench_memfd: mkdtemp");
		return -1;
	}
	snprintf(d->sock, sizeof(d->sock), "%s/s.sock", d->dir);
	snprintf(d->conf, sizeof(d->conf), "%s/t.conf", d->dir);
	f = fopen(d->conf, "w");
	if (!f)
		return -1;
	fprintf(f, "state_dir = %s/state\npersist = no\n", d->dir);
	if (extra) {
		x = fopen(extra, "r");
		if (!x) {
			fprintf(stderr, "bench_memfd: %s: %s\n", extra, strerror(errno));
			fclose(f);
			return -1;
		}
		while (fgets(line, sizeof(line), x))
			fputs(line, f);
		fclose(x);
	}
	fclose(f);
	d->pid = fork();
	if (d->pid < 0)
		return -1;
	if (d->pid == 0) {
		if (no_import)
			setenv("TENSORD_NO_HOST_IMPORT", "1", 1);
		execl(bin, bin, "--socket", d->sock, "--config", d->conf, "--device", "auto", (char *)NULL);
		perror("bench_memfd: exec");
		_exit(127);
	}
	if (bench_wait_for_socket(d->sock, 60) < 0) {
		fprintf(stderr, "bench_memfd: %s did not serve on %s\n", bin, d->sock);
		return -1;
	}
	return 0;
}

static void daemon_stop(struct own_daemon *d)
{
	char path[128];

	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		waitpid(d->pid, NULL, 0);
	}
	if (!d->dir[0])
		return;
	unlink(d->sock);
	unlink(d->conf);
	snprintf(path, sizeof(path), "%s/state", d->dir);
	rmdir(path);
	rmdir(d->dir);
}

int main(int argc, char **argv)
{
	const char *bin = NULL, *conf = NULL;
	bool no_import = false;
	struct own_daemon own = { .pid = -1 };
	const char *sock = NULL;
	unsigned mib = 256, reps = 5;
	bool json = false;
	double t[PATH_COUNT][MAX_REPS], med[PATH_COUNT];
	struct bench b = { .ready_fd = -1, .get_fd = -1 };
	char dev[256];
	int status = 1;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
			sock = argv[++i];
		else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc &&
			 bench_parse_uint(argv[i + 1], 1, 1024, &mib) == 0)
			i++;
		else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc &&
			 bench_parse_uint(argv[i + 1], 1, MAX_REPS, &reps) == 0)
			i++;
		else if (strcmp(argv[i], "--json") == 0)
			json = true;
		else if (strcmp(argv[i], "--tensord") == 0 && i + 1 < argc)
			bin = argv[++i];
		else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			conf = argv[++i];
		else if (strcmp(argv[i], "--no-import") == 0)
			no_import = true;
		else {
			fprintf(stderr, "usage: bench_memfd [--socket PATH | --tensord BIN [--config FILE] "
				"[--no-import]] [--mib 1..1024] [--reps 1..%d] [--json]\n", MAX_REPS);
			return 2;
		}
	}
	if (bin) {
		if (daemon_start(&own, bin, conf, no_import) < 0) {
			daemon_stop(&own);
			return 1;
		}
		sock = own.sock;
	}
	b.len = (size_t)mib << 20;
	b.data = malloc(b.len);
	b.back = malloc(b.len);
	if (!b.data || !b.back) {
		fprintf(stderr, "bench_memfd: out of memory\n");
		goto out;
	}
	for (size_t i = 0; i < b.len; i++)
		b.data[i] = (uint8_t)(i * 2654435761u >> 13);
	if (tensord_connect(bench_socket_path(sock), &b.td) < 0) {
		fprintf(stderr, "bench_memfd: cannot connect to %s\n", bench_socket_path(sock));
		goto out;
	}
	if (tensord_memfd(b.data, b.len, &b.ready_fd) < 0 || tensord_memfd(NULL, b.len, &b.get_fd) < 0) {
		fprintf(stderr, "bench_memfd: memfd_create failed\n");
		goto out;
	}
	b.map = mmap(NULL, b.len, PROT_READ, MAP_SHARED, b.get_fd, 0);
	if (b.map == MAP_FAILED) {
		b.map = NULL;
		fprintf(stderr, "bench_memfd: mmap: %s\n", strerror(errno));
		goto out;
	}
	bench_device_name(b.td, dev, sizeof(dev));
	/* Untimed warm-up of every path (first-touch page faults, staging),
	 * each get checked after each put. */
	for (int p = 0; p < PATH_COUNT; p++)
		for (int q = GET_SOCKET; p < GET_SOCKET && q < PATH_COUNT; q++)
			if (one(&b, (enum path)p, false) < 0 || one(&b, (enum path)q, true) < 0)
				goto out;
	/* Interleaved, so drift in the machine's load hits every path alike. */
	for (unsigned r = 0; r < reps; r++)
		for (int p = 0; p < PATH_COUNT; p++) {
			double t0 = bench_now_s();

			if (one(&b, (enum path)p, false) < 0)
				goto out;
			t[p][r] = bench_now_s() - t0;
		}
	for (int p = 0; p < PATH_COUNT; p++)
		med[p] = bench_median(t[p], reps);
	if (json) {
		printf("{\"device\":");
		bench_json_string(dev);
		printf(",\"mib\":%u,\"reps\":%u", mib, reps);
		for (int p = 0; p < PATH_COUNT; p++) {
			printf(",\"%s_gbps\":", path_keys[p]);
			bench_json_number((double)b.len / med[p] / 1e9);
		}
		printf(",\"put_ratio\":");
		bench_json_number(med[PUT_SOCKET] / med[PUT_MEMFD]);
		printf(",\"put_ready_ratio\":");
		bench_json_number(med[PUT_SOCKET] / med[PUT_MEMFD_READY]);
		printf(",\"get_ratio\":");
		bench_json_number(med[GET_SOCKET] / med[GET_MEMFD]);
		printf("}\n");
	} else {
		printf("%u MiB u8, median of %u, device %s\n", mib, reps, dev);
		for (int p = 0; p < PATH_COUNT; p++)
			printf("  %-18s %9.2f ms  %6.2f GB/s\n", path_names[p], med[p] * 1e3,
			       (double)b.len / med[p] / 1e9);
		printf("memfd / socket speed-up: put %.2fx (memfd made per put), %.2fx (memfd ready), "
		       "get %.2fx\n", med[PUT_SOCKET] / med[PUT_MEMFD], med[PUT_SOCKET] / med[PUT_MEMFD_READY],
		       med[GET_SOCKET] / med[GET_MEMFD]);
	}
	status = tensord_delete(b.td, NAME) < 0;
out:
	if (b.map)
		munmap(b.map, b.len);
	if (b.ready_fd >= 0)
		close(b.ready_fd);
	if (b.get_fd >= 0)
		close(b.get_fd);
	tensord_free(b.td);
	free(b.data);
	free(b.back);
	daemon_stop(&own);
	return status;
}
