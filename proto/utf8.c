#include "utf8.h"

size_t tdp_utf8_check(const uint8_t *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		uint8_t c = s[i];
		size_t n;
		uint32_t cp;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			n = 1, cp = c & 0x1f;
		else if (c >= 0xe0 && c <= 0xef)
			n = 2, cp = c & 0x0f;
		else if (c >= 0xf0 && c <= 0xf4)
			n = 3, cp = c & 0x07;
		else
			return i;
		if (len - i <= n)
			return i;
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		/* overlongs, surrogates, past U+10FFFF */
		if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
		    (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
			return i;
		i += n + 1;
	}
	return len;
}

bool tdp_utf8_valid(const char *s, size_t len)
{
	return tdp_utf8_check((const uint8_t *)s, len) == len;
}
