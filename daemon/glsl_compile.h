/* Compiling a client's GLSL compute shader to SPIR-V inside the daemon
 * (glslang's C API; #include is not available to clients). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define GLSL_MAX_SOURCE ((size_t)1 << 20)

/* Compile NUL-terminated GLSL compute source `src` for Vulkan 1.1 / SPIR-V
 * 1.3, with `preamble` (NULL: none) inserted after its #version line. On success returns 0 and sets *ret_words (malloc'd, the caller frees)
 * and *ret_nwords. Returns -EINVAL for a source that does not compile, with
 * glslang's messages (which carry line numbers: "ERROR: 0:LINE: ...") in
 * `log` (`cap` bytes), or -ENOMEM. */
int glsl_compile(const char *src, const char *preamble, uint32_t **ret_words, size_t *ret_nwords, char *log, size_t cap);
