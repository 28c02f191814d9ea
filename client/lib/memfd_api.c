/* Memory files for tensord_put_fd() and tensord_get_fd() (docs/c-api.md,
 * "Passing memory"). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "connection.h"

int tensord_memfd(const void *data, size_t len, int *ret_fd)
{
	unsigned seals = F_SEAL_SHRINK;
	const uint8_t *p = data;
	size_t done = 0;
	int fd;

	if (!ret_fd)
		return -EINVAL;
	fd = memfd_create("tensord", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0)
		goto fail;
	/* For a get, the pages the daemon writes must be the client's, in
	 * memory (docs/protocol.md): touch each one. */
	if (!data && len) {
		volatile uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		long page = sysconf(_SC_PAGESIZE);

		if (m == MAP_FAILED)
			goto fail;
		for (size_t off = 0; off < len; off += (size_t)page)
			m[off] = 0;
		munmap((void *)m, len);
	}
	while (data && done < len) {
		ssize_t n = pwrite(fd, p + done, len - done, (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto fail;
		done += (size_t)n;
	}
	/* A put's bytes may not change while the daemon reads them. */
	if (data)
		seals |= F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;
	if (fcntl(fd, F_ADD_SEALS, seals) < 0)
		goto fail;
	*ret_fd = fd;
	return 0;
fail:
	{
		int err = errno ? -errno : -EIO;

		close(fd);
		return err;
	}
}
