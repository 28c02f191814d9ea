#ifndef TENSORD_PROTO_UTF8_H
#define TENSORD_PROTO_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The offset of the first byte of `s` (`len` bytes) that breaks UTF-8
 * (overlongs, surrogates and code points past U+10FFFF included), or `len`
 * when all of it is valid. */
size_t tdp_utf8_check(const uint8_t *s, size_t len);

/* Whether `len` bytes at `s` are valid UTF-8 (no overlongs, surrogates or
 * code points past U+10FFFF). */
bool tdp_utf8_valid(const char *s, size_t len);

#endif
