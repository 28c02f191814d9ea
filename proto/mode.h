/* Tensor access modes: who besides the owner may read or write a tensor.
 * Both ends use these: the daemon stores and enforces the bits, clients
 * check what a user typed before sending it. docs/security.md has the rules. */
#pragma once

#include <stddef.h>
#include <stdint.h>

enum tdp_mode_bits {
	TDP_MODE_GROUP_READ = 1u << 0,
	TDP_MODE_GROUP_WRITE = 1u << 1,
	TDP_MODE_WORLD_READ = 1u << 2,
	TDP_MODE_WORLD_WRITE = 1u << 3,
};

/* Only the owner (and root) may touch the tensor: the default. */
#define TDP_MODE_PRIVATE 0u
#define TDP_MODE_MASK 0xfu
/* The longest mode text the daemon accepts, and room for any formatted mode. */
#define TDP_MODE_TEXT_MAX 64

/* Parse a mode text (`len` bytes, not NUL-terminated): "private", or a comma
 * list of "group-read", "group-write", "world-read", "world-write" (write
 * implies read). Returns 0 and sets *ret_mode, or -EINVAL. */
int tdp_mode_parse(const char *text, size_t len, uint32_t *ret_mode);

/* The canonical text of `mode` ("private", "group-write,world-read", ...)
 * into `buf` (TDP_MODE_TEXT_MAX bytes). Returns `buf`. */
const char *tdp_mode_format(uint32_t mode, char *buf);
