/* Validating a client's SPIR-V before the driver sees it: drivers may crash
 * on invalid modules (Vulkan leaves them undefined), so kernel.create runs
 * SPIRV-Tools' validator for the Vulkan 1.2 environment first. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Validate `nwords` words. Returns 0, -EINVAL with the validator's message
 * in `why` (`cap` bytes), or -ENOMEM. */
int spirv_validate(const uint32_t *words, size_t nwords, char *why, size_t cap);
