/* A bounded, resumable msgpack scanner.
 *
 * It walks the bytes of one msgpack object as they arrive and decides whether
 * the object is complete, still incomplete, or unacceptable, without allocating
 * anything. Every declared str/bin/ext length and every container count is
 * checked against the limits before the bytes are waited for, so a 5-byte array
 * header declaring 4 billion elements or a bin32 header declaring 4 GiB is
 * refused at once. Only an object the scanner accepted is handed to msgpack-c,
 * whose allocations are then bounded by the limits. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "wire_limits.h"

struct tdp_scan_limits {
	uint64_t max_bytes;   /* largest object, in bytes */
	unsigned max_depth;   /* deepest container nesting; at most TDP_MAX_DEPTH */
	uint64_t max_objects; /* most objects (containers included) */
};

struct tdp_scanner {
	uint64_t pos;     /* bytes of the object accepted so far */
	uint64_t need;    /* least total size the object can have, as far as known */
	uint64_t objects; /* objects accepted so far */
	uint64_t pending; /* objects still to come, over all open containers */
	unsigned depth;   /* open containers */
	uint64_t remaining[TDP_MAX_DEPTH + 1];
};

/* The protocol's default limits (TDP_MAX_MESSAGE_BYTES, TDP_MAX_DEPTH, TDP_MAX_OBJECTS). */
extern const struct tdp_scan_limits tdp_scan_default_limits;

/* Prepare `s` for a new object. */
void tdp_scanner_reset(struct tdp_scanner *s);

/* Scan on: `buf` holds the first `len` bytes of the object (the same bytes as at
 * the previous call, plus any that arrived since). Returns 1 when the object is
 * complete (its size is s->pos), 0 when more bytes are needed (at least s->need
 * in all), -EMSGSIZE when it would exceed max_bytes, -ELOOP when it nests deeper
 * than max_depth, -E2BIG when it holds more than max_objects objects, -EBADMSG
 * on a byte that starts no msgpack object (0xc1). */
int tdp_scanner_feed(struct tdp_scanner *s, const uint8_t *buf, size_t len,
		     const struct tdp_scan_limits *lim);
