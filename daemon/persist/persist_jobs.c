#include "persist/persist_jobs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "crc32c.h"
#include "daemon.h"
#include "persist/persist.h"
#include "persist/persist_file.h"
#include "rpc.h"
#include "scan.h"
#include "train/jobs_table.h"

/* MAGIC, the CRC-32C of the rest (4 bytes, little-endian), then one array. */
#define MAGIC "TDJ1"
#define FILE_NAME "jobs"
#define TMP_NAME "jobs.tmp"
#define MAX_FILE ((size_t)64 << 20)

static int open_dir(struct daemon *d, int *ret_fd)
{
	char path[PATH_MAX], err[512];
	int r = persist_open_subdir(d->cfg.state_dir, "jobs", path, sizeof(path), ret_fd, err, sizeof(err));

	if (r < 0)
		log_error("cannot keep jobs in the state directory: %s", err);
	return r;
}

static int write_all(int fd, const void *p, size_t n)
{
	return write(fd, p, n) == (ssize_t)n ? 0 : -(errno ? errno : EIO);
}

int persist_jobs_save(struct daemon *d)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	uint32_t n = 0, crc;
	uint8_t head[8];
	int dirfd, fd = -1, r;
	bool fail = false;

	if (!config_persist_on(&d->cfg))
		return 0;
	r = open_dir(d, &dirfd);
	if (r < 0)
		return r;
	for (struct job_record *rec = jobs_table_head(d); rec; rec = rec->next)
		n++;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	fail = msgpack_pack_array(&pk, n) != 0;
	for (struct job_record *rec = jobs_table_head(d); !fail && rec; rec = rec->next)
		fail = jobs_table_pack_file(&pk, rec) != 0;
	if (fail) {
		r = -ENOMEM;
		goto out;
	}
	crc = tdp_crc32c(0, sb.data, sb.size);
	memcpy(head, MAGIC, 4);
	for (int i = 0; i < 4; i++)
		head[4 + i] = (uint8_t)(crc >> (8 * i));
	errno = 0;
	fd = openat(dirfd, TMP_NAME, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	if ((r = write_all(fd, head, 8)) < 0 || (r = write_all(fd, sb.data, sb.size)) < 0)
		goto out;
	if (fsync(fd) < 0 || close(fd) < 0) {
		fd = -1;
		r = -errno;
		goto out;
	}
	fd = -1;
	if (renameat(dirfd, TMP_NAME, dirfd, FILE_NAME) < 0 || fsync(dirfd) < 0)
		r = -errno;
out:
	if (fd >= 0)
		close(fd);
	if (r < 0) {
		unlinkat(dirfd, TMP_NAME, 0);
		log_error("cannot write %s/jobs/" FILE_NAME ": %s", d->cfg.state_dir, strerror(-r));
	}
	close(dirfd);
	msgpack_sbuffer_destroy(&sb);
	return r;
}

/* Check and decode the file's bytes; add its records to d's table (oldest
 * first, so the table stays newest first). */
static int load(struct daemon *d, const uint8_t *buf, size_t len, uint64_t *ret_loaded, const char **why)
{
	static const struct tdp_scan_limits lim = { MAX_FILE, 8, 1u << 24 };
	struct tdp_scanner sc;
	msgpack_unpacked u;
	uint32_t crc;
	uint64_t loaded = 0;
	int r = 0;

	if (len < 9 || memcmp(buf, MAGIC, 4) != 0) {
		*why = "not a jobs file";
		return -EINVAL;
	}
	crc = (uint32_t)buf[4] | (uint32_t)buf[5] << 8 | (uint32_t)buf[6] << 16 | (uint32_t)buf[7] << 24;
	if (tdp_crc32c(0, buf + 8, len - 8) != crc) {
		*why = "checksum mismatch";
		return -EINVAL;
	}
	msgpack_unpacked_init(&u);
	tdp_scanner_reset(&sc);
	if (tdp_scanner_feed(&sc, buf + 8, len - 8, &lim) != 1 || sc.pos != len - 8 ||
	    tdp_unpack(&u, buf + 8, len - 8) < 0 || u.data.type != MSGPACK_OBJECT_ARRAY) {
		*why = "not one msgpack array";
		r = -EINVAL;
		goto out;
	}
	for (uint32_t i = u.data.via.array.size; i-- > 0 && loaded < JOBS_MAX_RESTORED;) {
		r = jobs_table_restore(d, &u.data.via.array.ptr[i]);
		if (r == -ENOMEM) {
			*why = "out of memory";
			goto out;
		}
		if (r < 0)
			log_warning("jobs file: record %u is damaged, skipped", i);
		else
			loaded++;
	}
	r = 0;
	*ret_loaded = loaded;
out:
	msgpack_unpacked_destroy(&u);
	return r;
}

int persist_jobs_restore(struct daemon *d, uint64_t *ret_loaded)
{
	char why_open[256];
	const char *why = NULL;
	struct stat st;
	uint8_t *buf = NULL;
	uint64_t loaded = 0;
	int dirfd, fd, r = open_dir(d, &dirfd);

	if (r < 0)
		return r;
	fd = persist_file_open(dirfd, FILE_NAME, &st, why_open, sizeof(why_open));
	if (fd == -ENOENT) {
		close(dirfd);
		*ret_loaded = 0;
		return 0;
	}
	if (fd < 0) {
		why = why_open;
		r = fd;
	} else if ((size_t)st.st_size > MAX_FILE) {
		why = "too large";
		r = -EFBIG;
	} else if (!(buf = malloc((size_t)st.st_size + 1)) ||
		   read(fd, buf, (size_t)st.st_size) != (ssize_t)st.st_size) {
		why = "cannot read it";
		r = -EIO;
	} else {
		r = load(d, buf, (size_t)st.st_size, &loaded, &why);
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	if (r < 0 && r != -ENOMEM) {
		/* Kept for a person to look at; the table starts empty. */
		log_warning("%s/jobs/" FILE_NAME ": %s; renamed to " FILE_NAME ".damaged", d->cfg.state_dir,
			    why ? why : strerror(-r));
		renameat(dirfd, FILE_NAME, dirfd, FILE_NAME ".damaged");
		r = 0;
	}
	close(dirfd);
	if (r == 0)
		*ret_loaded = loaded;
	return r;
}
