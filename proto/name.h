/* Tensor names: the one rule both ends check. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Whether `name` (`len` bytes) is a valid tensor name: 1..TDP_MAX_NAME_LEN bytes
 * of ASCII letters, digits and . _ : / - */
bool tdp_name_valid(const char *name, size_t len);
