/* Validating a client's SPIR-V before the driver sees it: drivers may crash
 * on invalid modules (Vulkan leaves them undefined) and a module may ask for
 * raw pointers, so kernel.create first checks the module against an
 * allow-list of capabilities, extensions, storage classes and instructions
 * (docs/kernels.md, "The allowed SPIR-V"), then runs SPIRV-Tools' validator
 * for the Vulkan 1.2 environment. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/spirv_reflect.h"

/* Whether every instruction of the `nwords`-word module is on the allow-list
 * for a device of limits `lim` (NULL: the Vulkan minimum, no Int64).
 * Returns 0 or -EINVAL naming the first refused capability, extension,
 * storage class, built-in or opcode in `why` (`cap` bytes). */
int spirv_allow(const uint32_t *words, size_t nwords, const struct spv_limits *lim, char *why,
		size_t cap);

/* spirv_allow, then SPIRV-Tools' validator. Returns 0, -EINVAL with the
 * reason in `why` (`cap` bytes), or -ENOMEM. */
int spirv_validate(const uint32_t *words, size_t nwords, const struct spv_limits *lim, char *why,
		   size_t cap);
