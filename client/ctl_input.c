/* Reading tensorctl's input files, where "-" means standard input. */
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"

/* Read all of `fd` (a pipe or a terminal: no size known) up to `max` bytes.
 * Returns 0, or -EFBIG, -ENOMEM or a read error. */
static int read_stream(int fd, size_t max, char **ret, size_t *ret_len)
{
	size_t n = 0, cap = 0;
	char *buf = NULL;

	for (;;) {
		ssize_t k;

		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64 << 10;
			char *nb;

			if (cap > max) {
				free(buf);
				return -EFBIG;
			}
			nb = realloc(buf, ncap + 1);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap = ncap;
		}
		k = read(fd, buf + n, cap - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			int e = errno;

			free(buf);
			return -e;
		}
		if (k == 0)
			break;
		n += (size_t)k;
		if (n > max) {
			free(buf);
			return -EFBIG;
		}
	}
	buf[n] = '\0';
	*ret = buf;
	*ret_len = n;
	return 0;
}

int ctl_read_input(const char *path, size_t max, char **ret, size_t *ret_len)
{
	struct stat st;
	size_t n = 0;
	char *buf;
	int fd;

	if (strcmp(path, "-") == 0) {
		int r = read_stream(STDIN_FILENO, max, ret, ret_len);

		if (r == -EFBIG)
			return ctl_error("standard input: more than %zu MiB", max >> 20);
		return r < 0 ? ctl_error("standard input: %s", strerror(-r)) : CTL_EXIT_OK;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ctl_error("%s: %s", path, strerror(errno));
	if (fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode))) {
		/* A pipe such as bash's <(...): read it to its end. */
		int r = read_stream(fd, max, ret, ret_len);

		close(fd);
		if (r == -EFBIG)
			return ctl_error("%s: more than %zu MiB", path, max >> 20);
		return r < 0 ? ctl_error("%s: %s", path, strerror(-r)) : CTL_EXIT_OK;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
		close(fd);
		return ctl_error("%s: not a regular file of at most %zu MiB", path, max >> 20);
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return ctl_error("out of memory");
	}
	while (n < (size_t)st.st_size) {
		ssize_t k = read(fd, buf + n, (size_t)st.st_size - n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			int e = errno;

			free(buf);
			close(fd);
			return ctl_error("%s: %s", path, k < 0 ? strerror(e) : "file shrank while read");
		}
		n += (size_t)k;
	}
	close(fd);
	buf[n] = '\0';
	*ret = buf;
	*ret_len = n;
	return CTL_EXIT_OK;
}

int ctl_st_load(const char *path, struct st_file *ret, void **ret_buf, char *err, size_t err_len)
{
	char *buf;
	size_t len;
	int r;

	*ret_buf = NULL;
	if (strcmp(path, "-") != 0)
		return st_load(path, ret, err, err_len);
	r = read_stream(STDIN_FILENO, CTL_STDIN_ST_MAX, &buf, &len);
	if (r < 0) {
		snprintf(err, err_len, "%s", r == -EFBIG ? "more than the 16 GiB read from standard input"
							: strerror(-r));
		return r;
	}
	r = st_parse((const uint8_t *)buf, len, ret, err, err_len);
	if (r < 0) {
		free(buf);
		return r;
	}
	*ret_buf = buf;
	return 0;
}
