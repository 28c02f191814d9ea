/* bench_batch: small op.runs with and without batching (batch_requests,
 * docs/architecture.md "Batching"), in one run, alternating:
 *   - one connection pipelining `depth` op.runs (add on [elements] f32 with
 *     out) written before their answers are read;
 *   - `clients` connections doing the same at once.
 * It starts two daemons itself (`--tensord PATH`, batch_requests = yes and
 * no, each with a private socket and state directory under a temporary
 * directory), or uses two already running (`--batched SOCK --unbatched
 * SOCK`). Prints ops/s of each (the median of the rounds) and the ratios
 * batched / unbatched; --json for a machine-readable report. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "tensord.h"

#define MAX_CLIENTS 256

struct opts {
	const char *tensord, *device, *sock[2];
	unsigned depth, clients, total, rounds, elements;
	bool json;
};

struct daemon_proc {
	pid_t pid;
	char dir[256], sock[300];
};

struct client {
	const char *path;
	unsigned id, depth, batches;
	pthread_barrier_t *start;
	int r;
	char err[256];
};

/* `depth` requests: op.run add of bb_a and bb_b into bb_out_<id>. */
static int pack_batch(msgpack_sbuffer *sb, unsigned id, unsigned depth)
{
	msgpack_packer pk;
	char out[32];

	snprintf(out, sizeof(out), "bb_out_%u", id);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	for (unsigned i = 0; i < depth; i++)
		if (msgpack_pack_array(&pk, 4) || msgpack_pack_uint8(&pk, 0) ||
		    msgpack_pack_uint32(&pk, i + 1) || bench_pack_str(&pk, "op.run") < 0 ||
		    msgpack_pack_array(&pk, 1) || msgpack_pack_map(&pk, 3) ||
		    bench_pack_str(&pk, "op") < 0 || bench_pack_str(&pk, "add") < 0 ||
		    bench_pack_str(&pk, "inputs") < 0 || msgpack_pack_array(&pk, 2) ||
		    bench_pack_str(&pk, "bb_a") < 0 || bench_pack_str(&pk, "bb_b") < 0 ||
		    bench_pack_str(&pk, "out") < 0 || bench_pack_str(&pk, out) < 0)
			return -ENOMEM;
	return 0;
}

static void *client_run(void *arg)
{
	struct client *c = arg;
	msgpack_sbuffer sb;
	msgpack_unpacker u;
	bool have_u = false;
	int fd = -1, r;

	msgpack_sbuffer_init(&sb);
	r = pack_batch(&sb, c->id, c->depth);
	if (r == 0 && !(have_u = msgpack_unpacker_init(&u, MSGPACK_UNPACKER_INIT_BUFFER_SIZE)))
		r = -ENOMEM;
	if (r == 0) {
		fd = bench_unix_connect(c->path);
		if (fd < 0)
			r = fd;
		/* One untimed batch: the connection and the pipelines warm. */
		if (r == 0 && (r = bench_write_all(fd, sb.data, sb.size)) == 0)
			r = bench_read_responses(fd, &u, c->depth, c->err, sizeof(c->err));
	}
	pthread_barrier_wait(c->start);
	for (unsigned b = 0; r == 0 && b < c->batches; b++)
		if ((r = bench_write_all(fd, sb.data, sb.size)) == 0)
			r = bench_read_responses(fd, &u, c->depth, c->err, sizeof(c->err));
	c->r = r;
	if (fd >= 0)
		close(fd);
	if (have_u)
		msgpack_unpacker_destroy(&u);
	msgpack_sbuffer_destroy(&sb);
	return NULL;
}

/* ops/s of `n` connections to `path` each pipelining `depth` op.runs,
 * `total` op.runs per connection (whole batches); 0 on failure. */
static double run_clients(const char *path, unsigned n, unsigned depth, unsigned total)
{
	struct client c[MAX_CLIENTS];
	pthread_t th[MAX_CLIENTS];
	pthread_barrier_t start;
	unsigned batches = (total + depth - 1) / depth;
	double t0, dt;
	bool ok = true;

	pthread_barrier_init(&start, NULL, n + 1);
	for (unsigned i = 0; i < n; i++) {
		c[i] = (struct client){ .path = path, .id = i, .depth = depth, .batches = batches,
					.start = &start };
		if (pthread_create(&th[i], NULL, client_run, &c[i]) != 0) {
			fprintf(stderr, "bench_batch: cannot start a thread\n");
			exit(1);
		}
	}
	pthread_barrier_wait(&start);
	t0 = bench_now_s();
	for (unsigned i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	dt = bench_now_s() - t0;
	pthread_barrier_destroy(&start);
	for (unsigned i = 0; i < n; i++)
		if (c[i].r < 0) {
			fprintf(stderr, "bench_batch: %s: client %u: %s\n", path, i,
				c[i].err[0] ? c[i].err : strerror(-c[i].r));
			ok = false;
		}
	return ok ? (double)n * batches * depth / dt : 0;
}

static int start_daemon(const struct opts *o, struct daemon_proc *p, const char *tmp, bool batch)
{
	char conf[320];
	FILE *f;

	snprintf(p->dir, sizeof(p->dir), "%s/%s", tmp, batch ? "batched" : "unbatched");
	snprintf(p->sock, sizeof(p->sock), "%s.sock", p->dir);
	snprintf(conf, sizeof(conf), "%s.conf", p->dir);
	f = fopen(conf, "w");
	if (!f)
		return -errno;
	fprintf(f, "socket = %s\nstate_dir = %s\npersist = no\ncheckpoint_interval = 0\n"
		"max_connections = %u\nbatch_requests = %s\n", p->sock, p->dir, MAX_CLIENTS + 8,
		batch ? "yes" : "no");
	fclose(f);
	p->pid = fork();
	if (p->pid < 0)
		return -errno;
	if (p->pid == 0) {
		const char *argv[6] = { o->tensord, "--config", conf, NULL, NULL, NULL };

		if (o->device) {
			argv[3] = "--device";
			argv[4] = o->device;
		}
		execv(o->tensord, (char *const *)argv);
		perror(o->tensord);
		_exit(127);
	}
	return bench_wait_for_socket(p->sock, 60);
}

static void stop_daemon(struct daemon_proc *p)
{
	int st;

	if (p->pid <= 0)
		return;
	kill(p->pid, SIGTERM);
	waitpid(p->pid, &st, 0);
	p->pid = 0;
}

/* Nanoseconds on a CPU of thread `tid` of process `pid`
 * (/proc/PID/task/TID/schedstat); 0 when unknown. */
static uint64_t thread_cpu_ns(pid_t pid, const char *tid)
{
	char path[96];
	unsigned long long ns = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%s/schedstat", (int)pid, tid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &ns) != 1)
		ns = 0;
	fclose(f);
	return ns;
}

/* CPU time of the daemon's loop thread (its main thread) and of the whole
 * process (its threads now: the lavapipe or driver threads included), ns. */
static void daemon_cpu(pid_t pid, uint64_t *loop, uint64_t *all)
{
	char dir[64], tid[24];
	struct dirent *e;
	DIR *d;

	snprintf(tid, sizeof(tid), "%d", (int)pid);
	*loop = thread_cpu_ns(pid, tid);
	*all = 0;
	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	d = opendir(dir);
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			*all += thread_cpu_ns(pid, e->d_name);
	if (d)
		closedir(d);
}

/* bb_a and bb_b of `n` f32 on the daemon at `path`. */
static int setup(const char *path, unsigned n)
{
	struct tensord *td;
	uint64_t shape[1] = { n };
	float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float));
	int r = -ENOMEM;

	if (a && b) {
		for (unsigned i = 0; i < n; i++) {
			a[i] = 1.5f + (float)i;
			b[i] = 2.25f;
		}
		r = tensord_connect(path, &td);
		if (r == 0) {
			if ((r = tensord_put(td, "bb_a", TENSORD_F32, 1, shape, a, n * sizeof(float), NULL)) == 0)
				r = tensord_put(td, "bb_b", TENSORD_F32, 1, shape, b, n * sizeof(float), NULL);
			if (r < 0)
				fprintf(stderr, "bench_batch: setup: %s\n", tensord_last_error(td));
			tensord_free(td);
		}
	}
	free(a);
	free(b);
	return r;
}

static int cmp(const void *a, const void *b)
{
	return bench_cmp_double(a, b);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench_batch [--tensord PATH | --batched SOCK --unbatched SOCK] [options]\n"
		"  --tensord PATH     start two daemons from PATH (default $TENSORD_BIN)\n"
		"  --device D         their --device (default: the config's)\n"
		"  --batched SOCK     a running daemon with batch_requests = yes...\n"
		"  --unbatched SOCK   ...and one with batch_requests = no\n"
		"  --depth N          op.runs written before reading (default 64)\n"
		"  --clients N        connections of the many-clients figure (default 16, max %d)\n"
		"  --total N          op.runs per connection and measurement (default 8192)\n"
		"  --rounds N         alternations; the median is reported (default 3)\n"
		"  --elements N       elements of the f32 operands (default 1)\n"
		"  --json             print a JSON report\n", MAX_CLIENTS);
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "tensord", required_argument, NULL, 't' }, { "device", required_argument, NULL, 'D' },
		{ "batched", required_argument, NULL, 'b' }, { "unbatched", required_argument, NULL, 'u' },
		{ "depth", required_argument, NULL, 'd' }, { "clients", required_argument, NULL, 'c' },
		{ "total", required_argument, NULL, 'n' }, { "rounds", required_argument, NULL, 'r' },
		{ "elements", required_argument, NULL, 'e' }, { "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	int ch, e = 0;

	while (e == 0 && (ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 't': o->tensord = optarg; break;
		case 'D': o->device = optarg; break;
		case 'b': o->sock[1] = optarg; break;
		case 'u': o->sock[0] = optarg; break;
		case 'd': e = bench_parse_uint(optarg, 1, 1024, &o->depth); break;
		case 'c': e = bench_parse_uint(optarg, 1, MAX_CLIENTS, &o->clients); break;
		case 'n': e = bench_parse_uint(optarg, 1, 100000000, &o->total); break;
		case 'r': e = bench_parse_uint(optarg, 1, 1000, &o->rounds); break;
		case 'e': e = bench_parse_uint(optarg, 1, 1 << 24, &o->elements); break;
		case 'j': o->json = true; break;
		case 'h': usage(stdout); exit(0);
		default: e = -EINVAL; break;
		}
	}
	if (e == 0 && (optind != argc || !o->sock[0] != !o->sock[1] ||
		       (!o->sock[0] && !o->tensord)))
		e = -EINVAL;
	return e;
}

int main(int argc, char **argv)
{
	struct opts o = { .tensord = getenv("TENSORD_BIN"), .depth = 64, .clients = 16, .total = 8192,
			  .rounds = 3, .elements = 1 };
	struct daemon_proc dp[2] = { { 0 }, { 0 } };
	double one[2][1000], many[2][1000], med_one[2], med_many[2];
	/* The batched daemon's CPU µs per op.run, loop thread and process, of
	 * each round (only for daemons started here: their pids are known). */
	double cpu[4][1000], med_cpu[4] = { 0, 0, 0, 0 };
	char tmp[] = "/tmp/bench-batch-XXXXXX";
	bool started = false;
	int r = 0;

	if (parse(argc, argv, &o) < 0) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!o.sock[0]) {
		if (!mkdtemp(tmp)) {
			perror("mkdtemp");
			return 1;
		}
		started = true;
		for (int m = 0; m < 2 && r == 0; m++)
			if ((r = start_daemon(&o, &dp[m], tmp, m == 1)) < 0)
				fprintf(stderr, "bench_batch: starting %s: %s\n", o.tensord, strerror(-r));
		o.sock[0] = dp[0].sock;
		o.sock[1] = dp[1].sock;
	}
	for (int m = 0; m < 2 && r == 0; m++)
		r = setup(o.sock[m], o.elements);
	/* Alternating, the order flipped each round: neither mode always runs
	 * on a machine warmed (or loaded) by the other. */
	for (unsigned i = 0; r == 0 && i < o.rounds; i++)
		for (int k = 0; r == 0 && k < 2; k++) {
			int m = (int)((i + (unsigned)k) % 2);

			uint64_t l0, a0, l1, a1, l2, a2;
			double ops = (double)((o.total + o.depth - 1) / o.depth) * o.depth;

			daemon_cpu(dp[m].pid, &l0, &a0);
			one[m][i] = run_clients(o.sock[m], 1, o.depth, o.total);
			daemon_cpu(dp[m].pid, &l1, &a1);
			many[m][i] = run_clients(o.sock[m], o.clients, o.depth, o.total);
			daemon_cpu(dp[m].pid, &l2, &a2);
			if (m == 1) {
				cpu[0][i] = (double)(l1 - l0) / 1e3 / ops;
				cpu[1][i] = (double)(a1 - a0) / 1e3 / ops;
				cpu[2][i] = (double)(l2 - l1) / 1e3 / (ops * o.clients);
				cpu[3][i] = (double)(a2 - a1) / 1e3 / (ops * o.clients);
			}
			if (one[m][i] <= 0 || many[m][i] <= 0)
				r = -EPROTO;
		}
	for (int m = 0; r == 0 && m < 2; m++) {
		qsort(one[m], o.rounds, sizeof(double), cmp);
		qsort(many[m], o.rounds, sizeof(double), cmp);
		med_one[m] = one[m][o.rounds / 2];
		med_many[m] = many[m][o.rounds / 2];
	}
	for (int k = 0; r == 0 && started && k < 4; k++) {
		qsort(cpu[k], o.rounds, sizeof(double), cmp);
		med_cpu[k] = cpu[k][o.rounds / 2];
	}
	if (started) {
		stop_daemon(&dp[0]);
		stop_daemon(&dp[1]);
		for (int m = 0; m < 2; m++) {
			char path[320];

			snprintf(path, sizeof(path), "%s.conf", dp[m].dir);
			unlink(path);
			unlink(dp[m].sock);
			snprintf(path, sizeof(path), "rm -rf '%s'", tmp);
			if (m == 1 && system(path) != 0)
				fprintf(stderr, "bench_batch: cannot remove %s\n", tmp);
		}
	}
	if (r < 0)
		return 1;
	if (o.json) {
		printf("{\"depth\": %u, \"clients\": %u, \"total\": %u, \"rounds\": %u, \"elements\": %u,\n",
		       o.depth, o.clients, o.total, o.rounds, o.elements);
		printf(" \"one_unbatched_ops\": %.1f, \"one_batched_ops\": %.1f, \"one_ratio\": %.3f,\n",
		       med_one[0], med_one[1], med_one[1] / med_one[0]);
		printf(" \"many_unbatched_ops\": %.1f, \"many_batched_ops\": %.1f, \"many_ratio\": %.3f",
		       med_many[0], med_many[1], med_many[1] / med_many[0]);
		if (started)
			printf(",\n \"one_batched_loop_us\": %.3f, \"one_batched_cpu_us\": %.3f,\n"
			       " \"many_batched_loop_us\": %.3f, \"many_batched_cpu_us\": %.3f",
			       med_cpu[0], med_cpu[1], med_cpu[2], med_cpu[3]);
		printf("}\n");
		return 0;
	}
	printf("op.run add on [%u] f32 with out, %u pipelined per connection, %u per connection and "
	       "measurement, median of %u alternating rounds\n", o.elements, o.depth, o.total, o.rounds);
	printf("%-34s %14s %14s %8s\n", "workload", "unbatched/s", "batched/s", "ratio");
	printf("%-34s %14.0f %14.0f %7.2fx\n", "one connection", med_one[0], med_one[1],
	       med_one[1] / med_one[0]);
	printf("%u clients x %-22u %14.0f %14.0f %7.2fx\n", o.clients, o.depth, med_many[0], med_many[1],
	       med_many[1] / med_many[0]);
	if (started)
		printf("batched daemon's CPU per op.run (loop thread / all threads): one connection %.2f / "
		       "%.2f us, %u clients %.2f / %.2f us\n", med_cpu[0], med_cpu[1], o.clients, med_cpu[2],
		       med_cpu[3]);
	return 0;
}
