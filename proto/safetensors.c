#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"
#include "errorf.h"
#include "json_parse.h"
#include "pack.h"
#include "utf8.h"

static const struct {
	const char *name;
	size_t size;
	int tensord;   /* enum tdp_dtype, or -1 */
} dtypes[ST_DTYPE_COUNT] = {
	[ST_BOOL] = { "BOOL", 1, -1 },
	[ST_U8] = { "U8", 1, TDP_DTYPE_U8 },
	[ST_I8] = { "I8", 1, -1 },
	[ST_F8_E5M2] = { "F8_E5M2", 1, -1 },
	[ST_F8_E4M3] = { "F8_E4M3", 1, -1 },
	[ST_I16] = { "I16", 2, -1 },
	[ST_U16] = { "U16", 2, -1 },
	[ST_F16] = { "F16", 2, TDP_DTYPE_F16 },
	[ST_BF16] = { "BF16", 2, TDP_DTYPE_BF16 },
	[ST_I32] = { "I32", 4, TDP_DTYPE_I32 },
	[ST_U32] = { "U32", 4, -1 },
	[ST_F32] = { "F32", 4, TDP_DTYPE_F32 },
	[ST_F64] = { "F64", 8, -1 },
	[ST_I64] = { "I64", 8, -1 },
	[ST_U64] = { "U64", 8, -1 },
};

const char *st_dtype_name(int dtype)
{
	return dtype >= 0 && dtype < ST_DTYPE_COUNT ? dtypes[dtype].name : NULL;
}

size_t st_dtype_size(int dtype)
{
	return dtype >= 0 && dtype < ST_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

int st_dtype_parse(const char *s, size_t n)
{
	for (int i = 0; i < ST_DTYPE_COUNT; i++)
		if (strlen(dtypes[i].name) == n && !memcmp(dtypes[i].name, s, n))
			return i;
	return -EINVAL;
}

int st_dtype_to_tensord(int dtype)
{
	return dtype >= 0 && dtype < ST_DTYPE_COUNT && dtypes[dtype].tensord >= 0 ? dtypes[dtype].tensord
										   : -ENOTSUP;
}

int st_dtype_from_tensord(int tdp_dtype)
{
	for (int i = 0; i < ST_DTYPE_COUNT; i++)
		if (dtypes[i].tensord >= 0 && dtypes[i].tensord == tdp_dtype)
			return i;
	return -EINVAL;
}

/* ---- reading ------------------------------------------------------------ */

/* A str object as a NUL-terminated copy in the string block at *cursor. */
static const char *keep_str(const msgpack_object *o, char **cursor)
{
	char *s = *cursor;

	memcpy(s, o->via.str.ptr, o->via.str.size);
	s[o->via.str.size] = '\0';
	*cursor += o->via.str.size + 1;
	return s;
}

static bool has_nul(const msgpack_object *o)
{
	return memchr(o->via.str.ptr, '\0', o->via.str.size) != NULL;
}

/* "'name'" cut short and made printable, for messages. */
static const char *quoted(const char *name, char *buf, size_t cap)
{
	snprintf(buf, cap, "'%.60s%s'", name, strlen(name) > 60 ? "..." : "");
	for (char *p = buf; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
			*p = '?';
	return buf;
}

static int parse_tensor(const msgpack_object *v, const char *name, uint64_t data_len, struct st_tensor *t,
			char *err, size_t err_len)
{
	const msgpack_object *dtype = NULL, *shape = NULL, *offs = NULL;
	uint64_t count = 1, bytes;
	char q[80];
	int dt;

	quoted(name, q, sizeof(q));
	if (v->type != MSGPACK_OBJECT_MAP)
		return tdp_errorf(err, err_len, -EINVAL, "tensor %s: not an object", q);
	for (uint32_t i = 0; i < v->via.map.size; i++) {
		const msgpack_object *k = &v->via.map.ptr[i].key, *val = &v->via.map.ptr[i].val;
		const msgpack_object **slot = tdp_obj_str_eq(k, "dtype") ? &dtype
					      : tdp_obj_str_eq(k, "shape") ? &shape
					      : tdp_obj_str_eq(k, "data_offsets") ? &offs : NULL;

		if (!slot)
			return tdp_errorf(err, err_len, -EINVAL,
					  "tensor %s: unknown key (only dtype, shape, data_offsets)", q);
		if (*slot)
			return tdp_errorf(err, err_len, -EINVAL, "tensor %s: a key appears twice", q);
		*slot = val;
	}
	if (!dtype || !shape || !offs)
		return tdp_errorf(err, err_len, -EINVAL, "tensor %s: needs dtype, shape and data_offsets", q);
	dt = dtype->type == MSGPACK_OBJECT_STR ? st_dtype_parse(dtype->via.str.ptr, dtype->via.str.size) : -EINVAL;
	if (dt < 0)
		return tdp_errorf(err, err_len, -EINVAL, "tensor %s: unknown dtype (the format's are BOOL U8 I8 "
				  "F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64)", q);
	t->dtype = (enum st_dtype)dt;
	if (shape->type != MSGPACK_OBJECT_ARRAY)
		return tdp_errorf(err, err_len, -EINVAL, "tensor %s: shape must be an array", q);
	if (shape->via.array.size > ST_MAX_RANK)
		return tdp_errorf(err, err_len, -ENOTSUP, "tensor %s: rank %u is over tensord's limit of %d", q,
				  shape->via.array.size, ST_MAX_RANK);
	t->rank = shape->via.array.size;
	for (uint32_t d = 0; d < t->rank; d++) {
		if (shape->via.array.ptr[d].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
			return tdp_errorf(err, err_len, -EINVAL, "tensor %s: shape[%u] must be a non-negative integer",
					  q, d);
		t->shape[d] = shape->via.array.ptr[d].via.u64;
		if (t->shape[d] && count > UINT64_MAX / t->shape[d])
			return tdp_errorf(err, err_len, -EINVAL, "tensor %s: the shape overflows", q);
		count *= t->shape[d];
	}
	if (count > UINT64_MAX / st_dtype_size(dt))
		return tdp_errorf(err, err_len, -EINVAL, "tensor %s: the shape overflows", q);
	bytes = count * st_dtype_size(dt);
	if (offs->type != MSGPACK_OBJECT_ARRAY || offs->via.array.size != 2 ||
	    offs->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
	    offs->via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return tdp_errorf(err, err_len, -EINVAL,
				  "tensor %s: data_offsets must be two non-negative integers [begin, end]", q);
	t->begin = offs->via.array.ptr[0].via.u64;
	t->end = offs->via.array.ptr[1].via.u64;
	if (t->begin > t->end)
		return tdp_errorf(err, err_len, -EINVAL, "tensor %s: data_offsets [%llu, %llu] end before they begin",
				  q, (unsigned long long)t->begin, (unsigned long long)t->end);
	if (t->end > data_len)
		return tdp_errorf(err, err_len, -EINVAL,
				  "tensor %s: data_offsets [%llu, %llu] run past the %llu-byte buffer", q,
				  (unsigned long long)t->begin, (unsigned long long)t->end,
				  (unsigned long long)data_len);
	if (t->end - t->begin != bytes)
		return tdp_errorf(err, err_len, -EINVAL,
				  "tensor %s: data_offsets hold %llu bytes but %s of that shape needs %llu", q,
				  (unsigned long long)(t->end - t->begin), dtypes[dt].name,
				  (unsigned long long)bytes);
	return 0;
}

static int parse_meta(const msgpack_object *v, struct st_file *f, char **cursor, char *err, size_t err_len)
{
	if (v->type != MSGPACK_OBJECT_MAP)
		return tdp_errorf(err, err_len, -EINVAL, "__metadata__ must be an object of strings");
	f->meta = calloc(v->via.map.size ? v->via.map.size : 1, sizeof(*f->meta));
	if (!f->meta)
		return tdp_errorf(err, err_len, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < v->via.map.size; i++) {
		const msgpack_object *k = &v->via.map.ptr[i].key, *val = &v->via.map.ptr[i].val;

		if (val->type != MSGPACK_OBJECT_STR)
			return tdp_errorf(err, err_len, -EINVAL,
					  "__metadata__: every value must be a string (no other JSON)");
		if (has_nul(k) || has_nul(val))
			return tdp_errorf(err, err_len, -EINVAL, "__metadata__: a NUL character in a string");
		for (uint32_t j = 0; j < i; j++)
			if (k->via.str.size == v->via.map.ptr[j].key.via.str.size &&
			    !memcmp(k->via.str.ptr, v->via.map.ptr[j].key.via.str.ptr, k->via.str.size))
				return tdp_errorf(err, err_len, -EINVAL, "__metadata__: a key appears twice");
		f->meta[i].key = keep_str(k, cursor);
		f->meta[i].value = keep_str(val, cursor);
	}
	f->nmeta = v->via.map.size;
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

static int by_offset(const void *a, const void *b)
{
	const struct st_tensor *x = *(const struct st_tensor *const *)a, *y = *(const struct st_tensor *const *)b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* No two tensors share a name; the tensors cover [0, data_len) exactly. */
static int check_layout(const struct st_file *f, uint64_t data_len, char *err, size_t err_len)
{
	struct st_tensor *copy = NULL, **order = NULL;
	uint64_t expect = 0;
	char q[80], q2[80];
	int r = 0;

	if (f->ntensors == 0)
		return data_len ? tdp_errorf(err, err_len, -EINVAL,
					     "the byte buffer has %llu bytes but no tensor points into it",
					     (unsigned long long)data_len)
				: 0;
	copy = malloc(f->ntensors * sizeof(*copy));
	order = malloc(f->ntensors * sizeof(*order));
	if (!copy || !order) {
		r = tdp_errorf(err, err_len, -ENOMEM, "out of memory");
		goto out;
	}
	memcpy(copy, f->tensors, f->ntensors * sizeof(*copy));
	qsort(copy, f->ntensors, sizeof(*copy), by_name);
	for (size_t i = 1; i < f->ntensors; i++)
		if (!strcmp(copy[i - 1].name, copy[i].name)) {
			r = tdp_errorf(err, err_len, -EINVAL, "tensor %s appears twice",
				       quoted(copy[i].name, q, sizeof(q)));
			goto out;
		}
	for (size_t i = 0; i < f->ntensors; i++)
		order[i] = &f->tensors[i];
	qsort(order, f->ntensors, sizeof(*order), by_offset);
	for (size_t i = 0; i < f->ntensors; i++) {
		if (order[i]->begin < expect) {
			r = tdp_errorf(err, err_len, -EINVAL, "tensors %s and %s overlap in the byte buffer",
				       quoted(order[i - 1]->name, q, sizeof(q)), quoted(order[i]->name, q2, sizeof(q2)));
			goto out;
		}
		if (order[i]->begin > expect) {
			r = tdp_errorf(err, err_len, -EINVAL,
				       "the byte buffer has a hole: bytes %llu to %llu belong to no tensor",
				       (unsigned long long)expect, (unsigned long long)order[i]->begin);
			goto out;
		}
		expect = order[i]->end;
	}
	if (expect != data_len)
		r = tdp_errorf(err, err_len, -EINVAL,
			       "the byte buffer has %llu bytes after the last tensor (it must be covered exactly)",
			       (unsigned long long)(data_len - expect));
out:
	free(copy);
	free(order);
	return r;
}

int st_parse(const uint8_t *buf, size_t len, struct st_file *ret, char *err, size_t err_len)
{
	struct st_file f = { 0 };
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacked u;
	const msgpack_object *top;
	uint64_t n = 0, data_len;
	size_t off = 0, bad, strbytes = 0, nt = 0;
	char why[200], *cursor;
	bool have_meta = false;
	int r;

	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&u);
	if (len < 8) {
		r = tdp_errorf(err, err_len, -EINVAL,
			       "%zu bytes is too short: a safetensors file starts with an 8-byte header length", len);
		goto fail;
	}
	for (int i = 7; i >= 0; i--)
		n = n << 8 | buf[i];
	if (n > ST_MAX_HEADER_LEN) {
		r = tdp_errorf(err, err_len, -EFBIG, "the header length %llu is over the limit of %u bytes",
			       (unsigned long long)n, ST_MAX_HEADER_LEN);
		goto fail;
	}
	if (n > len - 8) {
		r = tdp_errorf(err, err_len, -EINVAL, "the header length %llu runs past the end of the file (%zu bytes)",
			       (unsigned long long)n, len);
		goto fail;
	}
	if (n < 2 || buf[8] != '{') {
		r = tdp_errorf(err, err_len, -EINVAL, "the header does not start with '{'");
		goto fail;
	}
	bad = tdp_utf8_check(buf + 8, (size_t)n);
	if (bad != n) {
		r = tdp_errorf(err, err_len, -EINVAL, "the header is not UTF-8 (at header byte %zu)", bad);
		goto fail;
	}
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	r = tdp_json_to_msgpack((const char *)buf + 8, (size_t)n, &pk, why, sizeof(why));
	if (r < 0) {
		r = tdp_errorf(err, err_len, r, "header JSON: %s", r == -ENOMEM ? "out of memory" : why);
		goto fail;
	}
	if (msgpack_unpack_next(&u, sb.data, sb.size, &off) != MSGPACK_UNPACK_SUCCESS) {
		r = tdp_errorf(err, err_len, -ENOMEM, "out of memory");
		goto fail;
	}
	top = &u.data;
	if (top->type != MSGPACK_OBJECT_MAP) {
		r = tdp_errorf(err, err_len, -EINVAL, "the header is not a JSON object");
		goto fail;
	}
	/* One block for every string kept: names, keys, values. */
	for (uint32_t i = 0; i < top->via.map.size; i++) {
		const msgpack_object *k = &top->via.map.ptr[i].key, *v = &top->via.map.ptr[i].val;

		if (tdp_obj_str_eq(k, "__metadata__")) {
			if (have_meta) {
				r = tdp_errorf(err, err_len, -EINVAL, "__metadata__ appears twice");
				goto fail;
			}
			have_meta = true;
			for (uint32_t j = 0; v->type == MSGPACK_OBJECT_MAP && j < v->via.map.size; j++)
				strbytes += v->via.map.ptr[j].key.via.str.size + 1 +
					    (v->via.map.ptr[j].val.type == MSGPACK_OBJECT_STR ?
						     v->via.map.ptr[j].val.via.str.size + 1 : 0);
			continue;
		}
		if (has_nul(k)) {
			r = tdp_errorf(err, err_len, -EINVAL, "a tensor name holds a NUL character");
			goto fail;
		}
		strbytes += k->via.str.size + 1;
		nt++;
	}
	f.strings = malloc(strbytes ? strbytes : 1);
	f.tensors = calloc(nt ? nt : 1, sizeof(*f.tensors));
	if (!f.strings || !f.tensors) {
		r = tdp_errorf(err, err_len, -ENOMEM, "out of memory");
		goto fail;
	}
	cursor = f.strings;
	data_len = len - 8 - n;
	for (uint32_t i = 0; i < top->via.map.size; i++) {
		const msgpack_object *k = &top->via.map.ptr[i].key, *v = &top->via.map.ptr[i].val;
		struct st_tensor *t = &f.tensors[f.ntensors];

		if (tdp_obj_str_eq(k, "__metadata__")) {
			if ((r = parse_meta(v, &f, &cursor, err, err_len)) < 0)
				goto fail;
			continue;
		}
		t->name = keep_str(k, &cursor);
		if ((r = parse_tensor(v, t->name, data_len, t, err, err_len)) < 0)
			goto fail;
		t->data = buf + 8 + n + t->begin;
		f.ntensors++;
	}
	if ((r = check_layout(&f, data_len, err, err_len)) < 0)
		goto fail;
	f.header_len = n;
	msgpack_unpacked_destroy(&u);
	msgpack_sbuffer_destroy(&sb);
	*ret = f;
	return 0;
fail:
	msgpack_unpacked_destroy(&u);
	msgpack_sbuffer_destroy(&sb);
	st_close(&f);
	return r;
}

int st_load(const char *path, struct st_file *ret, char *err, size_t err_len)
{
	struct stat st;
	void *base;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tdp_errorf(err, err_len, -errno, "%s", strerror(errno));
	if (fstat(fd, &st) < 0) {
		r = tdp_errorf(err, err_len, -errno, "%s", strerror(errno));
		close(fd);
		return r;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return tdp_errorf(err, err_len, -EINVAL, "not a regular file");
	}
	if (st.st_size < 8) {
		close(fd);
		return tdp_errorf(err, err_len, -EINVAL,
				  "%lld bytes is too short: a safetensors file starts with an 8-byte header length",
				  (long long)st.st_size);
	}
	base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	r = -errno;
	close(fd);
	if (base == MAP_FAILED)
		return tdp_errorf(err, err_len, r, "mmap: %s", strerror(-r));
	r = st_parse(base, (size_t)st.st_size, ret, err, err_len);
	if (r < 0) {
		munmap(base, (size_t)st.st_size);
		return r;
	}
	ret->base = base;
	ret->base_len = (size_t)st.st_size;
	return 0;
}

void st_close(struct st_file *f)
{
	if (f->base)
		munmap(f->base, f->base_len);
	free(f->tensors);
	free(f->meta);
	free(f->strings);
	memset(f, 0, sizeof(*f));
}

const char *st_meta_get(const struct st_file *f, const char *key)
{
	for (size_t i = 0; i < f->nmeta; i++)
		if (!strcmp(f->meta[i].key, key))
			return f->meta[i].value;
	return NULL;
}

/* ---- writing ------------------------------------------------------------ */

struct st_writer {
	int fd;
	char *path, *tmp;
	uint64_t *sizes;
	size_t n, next;
};

static int write_all(int fd, const void *p, size_t n, char *err, size_t err_len)
{
	const uint8_t *b = p;

	while (n > 0) {
		ssize_t k = write(fd, b, n > (1u << 30) ? (1u << 30) : n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return tdp_errorf(err, err_len, -errno, "write: %s", strerror(errno));
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

static int entry_size(const struct st_entry *e, uint64_t *ret, char *err, size_t err_len)
{
	uint64_t count = 1;

	if (!st_dtype_name((int)e->dtype))
		return tdp_errorf(err, err_len, -EINVAL, "tensor '%.60s': unknown dtype", e->name);
	if (e->rank > ST_MAX_RANK || (e->rank && !e->shape))
		return tdp_errorf(err, err_len, -EINVAL, "tensor '%.60s': bad rank", e->name);
	for (uint32_t d = 0; d < e->rank; d++) {
		if (e->shape[d] && count > UINT64_MAX / e->shape[d])
			return tdp_errorf(err, err_len, -EOVERFLOW, "tensor '%.60s': the shape overflows", e->name);
		count *= e->shape[d];
	}
	if (count > UINT64_MAX / st_dtype_size((int)e->dtype))
		return tdp_errorf(err, err_len, -EOVERFLOW, "tensor '%.60s': the shape overflows", e->name);
	*ret = count * st_dtype_size((int)e->dtype);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names must be present, not "__metadata__", and distinct. */
static int check_names(const char **names, size_t n, const char *what, char *err, size_t err_len)
{
	for (size_t i = 0; i < n; i++)
		if (!names[i] || (!strcmp(what, "tensor") && !strcmp(names[i], "__metadata__")))
			return tdp_errorf(err, err_len, -EINVAL, "a %s has no name or a reserved one", what);
	qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(names[i - 1], names[i]))
			return tdp_errorf(err, err_len, -EINVAL, "%s '%.60s' is given twice", what, names[i]);
	return 0;
}

/* `n` bytes of `s` as a quoted JSON string: quotes, backslashes and control
 * bytes escaped, bytes that are not UTF-8 as U+FFFD. */
static void st_json_string(FILE *f, const char *s, size_t n)
{
	const uint8_t *p = (const uint8_t *)s;
	size_t i = 0;

	fputc('"', f);
	while (i < n) {
		size_t good = i + tdp_utf8_check(p + i, n - i);

		for (; i < good; i++) {
			if (p[i] == '"' || p[i] == '\\')
				fprintf(f, "\\%c", p[i]);
			else if (p[i] < 0x20)
				fprintf(f, "\\u%04x", p[i]);
			else
				fputc(p[i], f);
		}
		if (i < n) {
			fputs("\\ufffd", f);
			i++;
		}
	}
	fputc('"', f);
}

/* The header text (unpadded) into a malloc'd *ret. */
static int format_header(const struct st_entry *e, size_t n, const uint64_t *sizes, const struct st_meta *meta,
			 size_t nmeta, char **ret, size_t *ret_len)
{
	char *text = NULL;
	size_t len = 0;
	uint64_t off = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return -ENOMEM;
	fputc('{', f);
	if (nmeta) {
		fputs("\"__metadata__\":{", f);
		for (size_t i = 0; i < nmeta; i++) {
			if (i)
				fputc(',', f);
			st_json_string(f, meta[i].key, strlen(meta[i].key));
			fputc(':', f);
			st_json_string(f, meta[i].value, strlen(meta[i].value));
		}
		fputc('}', f);
	}
	for (size_t i = 0; i < n; i++) {
		if (i || nmeta)
			fputc(',', f);
		st_json_string(f, e[i].name, strlen(e[i].name));
		fprintf(f, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name((int)e[i].dtype));
		for (uint32_t d = 0; d < e[i].rank; d++)
			fprintf(f, "%s%llu", d ? "," : "", (unsigned long long)e[i].shape[d]);
		fprintf(f, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
			(unsigned long long)(off + sizes[i]));
		off += sizes[i];
	}
	fputc('}', f);
	if (fclose(f) != 0) {
		free(text);
		return -ENOMEM;
	}
	*ret = text;
	*ret_len = len;
	return 0;
}

int st_writer_open(const char *path, const struct st_entry *entries, size_t n, const struct st_meta *meta,
		   size_t nmeta, struct st_writer **ret, char *err, size_t err_len)
{
	struct st_writer *w;
	const char **names = NULL;
	char *header = NULL;
	size_t hlen = 0, padded;
	uint8_t lenbuf[8];
	mode_t mask;
	int r;

	w = calloc(1, sizeof(*w));
	if (!w)
		return tdp_errorf(err, err_len, -ENOMEM, "out of memory");
	w->fd = -1;
	w->n = n;
	w->sizes = calloc(n ? n : 1, sizeof(*w->sizes));
	names = calloc((n > nmeta ? n : nmeta) + 1, sizeof(*names));
	w->path = strdup(path);
	w->tmp = malloc(strlen(path) + 16);
	if (!w->sizes || !names || !w->path || !w->tmp) {
		r = tdp_errorf(err, err_len, -ENOMEM, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		if ((r = entry_size(&entries[i], &w->sizes[i], err, err_len)) < 0)
			goto fail;
		names[i] = entries[i].name;
	}
	if ((r = check_names(names, n, "tensor", err, err_len)) < 0)
		goto fail;
	for (size_t i = 0; i < nmeta; i++) {
		if (!meta[i].value)
			names[i] = NULL;
		else
			names[i] = meta[i].key;
	}
	if ((r = check_names(names, nmeta, "metadata key", err, err_len)) < 0)
		goto fail;
	if ((r = format_header(entries, n, w->sizes, meta, nmeta, &header, &hlen)) < 0) {
		r = tdp_errorf(err, err_len, r, "out of memory");
		goto fail;
	}
	/* Spaces after the JSON so that the data starts 8-byte aligned. */
	padded = (hlen + 7) & ~(size_t)7;
	if (padded > ST_MAX_HEADER_LEN) {
		r = tdp_errorf(err, err_len, -EFBIG, "the header would be over %u bytes", ST_MAX_HEADER_LEN);
		goto fail;
	}
	sprintf(w->tmp, "%s.tmp-XXXXXX", path);
	w->fd = mkostemp(w->tmp, O_CLOEXEC);
	if (w->fd < 0) {
		r = tdp_errorf(err, err_len, -errno, "%s", strerror(errno));
		goto fail;
	}
	mask = umask(0);
	umask(mask);
	if (fchmod(w->fd, 0666 & ~mask) < 0) {
		r = tdp_errorf(err, err_len, -errno, "chmod: %s", strerror(errno));
		goto fail;
	}
	for (int i = 0; i < 8; i++)
		lenbuf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
	if ((r = write_all(w->fd, lenbuf, 8, err, err_len)) < 0 ||
	    (r = write_all(w->fd, header, hlen, err, err_len)) < 0 ||
	    (r = write_all(w->fd, "        ", padded - hlen, err, err_len)) < 0)
		goto fail;
	free(header);
	free(names);
	*ret = w;
	return 0;
fail:
	free(header);
	free(names);
	st_writer_close(w, false, NULL, 0);
	return r;
}

int st_writer_put(struct st_writer *w, const void *data, uint64_t len, char *err, size_t err_len)
{
	if (w->next >= w->n)
		return tdp_errorf(err, err_len, -EINVAL, "no tensor is left to write");
	if (len != w->sizes[w->next])
		return tdp_errorf(err, err_len, -EINVAL, "tensor %zu has %llu bytes, not the %llu its header says",
				  w->next, (unsigned long long)len, (unsigned long long)w->sizes[w->next]);
	if (len > 0 && !data)
		return tdp_errorf(err, err_len, -EINVAL, "tensor %zu has no data", w->next);
	w->next++;
	return len ? write_all(w->fd, data, (size_t)len, err, err_len) : 0;
}

int st_writer_close(struct st_writer *w, bool commit, char *err, size_t err_len)
{
	int r = 0;

	if (!w)
		return 0;
	if (commit && w->next != w->n)
		r = tdp_errorf(err, err_len, -EINVAL, "only %zu of %zu tensors were written", w->next, w->n);
	if (r == 0 && commit && fsync(w->fd) < 0)
		r = tdp_errorf(err, err_len, -errno, "fsync: %s", strerror(errno));
	if (w->fd >= 0 && close(w->fd) < 0 && r == 0 && commit)
		r = tdp_errorf(err, err_len, -errno, "close: %s", strerror(errno));
	if (r == 0 && commit && rename(w->tmp, w->path) < 0)
		r = tdp_errorf(err, err_len, -errno, "rename: %s", strerror(errno));
	if (w->fd >= 0 && (!commit || r < 0))
		unlink(w->tmp);
	free(w->sizes);
	free(w->path);
	free(w->tmp);
	free(w);
	return r;
}

int st_write(const char *path, const struct st_entry *entries, size_t n, const struct st_meta *meta,
	     size_t nmeta, char *err, size_t err_len)
{
	struct st_writer *w;
	int r = st_writer_open(path, entries, n, meta, nmeta, &w, err, err_len);

	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		uint64_t len = w->sizes[i];

		if ((r = st_writer_put(w, entries[i].data, len, err, err_len)) < 0) {
			st_writer_close(w, false, NULL, 0);
			return r;
		}
	}
	return st_writer_close(w, true, err, err_len);
}
