/* A large tensor.get payload received straight into the caller's buffer
 * (tensord_get_into): no reply buffer as large as the tensor, whose fresh
 * pages cost a fault each, and no copy out of it. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Payloads at least this large land in the caller's buffer. */
#define TD_LAND_MIN ((size_t)1 << 20)

/* Where the payload of a tensor.get answer starts in the first `len` bytes
 * `b` of a message: a response [1, msgid, nil, {..., "data": bin}] whose
 * result map ends with a "data" bin. Returns 1 with *ret_at (the payload's
 * offset), *ret_size (its length), *ret_len_at and *ret_len_bytes (where the
 * bin's big-endian length field is, to be zeroed once the payload has been
 * taken out); 0 when more bytes are needed to tell; -1 when the message is
 * of another shape (a notification, an error, another answer). */
int tdc_land_find(const uint8_t *b, size_t len, size_t *ret_at, uint64_t *ret_size,
		  size_t *ret_len_at, unsigned *ret_len_bytes);
