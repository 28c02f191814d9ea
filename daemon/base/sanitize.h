/* What tensord does differently when built with a sanitizer (meson
 * -Db_sanitize=address..., which defines TENSORD_SANITIZE): keep the Vulkan
 * drivers loaded so LeakSanitizer can name their frames, and the test-only
 * leaks that prove the suppressions in tests/lib/lsan.supp work both ways
 * (docs/testing.md). In other builds these functions do nothing. */
#pragma once

#include <vulkan/vulkan.h>

/* At start-up, before the Vulkan loader runs: open every ICD library named
 * by the ICD manifests (VK_DRIVER_FILES / VK_ICD_FILENAMES, else the
 * standard icd.d directories) with RTLD_NODELETE, so vkDestroyInstance
 * cannot unmap them before LeakSanitizer symbolises at exit. Then, with
 * TENSORD_TEST_LEAK=1, leak one allocation of tensord's own. */
void sanitize_init(void);

/* With TENSORD_TEST_LEAK=driver, leak one fence inside the driver of `dev`
 * (memory the driver allocated and nobody frees): what tests/lib/lsan.supp must
 * suppress. Once per process. */
void sanitize_device_created(VkDevice dev);
