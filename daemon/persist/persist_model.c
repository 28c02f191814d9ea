#include "persist/persist_model.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "crc32c.h"
#include "daemon.h"
#include "errorf.h"
#include "name.h"
#include "pack.h"
#include "persist/checkpoint.h"
#include "persist/persist.h"
#include "persist/persist_file.h"
#include "rpc.h"
#include "scan.h"
#include "store/model.h"

/* A file: MAGIC, the CRC-32C of the rest (4 bytes, little-endian), then one
 * msgpack map {name, owner, created_ns, modified_ns, step, definition (bin)}. */
#define MAGIC "TDM1"
#define SUFFIX ".model"
#define SUFFIX_LEN (sizeof(SUFFIX) - 1)
#define MAX_FILE ((size_t)MODEL_MAX_DEF_BYTES + 65536)

/* What a model looked like when its file was last written. */
struct written {
	uint64_t serial;
	int64_t step;
	char name[TDP_MAX_NAME_LEN + 1];
};

struct model_persist {
	char dir[PATH_MAX];
	int dirfd;
	struct written *seen;     /* sorted by serial */
	size_t nseen;
};

int model_persist_open(const char *state_dir, struct model_persist **ret, char *err, size_t err_len)
{
	struct model_persist *mp = calloc(1, sizeof(*mp));
	int r;

	if (!mp)
		return tdp_errorf(err, err_len, -ENOMEM, "out of memory");
	r = persist_open_subdir(state_dir, "models", mp->dir, sizeof(mp->dir), &mp->dirfd, err, err_len);
	if (r < 0) {
		free(mp);
		return r;
	}
	*ret = mp;
	return 0;
}

void model_persist_free(struct model_persist *mp)
{
	if (!mp)
		return;
	close(mp->dirfd);
	free(mp->seen);
	free(mp);
}

static int cmp_written(const void *a, const void *b)
{
	const struct written *x = a, *y = b;

	return x->serial < y->serial ? -1 : x->serial > y->serial;
}

/* The registry as a sorted (serial, step) list: serials are unique per
 * definition, so equal lists mean nothing changed. */
static int snapshot(struct daemon *d, struct model ***ret_list, size_t *ret_n, struct written **ret_w)
{
	struct model **list;
	struct written *w;
	size_t n;
	int r = models_list(d->models, &list, &n);

	if (r < 0)
		return r;
	w = calloc(n ? n : 1, sizeof(*w));
	if (!w) {
		free(list);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		w[i] = (struct written){ .serial = list[i]->serial, .step = list[i]->step };
		memcpy(w[i].name, list[i]->name, sizeof(w[i].name));
	}
	qsort(w, n, sizeof(*w), cmp_written);
	*ret_list = list;
	*ret_n = n;
	*ret_w = w;
	return 0;
}

static bool same(const struct written *a, size_t na, const struct written *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++)
		if (a[i].serial != b[i].serial || a[i].step != b[i].step)
			return false;
	return true;
}

static bool was_written(const struct model_persist *mp, const struct model *m)
{
	struct written key = { .serial = m->serial };
	const struct written *w = bsearch(&key, mp->seen, mp->nseen, sizeof(key), cmp_written);

	return w && w->step == m->step;
}

static int write_model(struct model_persist *mp, const struct model *m, char *err, size_t err_len)
{
	char enc[PERSIST_FILE_MAX], tmp[PERSIST_FILE_MAX + 8];
	msgpack_sbuffer sb;
	msgpack_packer pk;
	size_t dlen;
	const void *def = model_definition(m, &dlen);
	uint8_t head[8];
	uint32_t crc;
	int fd = -1, r, n = persist_file_name(m->name, strlen(m->name), SUFFIX, enc);

	if (n < 0)
		return tdp_errorf(err, err_len, n, "no file name");
	snprintf(tmp, sizeof(tmp), "%s.tmp", enc);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (msgpack_pack_map(&pk, 6) || tdp_pack_cstr(&pk, "name") || tdp_pack_cstr(&pk, m->name) ||
	    tdp_pack_cstr(&pk, "owner") || msgpack_pack_uint32(&pk, m->owner) ||
	    tdp_pack_cstr(&pk, "created_ns") || msgpack_pack_int64(&pk, m->created_ns) ||
	    tdp_pack_cstr(&pk, "modified_ns") || msgpack_pack_int64(&pk, m->modified_ns) ||
	    tdp_pack_cstr(&pk, "step") || msgpack_pack_int64(&pk, m->step) ||
	    tdp_pack_cstr(&pk, "definition") || msgpack_pack_bin(&pk, dlen) ||
	    msgpack_pack_bin_body(&pk, def, dlen)) {
		r = tdp_errorf(err, err_len, -ENOMEM, "out of memory");
		goto out;
	}
	crc = tdp_crc32c(0, sb.data, sb.size);
	memcpy(head, MAGIC, 4);
	for (int i = 0; i < 4; i++)
		head[4 + i] = (uint8_t)(crc >> (8 * i));
	errno = 0;
	fd = openat(mp->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || write(fd, head, 8) != 8 || write(fd, sb.data, sb.size) != (ssize_t)sb.size ||
	    fsync(fd) < 0) {
		r = tdp_errorf(err, err_len, errno ? -errno : -EIO, "model '%s': %s", m->name,
			       strerror(errno ? errno : EIO));
		goto out;
	}
	if (close(fd) < 0) {
		fd = -1;
		r = tdp_errorf(err, err_len, -errno, "model '%s': close: %s", m->name, strerror(errno));
		goto out;
	}
	fd = -1;
	if (renameat(mp->dirfd, tmp, mp->dirfd, enc) < 0) {
		r = tdp_errorf(err, err_len, -errno, "model '%s': rename: %s", m->name, strerror(errno));
		goto out;
	}
	r = 0;
out:
	if (fd >= 0)
		close(fd);
	if (r < 0)
		unlinkat(mp->dirfd, tmp, 0);
	msgpack_sbuffer_destroy(&sb);
	return r;
}

int model_persist_flush(struct model_persist *mp, struct daemon *d, int64_t who,
			struct checkpoint_result *acc, char *err, size_t err_len)
{
	struct model **list;
	struct written *now;
	uint64_t written = 0, removed = 0;
	size_t n;
	int r = snapshot(d, &list, &n, &now);

	if (r < 0)
		return tdp_errorf(err, err_len, r, "out of memory");
	if (same(now, n, mp->seen, mp->nseen)) {
		free(list);
		free(now);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		char why[TDP_MAX_ERROR_MESSAGE];

		if (was_written(mp, list[i]))
			continue;
		if (write_model(mp, list[i], why, sizeof(why)) < 0) {
			log_error("checkpoint: cannot write model '%s' (retried at the next flush; the "
				  "others are written): %s", list[i]->name, why);
			checkpoint_note_failure(acc, who, list[i]->owner, "model", list[i]->name, why);
			/* Not written: a step no model has, so it differs next time. */
			for (size_t k = 0; k < n; k++)
				if (now[k].serial == list[i]->serial)
					now[k].step = -1;
			continue;
		}
		written++;
	}
	/* Remove the files of models deleted since (files skipped at start-up
	 * stay for inspection). */
	for (size_t i = 0; i < mp->nseen; i++) {
		char enc[PERSIST_FILE_MAX];

		if (models_find(d->models, mp->seen[i].name))
			continue;
		if (persist_file_name(mp->seen[i].name, strlen(mp->seen[i].name), SUFFIX, enc) < 0)
			continue;
		if (unlinkat(mp->dirfd, enc, 0) == 0)
			removed++;
		else if (errno != ENOENT)
			log_error("cannot remove %s/%s: %s", mp->dir, enc, strerror(errno));
	}
	if (fsync(mp->dirfd) < 0) {
		r = tdp_errorf(err, err_len, -errno, "fsync of %s: %s", mp->dir, strerror(errno));
		goto out;
	}
	free(mp->seen);
	mp->seen = now;
	mp->nseen = n;
	now = NULL;
	acc->models += written + removed;
	r = 0;
out:
	free(list);
	free(now);
	return r;
}

/* For a hashed file name (`hashed`), copy the name inside map `o` into
 * `name` when it is a valid name whose file name is `file`. Returns 0 or
 * -EINVAL. */
static int name_inside(const msgpack_object *o, const char *file, bool hashed, char *name)
{
	const msgpack_object *n = tdp_map_find(o, "name");

	if (!hashed)
		return 0;
	if (!n || n->type != MSGPACK_OBJECT_STR || n->via.str.size > TDP_MAX_NAME_LEN ||
	    !tdp_name_valid(n->via.str.ptr, n->via.str.size))
		return -EINVAL;
	memcpy(name, n->via.str.ptr, n->via.str.size);
	name[n->via.str.size] = 0;
	return persist_file_is_of(file, name, SUFFIX) ? 0 : -EINVAL;
}

/* Read and check one file into a new model; `name` holds its name, or with
 * `hashed` receives it from inside the file. Returns 0 with *ret or -EINVAL
 * with the reason in `why`. */
static int load_model(struct model_persist *mp, const char *file, char *name, bool hashed,
		      struct model **ret, char *why, size_t why_len)
{
	static const struct tdp_scan_limits lim = { MAX_FILE, 32, 1u << 20 };
	const msgpack_object *o, *def, *owner, *created, *modified, *step;
	struct tdp_scanner sc;
	msgpack_unpacked u, du;
	uint8_t *buf = NULL;
	struct stat stt;
	uint64_t v;
	int64_t c_ns, m_ns, st;
	uint32_t crc;
	struct model *m = NULL;
	int fd = persist_file_open(mp->dirfd, file, &stt, why, why_len), r;

	msgpack_unpacked_init(&u);
	msgpack_unpacked_init(&du);
	if (fd < 0) {
		r = fd;
		goto out;
	}
	if (stt.st_size < 9 || (size_t)stt.st_size > MAX_FILE) {
		r = tdp_errorf(why, why_len, -EINVAL, "not a model file of a plausible size");
		goto out;
	}
	buf = malloc((size_t)stt.st_size);
	if (!buf || read(fd, buf, (size_t)stt.st_size) != (ssize_t)stt.st_size) {
		r = tdp_errorf(why, why_len, -EIO, "cannot read it");
		goto out;
	}
	crc = (uint32_t)buf[4] | (uint32_t)buf[5] << 8 | (uint32_t)buf[6] << 16 | (uint32_t)buf[7] << 24;
	if (memcmp(buf, MAGIC, 4) != 0 || tdp_crc32c(0, buf + 8, (size_t)stt.st_size - 8) != crc) {
		r = tdp_errorf(why, why_len, -EINVAL, "checksum mismatch");
		goto out;
	}
	tdp_scanner_reset(&sc);
	if (tdp_scanner_feed(&sc, buf + 8, (size_t)stt.st_size - 8, &lim) != 1 ||
	    sc.pos != (uint64_t)stt.st_size - 8 || tdp_unpack(&u, buf + 8, (size_t)stt.st_size - 8) < 0) {
		r = tdp_errorf(why, why_len, -EINVAL, "not one msgpack map");
		goto out;
	}
	o = &u.data;
	if (o->type != MSGPACK_OBJECT_MAP || name_inside(o, file, hashed, name) < 0) {
		r = tdp_errorf(why, why_len, -EINVAL, "the name inside does not match the file name");
		goto out;
	}
	def = tdp_map_find(o, "definition");
	owner = tdp_map_find(o, "owner");
	created = tdp_map_find(o, "created_ns");
	modified = tdp_map_find(o, "modified_ns");
	step = tdp_map_find(o, "step");
	if (o->type != MSGPACK_OBJECT_MAP || !tdp_obj_str_eq(tdp_map_find(o, "name"), name) || !def ||
	    def->type != MSGPACK_OBJECT_BIN || !owner || tdp_obj_uint(owner, &v) < 0 || v > UINT32_MAX ||
	    !created || tdp_obj_int(created, &c_ns) < 0 || !modified || tdp_obj_int(modified, &m_ns) < 0 ||
	    !step || tdp_obj_int(step, &st) < 0 || st < 0 || st > MODEL_MAX_STEP) {
		r = tdp_errorf(why, why_len, -EINVAL, "missing or bad fields (name, owner, times, step, definition)");
		goto out;
	}
	tdp_scanner_reset(&sc);
	if (tdp_scanner_feed(&sc, (const uint8_t *)def->via.bin.ptr, def->via.bin.size, &lim) != 1 ||
	    sc.pos != def->via.bin.size ||
	    tdp_unpack(&du, (const uint8_t *)def->via.bin.ptr, def->via.bin.size) < 0) {
		r = tdp_errorf(why, why_len, -EINVAL, "the definition is not msgpack");
		goto out;
	}
	r = model_new(name, &du.data, &m, why, why_len);
	if (r < 0) {
		if (r != -EINVAL)
			tdp_errorf(why, why_len, r, "%s", r == -ENOMEM ? "out of memory" : "definition too large");
		goto out;
	}
	m->owner = (uint32_t)v;
	m->created_ns = c_ns;
	m->modified_ns = m_ns;
	m->step = st;
	*ret = m;
	r = 0;
out:
	msgpack_unpacked_destroy(&du);
	msgpack_unpacked_destroy(&u);
	free(buf);
	if (fd >= 0)
		close(fd);
	return r;
}

int model_persist_restore(struct model_persist *mp, struct daemon *d, uint64_t *ret_loaded,
			  uint64_t *ret_skipped)
{
	uint64_t loaded = 0, skipped = 0;
	int fd = dup(mp->dirfd);
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
		char name[TDP_MAX_NAME_LEN + 1], why[256];
		struct model *m = NULL;

		if (de->d_name[0] == '.')
			continue;
		int len = persist_file_parse(de->d_name, SUFFIX, name);

		if (len < 0 && len != -EAGAIN) {
			size_t n = strlen(de->d_name);

			if (n > 4 && !strcmp(de->d_name + n - 4, ".tmp")) {
				unlinkat(mp->dirfd, de->d_name, 0);
				continue;
			}
			log_error("model checkpoint %s/%s skipped: not the file name of a model", mp->dir,
				  de->d_name);
			skipped++;
			continue;
		}
		if (load_model(mp, de->d_name, name, len == -EAGAIN, &m, why, sizeof(why)) < 0) {
			log_error("model checkpoint %s/%s skipped: %s", mp->dir, de->d_name, why);
			skipped++;
			continue;
		}
		if (models_put(d->models, m) < 0) {
			log_error("model checkpoint %s/%s skipped: over the limit of models", mp->dir, de->d_name);
			model_free(m);
			skipped++;
			continue;
		}
		loaded++;
	}
	closedir(dir);
	/* Remember what is on disk now, so the first checkpoint writes nothing.
	 * Skipped files stay: nothing in the registry has their name. */
	free(mp->seen);
	mp->seen = NULL;
	mp->nseen = 0;
	{
		struct model **list;
		size_t n;
		struct written *now;

		if (snapshot(d, &list, &n, &now) == 0) {
			free(list);
			mp->seen = now;
			mp->nseen = n;
		}
	}
	*ret_loaded = loaded;
	*ret_skipped = skipped;
	return 0;
}
