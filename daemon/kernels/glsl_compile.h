/* Compiling a client's GLSL compute shader to SPIR-V (glslang's C API;
 * #include is not available to clients). The daemon compiles in a child
 * process (glsl_job_*, glsl_compile_isolated): tensord itself, run with GLSL_CHILD_ARG,
 * under CPU-time, memory, stack and file limits and killed at a deadline,
 * so a source that crashes or exhausts the compiler costs one request. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GLSL_MAX_SOURCE ((size_t)1 << 20)
#define GLSL_CHILD_ARG "--glsl-compile-child"
#define GLSL_CHILD_SECONDS 10                    /* CPU and wall limit */
#define GLSL_CHILD_SECONDS_MAX GLSL_CHILD_SECONDS
#define GLSL_CHILD_MEMORY ((size_t)512 << 20)    /* RLIMIT_AS */
#define GLSL_CHILD_STACK ((size_t)8 << 20)       /* RLIMIT_STACK */
#define GLSL_CHILD_MAX_OUTPUT ((size_t)8 << 20)

/* Compile NUL-terminated GLSL compute source `src` for Vulkan 1.1 / SPIR-V
 * 1.3, with `preamble` (NULL: none) inserted after its #version line. On success returns 0 and sets *ret_words (malloc'd, the caller frees)
 * and *ret_nwords. Returns -EINVAL for a source that does not compile, with
 * glslang's messages (which carry line numbers: "ERROR: 0:LINE: ...") in
 * `log` (`cap` bytes), or -ENOMEM. */
int glsl_compile(const char *src, const char *preamble, uint32_t **ret_words, size_t *ret_nwords, char *log, size_t cap);

/* The executable run as the compiler child ("/proc/self/exe", set by
 * main); NULL: glsl_compile_isolated compiles in process (unit tests, the
 * fuzzers). */
extern const char *glsl_child_exe;

/* glsl_compile in a child process, waited for at most `seconds` (the
 * caller waits: kernel.create uses glsl_job_* instead). Returns what glsl_compile returns, or -EINVAL when the
 * compiler crashed, -ETIMEDOUT past the time limit, -E2BIG past the memory
 * limit, -EIO when the child could not run; `log` says which. */
int glsl_compile_isolated(const char *src, const char *preamble, unsigned seconds,
			  uint32_t **ret_words, size_t *ret_nwords, char *log, size_t cap);

/* A compile running in a child process, read by the event loop
 * (kernel.create): start it, watch glsl_job_fd for input and call
 * glsl_job_read until it returns 1, then glsl_job_finish; past the time
 * limit, glsl_job_finish with `timed_out`; glsl_job_cancel drops it. */
struct glsl_job;

/* Start compiling `src` with `preamble` (as glsl_compile) in a child that
 * gets `seconds` of CPU time. Returns 0 with *ret set, -ENOMEM, or -EIO when
 * the child could not start (`log` says why). */
int glsl_job_start(const char *src, const char *preamble, unsigned seconds, struct glsl_job **ret,
		   char *log, size_t cap);

/* The descriptor to watch for input (the child's stdout, non-blocking). */
int glsl_job_fd(const struct glsl_job *j);

/* Take what the child wrote. Returns 1 at the end of its answer, 0 while
 * more is to come, -ENOMEM. */
int glsl_job_read(struct glsl_job *j);

/* Reap the child (killed first when `timed_out`) and free the job. Returns
 * what glsl_compile_isolated returns. */
int glsl_job_finish(struct glsl_job *j, bool timed_out, uint32_t **ret_words, size_t *ret_nwords,
		    char *log, size_t cap);

/* Kill the child, reap it and free the job. NULL is accepted. */
void glsl_job_cancel(struct glsl_job *j);

/* The child's main (tensord GLSL_CHILD_ARG): sets its limits, reads the
 * request on stdin, answers on stdout. Returns the exit status. */
int glsl_child_main(void);
