#include "scan.h"

#include <errno.h>
#include <string.h>

const struct tdp_scan_limits tdp_scan_default_limits = {
	.max_bytes = TDP_MAX_MESSAGE_BYTES,
	.max_depth = TDP_MAX_DEPTH,
	.max_objects = TDP_MAX_OBJECTS,
};

void tdp_scanner_reset(struct tdp_scanner *s)
{
	memset(s, 0, sizeof(*s));
	s->remaining[0] = 1;
	s->pending = 1;
	s->need = 1;
}

static uint64_t read_be(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v = (v << 8) | p[i];
	return v;
}

/* Sizes of the object whose type byte is `c`: header bytes (type byte
 * included), how many of them hold a big-endian length (`lenbytes`, read by the
 * caller), what that length counts (payload bytes or child objects), and the
 * payload and children known from the type byte alone. */
struct item_shape {
	unsigned header;
	unsigned lenbytes;
	enum { LEN_NONE, LEN_PAYLOAD, LEN_ARRAY, LEN_MAP } len_kind;
	uint64_t payload;
	uint64_t children;
	int container;
};

static int classify(uint8_t c, struct item_shape *it)
{
	memset(it, 0, sizeof(*it));
	it->header = 1;
	if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3)
		return 0;
	if (c >= 0x80 && c <= 0x8f) {
		it->children = 2u * (c & 0x0f);
		it->container = 1;
		return 0;
	}
	if (c >= 0x90 && c <= 0x9f) {
		it->children = c & 0x0f;
		it->container = 1;
		return 0;
	}
	if (c >= 0xa0 && c <= 0xbf) {
		it->payload = c & 0x1f;
		return 0;
	}
	switch (c) {
	case 0xc4: case 0xc5: case 0xc6: /* bin 8/16/32 */
		it->lenbytes = 1u << (c - 0xc4);
		it->len_kind = LEN_PAYLOAD;
		break;
	case 0xc7: case 0xc8: case 0xc9: /* ext 8/16/32: length, then a type byte */
		it->lenbytes = 1u << (c - 0xc7);
		it->len_kind = LEN_PAYLOAD;
		it->payload = 1;
		break;
	case 0xca: it->payload = 4; break;
	case 0xcb: it->payload = 8; break;
	case 0xcc: case 0xd0: it->payload = 1; break;
	case 0xcd: case 0xd1: it->payload = 2; break;
	case 0xce: case 0xd2: it->payload = 4; break;
	case 0xcf: case 0xd3: it->payload = 8; break;
	case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: /* fixext */
		it->payload = 1 + (1u << (c - 0xd4));
		break;
	case 0xd9: case 0xda: case 0xdb: /* str 8/16/32 */
		it->lenbytes = 1u << (c - 0xd9);
		it->len_kind = LEN_PAYLOAD;
		break;
	case 0xdc: case 0xdd:
		it->lenbytes = 2u << (c - 0xdc);
		it->len_kind = LEN_ARRAY;
		it->container = 1;
		break;
	case 0xde: case 0xdf:
		it->lenbytes = 2u << (c - 0xde);
		it->len_kind = LEN_MAP;
		it->container = 1;
		break;
	default: /* 0xc1 */
		return -EBADMSG;
	}
	it->header += it->lenbytes;
	return 0;
}

static int need_more(struct tdp_scanner *s, uint64_t need, const struct tdp_scan_limits *lim)
{
	if (need > lim->max_bytes)
		return -EMSGSIZE;
	s->need = need;
	return 0;
}

int tdp_scanner_feed(struct tdp_scanner *s, const uint8_t *buf, size_t len,
		     const struct tdp_scan_limits *lim)
{
	unsigned max_depth = lim->max_depth < TDP_MAX_DEPTH ? lim->max_depth : TDP_MAX_DEPTH;
	struct item_shape it;
	uint64_t end, rest;
	int r;

	while (s->pending > 0) {
		/* Every object still pending needs at least its type byte. */
		rest = s->pending - 1;
		if (s->pos >= len)
			return need_more(s, s->pos + s->pending, lim);
		r = classify(buf[s->pos], &it);
		if (r < 0)
			return r;
		if (s->pos + it.header > len)
			return need_more(s, s->pos + it.header + rest, lim);
		if (it.lenbytes) {
			uint64_t n = read_be(buf + s->pos + 1, it.lenbytes);

			if (it.len_kind == LEN_PAYLOAD)
				it.payload += n;
			else
				it.children = it.len_kind == LEN_MAP ? 2 * n : n;
		}
		end = s->pos + it.header + it.payload;
		if (end + rest + it.children > lim->max_bytes)
			return -EMSGSIZE;
		if (s->objects + 1 + it.children > lim->max_objects)
			return -E2BIG;
		if (it.container && s->depth + 1 > max_depth)
			return -ELOOP;
		if (end > len)
			return need_more(s, end + rest + it.children, lim);

		s->pos = end;
		s->objects++;
		s->pending--;
		s->remaining[s->depth]--;
		if (it.children > 0) {
			s->depth++;
			s->remaining[s->depth] = it.children;
			s->pending += it.children;
		}
		while (s->depth > 0 && s->remaining[s->depth] == 0)
			s->depth--;
	}
	s->need = s->pos;
	return 1;
}
