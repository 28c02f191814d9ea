/* Starting and stopping a real tensord for integration tests (see
 * daemon_fixture.h). */
#include "daemon_fixture.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
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

static void remove_dir(struct daemon_fixture *d)
{
	DIR *dir = opendir(d->dir);
	struct dirent *e;
	char path[sizeof(d->dir) + 258];

	if (!dir)
		return;
	while ((e = readdir(dir))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", d->dir, e->d_name);
		unlink(path);
	}
	closedir(dir);
	rmdir(d->dir);
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
	/* TENSORD_CONFIG runs the same tests under other settings (the staging path). */
	if (getenv("TENSORD_CONFIG") && *getenv("TENSORD_CONFIG")) {
		argv[argc++] = "--config";
		argv[argc++] = getenv("TENSORD_CONFIG");
	}
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
