/* kernel.create's GLSL compile without holding the event loop: the compiler
 * child's answer is read by the loop, and the request is answered when it
 * has come (or at the time limit); the connection's later requests wait,
 * everyone else's go on (docs/kernels.md). */
#pragma once

#include "methods/methods_kernel.h"
#include "methods/request.h"

/* Start compiling `src` with `preamble` (NULL: none) for kernel.create `ks`
 * and answer `req` later. Returns REQUEST_DEFERRED, or -1 with
 * request_fail(). */
int kernel_compile_defer(struct request *req, const struct kernel_spec *ks, const char *src,
			 const char *preamble);

/* Free what d's finished or cancelled compile jobs left (after each batch of
 * loop events, and at shutdown, after the connections closed). */
void kernel_compile_jobs_free(struct daemon *d);
