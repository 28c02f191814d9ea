/* Starting and stopping a real tensord for integration tests (see
 * daemon_fixture.h). */
#include "daemon_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

void daemon_dump_log(const struct daemon_fixture *d)
{
	char line[1024];
	FILE *f = fopen(d->log, "re");

	fprintf(stderr, "---- tensord log (%s) ----\n", d->log);
	if (!f) {
		fprintf(stderr, "(cannot open: %s)\n", strerror(errno));
		return;
	}
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
	fprintf(stderr, "---- end of tensord log ----\n");
}

static void describe_status(int status)
{
	if (WIFEXITED(status))
		fprintf(stderr, "tensord exited with status %d\n", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		fprintf(stderr, "tensord was killed by signal %d (%s)\n", WTERMSIG(status),
			strsignal(WTERMSIG(status)));
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

/* The temporary directory and everything in it (the state directory too). */
static void remove_dir(struct daemon_fixture *d)
{
	nftw(d->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* dir/test-state.conf: `state_dir = dir/state` and `persist = no`, then the
 * lines of $TENSORD_CONFIG when it is set. Every test daemon keeps its state
 * (the pipeline cache) there and never touches /var/lib/tensord; persistence
 * stays off as without --state-dir. Returns 0 or -1. */
static int write_state_config(const struct daemon_fixture *d, char *conf, size_t conf_len)
{
	const char *extra = getenv("TENSORD_CONFIG");
	FILE *out, *in;
	char buf[4096];
	size_t n;
	int r = 0;

	snprintf(conf, conf_len, "%s/test-state.conf", d->dir);
	out = fopen(conf, "we");
	if (!out)
		return -1;
	fprintf(out, "state_dir = %s/state\npersist = no\n", d->dir);
	if (extra && *extra) {
		in = fopen(extra, "re");
		if (!in) {
			fclose(out);
			return -1;
		}
		while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
			fwrite(buf, 1, n, out);
		fclose(in);
	}
	if (ferror(out))
		r = -1;
	if (fclose(out) != 0)
		r = -1;
	return r;
}

int daemon_connect_raw(const struct daemon_fixture *d)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d->sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

bool daemon_alive(struct daemon_fixture *d)
{
	pid_t r;

	if (d->reaped || d->pid <= 0)
		return false;
	r = waitpid(d->pid, &d->status, WNOHANG);
	if (r == d->pid) {
		d->reaped = true;
		return false;
	}
	return true;
}

int daemon_time_scale(void)
{
	const char *v = getenv("TENSORD_TEST_TIME_SCALE");
	int scale = v ? atoi(v) : 1;

	return scale < 1 ? 1 : scale > 1000 ? 1000 : scale;
}

int daemon_start(struct daemon_fixture *d, const char *const *extra, int timeout_s)
{
	const char *bin = getenv("TENSORD_BIN");
	const char *argv[32];
	char conf[sizeof(d->dir) + 32];
	int argc = 0;
	double deadline;
	pid_t parent = getpid();

	memset(d, 0, sizeof(*d));
	if (!bin || !*bin) {
		fprintf(stderr, "TENSORD_BIN is not set\n");
		return -1;
	}
	snprintf(d->dir, sizeof(d->dir), "/tmp/tensord-test-XXXXXX");
	if (!mkdtemp(d->dir)) {
		perror("mkdtemp");
		return -1;
	}
	snprintf(d->sock, sizeof(d->sock), "%s/s.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/tensord.log", d->dir);

	argv[argc++] = bin;
	argv[argc++] = "--socket";
	argv[argc++] = d->sock;
	argv[argc++] = "--device";
	argv[argc++] = "auto";
	/* A private state directory; TENSORD_CONFIG, copied into the same
	 * file, runs the same tests under other settings (the staging path). */
	if (write_state_config(d, conf, sizeof(conf)) < 0) {
		perror("test-state.conf");
		remove_dir(d);
		return -1;
	}
	argv[argc++] = "--config";
	argv[argc++] = conf;
	for (int i = 0; extra && extra[i] && argc < 31; i++)
		argv[argc++] = extra[i];
	argv[argc] = NULL;

	fflush(stdout);
	fflush(stderr);
	d->pid = fork();
	if (d->pid < 0) {
		perror("fork");
		return -1;
	}
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

		/* never outlive the test, even when it crashes */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(127);
		if (fd < 0 || null < 0 || dup2(null, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(127);
		execv(bin, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}

	timeout_s *= daemon_time_scale();
	deadline = now() + timeout_s;
	for (;;) {
		int fd = daemon_connect_raw(d);

		if (fd >= 0) {
			close(fd);
			return 0;
		}
		if (!daemon_alive(d)) {
			fprintf(stderr, "tensord exited before serving\n");
			describe_status(d->status);
			daemon_dump_log(d);
			remove_dir(d);
			return -1;
		}
		if (now() > deadline) {
			fprintf(stderr, "tensord did not accept connections within %d s\n",
				timeout_s);
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &d->status, 0);
			d->reaped = true;
			daemon_dump_log(d);
			remove_dir(d);
			return -1;
		}
		sleep_ms(20);
	}
}

int daemon_stop(struct daemon_fixture *d, int timeout_s)
{
	double deadline;
	int ok;

	timeout_s *= daemon_time_scale();
	deadline = now() + timeout_s;

	if (d->pid <= 0)
		return -1;
	if (!d->reaped) {
		if (!daemon_alive(d)) {
			fprintf(stderr, "tensord died before it was asked to stop\n");
		} else {
			kill(d->pid, SIGTERM);
			while (daemon_alive(d) && now() < deadline)
				sleep_ms(10);
			if (!d->reaped) {
				fprintf(stderr, "tensord did not exit within %d s of SIGTERM\n",
					timeout_s);
				kill(d->pid, SIGKILL);
				waitpid(d->pid, &d->status, 0);
				d->reaped = true;
				daemon_dump_log(d);
				remove_dir(d);
				return -1;
			}
		}
	}
	ok = WIFEXITED(d->status) && WEXITSTATUS(d->status) == 0;
	if (!ok) {
		describe_status(d->status);
		daemon_dump_log(d);
	}
	remove_dir(d);
	d->pid = 0;
	return ok ? 0 : -1;
}

long daemon_vm_peak_kib(const struct daemon_fixture *d)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPeak: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}
