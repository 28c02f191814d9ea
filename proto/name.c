#include "name.h"

#include <errno.h>
#include <string.h>

#include "wire_limits.h"

bool tdp_name_valid(const char *name, size_t len)
{
	if (len == 0 || len > TDP_MAX_NAME_LEN)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == ':' || c == '/' || c == '-'))
			return false;
	}
	return true;
}

bool tdp_ref_valid(const char *ref, size_t len, bool prefix)
{
	if (len > 0 && ref[0] == '~') {
		const char *slash = memchr(ref, '/', len);
		size_t ulen = slash ? (size_t)(slash - ref - 1) : 0;

		if (!slash || ulen == 0 || ulen > 32)
			return false;
		for (size_t i = 1; i <= ulen; i++) {
			char c = ref[i];

			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			      c == '.' || c == '_' || c == '-'))
				return false;
		}
		ref = slash + 1;
		len -= ulen + 2;
	}
	return (prefix && len == 0) || tdp_name_valid(ref, len);
}

static bool keep_plain(char c, size_t i)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-' || (c == '.' && i > 0);
}

int tdp_name_to_file(const char *name, size_t len, char *dst, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;

	if (!tdp_name_valid(name, len))
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];

		if (n + (keep_plain((char)c, i) ? 1 : 3) >= cap)
			return -ENOSPC;
		if (keep_plain((char)c, i)) {
			dst[n++] = (char)c;
		} else {
			dst[n++] = '%';
			dst[n++] = hex[c >> 4];
			dst[n++] = hex[c & 15];
		}
	}
	dst[n] = '\0';
	return (int)n;
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int tdp_name_from_file(const char *file, size_t len, char *dst)
{
	char name[TDP_MAX_NAME_LEN + 1], again[TDP_NAME_FILE_MAX];
	size_t n = 0;
	int r;

	for (size_t i = 0; i < len; i++) {
		char c = file[i];

		if (n == TDP_MAX_NAME_LEN)
			return -EINVAL;
		if (c == '%') {
			int hi, lo;

			if (i + 2 >= len)
				return -EINVAL;
			hi = hex_value(file[i + 1]);
			lo = hex_value(file[i + 2]);
			if (hi < 0 || lo < 0)
				return -EINVAL;
			c = (char)(hi << 4 | lo);
			i += 2;
		}
		name[n++] = c;
	}
	/* Only the one canonical spelling decodes, so two files never map to one name. */
	r = tdp_name_to_file(name, n, again, sizeof(again));
	if (r < 0 || (size_t)r != len || memcmp(again, file, len) != 0)
		return -EINVAL;
	memcpy(dst, name, n);
	dst[n] = '\0';
	return (int)n;
}
