#include "spirv_validate.h"

#include <errno.h>
#include <stdio.h>

#include <spirv-tools/libspirv.h>

int spirv_validate(const uint32_t *words, size_t nwords, char *why, size_t cap)
{
	spv_context ctx = spvContextCreate(SPV_ENV_VULKAN_1_2);
	spv_validator_options opt;
	spv_const_binary_t bin = { words, nwords };
	spv_diagnostic diag = NULL;
	spv_result_t r;

	if (!ctx)
		return -ENOMEM;
	opt = spvValidatorOptionsCreate();
	if (!opt) {
		spvContextDestroy(ctx);
		return -ENOMEM;
	}
	/* What tensord's device enables for its own shaders (std430 and
	 * 8/16-bit storage). */
	spvValidatorOptionsSetUniformBufferStandardLayout(opt, true);
	r = spvValidateWithOptions(ctx, opt, &bin, &diag);
	if (r != SPV_SUCCESS && cap)
		snprintf(why, cap, "invalid SPIR-V: %s",
			 diag && diag->error ? diag->error : "rejected by the validator");
	spvDiagnosticDestroy(diag);
	spvValidatorOptionsDestroy(opt);
	spvContextDestroy(ctx);
	if (r == SPV_ERROR_OUT_OF_MEMORY)
		return -ENOMEM;
	return r == SPV_SUCCESS ? 0 : -EINVAL;
}
