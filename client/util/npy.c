/* NumPy .npy reading and writing for tensorctl (format spec:
 * numpy.lib.format). The header is a Python dict literal; only the exact
 * subset NumPy writes is accepted, parsed within its stated length. */
#include "errorf.h"
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "dtype.h"
#include "values.h"

static const char MAGIC[6] = { '\x93', 'N', 'U', 'M', 'P', 'Y' };

/* Largest file read from a pipe: a float64 copy of the largest tensor. */
#define NPY_MAX_STREAM_BYTES (2 * TDP_MAX_TENSOR_BYTES + ((uint64_t)1 << 20))

static const struct {
	const char *descr;
	enum npy_elem elem;
} descrs[] = {
	{ "<f4", NPY_F32 }, { "<f2", NPY_F16 }, { "<i4", NPY_I32 }, { "|u1", NPY_U8 },
	{ "u1", NPY_U8 },   { "<u1", NPY_U8 },  { "<u2", NPY_U16 }, { "<f8", NPY_F64 },
	{ "<i8", NPY_I64 },
};

static const size_t elem_sizes[NPY_ELEM_COUNT] = {
	[NPY_F32] = 4, [NPY_F16] = 2, [NPY_I32] = 4, [NPY_U8] = 1,
	[NPY_U16] = 2, [NPY_F64] = 8, [NPY_I64] = 8,
};

size_t npy_elem_size(enum npy_elem elem)
{
	return (unsigned)elem < NPY_ELEM_COUNT ? elem_sizes[elem] : 0;
}

struct parser {
	const char *p, *end;
	char *err;
	size_t err_len;
};

static void skip_ws(struct parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t'))
		ps->p++;
}

static int syntax(struct parser *ps, const char *what)
{
	if (ps->p >= ps->end)
		return tdp_errorf(ps->err, ps->err_len, -EINVAL, "bad .npy header: %s, found the end",
			    what);
	if (*ps->p >= 0x20 && *ps->p < 0x7f)
		return tdp_errorf(ps->err, ps->err_len, -EINVAL, "bad .npy header: %s, found '%c'", what,
			    *ps->p);
	return tdp_errorf(ps->err, ps->err_len, -EINVAL, "bad .npy header: %s, found byte 0x%02x",
		    what, (unsigned)(uint8_t)*ps->p);
}

static bool accept(struct parser *ps, char c)
{
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == c) {
		ps->p++;
		return true;
	}
	return false;
}

/* A quoted string without escapes, at most cap - 1 bytes. */
static int parse_str(struct parser *ps, char *out, size_t cap)
{
	const char *b;
	char q;

	skip_ws(ps);
	if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"'))
		return syntax(ps, "expected a quoted string");
	q = *ps->p++;
	for (b = ps->p; ps->p < ps->end && *ps->p != q; ps->p++)
		if (*ps->p == '\\' || (uint8_t)*ps->p < 0x20 || (uint8_t)*ps->p >= 0x7f)
			return syntax(ps, "unsupported character in a string");
	if (ps->p >= ps->end)
		return syntax(ps, "unterminated string");
	if ((size_t)(ps->p - b) >= cap)
		return tdp_errorf(ps->err, ps->err_len, -EINVAL, "bad .npy header: string '%.*s...' too long",
			    (int)(cap - 1), b);
	memcpy(out, b, (size_t)(ps->p - b));
	out[ps->p - b] = '\0';
	ps->p++;
	return 0;
}

static bool accept_word(struct parser *ps, const char *w)
{
	size_t n = strlen(w);

	skip_ws(ps);
	if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, w, n) == 0) {
		ps->p += n;
		return true;
	}
	return false;
}

/* A Python tuple of non-negative integers: (), (3,), (2, 3) or (2, 3,). */
static int parse_shape(struct parser *ps, struct npy_header *h)
{
	if (!accept(ps, '('))
		return syntax(ps, "expected '(' starting the shape");
	h->rank = 0;
	for (;;) {
		uint64_t v = 0;
		const char *b;

		if (accept(ps, ')'))
			break;
		if (h->rank == TDP_MAX_RANK)
			return tdp_errorf(ps->err, ps->err_len, -EINVAL,
				    "shape has more than %d dimensions", TDP_MAX_RANK);
		skip_ws(ps);
		for (b = ps->p; ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9'; ps->p++)
			if (__builtin_mul_overflow(v, 10, &v) ||
			    __builtin_add_overflow(v, (uint64_t)(*ps->p - '0'), &v))
				return tdp_errorf(ps->err, ps->err_len, -EOVERFLOW,
					    "bad .npy header: dimension too large");
		if (ps->p == b)
			return syntax(ps, "expected a dimension");
		if (ps->p < ps->end && *ps->p == 'L') /* written by Python 2 */
			ps->p++;
		h->shape[h->rank++] = v;
		if (accept(ps, ','))
			continue;
		if (h->rank == 1)
			return syntax(ps, "expected ',' in a one-element tuple");
		if (!accept(ps, ')'))
			return syntax(ps, "expected ',' or ')' in the shape");
		break;
	}
	return 0;
}

static int parse_descr(struct parser *ps, struct npy_header *h)
{
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == '[')
		return tdp_errorf(ps->err, ps->err_len, -ENOTSUP, "structured arrays are not supported");
	if (parse_str(ps, h->descr, sizeof(h->descr)) < 0)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(descrs) / sizeof(descrs[0]); i++)
		if (strcmp(descrs[i].descr, h->descr) == 0) {
			h->elem = descrs[i].elem;
			return 0;
		}
	if (h->descr[0] == '>')
		return tdp_errorf(ps->err, ps->err_len, -ENOTSUP,
			    "big-endian data (descr '%s') is not supported; save "
			    "arr.astype(arr.dtype.newbyteorder('<'))", h->descr);
	return tdp_errorf(ps->err, ps->err_len, -ENOTSUP,
		    "unsupported dtype (descr '%s'); supported: <f4 <f2 <i4 |u1, and "
		    "<u2 <f8 <i8 with --dtype", h->descr);
}

/* The header dict: exactly the keys descr, fortran_order and shape. */
static int parse_dict(struct parser *ps, struct npy_header *h)
{
	bool seen_descr = false, seen_order = false, seen_shape = false;
	char key[32];
	int r;

	if (!accept(ps, '{'))
		return syntax(ps, "expected '{'");
	while (!accept(ps, '}')) {
		if ((r = parse_str(ps, key, sizeof(key))) < 0)
			return r;
		if (!accept(ps, ':'))
			return syntax(ps, "expected ':'");
		if (strcmp(key, "descr") == 0 && !seen_descr) {
			seen_descr = true;
			if ((r = parse_descr(ps, h)) < 0)
				return r;
		} else if (strcmp(key, "fortran_order") == 0 && !seen_order) {
			seen_order = true;
			if (accept_word(ps, "True"))
				return tdp_errorf(ps->err, ps->err_len, -ENOTSUP,
					    "Fortran-ordered arrays are not supported; save "
					    "np.ascontiguousarray(arr)");
			if (!accept_word(ps, "False"))
				return syntax(ps, "expected True or False");
		} else if (strcmp(key, "shape") == 0 && !seen_shape) {
			seen_shape = true;
			if ((r = parse_shape(ps, h)) < 0)
				return r;
		} else {
			return tdp_errorf(ps->err, ps->err_len, -EINVAL,
				    "bad .npy header: unexpected or repeated key '%s'", key);
		}
		if (accept(ps, ','))
			continue;
		if (!accept(ps, '}'))
			return syntax(ps, "expected ',' or '}'");
		break;
	}
	if (!seen_descr || !seen_order || !seen_shape)
		return tdp_errorf(ps->err, ps->err_len, -EINVAL,
			    "bad .npy header: descr, fortran_order or shape missing");
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' ||
				   *ps->p == '\r'))
		ps->p++;
	if (ps->p != ps->end)
		return syntax(ps, "expected only padding after the dict");
	return 0;
}

int npy_parse_header(const uint8_t *buf, size_t len, struct npy_header *ret, char *err,
		     size_t err_len)
{
	struct npy_header h;
	struct parser ps = { .err = err, .err_len = err_len };
	size_t hlen, pre;
	int r;

	memset(&h, 0, sizeof(h));
	if (len < 10 || memcmp(buf, MAGIC, sizeof(MAGIC)) != 0)
		return tdp_errorf(err, err_len, -EINVAL, "not a .npy file (no \\x93NUMPY magic)");
	if (buf[6] < 1 || buf[6] > 3 || buf[7] != 0)
		return tdp_errorf(err, err_len, -ENOTSUP, "unsupported .npy format version %u.%u",
			    buf[6], buf[7]);
	if (buf[6] == 1) {
		pre = 10;
		hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
	} else {
		if (len < 12)
			return tdp_errorf(err, err_len, -EINVAL, "truncated .npy header");
		pre = 12;
		hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
		       (size_t)buf[11] << 24;
	}
	if (hlen > NPY_MAX_HEADER_LEN)
		return tdp_errorf(err, err_len, -EINVAL, ".npy header of %zu bytes is over the %d-byte limit",
			    hlen, NPY_MAX_HEADER_LEN);
	if (hlen > len - pre)
		return tdp_errorf(err, err_len, -EINVAL, "truncated .npy header (%zu of %zu bytes)",
			    len - pre, hlen);
	ps.p = (const char *)buf + pre;
	ps.end = ps.p + hlen;
	if ((r = parse_dict(&ps, &h)) < 0)
		return r;
	if (tdp_shape_count(h.shape, h.rank, npy_elem_size(h.elem), &h.count) < 0)
		return tdp_errorf(err, err_len, -EOVERFLOW, "the .npy shape is too large");
	h.data_offset = pre + hlen;
	h.data_bytes = h.count * npy_elem_size(h.elem);
	if (h.data_bytes != len - h.data_offset)
		return tdp_errorf(err, err_len, -EINVAL,
			    "the .npy file holds %zu data bytes but its shape needs %llu",
			    len - h.data_offset, (unsigned long long)h.data_bytes);
	*ret = h;
	return 0;
}

static int read_all(int fd, uint8_t **ret_buf, size_t *ret_len, char *err, size_t err_len)
{
	size_t len = 0, cap = 0;
	uint8_t *buf = NULL, *p;
	ssize_t n;

	for (;;) {
		if (len == cap) {
			if (cap >= NPY_MAX_STREAM_BYTES) {
				free(buf);
				return tdp_errorf(err, err_len, -EFBIG, "input larger than %llu bytes",
					    (unsigned long long)NPY_MAX_STREAM_BYTES);
			}
			cap = cap ? 2 * cap : (size_t)1 << 20;
			if (cap > NPY_MAX_STREAM_BYTES)
				cap = NPY_MAX_STREAM_BYTES;
			p = realloc(buf, cap);
			if (!p) {
				free(buf);
				return tdp_errorf(err, err_len, -ENOMEM, "out of memory");
			}
			buf = p;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int r = -errno;

			free(buf);
			return tdp_errorf(err, err_len, r, "read: %s", strerror(-r));
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*ret_buf = buf;
	*ret_len = len;
	return 0;
}

int npy_load(const char *path, struct npy_file *ret, char *err, size_t err_len)
{
	struct npy_file f = { 0 };
	bool is_stdin = strcmp(path, "-") == 0;
	struct stat st;
	int fd, r;

	fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tdp_errorf(err, err_len, -errno, "%s", strerror(errno));
	if (fstat(fd, &st) < 0) {
		r = tdp_errorf(err, err_len, -errno, "%s", strerror(errno));
		goto fail;
	}
	if (S_ISDIR(st.st_mode)) {
		r = tdp_errorf(err, err_len, -EISDIR, "is a directory");
		goto fail;
	}
	if (S_ISREG(st.st_mode) && st.st_size > 0) {
		f.base_len = (size_t)st.st_size;
		f.base = mmap(NULL, f.base_len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
		if (f.base == MAP_FAILED) {
			f.base = NULL;
			r = tdp_errorf(err, err_len, -errno, "mmap: %s", strerror(errno));
			goto fail;
		}
		f.mapped = true;
	} else {
		uint8_t *buf = NULL;

		if ((r = read_all(fd, &buf, &f.base_len, err, err_len)) < 0)
			goto fail;
		f.base = buf;
	}
	if ((r = npy_parse_header(f.base, f.base_len, &f.hdr, err, err_len)) < 0)
		goto fail;
	f.data = (const uint8_t *)f.base + f.hdr.data_offset;
	if (!is_stdin)
		close(fd);
	*ret = f;
	return 0;

fail:
	npy_close(&f);
	if (!is_stdin)
		close(fd);
	return r;
}

void npy_close(struct npy_file *f)
{
	if (f->base) {
		if (f->mapped)
			munmap(f->base, f->base_len);
		else
			free(f->base);
	}
	memset(f, 0, sizeof(*f));
}

static bool elem_is_float(enum npy_elem e)
{
	return e == NPY_F32 || e == NPY_F16 || e == NPY_F64;
}

static int elem_default_dtype(enum npy_elem e)
{
	switch (e) {
	case NPY_F32: return TDP_DTYPE_F32;
	case NPY_F16: return TDP_DTYPE_F16;
	case NPY_I32: return TDP_DTYPE_I32;
	case NPY_U8: return TDP_DTYPE_U8;
	default: return -1;
	}
}

bool npy_same_bytes(enum npy_elem elem, int dtype)
{
	return elem_default_dtype(elem) == dtype || (elem == NPY_U16 && dtype == TDP_DTYPE_BF16);
}

int npy_target_dtype(enum npy_elem elem, int want, char *err, size_t err_len)
{
	bool want_float = want == TDP_DTYPE_F32 || want == TDP_DTYPE_F16 || want == TDP_DTYPE_BF16;

	if (want < 0) {
		want = elem_default_dtype(elem);
		if (want >= 0)
			return want;
		if (elem == NPY_U16)
			return tdp_errorf(err, err_len, -EINVAL,
				    "uint16 data (<u2): pass --dtype bf16 if it holds bfloat16 bits");
		return tdp_errorf(err, err_len, -EINVAL, "%s data: pass --dtype %s to convert it",
			    elem == NPY_F64 ? "float64 (<f8)" : "int64 (<i8)",
			    elem == NPY_F64 ? "f32, f16 or bf16" : "i32 or u8");
	}
	if (npy_same_bytes(elem, want) || !elem_is_float(elem) || want_float)
		return want;
	return tdp_errorf(err, err_len, -EINVAL, "cannot store floating-point data as %s",
		    tdp_dtype_name(want));
}

static double load_double(enum npy_elem elem, const uint8_t *p, uint64_t i)
{
	uint16_t u16;
	int64_t i64;
	double d;

	switch (elem) {
	case NPY_F32: return ctl_elem_double(TDP_DTYPE_F32, p, i);
	case NPY_F16: return ctl_elem_double(TDP_DTYPE_F16, p, i);
	case NPY_I32: return ctl_elem_double(TDP_DTYPE_I32, p, i);
	case NPY_U8: return p[i];
	case NPY_U16:
		memcpy(&u16, p + 2 * i, 2);
		return u16;
	case NPY_F64:
		memcpy(&d, p + 8 * i, 8);
		return d;
	case NPY_I64:
		memcpy(&i64, p + 8 * i, 8);
		return (double)i64;
	default:
		return 0;
	}
}

static int64_t load_int(enum npy_elem elem, const uint8_t *p, uint64_t i)
{
	int64_t v;

	if (elem == NPY_I64) {
		memcpy(&v, p + 8 * i, 8);
		return v;
	}
	return (int64_t)load_double(elem, p, i);
}

int npy_convert(enum npy_elem elem, const void *src, int dtype, void *dst, uint64_t count,
		char *err, size_t err_len)
{
	bool to_int = dtype == TDP_DTYPE_I32 || dtype == TDP_DTYPE_U8;
	int64_t lo = dtype == TDP_DTYPE_I32 ? INT32_MIN : 0;
	int64_t hi = dtype == TDP_DTYPE_I32 ? INT32_MAX : UINT8_MAX;

	if (npy_same_bytes(elem, dtype)) {
		memcpy(dst, src, count * tdp_dtype_size(dtype));
		return 0;
	}
	if (to_int && elem_is_float(elem))
		return tdp_errorf(err, err_len, -EINVAL, "cannot store floating-point data as %s",
			    tdp_dtype_name(dtype));
	for (uint64_t i = 0; i < count; i++) {
		if (to_int) {
			int64_t v = load_int(elem, src, i);

			if (v < lo || v > hi)
				return tdp_errorf(err, err_len, -ERANGE,
					    "element %llu (%lld) is out of range for %s",
					    (unsigned long long)i, (long long)v, tdp_dtype_name(dtype));
			ctl_elem_store(dtype, dst, i, (double)v);
		} else {
			ctl_elem_store(dtype, dst, i, load_double(elem, src, i));
		}
	}
	return 0;
}

static const char *write_descr(int dtype)
{
	switch (dtype) {
	case TDP_DTYPE_F32: return "<f4";
	case TDP_DTYPE_F16: return "<f2";
	case TDP_DTYPE_BF16: return "<u2";
	case TDP_DTYPE_I32: return "<i4";
	case TDP_DTYPE_U8: return "|u1";
	default: return NULL;
	}
}

int npy_format_header(int dtype, uint32_t rank, const uint64_t *shape, char *buf, size_t cap)
{
	const char *descr = write_descr(dtype);
	char dict[512];
	size_t n, total, pad, hlen;
	int w;

	if (!descr || rank > TDP_MAX_RANK)
		return -EINVAL;
	w = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (",
		     descr);
	n = (size_t)w;
	for (uint32_t i = 0; i < rank; i++) {
		w = snprintf(dict + n, sizeof(dict) - n, "%s%llu", i ? ", " : "",
			     (unsigned long long)shape[i]);
		n += (size_t)w;
	}
	w = snprintf(dict + n, sizeof(dict) - n, "%s), }", rank == 1 ? "," : "");
	n += (size_t)w;
	total = 10 + n + 1;
	pad = (64 - total % 64) % 64;
	total += pad;
	hlen = total - 10;
	if (total > cap)
		return -ENOSPC;
	memcpy(buf, MAGIC, sizeof(MAGIC));
	buf[6] = 1;
	buf[7] = 0;
	buf[8] = (char)(hlen & 0xff);
	buf[9] = (char)(hlen >> 8);
	memcpy(buf + 10, dict, n);
	memset(buf + 10 + n, ' ', pad);
	buf[total - 1] = '\n';
	return (int)total;
}

static int write_all(int fd, const void *a, size_t alen, const void *b, size_t blen)
{
	struct iovec iov[2] = {
		{ .iov_base = (void *)a, .iov_len = alen },
		{ .iov_base = (void *)b, .iov_len = blen },
	};
	struct iovec *v = iov;
	int cnt = 2;

	while (cnt > 0) {
		ssize_t n = writev(fd, v, cnt);
		size_t done;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done = (size_t)n;
		while (cnt > 0 && done >= v->iov_len) {
			done -= v->iov_len;
			v++;
			cnt--;
		}
		if (cnt > 0) {
			v->iov_base = (uint8_t *)v->iov_base + done;
			v->iov_len -= done;
		}
	}
	return 0;
}

int npy_write(const char *path, int dtype, uint32_t rank, const uint64_t *shape,
	      const void *data, size_t len, char *err, size_t err_len)
{
	bool is_stdout = strcmp(path, "-") == 0;
	char header[1024];
	int hlen, fd, r;

	hlen = npy_format_header(dtype, rank, shape, header, sizeof(header));
	if (hlen < 0)
		return tdp_errorf(err, err_len, hlen, "cannot describe this tensor in a .npy header");
	fd = is_stdout ? STDOUT_FILENO
		       : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0)
		return tdp_errorf(err, err_len, -errno, "%s", strerror(errno));
	r = write_all(fd, header, (size_t)hlen, data, len);
	if (is_stdout)
		return r < 0 ? tdp_errorf(err, err_len, r, "write: %s", strerror(-r)) : 0;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r < 0) {
		unlink(path);
		return tdp_errorf(err, err_len, r, "write: %s", strerror(-r));
	}
	return 0;
}
