/* tensorctl: JSON output helpers and the msgpack → JSON printer. */
#include "json.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "dtype.h"
#include "print.h"

/* Length of the valid UTF-8 sequence at s (n bytes available), or 0. */
static size_t utf8_len(const uint8_t *s, size_t n)
{
	uint32_t cp;
	size_t len;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

void ctl_json_string(FILE *f, const char *s, size_t n)
{
	const uint8_t *p = (const uint8_t *)s;

	fputc('"', f);
	for (size_t i = 0; i < n;) {
		uint8_t c = p[i];
		size_t len;

		switch (c) {
		case '"': fputs("\\\"", f); i++; continue;
		case '\\': fputs("\\\\", f); i++; continue;
		case '\n': fputs("\\n", f); i++; continue;
		case '\r': fputs("\\r", f); i++; continue;
		case '\t': fputs("\\t", f); i++; continue;
		case '\b': fputs("\\b", f); i++; continue;
		case '\f': fputs("\\f", f); i++; continue;
		default: break;
		}
		if (c < 0x20) {
			fprintf(f, "\\u%04x", c);
			i++;
			continue;
		}
		len = utf8_len(p + i, n - i);
		if (len == 0) {
			fputs("\\ufffd", f);
			i++;
			continue;
		}
		fwrite(p + i, 1, len, f);
		i += len;
	}
	fputc('"', f);
}

void ctl_json_double(FILE *f, double v)
{
	char buf[40];

	if (!isfinite(v)) {
		fputs("null", f);
		return;
	}
	ctl_format_double(buf, sizeof(buf), v);
	fputs(buf, f);
}

void ctl_json_base64(FILE *f, const void *data, size_t n)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const uint8_t *p = data;
	size_t i;

	fputc('"', f);
	for (i = 0; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];

		fputc(tab[v >> 18], f);
		fputc(tab[(v >> 12) & 63], f);
		fputc(tab[(v >> 6) & 63], f);
		fputc(tab[v & 63], f);
	}
	if (n - i == 1) {
		uint32_t v = (uint32_t)p[i] << 16;

		fputc(tab[v >> 18], f);
		fputc(tab[(v >> 12) & 63], f);
		fputs("==", f);
	} else if (n - i == 2) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;

		fputc(tab[v >> 18], f);
		fputc(tab[(v >> 12) & 63], f);
		fputc(tab[(v >> 6) & 63], f);
		fputc('=', f);
	}
	fputc('"', f);
}

static void json_key(FILE *f, const msgpack_object *k)
{
	char *text = NULL;
	size_t len = 0;
	FILE *m;

	if (k->type == MSGPACK_OBJECT_STR) {
		ctl_json_string(f, k->via.str.ptr, k->via.str.size);
		return;
	}
	m = open_memstream(&text, &len);
	if (!m) {
		fputs("\"\"", f);
		return;
	}
	ctl_json_msgpack(m, k);
	if (fclose(m) != 0) {
		free(text);
		fputs("\"\"", f);
		return;
	}
	ctl_json_string(f, text, len);
	free(text);
}

void ctl_json_msgpack(FILE *f, const msgpack_object *o)
{
	char text[64];

	switch (o->type) {
	case MSGPACK_OBJECT_NIL:
		fputs("null", f);
		break;
	case MSGPACK_OBJECT_BOOLEAN:
		fputs(o->via.boolean ? "true" : "false", f);
		break;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		fprintf(f, "%" PRIu64, o->via.u64);
		break;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		fprintf(f, "%" PRId64, o->via.i64);
		break;
	case MSGPACK_OBJECT_FLOAT32:
		if (!isfinite(o->via.f64)) {
			fputs("null", f);
			break;
		}
		ctl_format_float(text, sizeof(text), TDP_DTYPE_F32, o->via.f64);
		fputs(text, f);
		break;
	case MSGPACK_OBJECT_FLOAT64:
		ctl_json_double(f, o->via.f64);
		break;
	case MSGPACK_OBJECT_STR:
		ctl_json_string(f, o->via.str.ptr, o->via.str.size);
		break;
	case MSGPACK_OBJECT_BIN:
		ctl_json_base64(f, o->via.bin.ptr, o->via.bin.size);
		break;
	case MSGPACK_OBJECT_ARRAY:
		fputc('[', f);
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			if (i > 0)
				fputc(',', f);
			ctl_json_msgpack(f, &o->via.array.ptr[i]);
		}
		fputc(']', f);
		break;
	case MSGPACK_OBJECT_MAP:
		fputc('{', f);
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			if (i > 0)
				fputc(',', f);
			json_key(f, &o->via.map.ptr[i].key);
			fputc(':', f);
			ctl_json_msgpack(f, &o->via.map.ptr[i].val);
		}
		fputc('}', f);
		break;
	default:
		fputs("null", f);
		break;
	}
}
