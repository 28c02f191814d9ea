/* Finding a tensor.get payload to receive in place (land.h). */
#include "land.h"

#include <string.h>

#include "scan.h"

/* The size of the msgpack object at b[at..len): 1 with *ret_next, 0 when it
 * is not all there yet, -1 when it is malformed. */
static int skip(const uint8_t *b, size_t len, size_t at, size_t *ret_next)
{
	struct tdp_scanner s;
	int r;

	if (at >= len)
		return 0;
	tdp_scanner_reset(&s);
	r = tdp_scanner_feed(&s, b + at, len - at, &tdp_scan_default_limits);
	if (r < 0)
		return -1;
	if (r == 0)
		return 0;
	*ret_next = at + (size_t)s.pos;
	return 1;
}

static uint64_t be(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

int tdc_land_find(const uint8_t *b, size_t len, size_t *ret_at, uint64_t *ret_size,
		  size_t *ret_len_at, unsigned *ret_len_bytes)
{
	size_t at = 0, next;
	uint64_t entries, size;
	unsigned lb;
	int r;

	/* [1, msgid, nil, map] */
	if (len < 2)
		return 0;
	if (b[0] != 0x94 || b[1] != 0x01)
		return -1;
	if ((r = skip(b, len, 2, &at)) <= 0)
		return r;
	if (at >= len)
		return 0;
	if (b[at] != 0xc0)
		return -1;
	at++;
	if (at >= len)
		return 0;
	if ((b[at] & 0xf0) == 0x80) {
		entries = b[at] & 0x0f;
		at++;
	} else if (b[at] == 0xde) {
		if (len < at + 3)
			return 0;
		entries = be(b + at + 1, 2);
		at += 3;
	} else {
		return -1;
	}
	if (entries == 0)
		return -1;
	/* Every entry but the last: key and value. */
	for (uint64_t i = 0; i + 1 < entries; i++) {
		if ((r = skip(b, len, at, &next)) <= 0 || (r = skip(b, len, next, &at)) <= 0)
			return r;
	}
	/* The last: "data" and a bin. */
	if (len < at + 5)
		return 0;
	if (memcmp(b + at, "\xa4" "data", 5) != 0)
		return -1;
	at += 5;
	if (at >= len)
		return 0;
	switch (b[at]) {
	case 0xc4: lb = 1; break;
	case 0xc5: lb = 2; break;
	case 0xc6: lb = 4; break;
	default: return -1;
	}
	if (len < at + 1 + lb)
		return 0;
	size = be(b + at + 1, lb);
	*ret_len_at = at + 1;
	*ret_len_bytes = lb;
	*ret_at = at + 1 + lb;
	*ret_size = size;
	return 1;
}
