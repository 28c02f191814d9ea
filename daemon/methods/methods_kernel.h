/* kernel.create, kernel.run, kernel.list, kernel.delete: clients' own
 * compute kernels (docs/kernels.md). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/spirv_reflect.h"
#include "methods/request.h"

/* What kernel.create asked for, kept while its GLSL compiles. */
struct kernel_spec {
	char name[TDP_MAX_NAME_LEN + 1];
	char entry[SPV_MAX_NAME];
	uint32_t wg[3];
	bool has_wg;            /* workgroup given */
	bool from_spirv;        /* SPIR-V given, not GLSL */
};

struct kernel;

/* The rest of kernel.create once the module's words are there (`words`
 * taken over): validate, bound its cost, reflect, then build (on a thread:
 * kernel_build_job.h), store, answer. Returns 0, REQUEST_DEFERRED, or -1
 * with request_fail(). */
int kernel_create_finish(struct request *req, const struct kernel_spec *ks, uint32_t *words,
			 size_t nwords);

/* kernel.create's end once `k`'s pipelines were built with outcome `r`
 * (0 or -errno): the kernel limits checked again, `k` stored under ks's
 * name and the answer written; `k` is taken (freed on failure). Returns 0
 * or -1 with request_fail(). */
int kernel_create_store(struct request *req, const struct kernel_spec *ks, struct kernel *k, int r,
			size_t nwords);

/* kernel.create after glsl_compile_isolated/glsl_job_finish returned `r`
 * (with `words` taken over, or `why`): the compile error as a response, else
 * kernel_create_finish (whose REQUEST_DEFERRED it returns). */
int kernel_create_compiled(struct request *req, const struct kernel_spec *ks, int r,
			   uint32_t *words, size_t nwords, const char *why);

int method_kernel_create(struct request *req);
int method_kernel_run(struct request *req);
int method_kernel_list(struct request *req);
int method_kernel_delete(struct request *req);
