#include "buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int tdp_buf_reserve(struct tdp_buf *b, size_t n)
{
	size_t len = tdp_buf_len(b), want, cap;
	uint8_t *p;

	/* Always leave storage behind, so that extend() can hand out a valid
	 * pointer even for zero bytes. */
	if (b->data && b->cap - b->end >= n)
		return 0;
	if (b->start > 0 && b->cap - len >= n) {
		memmove(b->data, b->data + b->start, len);
		b->start = 0;
		b->end = len;
		return 0;
	}
	if (__builtin_add_overflow(len, n, &want))
		return -ENOMEM;
	cap = b->cap ? b->cap : 4096;
	while (cap < want) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	if (b->start > 0) {
		memmove(b->data, b->data + b->start, len);
		b->start = 0;
		b->end = len;
	}
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int tdp_buf_append(struct tdp_buf *b, const void *p, size_t n)
{
	void *dst = tdp_buf_extend(b, n);

	if (!dst)
		return -ENOMEM;
	if (n)
		memcpy(dst, p, n);
	return 0;
}

void *tdp_buf_extend(struct tdp_buf *b, size_t n)
{
	void *p;

	if (tdp_buf_reserve(b, n) < 0)
		return NULL;
	p = b->data + b->end;
	b->end += n;
	return p;
}

void tdp_buf_consume(struct tdp_buf *b, size_t n)
{
	if (n >= tdp_buf_len(b)) {
		b->start = b->end = 0;
		return;
	}
	b->start += n;
}

void tdp_buf_shrink(struct tdp_buf *b, size_t keep)
{
	if (tdp_buf_len(b) == 0 && b->cap > keep) {
		free(b->data);
		b->data = NULL;
		b->cap = b->start = b->end = 0;
	}
}

void tdp_buf_free(struct tdp_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->cap = b->start = b->end = 0;
}

int tdp_buf_msgpack_write(void *data, const char *p, size_t n)
{
	return tdp_buf_append(data, p, n) < 0 ? -1 : 0;
}
