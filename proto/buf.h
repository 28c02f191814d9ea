/* A growable byte buffer with a consumed prefix: the connection input and
 * output queues of daemon and client are built on it. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct tdp_buf {
	uint8_t *data;
	size_t start; /* first unconsumed byte */
	size_t end;   /* one past the last byte written */
	size_t cap;
};

/* Bytes written and not yet consumed. */
static inline size_t tdp_buf_len(const struct tdp_buf *b)
{
	return b->end - b->start;
}

/* Pointer to the first unconsumed byte. */
static inline uint8_t *tdp_buf_head(const struct tdp_buf *b)
{
	return b->data + b->start;
}

/* Make room for at least `n` more bytes after `end`, growing geometrically but
 * never past `start + len + n` rounded up to a power of two. Moves unconsumed
 * bytes to the front when that frees enough room. Afterwards the buffer always
 * has storage, even for n == 0. Returns 0 or -ENOMEM. */
int tdp_buf_reserve(struct tdp_buf *b, size_t n);

/* Append `n` bytes. Returns 0 or -ENOMEM. */
int tdp_buf_append(struct tdp_buf *b, const void *p, size_t n);

/* Reserve `n` bytes at the end, mark them written and return them for the caller
 * to fill (NULL on ENOMEM). */
void *tdp_buf_extend(struct tdp_buf *b, size_t n);

/* Mark `n` leading bytes consumed; empties the buffer cheaply when all are. */
void tdp_buf_consume(struct tdp_buf *b, size_t n);

/* Give back memory when the buffer is empty and larger than `keep` bytes. */
void tdp_buf_shrink(struct tdp_buf *b, size_t keep);

/* Free the storage; the buffer is empty and reusable afterwards. */
void tdp_buf_free(struct tdp_buf *b);

/* msgpack_packer write callback appending to a struct tdp_buf passed as `data`. */
int tdp_buf_msgpack_write(void *data, const char *p, size_t n);
