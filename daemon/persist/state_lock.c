#include "persist/state_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "errorf.h"
#include "persist/persist_file.h"

/* The pid the holder wrote, or 0 when the file does not hold one yet (the
 * holder took the lock but has not written it). */
static long holder_pid(int fd)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	long pid;

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	pid = strtol(buf, NULL, 10);
	return pid > 0 ? pid : 0;
}

/* Lock `fd` exclusively and write our pid into it. Returns 0 or -errno
 * with the message in `err`. */
static int lock_and_claim(int fd, const char *state_dir, char *err, size_t err_len)
{
	char buf[32];
	int n, r;

	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		long pid;

		r = -errno;
		if (r != -EWOULDBLOCK)
			return tdp_errorf(err, err_len, r, "cannot lock %s/" STATE_LOCK_FILE ": %s",
					  state_dir, strerror(-r));
		pid = holder_pid(fd);
		if (pid)
			return tdp_errorf(err, err_len, r, "state directory %s is in use by another tensord "
					  "(pid %ld holds %s/" STATE_LOCK_FILE "); one daemon per state directory",
					  state_dir, pid, state_dir);
		return tdp_errorf(err, err_len, r, "state directory %s is in use by another tensord "
				  "(starting: %s/" STATE_LOCK_FILE " is locked); one daemon per state directory",
				  state_dir, state_dir);
	}
	n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)n, 0) != n)
		return tdp_errorf(err, err_len, -errno, "cannot write %s/" STATE_LOCK_FILE ": %s",
				  state_dir, strerror(errno));
	return 0;
}

int state_lock_take(const char *state_dir, int *ret_fd, char *err, size_t err_len)
{
	int dfd, fd = -1, r;

	dfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return tdp_errorf(err, err_len, -errno, "cannot open %s: %s", state_dir, strerror(errno));
	/* Another user could otherwise plant the lock file (or a link). */
	r = persist_dir_check(dfd, state_dir, err, err_len);
	if (r < 0)
		goto out;
	fd = openat(dfd, STATE_LOCK_FILE, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = tdp_errorf(err, err_len, -errno, "cannot open %s/" STATE_LOCK_FILE ": %s", state_dir,
			       strerror(errno));
		goto out;
	}
	r = lock_and_claim(fd, state_dir, err, err_len);
	if (r < 0)
		goto out;
	*ret_fd = fd;
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	close(dfd);
	return r;
}
