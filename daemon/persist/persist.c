#include "persist/persist.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "crc32c.h"
#include "daemon.h"
#include "devices.h"
#include "dtype.h"
#include "errorf.h"
#include "gpu/transfer.h"
#include "mode.h"
#include "name.h"
#include "persist/persist_file.h"
#include "safetensors.h"
#include "store/access.h"
#include "store/store.h"

/* The value of __metadata__ "format": files without it are not ours. */
#define PERSIST_FORMAT "tensord-tensor-1"
/* Every checkpoint file name ends so; st_write's temporary files do not
 * (they end in ".tmp-" and six random characters). */
#define PERSIST_SUFFIX ".safetensors"
#define PERSIST_SUFFIX_LEN (sizeof(PERSIST_SUFFIX) - 1)

struct persist {
	char dir[PATH_MAX];
	int dirfd;
};

int persist_open_subdir(const char *state_dir, const char *sub, char *path, size_t path_len,
			int *ret_fd, char *err, size_t err_len)
{
	int sfd, fd, r;

	if ((size_t)snprintf(path, path_len, "%s/%s", state_dir, sub) >= path_len)
		return tdp_errorf(err, err_len, -ENAMETOOLONG, "state directory path too long");
	if (mkdir(state_dir, 0700) < 0 && errno != EEXIST)
		return tdp_errorf(err, err_len, -errno, "cannot create %s: %s", state_dir, strerror(errno));
	/* The directory itself may be a link an administrator made; what it
	 * leads to must be ours and closed to others (docs/durability.md). */
	sfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0)
		return tdp_errorf(err, err_len, -errno, "cannot open %s: %s", state_dir, strerror(errno));
	if ((r = persist_dir_check(sfd, state_dir, err, err_len)) < 0) {
		close(sfd);
		return r;
	}
	if (mkdirat(sfd, sub, 0700) < 0 && errno != EEXIST) {
		r = tdp_errorf(err, err_len, -errno, "cannot create %s: %s", path, strerror(errno));
		close(sfd);
		return r;
	}
	fd = openat(sfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	r = -errno;
	close(sfd);
	if (fd < 0)
		return tdp_errorf(err, err_len, r, "cannot open %s: %s", path,
				  r == -ELOOP || r == -ENOTDIR ? "not a directory (a link is not followed)" : strerror(-r));
	if ((r = persist_dir_check(fd, path, err, err_len)) < 0) {
		close(fd);
		return r;
	}
	/* Every user's data: only the daemon reads the files. */
	if (fchmod(fd, 0700) < 0)
		log_warning("cannot make %s private: %s", path, strerror(errno));
	*ret_fd = fd;
	return 0;
}

int persist_open(const char *state_dir, struct persist **ret, char *err, size_t err_len)
{
	struct persist *p = calloc(1, sizeof(*p));
	int r;

	if (!p)
		return tdp_errorf(err, err_len, -ENOMEM, "out of memory");
	r = persist_open_subdir(state_dir, "tensors", p->dir, sizeof(p->dir), &p->dirfd, err, err_len);
	if (r < 0) {
		free(p);
		return r;
	}
	*ret = p;
	return 0;
}

void persist_free(struct persist *p)
{
	if (!p)
		return;
	if (p->dirfd >= 0)
		close(p->dirfd);
	free(p);
}

int persist_commit(struct persist *p)
{
	return fsync(p->dirfd) < 0 ? -errno : 0;
}

static int file_path(const struct persist *p, const char *name, size_t len, char *path, size_t cap)
{
	char file[PERSIST_FILE_MAX];
	int n = persist_file_name(name, len, PERSIST_SUFFIX, file);

	if (n < 0)
		return n;
	if ((size_t)snprintf(path, cap, "%s/%s", p->dir, file) >= cap)
		return -ENAMETOOLONG;
	return 0;
}

/* TENSORD_FAULT_CHECKPOINT_BYTES (docs/durability.md, "Fault injection"):
 * a tensor of more bytes fails its checkpoint as on a full disk. */
static uint64_t fault_bytes(void)
{
	static int read_env;
	static uint64_t limit;

	if (!read_env) {
		const char *v = getenv("TENSORD_FAULT_CHECKPOINT_BYTES");
		char *end;

		read_env = 1;
		if (v && *v) {
			errno = 0;
			limit = strtoull(v, &end, 10);
			if (errno || *end || *v < '0' || *v > '9') {
				log_warning("TENSORD_FAULT_CHECKPOINT_BYTES=%s is not a byte count: ignored", v);
				limit = 0;
			}
		}
	}
	return limit;
}

int persist_write(struct persist *p, struct daemon *d, const struct tensor *t, char *err,
		  size_t err_len)
{
	char path[PATH_MAX + TDP_NAME_FILE_MAX + 16], owner[16], group[16], mode[TDP_MODE_TEXT_MAX];
	char version[24], created[24], modified[24], crc[16], device[16];
	struct st_entry e = { .name = t->name, .rank = t->rank, .shape = t->shape };
	struct st_meta meta[] = {
		{ "format", PERSIST_FORMAT }, { "tensord_name", t->name }, { "owner", owner },
		{ "group", group }, { "mode", mode }, { "version", version },
		{ "created_ns", created }, { "modified_ns", modified }, { "crc32c", crc },
		{ "device", device },
	};
	void *buf;
	int r, dt = st_dtype_from_tensord(t->dtype);

	if (dt < 0)
		return tdp_errorf(err, err_len, -ENOTSUP, "dtype %s has no safetensors name",
				  tdp_dtype_name(t->dtype));
	e.dtype = (enum st_dtype)dt;
	if ((r = file_path(p, t->name, t->name_len, path, sizeof(path))) < 0)
		return tdp_errorf(err, err_len, r, "no file name for the tensor");
	if (fault_bytes() && t->bytes > fault_bytes())
		return tdp_errorf(err, err_len, -ENOSPC, "%s (TENSORD_FAULT_CHECKPOINT_BYTES)",
				  strerror(ENOSPC));
	buf = malloc(t->bytes ? t->bytes : 1);
	if (!buf)
		return tdp_errorf(err, err_len, -ENOMEM, "out of memory for %" PRIu64 " bytes", t->bytes);
	r = gpu_download(devices_of(d, t), &t->alloc, buf);
	if (r < 0) {
		free(buf);
		return tdp_errorf(err, err_len, r, "reading from the device: %s", strerror(-r));
	}
	snprintf(owner, sizeof(owner), "%" PRIu32, t->owner);
	snprintf(group, sizeof(group), "%" PRIu32, t->group);
	tdp_mode_format(t->mode, mode);
	snprintf(version, sizeof(version), "%" PRIu64, t->version);
	snprintf(created, sizeof(created), "%" PRId64, t->created_ns);
	snprintf(modified, sizeof(modified), "%" PRId64, t->modified_ns);
	snprintf(crc, sizeof(crc), "%08" PRIx32, tdp_crc32c(0, buf, t->bytes));
	snprintf(device, sizeof(device), "%" PRIu32, t->device);
	e.data = buf;
	r = st_write(path, &e, 1, meta, sizeof(meta) / sizeof(meta[0]), err, err_len);
	free(buf);
	return r;
}

int persist_remove(struct persist *p, const char *name, size_t len)
{
	char file[PERSIST_FILE_MAX];
	int n = persist_file_name(name, len, PERSIST_SUFFIX, file);

	if (n < 0)
		return n;
	if (unlinkat(p->dirfd, file, 0) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static int parse_u64_text(const char *s, uint64_t max, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int parse_i64_text(const char *s, int64_t *ret)
{
	char *end;
	long long v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* Check the parsed file `f` of tensor `name` and fill `t` from it (all but
 * the device memory). Returns 0 or -EINVAL with the reason in `why`. */
static int check_file(const struct st_file *f, const char *name, size_t len, const struct daemon *d,
		      struct tensor *t, char *why, size_t why_len)
{
	const struct st_tensor *st;
	const char *crc_text, *mode_text;
	uint64_t v, crc;
	int dt;

	if (!st_meta_get(f, "format") || strcmp(st_meta_get(f, "format"), PERSIST_FORMAT) != 0)
		return tdp_errorf(why, why_len, -EINVAL, "no __metadata__ format \"%s\"", PERSIST_FORMAT);
	if (f->ntensors != 1)
		return tdp_errorf(why, why_len, -EINVAL, "%zu tensors in the file, not 1", f->ntensors);
	st = &f->tensors[0];
	if (!st_meta_get(f, "tensord_name") || strcmp(st_meta_get(f, "tensord_name"), name) != 0 ||
	    strcmp(st->name, name) != 0)
		return tdp_errorf(why, why_len, -EINVAL, "the names inside do not match the file name");
	dt = st_dtype_to_tensord((int)st->dtype);
	if (dt < 0)
		return tdp_errorf(why, why_len, -EINVAL, "dtype %s is not one tensord stores",
				  st_dtype_name((int)st->dtype));
	memset(t, 0, sizeof(*t));
	memcpy(t->name, name, len + 1);
	t->name_len = len;
	t->dtype = dt;
	t->rank = st->rank;
	memcpy(t->shape, st->shape, st->rank * sizeof(st->shape[0]));
	if (tdp_shape_count(t->shape, t->rank, tdp_dtype_size(dt), &t->count) < 0)
		return tdp_errorf(why, why_len, -EINVAL, "the shape overflows");
	t->bytes = t->count * tdp_dtype_size(dt);
	if (t->bytes != st->end - st->begin)
		return tdp_errorf(why, why_len, -EINVAL, "size mismatch");
	if (t->bytes > d->cfg.max_tensor_bytes)
		return tdp_errorf(why, why_len, -EFBIG, "%" PRIu64 " bytes is over max_tensor_bytes", t->bytes);
	if (parse_u64_text(st_meta_get(f, "owner"), UINT32_MAX, &v) < 0)
		return tdp_errorf(why, why_len, -EINVAL, "bad owner");
	t->owner = (uint32_t)v;
	if (parse_u64_text(st_meta_get(f, "group"), UINT32_MAX, &v) < 0)
		return tdp_errorf(why, why_len, -EINVAL, "bad group");
	t->group = (uint32_t)v;
	mode_text = st_meta_get(f, "mode");
	if (!mode_text || tdp_mode_parse(mode_text, strlen(mode_text), &t->mode) < 0)
		return tdp_errorf(why, why_len, -EINVAL, "bad mode");
	if (parse_u64_text(st_meta_get(f, "version"), UINT64_MAX, &t->version) < 0 || !t->version)
		return tdp_errorf(why, why_len, -EINVAL, "bad version");
	if (parse_i64_text(st_meta_get(f, "created_ns"), &t->created_ns) < 0 ||
	    parse_i64_text(st_meta_get(f, "modified_ns"), &t->modified_ns) < 0)
		return tdp_errorf(why, why_len, -EINVAL, "bad times");
	crc_text = st_meta_get(f, "crc32c");
	if (!crc_text || strlen(crc_text) != 8 || strspn(crc_text, "0123456789abcdef") != 8)
		return tdp_errorf(why, why_len, -EINVAL, "no crc32c");
	crc = strtoull(crc_text, NULL, 16);
	if (tdp_crc32c(0, st->data, t->bytes) != (uint32_t)crc)
		return tdp_errorf(why, why_len, -EINVAL, "checksum mismatch");
	return 0;
}

/* Map file `file` of the directory (never following a link or waiting on a
 * FIFO) and parse it into `f`. Returns 0 or -errno with the reason in `why`. */
static int load_at(const struct persist *p, const char *file, struct st_file *f, char *why,
		   size_t why_len)
{
	struct stat st;
	void *base;
	int r, fd = persist_file_open(p->dirfd, file, &st, why, why_len);

	if (fd < 0)
		return fd;
	if (st.st_size < 8) {
		close(fd);
		return tdp_errorf(why, why_len, -EINVAL, "%lld bytes is too short", (long long)st.st_size);
	}
	base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	r = -errno;
	close(fd);
	if (base == MAP_FAILED)
		return tdp_errorf(why, why_len, r, "mmap: %s", strerror(-r));
	r = st_parse(base, (size_t)st.st_size, f, why, why_len);
	if (r < 0) {
		munmap(base, (size_t)st.st_size);
		return r;
	}
	f->base = base;
	f->base_len = (size_t)st.st_size;
	return 0;
}

/* The tensor name of parsed file `file` into `name` (from the file name, or
 * for a hashed file name from the metadata, checked against the file
 * name). Returns its length or -EINVAL. */
static int name_in_file(const struct st_file *f, const char *file, char *name)
{
	int len = persist_file_parse(file, PERSIST_SUFFIX, name);
	const char *inside = st_meta_get(f, "tensord_name");

	if (len != -EAGAIN)
		return len;
	if (!inside || !tdp_name_valid(inside, strlen(inside)) || !persist_file_is_of(file, inside, PERSIST_SUFFIX))
		return -EINVAL;
	memcpy(name, inside, strlen(inside) + 1);
	return (int)strlen(inside);
}

/* Load one file into the store (its tensor's name into `name`). Returns 1
 * when loaded, 0 when skipped. */
static int restore_one(struct persist *p, struct daemon *d, const char *file, char *name)
{
	char path[PATH_MAX + TDP_NAME_FILE_MAX + 16], why[256];
	struct st_file f = { 0 };
	struct tensor *t = NULL;
	struct gpu_device *g;
	uint64_t version, dev;
	size_t len;
	int r;

	snprintf(path, sizeof(path), "%s/%s", p->dir, file);
	r = load_at(p, file, &f, why, sizeof(why));
	if (r < 0)
		goto skip;
	r = name_in_file(&f, file, name);
	if (r < 0) {
		snprintf(why, sizeof(why), "the name inside does not match the file name");
		goto skip;
	}
	len = (size_t)r;
	t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(why, sizeof(why), "out of memory");
		goto skip;
	}
	if (check_file(&f, name, len, d, t, why, sizeof(why)) < 0)
		goto skip;
	if (!store_has_room(d->store)) {
		snprintf(why, sizeof(why), "the store holds max_tensors tensors");
		goto skip;
	}
	/* Back to its device when that still exists (docs/devices.md). */
	t->device = parse_u64_text(st_meta_get(&f, "device"), UINT32_MAX, &dev) == 0 && dev < d->ngpus ?
		    (uint32_t)dev : devices_default(d, t->owner, t->bytes);
	g = devices_of(d, t);
	r = gpu_memory_alloc(g, t->bytes, &t->alloc);
	if (r < 0) {
		snprintf(why, sizeof(why), "no device memory for %" PRIu64 " bytes: %s", t->bytes,
			 strerror(-r));
		goto skip;
	}
	r = gpu_upload(g, &t->alloc, f.tensors[0].data);
	if (r < 0) {
		snprintf(why, sizeof(why), "uploading: %s", strerror(-r));
		gpu_memory_free(g, &t->alloc);
		goto skip;
	}
	version = t->version;
	/* The store's tensor limit was checked; quotas are not: these tensors
	 * were admitted before. */
	if (store_quota_check(d->store, t->owner, 0, 0, NULL) < 0 || store_put(d->store, t) < 0) {
		snprintf(why, sizeof(why), "out of memory");
		gpu_memory_free(g, &t->alloc);
		goto skip;
	}
	t->version = version;
	store_mark_clean(d->store, t);
	st_close(&f);
	return 1;
skip:
	log_error("checkpoint %s skipped: %s", path, why);
	free(t);
	st_close(&f);
	return 0;
}

int persist_restore(struct persist *p, struct daemon *d, struct persist_restored *ret)
{
	struct persist_restored out = { 0 };
	int fd = dup(p->dirfd);
	struct dirent *de;
	DIR *dir;

	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return -errno;
	}
	rewinddir(dir);
	while ((de = readdir(dir))) {
		char name[TDP_MAX_NAME_LEN + 1];
		int len;

		if (de->d_name[0] == '.')
			continue;
		len = persist_file_parse(de->d_name, PERSIST_SUFFIX, name);
		/* A write that never reached its rename. */
		if (len < 0 && strstr(de->d_name, PERSIST_SUFFIX ".tmp-")) {
			if (unlinkat(p->dirfd, de->d_name, 0) == 0)
				log_info("removed the unfinished checkpoint %s/%s", p->dir, de->d_name);
			continue;
		}
		if (len < 0 && len != -EAGAIN) {
			log_error("checkpoint %s/%s skipped: not the file name of a tensor", p->dir, de->d_name);
			out.skipped++;
			continue;
		}
		if (restore_one(p, d, de->d_name, name)) {
			struct tensor *t;

			out.tensors++;
			if (store_lookup(d->store, name, strlen(name), &access_daemon, 0, &t, NULL) == 0)
				out.bytes += t->bytes;
		} else {
			out.skipped++;
		}
	}
	closedir(dir);
	*ret = out;
	return 0;
}

int persist_reconcile(struct persist *p, struct store *s)
{
	int fd = dup(p->dirfd), r = 0;
	struct dirent *de;
	DIR *dir;

	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return -errno;
	}
	rewinddir(dir);
	while ((de = readdir(dir))) {
		char name[TDP_MAX_NAME_LEN + 1], why[128];
		struct st_file f = { 0 };
		struct tensor *t;
		int len = persist_file_parse(de->d_name, PERSIST_SUFFIX, name);

		if (de->d_name[0] == '.' || (len < 0 && len != -EAGAIN))
			continue;
		/* A hashed file name: the name is inside. */
		if (len == -EAGAIN) {
			len = load_at(p, de->d_name, &f, why, sizeof(why)) < 0 ? -EINVAL :
			      name_in_file(&f, de->d_name, name);
			st_close(&f);
			if (len < 0)
				continue;
		}
		if (store_lookup(s, name, (size_t)len, &access_daemon, 0, &t, NULL) == -ENOENT &&
		    unlinkat(p->dirfd, de->d_name, 0) < 0 && errno != ENOENT)
			r = -errno;
	}
	closedir(dir);
	return r;
}
