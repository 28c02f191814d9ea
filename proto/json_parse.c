/* tensorctl: JSON → msgpack (see json_parse.h).
 *
 * msgpack wants a container's length before its elements, so a container is
 * first skimmed (parsed with no output) to count its elements, then parsed
 * again for real. Nesting is bounded, so the extra work is too. */
#include "json_parse.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jp {
	const char *s, *end, *p;
	msgpack_packer *pk;   /* NULL while skimming */
	unsigned long items;
	int err;
	char *msg;
	size_t msg_len;
};

__attribute__((format(printf, 2, 3)))
static int jp_fail(struct jp *j, const char *fmt, ...)
{
	unsigned line = 1, col = 1;
	char why[160];
	va_list ap;

	if (j->err)
		return -1;
	for (const char *c = j->s; c < j->p; c++) {
		if (*c == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	snprintf(j->msg, j->msg_len, "line %u, column %u: %s", line, col, why);
	j->err = -EINVAL;
	return -1;
}

static int jp_oom(struct jp *j)
{
	if (!j->err) {
		snprintf(j->msg, j->msg_len, "out of memory");
		j->err = -ENOMEM;
	}
	return -1;
}

static void blanks(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int hex4(struct jp *j, uint32_t *ret)
{
	uint32_t v = 0;

	if (j->end - j->p < 4)
		return jp_fail(j, "a \\u escape needs 4 hex digits");
	for (int i = 0; i < 4; i++) {
		char c = *j->p++;

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return jp_fail(j, "a \\u escape needs 4 hex digits");
	}
	*ret = v;
	return 0;
}

static size_t put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* A string at j->p (after the quote); decoded into a malloc'd buffer and
 * packed unless skimming. The decoded text is never longer than the source. */
static int string(struct jp *j)
{
	const char *start = j->p;
	char *buf = NULL, *o = NULL;
	int r = -1;

	if (j->pk) {
		/* The string ends somewhere before the input does. */
		buf = malloc((size_t)(j->end - start) + 1);
		if (!buf)
			return jp_oom(j);
		o = buf;
	}
	for (;;) {
		unsigned char c;
		uint32_t cp;

		if (j->p >= j->end) {
			jp_fail(j, "unterminated string");
			goto out;
		}
		c = (unsigned char)*j->p++;
		if (c == '"')
			break;
		if (c < 0x20) {
			j->p--;
			jp_fail(j, "a control character in a string (escape it)");
			goto out;
		}
		if (c != '\\') {
			if (o)
				*o++ = (char)c;
			continue;
		}
		if (j->p >= j->end) {
			jp_fail(j, "unterminated string");
			goto out;
		}
		c = (unsigned char)*j->p++;
		switch (c) {
		case '"': case '\\': case '/': cp = c; break;
		case 'b': cp = '\b'; break;
		case 'f': cp = '\f'; break;
		case 'n': cp = '\n'; break;
		case 'r': cp = '\r'; break;
		case 't': cp = '\t'; break;
		case 'u':
			if (hex4(j, &cp) < 0)
				goto out;
			if (cp >= 0xd800 && cp <= 0xdbff) {
				uint32_t lo;

				if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u') {
					jp_fail(j, "a lone UTF-16 surrogate");
					goto out;
				}
				j->p += 2;
				if (hex4(j, &lo) < 0)
					goto out;
				if (lo < 0xdc00 || lo > 0xdfff) {
					jp_fail(j, "a lone UTF-16 surrogate");
					goto out;
				}
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			} else if (cp >= 0xdc00 && cp <= 0xdfff) {
				jp_fail(j, "a lone UTF-16 surrogate");
				goto out;
			}
			break;
		default:
			j->p--;
			jp_fail(j, "unknown escape '\\%c'", c >= 0x20 && c < 0x7f ? c : '?');
			goto out;
		}
		if (o)
			o += put_utf8(o, cp);
	}
	if (j->pk && (msgpack_pack_str(j->pk, (size_t)(o - buf)) ||
		      msgpack_pack_str_body(j->pk, buf, (size_t)(o - buf)))) {
		jp_oom(j);
		goto out;
	}
	r = 0;
out:
	free(buf);
	return r;
}

static int number(struct jp *j)
{
	const char *start = j->p;
	bool is_float = false;
	char tmp[400];
	size_t n;

	if (j->p < j->end && *j->p == '-')
		j->p++;
	if (j->p >= j->end || *j->p < '0' || *j->p > '9')
		return jp_fail(j, "expected a value");
	if (*j->p == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9')
		return jp_fail(j, "a number with a leading zero");
	while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
		j->p++;
	if (j->p < j->end && *j->p == '.') {
		is_float = true;
		j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9')
			return jp_fail(j, "a digit must follow '.'");
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		is_float = true;
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9')
			return jp_fail(j, "a digit must follow the exponent");
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	n = (size_t)(j->p - start);
	if (n >= sizeof(tmp))
		return jp_fail(j, "a number of more than %zu characters", sizeof(tmp) - 1);
	if (!j->pk)
		return 0;
	memcpy(tmp, start, n);
	tmp[n] = '\0';
	errno = 0;
	if (!is_float) {
		long long v = strtoll(tmp, NULL, 10);

		if (errno == 0)
			return msgpack_pack_int64(j->pk, v) ? jp_oom(j) : 0;
	}
	return msgpack_pack_double(j->pk, strtod(tmp, NULL)) ? jp_oom(j) : 0;
}

static int value(struct jp *j, unsigned depth);

/* The elements of the array or members of the object at j->p (after the
 * bracket): counted by a skim, then parsed. */
static int container(struct jp *j, unsigned depth, bool object)
{
	char close = object ? '}' : ']';
	const char *first = j->p;
	msgpack_packer *pk = j->pk;
	uint32_t count = 0;

	if (depth >= CTL_JSON_MAX_DEPTH)
		return jp_fail(j, "nested deeper than %d", CTL_JSON_MAX_DEPTH);
	for (int pass = pk ? 0 : 1; pass < 2; pass++) {
		j->pk = pass == 0 ? NULL : pk;
		j->p = first;
		if (j->pk && (object ? msgpack_pack_map(j->pk, count) : msgpack_pack_array(j->pk, count)))
			return jp_oom(j);
		count = 0;
		blanks(j);
		if (j->p < j->end && *j->p == close) {
			j->p++;
			continue;
		}
		for (;;) {
			blanks(j);
			if (object) {
				if (j->p >= j->end || *j->p != '"')
					return jp_fail(j, "expected a string key");
				j->p++;
				if (string(j) < 0)
					return -1;
				blanks(j);
				if (j->p >= j->end || *j->p != ':')
					return jp_fail(j, "expected ':'");
				j->p++;
			}
			if (value(j, depth + 1) < 0)
				return -1;
			if (count == UINT32_MAX)
				return jp_fail(j, "too many elements");
			count++;
			blanks(j);
			if (j->p < j->end && *j->p == ',') {
				j->p++;
				continue;
			}
			if (j->p < j->end && *j->p == close) {
				j->p++;
				break;
			}
			return jp_fail(j, "expected ',' or '%c'", close);
		}
	}
	j->pk = pk;
	return 0;
}

static int literal(struct jp *j, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0)
		return jp_fail(j, "expected a value");
	j->p += n;
	return 0;
}

static int value(struct jp *j, unsigned depth)
{
	msgpack_packer *pk = j->pk;

	blanks(j);
	if (j->p >= j->end)
		return jp_fail(j, "expected a value, found the end");
	/* Count only real values, not those of a skim. */
	if (pk && ++j->items > CTL_JSON_MAX_ITEMS)
		return jp_fail(j, "more than %d values", CTL_JSON_MAX_ITEMS);
	switch (*j->p) {
	case '{': j->p++; return container(j, depth, true);
	case '[': j->p++; return container(j, depth, false);
	case '"': j->p++; return string(j);
	case 't':
		if (literal(j, "true") < 0)
			return -1;
		return pk && msgpack_pack_true(pk) ? jp_oom(j) : 0;
	case 'f':
		if (literal(j, "false") < 0)
			return -1;
		return pk && msgpack_pack_false(pk) ? jp_oom(j) : 0;
	case 'n':
		if (literal(j, "null") < 0)
			return -1;
		return pk && msgpack_pack_nil(pk) ? jp_oom(j) : 0;
	default:
		return number(j);
	}
}

int tdp_json_to_msgpack(const char *text, size_t len, msgpack_packer *pk, char *err,
			size_t err_len)
{
	struct jp j = { .s = text, .end = text + len, .p = text, .pk = pk, .msg = err,
			.msg_len = err_len };

	if (value(&j, 0) < 0)
		return j.err;
	blanks(&j);
	if (j.p != j.end) {
		jp_fail(&j, "unexpected text after the value");
		return j.err;
	}
	return 0;
}

int tdp_attr_value_to_msgpack(const char *text, msgpack_packer *pk, char *err, size_t err_len)
{
	struct jp j = { .s = text, .end = text + strlen(text), .p = text, .msg = err,
			.msg_len = err_len };
	size_t n = strlen(text);

	/* A skim first: nothing is packed unless the whole text is JSON. */
	if (value(&j, 0) == 0) {
		blanks(&j);
		if (j.p == j.end)
			return tdp_json_to_msgpack(text, n, pk, err, err_len);
	}
	if (text[0] == '[' || text[0] == '{' || text[0] == '"') {
		if (!j.err)
			snprintf(err, err_len, "unexpected text after the value");
		return -EINVAL;
	}
	if (msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, text, n)) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	return 0;
}
