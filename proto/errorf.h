/* Writing a reason into a caller's buffer while returning an error code. */
#pragma once

#include <stddef.h>

/* Format the reason into `dst` (`cap` bytes, always NUL-terminated) and return
 * `ret`, so callers can write `return tdp_errorf(err, len, -EINVAL, ...)`. */
__attribute__((format(printf, 4, 5)))
int tdp_errorf(char *dst, size_t cap, int ret, const char *fmt, ...);
