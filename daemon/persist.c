#include "persist.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access.h"
#include "crc32c.h"
#include "daemon.h"
#include "devices.h"
#include "dtype.h"
#include "errorf.h"
#include "gpu/transfer.h"
#include "log.h"
#include "mode.h"
#include "name.h"
#include "safetensors.h"
#include "store.h"

/* The value of __metadata__ "format": files without it are not ours. */
#define PERSIST_FORMAT "tensord-tensor-1"
/* Every checkpoint file name ends so; st_write's temporary files do not
 * (they end in ".tmp-" and six random characters). */
#define PERSIST_SUFFIX ".safetensors"
#define PERSIST_SUFFIX_LEN (sizeof(PERSIST_SUFFIX) - 1)

/* The tensor name of checkpoint file `file`, into `name`; its length or -EINVAL. */
static int name_of_file(const char *file, char *name)
{
	size_t n = strlen(file);

	if (n <= PERSIST_SUFFIX_LEN || strcmp(file + n - PERSIST_SUFFIX_LEN, PERSIST_SUFFIX) != 0)
		return -EINVAL;
	return tdp_name_from_file(file, n - PERSIST_SUFFIX_LEN, name);
}

struct persist {
	char dir[PATH_MAX];
	int dirfd;
};

int persist_open_subdir(const char *state_dir, const char *sub, char *path, size_t path_len,
			int *ret_fd, char *err, size_t err_len)
{
	int fd;

	if ((size_t)snprintf(path, path_len, "%s/%s", state_dir, sub) >= path_len)
		return tdp_errorf(err, err_len, -ENAMETOOLONG, "state directory path too long");
	if (mkdir(state_dir, 0750) < 0 && errno != EEXIST)
		return tdp_errorf(err, err_len, -errno, "cannot create %s: %s", state_dir, strerror(errno));
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return tdp_errorf(err, err_len, -errno, "cannot create %s: %s", path, strerror(errno));
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return tdp_errorf(err, err_len, -errno, "cannot open %s: %s", path, strerror(errno));
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
	char enc[TDP_NAME_FILE_MAX];
	int n = tdp_name_to_file(name, len, enc, sizeof(enc));

	if (n < 0)
		return n;
	if ((size_t)snprintf(path, cap, "%s/%s" PERSIST_SUFFIX, p->dir, enc) >= cap)
		return -ENAMETOOLONG;
	return 0;
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
	char enc[TDP_NAME_FILE_MAX + PERSIST_SUFFIX_LEN];
	int n = tdp_name_to_file(name, len, enc, TDP_NAME_FILE_MAX);

	if (n < 0)
		return n;
	memcpy(enc + n, PERSIST_SUFFIX, PERSIST_SUFFIX_LEN + 1);
	if (unlinkat(p->dirfd, enc, 0) < 0 && errno != ENOENT)
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

/* Load one file into the store. Returns 1 when loaded, 0 when skipped. */
static int restore_one(struct persist *p, struct daemon *d, const char *file, char *name, size_t len)
{
	char path[PATH_MAX + TDP_NAME_FILE_MAX + 16], why[256];
	struct st_file f = { 0 };
	struct tensor *t = NULL;
	struct gpu_device *g;
	uint64_t version, dev;
	int r;

	snprintf(path, sizeof(path), "%s/%s", p->dir, file);
	r = st_load(path, &f, why, sizeof(why));
	if (r < 0)
		goto skip;
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
		len = name_of_file(de->d_name, name);
		/* A write that never reached its rename. */
		if (len < 0 && strstr(de->d_name, PERSIST_SUFFIX ".tmp-")) {
			if (unlinkat(p->dirfd, de->d_name, 0) == 0)
				log_info("removed the unfinished checkpoint %s/%s", p->dir, de->d_name);
			continue;
		}
		if (len < 0) {
			log_error("checkpoint %s/%s skipped: not the file name of a tensor", p->dir, de->d_name);
			out.skipped++;
			continue;
		}
		if (restore_one(p, d, de->d_name, name, (size_t)len)) {
			struct tensor *t;

			out.tensors++;
			if (store_lookup(d->store, name, (size_t)len, &access_daemon, 0, &t, NULL) == 0)
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
		char name[TDP_MAX_NAME_LEN + 1];
		struct tensor *t;
		int len = name_of_file(de->d_name, name);

		if (de->d_name[0] == '.' || len < 0)
			continue;
		if (store_lookup(s, name, (size_t)len, &access_daemon, 0, &t, NULL) == -ENOENT &&
		    unlinkat(p->dirfd, de->d_name, 0) < 0 && errno != ENOENT)
			r = -errno;
	}
	closedir(dir);
	return r;
}
