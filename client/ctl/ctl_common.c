/* tensorctl's common layer (ctl_common.h): what the command files share, so
 * that none of them calls another. Messages and exit statuses, connecting,
 * calls and their replies, the options that several commands take, tensor
 * metadata and results for people and as JSON, input files and the
 * progress bar of large transfers. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctl_common.h"
#include "dtype.h"
#include "json.h"
#include "json_parse.h"
#include "name.h"
#include "pack.h"
#include "print.h"
#include "wire_limits.h"

#define MSG_MAX 512
/* Graph files larger than this are refused before reading them. */
#define GRAPH_FILE_MAX (64u << 20)

/* ---- messages ---- */

int ctl_usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("tensorctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return CTL_EXIT_USAGE;
}

int ctl_error(const char *fmt, ...)
{
	va_list ap;

	fputs("tensorctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return CTL_EXIT_FAIL;
}

int ctl_fail(int status, const char *fmt, ...)
{
	va_list ap;

	fputs("tensorctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return status;
}

/* ---- the connection and calls ---- */

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
int ctl_unpack_result(const void *buf, size_t len, msgpack_unpacked *u)
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
int ctl_call_named(struct ctl *c, const char *method, const char *name, msgpack_unpacked *u,
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
	status = ctl_unpack_result(res, len, u);
	if (status != CTL_EXIT_OK)
		free(res);
	else
		*ret_buf = res;
	return status;
}

/* ---- tensor metadata ---- */

void ctl_json_shape(FILE *f, uint32_t rank, const uint64_t *shape)
{
	fputc('[', f);
	for (uint32_t i = 0; i < rank; i++)
		fprintf(f, "%s%" PRIu64, i ? "," : "", shape[i]);
	fputc(']', f);
}

/* The metadata object of --json output, without the closing brace. */
void ctl_json_info_open(FILE *f, const struct tensord_tensor_info *t)
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
	ctl_json_info_open(f, t);
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

void ctl_format_duration(char *buf, size_t cap, double s)
{
	uint64_t t;

	if (!isfinite(s) || s < 0 || s > 1e15) {
		snprintf(buf, cap, "?");
		return;
	}
	if (s < 60) {
		snprintf(buf, cap, "%.1f s", s);
		return;
	}
	t = (uint64_t)s;
	if (t < 86400)
		snprintf(buf, cap, "%" PRIu64 "h %02" PRIu64 "m %02" PRIu64 "s", t / 3600,
			 t / 60 % 60, t % 60);
	else
		snprintf(buf, cap, "%" PRIu64 "d %02" PRIu64 "h %02" PRIu64 "m", t / 86400,
			 t / 3600 % 24, t / 60 % 60);
}

bool ctl_map_number(const msgpack_object *map, const char *key, double *ret)
{
	const msgpack_object *o = map ? tdp_map_find(map, key) : NULL;

	if (!o)
		return false;
	switch (o->type) {
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: *ret = o->via.f64; return true;
	case MSGPACK_OBJECT_POSITIVE_INTEGER: *ret = (double)o->via.u64; return true;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: *ret = (double)o->via.i64; return true;
	default: return false;
	}
}

/* ---- the progress bar of large transfers (put, get) ---- */

#define BAR_CELLS 20
#define REDRAW_S 0.1
double ctl_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t term_columns(void)
{
	struct winsize ws;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
		return ws.ws_col;
	return 80;
}

static void on_progress(void *userdata, enum tensord_transfer dir, uint64_t done, uint64_t total)
{
	struct ctl_bar *b = userdata;
	char line[512], have[32], all[32], rate[32];
	double now = ctl_now(), frac, secs;
	size_t n, cols = term_columns() - 1;
	int k, cells;

	(void)dir;
	if (total < CTL_BAR_MIN)
		return;
	if (b->start == 0)
		b->start = now;
	/* Redraw at most ten times a second, and once more at the end. */
	if (done < total && b->shown && now - b->drawn < REDRAW_S)
		return;
	b->drawn = now;
	frac = done >= total ? 1.0 : (double)done / (double)total;
	cells = (int)(frac * BAR_CELLS);
	secs = now - b->start;
	ctl_format_size(have, sizeof(have), done);
	ctl_format_size(all, sizeof(all), total);
	if (secs > 0.05) {
		ctl_format_size(rate, sizeof(rate), (uint64_t)((double)done / secs));
		strcat(rate, "/s");
	} else {
		snprintf(rate, sizeof(rate), "-");
	}
	k = snprintf(line, sizeof(line), "%.200s [%.*s%.*s] %3d%%  %s / %s  %s", b->label, cells,
		     "####################", BAR_CELLS - cells, "....................",
		     (int)(frac * 100), have, all, rate);
	n = k < 0 ? 0 : (size_t)k >= sizeof(line) ? sizeof(line) - 1 : (size_t)k;
	if (n > cols)
		n = cols;
	fprintf(stderr, "\r%.*s", (int)n, line);
	if (b->shown > n)
		fprintf(stderr, "%*s\r%.*s", (int)(b->shown - n), "", (int)n, line);
	fflush(stderr);
	b->shown = n;
}

void ctl_bar_start(struct ctl_bar *b, struct ctl *c, const char *label)
{
	*b = (struct ctl_bar){ .c = c, .label = label };
	if (c->json || !c->td || !isatty(STDERR_FILENO))
		return;
	tensord_set_progress(c->td, on_progress, b);
}

void ctl_bar_done(struct ctl_bar *b, uint64_t total)
{
	if (b->c && !b->c->json && b->c->td && isatty(STDERR_FILENO))
		on_progress(b, TENSORD_TRANSFER_SEND, total, total);
}

void ctl_bar_finish(struct ctl_bar *b)
{
	if (b->c && b->c->td)
		tensord_set_progress(b->c->td, NULL, NULL);
	if (b->shown) {
		fprintf(stderr, "\r%*s\r", (int)b->shown, "");
		fflush(stderr);
		b->shown = 0;
	}
}

/* ---- input files: "-" is standard input ---- */

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

/* ---- options several commands take ---- */

int ctl_parse_count(const char *opt, const char *text, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno || end == text || *end || text[0] == '-' || text[0] == '+' || v == 0 || v > INT32_MAX)
		return ctl_usage_error("%s must be a whole number from 1 to %d, not '%.32s'", opt, INT32_MAX, text);
	*ret = v;
	return CTL_EXIT_OK;
}

int ctl_pack_pairs(msgpack_packer *pk, const char *const *pairs, int n, const char *opt)
{
	if (msgpack_pack_map(pk, (uint32_t)n))
		return ctl_error("out of memory");
	for (int i = 0; i < n; i++) {
		const char *eq = strchr(pairs[i], '=');
		size_t klen = eq ? (size_t)(eq - pairs[i]) : 0;

		if (!eq || klen == 0 || klen > TENSORD_MAX_NAME_LEN || !tdp_ref_valid(eq + 1, strlen(eq + 1), false))
			return ctl_usage_error("%s wants INPUT=TENSOR (a tensor name of 1-%d bytes of A-Z a-z "
					       "0-9 . _ : / -), not '%.64s'", opt, TENSORD_MAX_NAME_LEN, pairs[i]);
		for (int j = 0; j < i; j++)
			if (!strncmp(pairs[j], pairs[i], klen + 1))
				return ctl_usage_error("%s: input '%.*s' is given twice", opt, (int)klen, pairs[i]);
		if (tdp_pack_strn(pk, pairs[i], klen) || tdp_pack_cstr(pk, eq + 1))
			return ctl_error("out of memory");
	}
	return CTL_EXIT_OK;
}

static bool key_in(const msgpack_object *key, const msgpack_object *map)
{
	for (uint32_t i = 0; map && i < map->via.map.size; i++) {
		const msgpack_object *k = &map->via.map.ptr[i].key;

		if (k->type == MSGPACK_OBJECT_STR && key->type == MSGPACK_OBJECT_STR &&
		    k->via.str.size == key->via.str.size && !memcmp(k->via.str.ptr, key->via.str.ptr, k->via.str.size))
			return true;
	}
	return false;
}

int ctl_pack_merged(msgpack_packer *pk, const msgpack_object *base, const msgpack_object *extra)
{
	uint32_t n = extra->via.map.size;

	for (uint32_t i = 0; base && i < base->via.map.size; i++)
		n += !key_in(&base->via.map.ptr[i].key, extra);
	if (msgpack_pack_map(pk, n))
		return -1;
	for (uint32_t i = 0; base && i < base->via.map.size; i++)
		if (!key_in(&base->via.map.ptr[i].key, extra) &&
		    (msgpack_pack_object(pk, base->via.map.ptr[i].key) || msgpack_pack_object(pk, base->via.map.ptr[i].val)))
			return -1;
	for (uint32_t i = 0; i < extra->via.map.size; i++)
		if (msgpack_pack_object(pk, extra->via.map.ptr[i].key) || msgpack_pack_object(pk, extra->via.map.ptr[i].val))
			return -1;
	return 0;
}

int ctl_check_ref(const char *what, const char *name)
{
	if (!tdp_ref_valid(name, strnlen(name, TENSORD_MAX_NAME_LEN + 1), false))
		return ctl_usage_error("invalid %s '%.64s' (1-%d bytes of A-Z a-z 0-9 . _ : / -)", what, name,
				       TENSORD_MAX_NAME_LEN);
	return CTL_EXIT_OK;
}

/* ---- results ---- */

int ctl_read_json_map(const char *path, const char *what, msgpack_sbuffer *sb)
{
	msgpack_packer pk;
	char err[MSG_MAX], *text = NULL;
	size_t len = 0;
	int r, status;

	if ((status = ctl_read_input(path, GRAPH_FILE_MAX, &text, &len)) != CTL_EXIT_OK)
		return status;
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	r = tdp_json_to_msgpack(text, len, &pk, err, sizeof(err));
	free(text);
	if (r < 0)
		return ctl_error("%s: %s", path, err);
	if (sb->size == 0 || !(((uint8_t)sb->data[0] >= 0x80 && (uint8_t)sb->data[0] <= 0x8f) ||
			       (uint8_t)sb->data[0] == 0xde || (uint8_t)sb->data[0] == 0xdf))
		return ctl_error("%s: the file must hold one JSON object %s", path, what);
	return CTL_EXIT_OK;
}

int ctl_print_output(struct ctl *c, const msgpack_object *key, const msgpack_object *o)
{
	const msgpack_object *dt = tdp_map_find(o, "dtype"), *sh = tdp_map_find(o, "shape");
	const msgpack_object *data = tdp_map_find(o, "data");
	uint64_t shape[TDP_MAX_RANK], count;
	int dtype;

	if (key->type != MSGPACK_OBJECT_STR || !dt || dt->type != MSGPACK_OBJECT_STR || !sh ||
	    sh->type != MSGPACK_OBJECT_ARRAY || sh->via.array.size > TDP_MAX_RANK || !data ||
	    data->type != MSGPACK_OBJECT_BIN)
		return ctl_error("malformed reply: an output lacks dtype, shape or data");
	dtype = tdp_dtype_parse(dt->via.str.ptr, dt->via.str.size);
	for (uint32_t i = 0; i < sh->via.array.size; i++)
		if (tdp_obj_uint(&sh->via.array.ptr[i], &shape[i]) < 0)
			return ctl_error("malformed reply: a bad shape");
	if (dtype < 0 || tdp_shape_count(shape, sh->via.array.size, tdp_dtype_size(dtype), &count) < 0 ||
	    count * tdp_dtype_size(dtype) != data->via.bin.size)
		return ctl_error("malformed reply: output data does not match its dtype and shape");
	if (c->json) {
		ctl_json_string(stdout, key->via.str.ptr, key->via.str.size);
		fputc(':', stdout);
	} else {
		printf("%.*s =\n", (int)(key->via.str.size > 255 ? 255 : key->via.str.size),
		       key->via.str.ptr);
	}
	ctl_print_inline(c, dtype, sh->via.array.size, shape, data->via.bin.ptr, data->via.bin.size);
	return CTL_EXIT_OK;
}

/* The stored tensors of a graph result, for people: "stored NAME: ...". */
static int print_stored_meta(const msgpack_object *name, const msgpack_object *meta)
{
	const msgpack_object *dt = tdp_map_find(meta, "dtype"), *sh = tdp_map_find(meta, "shape");
	const msgpack_object *by = tdp_map_find(meta, "bytes"), *ve = tdp_map_find(meta, "version");
	const msgpack_object *dev = tdp_map_find(meta, "device");
	struct tensord_tensor_info info;
	uint64_t device = 0;
	int dtype;

	memset(&info, 0, sizeof(info));
	if ((dev && (tdp_obj_uint(dev, &device) < 0 || device > UINT32_MAX)) ||
	    tdp_obj_strcpy(name, info.name, sizeof(info.name)) < 0 || !dt ||
	    dt->type != MSGPACK_OBJECT_STR || !sh || sh->type != MSGPACK_OBJECT_ARRAY ||
	    sh->via.array.size > TDP_MAX_RANK || !by || tdp_obj_uint(by, &info.bytes) < 0 || !ve ||
	    tdp_obj_uint(ve, &info.version) < 0)
		return ctl_error("malformed reply: bad metadata of a stored tensor");
	dtype = tdp_dtype_parse(dt->via.str.ptr, dt->via.str.size);
	if (dtype < 0)
		return ctl_error("malformed reply: bad metadata of a stored tensor");
	info.dtype = (enum tensord_dtype)dtype;
	info.device = (uint32_t)device;
	info.rank = sh->via.array.size;
	for (uint32_t i = 0; i < info.rank; i++)
		if (tdp_obj_uint(&sh->via.array.ptr[i], &info.shape[i]) < 0)
			return ctl_error("malformed reply: bad metadata of a stored tensor");
	ctl_print_stored(&info);
	return CTL_EXIT_OK;
}

int ctl_print_graph_result(struct ctl *c, const msgpack_object *res)
{
	const msgpack_object *outs = tdp_map_find(res, "outputs"), *stored = tdp_map_find(res, "stored");
	int status;

	if (!outs || outs->type != MSGPACK_OBJECT_MAP || !stored || stored->type != MSGPACK_OBJECT_MAP)
		return ctl_error("malformed reply: no outputs or stored map");
	if (c->json)
		fputs("{\"outputs\":{", stdout);
	for (uint32_t i = 0; i < outs->via.map.size; i++) {
		if (c->json && i > 0)
			fputc(',', stdout);
		status = ctl_print_output(c, &outs->via.map.ptr[i].key, &outs->via.map.ptr[i].val);
		if (status != CTL_EXIT_OK)
			return status;
	}
	if (c->json) {
		/* the daemon's metadata maps, as they are */
		fputs("},\"stored\":", stdout);
		ctl_json_msgpack(stdout, stored);
		fputs("}\n", stdout);
		return CTL_EXIT_OK;
	}
	for (uint32_t i = 0; i < stored->via.map.size; i++)
		if ((status = print_stored_meta(&stored->via.map.ptr[i].key,
						&stored->via.map.ptr[i].val)) != CTL_EXIT_OK)
			return status;
	return CTL_EXIT_OK;
}

/* Whether `path` names a safetensors file (by its extension). */
bool ctl_is_safetensors(const char *path)
{
	size_t n = strlen(path), e = strlen(".safetensors");

	return n > e && strcmp(path + n - e, ".safetensors") == 0;
}

/* Print a result that came back inline: a NumPy-style array, or with --json
 * {"dtype", "shape", "data"} (no newline in JSON mode). */
void ctl_print_inline(struct ctl *c, int dtype, uint32_t rank, const uint64_t *shape,
		      const void *data, size_t len)
{
	if (c->json) {
		fprintf(stdout, "{\"dtype\":\"%s\",\"shape\":", tdp_dtype_name(dtype));
		ctl_json_shape(stdout, rank, shape);
		fputs(",\"data\":", stdout);
		ctl_print_json_values(stdout, dtype, data, len / tdp_dtype_size(dtype));
		fputc('}', stdout);
	} else {
		ctl_print_array(stdout, dtype, rank, shape, data);
	}
}

void ctl_print_stored(const struct tensord_tensor_info *info)
{
	char shape[256], size[32];

	ctl_format_shape(shape, sizeof(shape), info->rank, info->shape);
	ctl_format_size(size, sizeof(size), info->bytes);
	printf("stored %s: %s %s, %s, version %" PRIu64 ", device %" PRIu32 "\n", info->name,
	       tensord_dtype_name(info->dtype), shape, size, info->version, info->device);
}
