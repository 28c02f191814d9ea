/* tensorctl commands: each talks to the daemon through libtensord and prints
 * either text for people or exactly one JSON document. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "dtype.h"
#include "json.h"
#include "mode.h"
#include "npy.h"
#include "pack.h"
#include "print.h"
#include "safetensors.h"
#include "values.h"

#define MSG_MAX 512

int ctl_connect(struct ctl *c)
{
	int r = tensord_connect(c->socket, &c->td);

	const char *hint = "";

	if (r == -ENOENT || r == -ECONNREFUSED) {
		if (c->socket_from == CTL_SOCKET_DEFAULT)
			hint = " \u2014 is tensord running? Start it (systemctl start tensord.socket), "
			       "or your own (tensord, which listens in $XDG_RUNTIME_DIR/tensord/), "
			       "or set TENSORD_SOCKET / --socket";
		else if (c->socket_from == CTL_SOCKET_ENV)
			hint = " \u2014 is tensord running? This path is $TENSORD_SOCKET: start tensord "
			       "there, or unset it / use --socket";
		else
			hint = " \u2014 is tensord running on that socket (--socket)?";
	} else if (r == -EACCES) {
		hint = " \u2014 the socket's owner or group must let you in (docs/security.md), "
		       "or run a daemon of your own and use --socket";
	}
	if (r < 0)
		return ctl_fail(CTL_EXIT_CONNECT, "cannot connect to %s: %s%s", c->socket,
				strerror(-r), hint);
	return CTL_EXIT_OK;
}

/* Whether a libtensord failure means the connection failed or broke, rather
 * than the daemon or the library refusing one call. */
static bool connection_error(int r)
{
	switch (-r) {
	case ECONNRESET: case ECONNREFUSED: case ECONNABORTED: case EPIPE: case EPROTO:
	case ENOTCONN: case ETIMEDOUT: case EIO: case ENOENT:
		return true;
	default:
		return false;
	}
}

int ctl_call_failed(struct ctl *c, int r)
{
	const char *msg = tensord_last_error(c->td);
	int status = r != -TENSORD_EREMOTE && connection_error(r) ? CTL_EXIT_CONNECT
								   : CTL_EXIT_FAIL;

	return ctl_fail(status, "%s", msg && *msg ? msg : strerror(r < 0 ? -r : r));
}

/* Decode a result that libtensord packed (so within the protocol's limits). */
static int unpack_result(const void *buf, size_t len, msgpack_unpacked *u)
{
	size_t off = 0;

	msgpack_unpacked_init(u);
	if (msgpack_unpack_next(u, buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
		msgpack_unpacked_destroy(u);
		return ctl_error("malformed reply");
	}
	return CTL_EXIT_OK;
}

/* Call `method` with params {"name": name} (or none when NULL) and return its
 * decoded result in *u, which points into *ret_buf (free() it after *u). */
static int call_raw(struct ctl *c, const char *method, const char *name, msgpack_unpacked *u,
		    void **ret_buf)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	void *res = NULL;
	size_t len;
	int r, status;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (name && (msgpack_pack_map(&pk, 1) || tdp_pack_cstr(&pk, "name") ||
		     tdp_pack_cstr(&pk, name))) {
		msgpack_sbuffer_destroy(&sb);
		return ctl_error("out of memory");
	}
	r = tensord_call_raw(c->td, method, name ? sb.data : NULL, sb.size, &res, &len);
	msgpack_sbuffer_destroy(&sb);
	if (r < 0)
		return ctl_call_failed(c, r);
	status = unpack_result(res, len, u);
	if (status != CTL_EXIT_OK)
		free(res);
	else
		*ret_buf = res;
	return status;
}

void ctl_json_shape(FILE *f, uint32_t rank, const uint64_t *shape)
{
	fputc('[', f);
	for (uint32_t i = 0; i < rank; i++)
		fprintf(f, "%s%" PRIu64, i ? "," : "", shape[i]);
	fputc(']', f);
}

/* The metadata object of --json output, without the closing brace. */
static void json_info_open(FILE *f, const struct tensord_tensor_info *t)
{
	fputs("{\"name\":", f);
	ctl_json_string(f, t->name, strlen(t->name));
	fprintf(f, ",\"dtype\":\"%s\",\"shape\":", tensord_dtype_name(t->dtype));
	ctl_json_shape(f, t->rank, t->shape);
	fprintf(f, ",\"bytes\":%" PRIu64 ",\"owner\":%" PRIu32 ",\"created\":", t->bytes, t->owner);
	ctl_json_double(f, t->created);
	fputs(",\"modified\":", f);
	ctl_json_double(f, t->modified);
	fprintf(f, ",\"version\":%" PRIu64 ",\"device\":%" PRIu32, t->version, t->device);
	if (t->mode[0]) {
		fprintf(f, ",\"group\":%" PRIu32 ",\"mode\":", t->group);
		ctl_json_string(f, t->mode, strlen(t->mode));
	}
}

void ctl_json_info(FILE *f, const struct tensord_tensor_info *t)
{
	json_info_open(f, t);
	fputc('}', f);
}

enum { COL_NAME, COL_DTYPE, COL_SHAPE, COL_SIZE, COL_DEVICE, COL_VERSION, COL_OWNER, COL_MODE,
       COL_MODIFIED, COL_COUNT };

static void format_cell(const struct tensord_tensor_info *t, int col, char *buf, size_t cap)
{
	switch (col) {
	case COL_NAME: snprintf(buf, cap, "%s", t->name); break;
	case COL_DTYPE: snprintf(buf, cap, "%s", tensord_dtype_name(t->dtype)); break;
	case COL_SHAPE: ctl_format_shape(buf, cap, t->rank, t->shape); break;
	case COL_SIZE: ctl_format_size(buf, cap, t->bytes); break;
	case COL_DEVICE: snprintf(buf, cap, "%" PRIu32, t->device); break;
	case COL_VERSION: snprintf(buf, cap, "%" PRIu64, t->version); break;
	case COL_OWNER: snprintf(buf, cap, "%" PRIu32 ":%" PRIu32, t->owner, t->group); break;
	case COL_MODE: snprintf(buf, cap, "%s", t->mode[0] ? t->mode : "-"); break;
	default: ctl_format_time(buf, cap, t->modified); break;
	}
}

/* An aligned table of tensors: text left-aligned, numbers right-aligned. */
void ctl_print_tensor_table(FILE *f, const struct tensord_tensor_info *list, size_t n)
{
	static const char *const heads[COL_COUNT] = { "NAME", "DTYPE", "SHAPE", "SIZE", "DEVICE",
						      "VERSION", "OWNER", "MODE", "MODIFIED" };
	static const int right[COL_COUNT] = { 0, 0, 0, 1, 1, 1, 0, 0, 0 };
	int width[COL_COUNT];
	char cell[300];

	for (int k = 0; k < COL_COUNT; k++)
		width[k] = (int)strlen(heads[k]);
	for (size_t i = 0; i < n; i++)
		for (int k = 0; k < COL_COUNT; k++) {
			format_cell(&list[i], k, cell, sizeof(cell));
			if ((int)strlen(cell) > width[k])
				width[k] = (int)strlen(cell);
		}
	for (int k = 0; k < COL_COUNT; k++)
		fprintf(f, "%*s%s", k + 1 < COL_COUNT ? (right[k] ? width[k] : -width[k]) : 0,
			heads[k], k + 1 < COL_COUNT ? "  " : "\n");
	for (size_t i = 0; i < n; i++)
		for (int k = 0; k < COL_COUNT; k++) {
			format_cell(&list[i], k, cell, sizeof(cell));
			fprintf(f, "%*s%s",
				k + 1 < COL_COUNT ? (right[k] ? width[k] : -width[k]) : 0, cell,
				k + 1 < COL_COUNT ? "  " : "\n");
		}
}

static double now_ms(void)
{
	return ctl_now() * 1e3;
}

int ctl_cmd_ping(struct ctl *c)
{
	const msgpack_object *res, *version, *proto;
	msgpack_unpacked u;
	void *buf = NULL;
	double t0, ms;
	int status;

	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	t0 = now_ms();
	if ((status = call_raw(c, "ping", NULL, &u, &buf)) != CTL_EXIT_OK)
		return status;
	ms = now_ms() - t0;
	res = &u.data;
	version = tdp_map_find(res, "version");
	proto = tdp_map_find(res, "protocol");
	if (c->json) {
		fputc('{', stdout);
		for (uint32_t i = 0; res->type == MSGPACK_OBJECT_MAP && i < res->via.map.size; i++) {
			ctl_json_msgpack(stdout, &res->via.map.ptr[i].key);
			fputc(':', stdout);
			ctl_json_msgpack(stdout, &res->via.map.ptr[i].val);
			fputc(',', stdout);
		}
		printf("\"rtt_ms\":%.3f}\n", ms);
	} else {
		printf("pong from tensord ");
		if (version && version->type == MSGPACK_OBJECT_STR)
			printf("%.*s", (int)(version->via.str.size > 64 ? 64 : version->via.str.size),
			       version->via.str.ptr);
		else
			printf("(unknown version)");
		if (proto && proto->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			printf(" (protocol %" PRIu64 ")", proto->via.u64);
		printf(" in %.3f ms\n", ms);
	}
	msgpack_unpacked_destroy(&u);
	free(buf);
	return CTL_EXIT_OK;
}

int ctl_cmd_info(struct ctl *c)
{
	msgpack_unpacked u;
	void *res = NULL;
	size_t len;
	int r, status;

	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((r = tensord_info_raw(c->td, &res, &len)) < 0)
		return ctl_call_failed(c, r);
	status = unpack_result(res, len, &u);
	if (status != CTL_EXIT_OK) {
		free(res);
		return status;
	}
	if (c->json) {
		ctl_json_msgpack(stdout, &u.data);
		fputc('\n', stdout);
	} else {
		ctl_print_info(stdout, &u.data);
	}
	msgpack_unpacked_destroy(&u);
	free(res);
	return CTL_EXIT_OK;
}

int ctl_cmd_ls(struct ctl *c)
{
	struct tensord_tensor_info *list = NULL;
	size_t n = 0;
	int r, status;

	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((r = tensord_list(c->td, c->npos ? c->pos[0] : NULL, &list, &n)) < 0)
		return ctl_call_failed(c, r);
	if (c->json) {
		fputs("{\"tensors\":[", stdout);
		for (size_t i = 0; i < n; i++) {
			if (i > 0)
				fputc(',', stdout);
			ctl_json_info(stdout, &list[i]);
		}
		fputs("]}\n", stdout);
	} else {
		ctl_print_tensor_table(stdout, list, n);
	}
	free(list);
	return CTL_EXIT_OK;
}

int ctl_stat_one(struct ctl *c, const char *name)
{
	struct tensord_tensor_info info;
	int r;

	if ((r = tensord_stat(c->td, name, &info)) < 0)
		return ctl_call_failed(c, r);
	if (c->json) {
		ctl_json_info(stdout, &info);
		fputc('\n', stdout);
	} else {
		ctl_print_tensor_table(stdout, &info, 1);
	}
	return CTL_EXIT_OK;
}

int ctl_rm_one(struct ctl *c, const char *name, bool element)
{
	const msgpack_object *bytes;
	msgpack_unpacked u;
	void *buf = NULL;
	uint64_t freed;
	char size[32];
	int status;

	if ((status = call_raw(c, "tensor.delete", name, &u, &buf)) != CTL_EXIT_OK)
		return status;
	if (c->json) {
		ctl_json_msgpack(stdout, &u.data);
		if (!element)
			fputc('\n', stdout);
	} else {
		bytes = tdp_map_find(&u.data, "bytes");
		if (bytes && tdp_obj_uint(bytes, &freed) == 0) {
			ctl_format_size(size, sizeof(size), freed);
			printf("deleted %s (%s freed)\n", name, size);
		} else {
			printf("deleted %s\n", name);
		}
	}
	msgpack_unpacked_destroy(&u);
	free(buf);
	return CTL_EXIT_OK;
}

int ctl_cmd_sync(struct ctl *c)
{
	const msgpack_object *written, *bytes, *removed, *seconds;
	uint64_t w = 0, b = 0, r = 0;
	msgpack_unpacked u;
	void *buf = NULL;
	char size[32];
	int status;

	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((status = call_raw(c, "store.sync", NULL, &u, &buf)) != CTL_EXIT_OK)
		return status;
	if (c->json) {
		ctl_json_msgpack(stdout, &u.data);
		fputc('\n', stdout);
	} else {
		written = tdp_map_find(&u.data, "written");
		bytes = tdp_map_find(&u.data, "bytes");
		removed = tdp_map_find(&u.data, "removed");
		seconds = tdp_map_find(&u.data, "seconds");
		if (written)
			tdp_obj_uint(written, &w);
		if (bytes)
			tdp_obj_uint(bytes, &b);
		if (removed)
			tdp_obj_uint(removed, &r);
		ctl_format_size(size, sizeof(size), b);
		printf("synced: %" PRIu64 " tensors written (%s), %" PRIu64 " removed in %.3f s\n", w, size, r,
		       seconds && seconds->type == MSGPACK_OBJECT_FLOAT64 ? seconds->via.f64 : 0.0);
	}
	msgpack_unpacked_destroy(&u);
	free(buf);
	return CTL_EXIT_OK;
}

int ctl_cmd_chmod(struct ctl *c)
{
	const char *mode = strcmp(c->pos[0], "-") ? c->pos[0] : NULL;
	struct tensord_tensor_info info;
	int64_t group = -1;
	uint32_t bits;
	char *end;
	int r, status;

	if (c->group) {
		errno = 0;
		group = (int64_t)strtoll(c->group, &end, 10);
		if (errno || end == c->group || *end || group < 0 || group >= (int64_t)UINT32_MAX)
			return ctl_usage_error("chmod: --group takes a numeric gid, not '%.64s'", c->group);
	}
	if (!mode && group < 0)
		return ctl_usage_error("chmod: MODE '-' (keep the mode) needs --group");
	if (mode && tdp_mode_parse(mode, strlen(mode), &bits) < 0)
		return ctl_usage_error("chmod: invalid mode '%.64s' (private, or a comma list of group-read, "
				       "group-write, world-read, world-write)", mode);
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((r = tensord_chmod(c->td, c->pos[1], mode, group, &info)) < 0)
		return ctl_call_failed(c, r);
	if (c->json) {
		ctl_json_info(stdout, &info);
		fputc('\n', stdout);
	} else {
		printf("%s: owner %" PRIu32 ", group %" PRIu32 ", mode %s\n", info.name, info.owner,
		       info.group, info.mode);
	}
	return CTL_EXIT_OK;
}

/* The tensor `put` stores, from --values or --file. */
struct put_source {
	int dtype;
	uint32_t rank;
	uint64_t shape[TDP_MAX_RANK];
	const void *data;
	size_t len;
	void *owned;          /* malloc'd data to free */
	struct npy_file npy;  /* the mapped file */
	struct st_file st;    /* or the mapped .safetensors file */
};

/* Whether `path` names a safetensors file (by its extension). */
static bool is_safetensors(const char *path)
{
	size_t n = strlen(path), e = strlen(".safetensors");

	return n > e && strcmp(path + n - e, ".safetensors") == 0;
}

/* put --file F.safetensors: the file's one tensor, or the one named like
 * the target when it holds several. No dtype conversion. */
static int source_from_safetensors(struct ctl *c, struct put_source *s, int want)
{
	char err[MSG_MAX];
	const struct st_tensor *t = NULL;
	int dt;

	if (st_load(c->file, &s->st, err, sizeof(err)) < 0)
		return ctl_error("%s: %s", c->file, err);
	if (s->st.ntensors == 1)
		t = &s->st.tensors[0];
	for (size_t i = 0; !t && i < s->st.ntensors; i++)
		if (strcmp(s->st.tensors[i].name, c->pos[0]) == 0)
			t = &s->st.tensors[i];
	if (!t)
		return ctl_error("%s holds %zu tensors, none named '%s' (tensorctl load puts them all)",
				 c->file, s->st.ntensors, c->pos[0]);
	dt = st_dtype_to_tensord((int)t->dtype);
	if (dt < 0)
		return ctl_error("%s: tensor '%s' is %s, which tensord does not store", c->file, t->name,
				 st_dtype_name((int)t->dtype));
	if (want >= 0 && want != dt)
		return ctl_usage_error("%s: tensor '%s' is %s; safetensors input is not converted (--dtype %s)",
				       c->file, t->name, tdp_dtype_name(dt), tdp_dtype_name(want));
	s->dtype = dt;
	s->rank = t->rank;
	for (uint32_t d = 0; d < t->rank; d++)
		s->shape[d] = t->shape[d];
	s->data = t->data;
	s->len = (size_t)(t->end - t->begin);
	return CTL_EXIT_OK;
}

static int source_from_values(struct ctl *c, struct put_source *s)
{
	char err[MSG_MAX], shape[256];
	uint64_t count = 0;
	size_t n;
	int r;

	if (ctl_parse_values(c->values, s->dtype, &s->owned, &n, err, sizeof(err)) < 0)
		return ctl_usage_error("--values: %s", err);
	/* An empty list is more often an empty shell variable than a wish. */
	if (n == 0 && !c->shape)
		return ctl_usage_error("--values is empty (add --shape 0 to store an empty tensor)");
	if (!c->shape) {
		s->rank = 1;
		s->shape[0] = n;
	} else if (ctl_parse_shape(c->shape, s->shape, &s->rank, err, sizeof(err)) < 0) {
		return ctl_usage_error("--shape: %s", err);
	}
	r = tdp_shape_count(s->shape, s->rank, tdp_dtype_size(s->dtype), &count);
	if (r < 0 || count != n) {
		ctl_format_shape(shape, sizeof(shape), s->rank, s->shape);
		if (r < 0)
			return ctl_usage_error("shape %s is too large", shape);
		return ctl_usage_error("%zu value%s given, shape %s needs %" PRIu64, n,
				       n == 1 ? "" : "s", shape, count);
	}
	s->data = s->owned;
	s->len = n * tdp_dtype_size(s->dtype);
	return CTL_EXIT_OK;
}

static int source_from_file(struct ctl *c, struct put_source *s, int want)
{
	char err[MSG_MAX];
	const struct npy_header *h = &s->npy.hdr;
	size_t size;

	if (npy_load(c->file, &s->npy, err, sizeof(err)) < 0)
		return ctl_error("%s: %s", c->file, err);
	s->dtype = npy_target_dtype(h->elem, want, err, sizeof(err));
	if (s->dtype < 0)
		return ctl_usage_error("%s: %s", c->file, err);
	s->rank = h->rank;
	memcpy(s->shape, h->shape, sizeof(s->shape));
	size = tdp_dtype_size(s->dtype);
	if (h->count > SIZE_MAX / size)
		return ctl_error("%s: too large", c->file);
	s->len = (size_t)h->count * size;
	if (npy_same_bytes(h->elem, s->dtype)) {
		s->data = s->npy.data;
		return CTL_EXIT_OK;
	}
	s->owned = malloc(s->len ? s->len : 1);
	if (!s->owned)
		return ctl_error("out of memory converting %s", c->file);
	if (npy_convert(h->elem, s->npy.data, s->dtype, s->owned, h->count, err, sizeof(err)) < 0)
		return ctl_error("%s: %s", c->file, err);
	s->data = s->owned;
	return CTL_EXIT_OK;
}

int ctl_cmd_put(struct ctl *c)
{
	struct put_source s = { .dtype = TDP_DTYPE_F32 };
	struct tensord_put_options popts = TENSORD_PUT_OPTIONS_INIT;
	struct tensord_tensor_info info;
	struct ctl_bar bar;
	char shape[256], size[32], label[300];
	int want = -1, device = TENSORD_DEVICE_ANY, r, status, memfd;

	if (!c->file == !c->values) {
		return ctl_usage_error("put needs exactly one of --file or --values");
	}
	if (c->device && (status = ctl_parse_device("--device", c->device, &device)) != CTL_EXIT_OK)
		return status;
	if (c->file && c->shape)
		return ctl_usage_error("--shape goes with --values; a .npy file has its own");
	if (c->dtype) {
		want = tdp_dtype_parse(c->dtype, strlen(c->dtype));
		if (want < 0)
			return ctl_usage_error("unknown dtype '%s' (f32 f16 bf16 i32 u8)", c->dtype);
		s.dtype = want;
	}
	if (c->values)
		status = source_from_values(c, &s);
	else if (is_safetensors(c->file))
		status = source_from_safetensors(c, &s, want);
	else
		status = source_from_file(c, &s, want);
	if (status != CTL_EXIT_OK)
		goto out;
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		goto out;
	snprintf(label, sizeof(label), "put %s", c->pos[0]);
	ctl_bar_start(&bar, c, label);
	popts.device = device;
	/* A large file travels in a memfd, not through the socket (docs/tensorctl.1). */
	if (s.len >= CTL_MEMFD_MIN && tensord_memfd(s.data, s.len, &memfd) == 0) {
		r = tensord_put_fd(c->td, c->pos[0], (enum tensord_dtype)s.dtype, s.rank, s.shape,
				   memfd, 0, &popts, &info);
		close(memfd);
		if (r >= 0)
			ctl_bar_done(&bar, s.len);
	} else {
		r = tensord_put_opts(c->td, c->pos[0], (enum tensord_dtype)s.dtype, s.rank, s.shape,
				     s.data, s.len, &popts, &info);
	}
	ctl_bar_finish(&bar);
	if (r < 0) {
		status = ctl_call_failed(c, r);
		goto out;
	}
	if (c->json) {
		ctl_json_info(stdout, &info);
		fputc('\n', stdout);
	} else {
		ctl_format_shape(shape, sizeof(shape), info.rank, info.shape);
		ctl_format_size(size, sizeof(size), info.bytes);
		printf("stored %s: %s %s, %s, version %" PRIu64 ", device %" PRIu32 "\n", info.name,
		       tensord_dtype_name(info.dtype), shape, size, info.version, info.device);
	}
out:
	free(s.owned);
	npy_close(&s.npy);
	st_close(&s.st);
	return status;
}

int ctl_get_one(struct ctl *c, const char *name, const char *out, bool element)
{
	struct tensord_tensor_info info;
	struct ctl_bar bar;
	char err[MSG_MAX], shape[256], size[32], label[300];
	const char *end = element ? "}" : "}\n";
	uint64_t count = 0;
	void *data = NULL, *map = NULL;
	size_t len = 0;
	int r, status = CTL_EXIT_OK, memfd = -1;

	snprintf(label, sizeof(label), "get %s", name);
	ctl_bar_start(&bar, c, label);
	/* Into a file: the daemon writes the bytes into a memfd of the size
	 * stat says (docs/tensorctl.1); when that fails (no such tensor, or it
	 * grew meanwhile) the plain get answers. */
	if (out && tensord_stat(c->td, name, &info) == 0 && info.bytes <= SIZE_MAX &&
	    tensord_memfd(NULL, (size_t)info.bytes, &memfd) == 0 &&
	    (r = tensord_get_fd(c->td, name, memfd, 0, &info)) < 0) {
		close(memfd);
		memfd = -1;
	}
	if (memfd >= 0) {
		len = (size_t)info.bytes;
		if (len > 0) {
			map = mmap(NULL, len, PROT_READ, MAP_SHARED, memfd, 0);
			if (map == MAP_FAILED) {
				close(memfd);
				ctl_bar_finish(&bar);
				return ctl_error("mapping the memfd of %zu bytes: %s", len, strerror(errno));
			}
		}
		close(memfd);
		data = map;
		if (r >= 0)
			ctl_bar_done(&bar, len);
	} else {
		r = tensord_get(c->td, name, &info, &data, &len);
	}
	ctl_bar_finish(&bar);
	if (r < 0)
		return ctl_call_failed(c, r);
	count = len / tensord_dtype_size(info.dtype);
	if (out && is_safetensors(out)) {
		struct st_entry e = { .name = info.name, .dtype = (enum st_dtype)st_dtype_from_tensord((int)info.dtype),
				      .rank = info.rank, .shape = info.shape, .data = data };

		if (st_write(out, &e, 1, NULL, 0, err, sizeof(err)) < 0) {
			status = ctl_error("%s: %s", out, err);
			goto out;
		}
	}
	if (out) {
		if (!is_safetensors(out) &&
		    npy_write(out, (int)info.dtype, info.rank, info.shape, data, len, err,
			      sizeof(err)) < 0) {
			status = ctl_error("%s: %s", out, err);
			goto out;
		}
		if (c->json) {
			json_info_open(stdout, &info);
			fputs(",\"file\":", stdout);
			ctl_json_string(stdout, out, strlen(out));
			fputs(end, stdout);
		} else if (strcmp(out, "-") != 0) {
			ctl_format_shape(shape, sizeof(shape), info.rank, info.shape);
			ctl_format_size(size, sizeof(size), info.bytes);
			printf("wrote %s: %s %s %s, %s\n", out, info.name,
			       tensord_dtype_name(info.dtype), shape, size);
		}
	} else if (c->json) {
		fputs("{\"name\":", stdout);
		ctl_json_string(stdout, info.name, strlen(info.name));
		fprintf(stdout, ",\"dtype\":\"%s\",\"shape\":", tensord_dtype_name(info.dtype));
		ctl_json_shape(stdout, info.rank, info.shape);
		fputs(",\"data\":", stdout);
		ctl_print_json_values(stdout, (int)info.dtype, data, count);
		fputs(end, stdout);
	} else {
		if (element)
			printf("%s =\n", info.name);
		ctl_print_array(stdout, (int)info.dtype, info.rank, info.shape, data);
	}
out:
	if (map)
		munmap(map, len);
	else
		free(data);
	return status;
}
