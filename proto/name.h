/* Tensor names: the one rule both ends check. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "wire_limits.h"

/* Whether `name` (`len` bytes) is a valid tensor name: 1..TDP_MAX_NAME_LEN bytes
 * of ASCII letters, digits and . _ : / - */
bool tdp_name_valid(const char *name, size_t len);

/* Whether `ref` (`len` bytes) names a tensor or model the way a client may
 * write it: a valid name, optionally after "~USER/" (USER: 1-32 bytes of
 * A-Z a-z 0-9 . _ -, a login name or a uid) for another user's namespace
 * (docs/security.md, "Names"). With `prefix`, the part after the qualifier
 * may also be empty (a tensor.list prefix). */
bool tdp_ref_valid(const char *ref, size_t len, bool prefix);

/* The longest file name tdp_name_to_file writes, NUL included: every byte
 * of a TDP_MAX_NAME_LEN name may take three. */
#define TDP_NAME_FILE_MAX (3 * TDP_MAX_NAME_LEN + 1)

/* Encode valid tensor name `name` (`len` bytes) as one file-name component
 * into `dst` (`cap` bytes), so that a name never becomes a path: '/' and '%'
 * become %2F and %25, a leading '.' becomes %2E (no ".", "..", or hidden
 * files), ':' becomes %3A; letters, digits, '_', '-' and other dots stay.
 * Returns the length written, -EINVAL for an invalid name, -ENOSPC when
 * `cap` is too small. */
int tdp_name_to_file(const char *name, size_t len, char *dst, size_t cap);

/* Decode what tdp_name_to_file wrote (`len` bytes) back into a name in `dst`
 * (TDP_MAX_NAME_LEN + 1 bytes, NUL-terminated). Returns the name's length,
 * or -EINVAL when `file` is not such an encoding (another file in the
 * directory). */
int tdp_name_from_file(const char *file, size_t len, char *dst);
