/* What a client module costs the driver to build, bounded before it sees
 * it (issue 31): drivers inline every call, so a call tree of depth k whose
 * functions each call the next twice is a few hundred bytes of SPIR-V and
 * 2^k inlined copies (lavapipe: depth 15 held the build 15 s and 1 GiB,
 * depth 20 past 300 s and 8 GiB); and a loop marked [[unroll]] is copied
 * out as often as it runs. docs/kernels.md, "Build cost". */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Instructions of a kernel's call tree with every call inlined, at most:
 * on lavapipe about a second of building on a quiet 2-core machine (a
 * 49k-instruction call tree: 0.8 s with its compile, 3.2 s for twice that
 * on a loaded one); hand-written kernels are hundreds to a few thousand
 * (docs/kernels.md, "Build cost"). */
#define SPV_MAX_INLINED 65536u

/* Check the `nwords`-word module (valid: spirv_validate passed) against
 * SPV_MAX_INLINED: the instructions of each function plus those of every
 * function it calls, once per call site, transitively. Clears the Unroll
 * hint of every loop in place (the driver decides), and refuses loops
 * asking for a peel or partial unroll count. Returns 0, or -EINVAL (a
 * recursive call graph too) with the reason in `why` (`cap` bytes), or
 * -ENOMEM. The inlined size goes to *ret_inlined when not NULL. */
int spirv_cost_check(uint32_t *words, size_t nwords, uint64_t *ret_inlined, char *why, size_t cap);
