/* kernel.create's pipeline builds off the event loop (issue 31): the driver
 * may take about a second for a module within spirv_cost.h's bound, and
 * everyone else is served meanwhile; the connection's later requests wait
 * for the answer, which comes through the deferred path (docs/kernels.md,
 * "Build cost"). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "methods/methods_kernel.h"
#include "methods/request.h"

struct daemon;
struct kernel;

/* Build `k`'s pipelines from `words` on every device on a thread, then
 * kernel_create_store and answer `req` from the loop. Takes `k` and `words`
 * whatever it returns. Returns REQUEST_DEFERRED, or what building on the
 * loop and kernel_create_store returned where no thread can be watched (no
 * connection, no loop: unit tests and fuzzers), or -1 with request_fail()
 * past the daemon's or the user's concurrent builds. */
int kernel_build(struct request *req, const struct kernel_spec *ks, struct kernel *k, uint32_t *words,
		 size_t nwords);

/* Wait for the builds still running and free their jobs (at shutdown, after
 * the connections closed). */
void kernel_build_jobs_free(struct daemon *d);
