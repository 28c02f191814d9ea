/* Validating a client's SPIR-V before the driver sees it (spirv_validate.h):
 * an allow-list of what a compute kernel over bound buffers needs, then
 * SPIRV-Tools' validator for the Vulkan 1.2 environment. */
#include "kernels/spirv_validate.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <spirv-tools/libspirv.h>

enum {
	OP_EXTENSION = 10, OP_EXT_INST_IMPORT = 11, OP_MEMORY_MODEL = 14, OP_ENTRY_POINT = 15,
	OP_EXECUTION_MODE = 16, OP_CAPABILITY = 17, OP_TYPE_POINTER = 32,
	OP_TYPE_FORWARD_POINTER = 39, OP_VARIABLE = 59, OP_DECORATE = 71,
	OP_EXECUTION_MODE_ID = 331,
};

__attribute__((format(printf, 3, 4)))
static int refuse(char *why, size_t cap, const char *fmt, ...)
{
	va_list ap;

	if (cap) {
		va_start(ap, fmt);
		vsnprintf(why, cap, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* The instructions a kernel may use: debug and annotation, the numeric and
 * composite types, constants, functions, loads and stores through logical
 * pointers, arithmetic, conversions between numbers, bit operations,
 * barriers, atomics on integers, control flow and subgroup operations. No
 * images or samplers, no pointer casts or pointer arithmetic, nothing of the
 * OpenCL (Kernel) or graphics stages. */
static bool op_allowed(uint32_t op)
{
	if ((op >= 1 && op <= 8) || (op >= 10 && op <= 17) || (op >= 19 && op <= 24) ||
	    (op >= 28 && op <= 30) || op == 32 || op == 33 || (op >= 41 && op <= 44) ||
	    op == 46 || (op >= 48 && op <= 52) || (op >= 54 && op <= 57) || op == 59 ||
	    (op >= 61 && op <= 63) || (op >= 65 && op <= 66) || op == 68 ||
	    (op >= 71 && op <= 75) || (op >= 77 && op <= 84) || (op >= 109 && op <= 116) ||
	    op == 124 || (op >= 126 && op <= 152) || (op >= 154 && op <= 157) ||
	    (op >= 160 && op <= 191) || (op >= 194 && op <= 205) || op == 224 || op == 225 ||
	    (op >= 227 && op <= 242) || (op >= 245 && op <= 251) || (op >= 253 && op <= 255) ||
	    op == 317 || (op >= 330 && op <= 366) || op == 400 || op == 5632 || op == 5633)
		return true;
	return false;
}

/* Capabilities: Shader and Matrix, the 8/16-bit types and storage the
 * device is created with, Int64 where it has it, subgroup operations. */
static bool cap_allowed(uint32_t c, const struct spv_limits *lim)
{
	switch (c) {
	case 0: case 1:                 /* Matrix, Shader */
	case 9: case 22: case 39:       /* Float16, Int16, Int8 */
	case 4433: case 4448:           /* StorageBuffer16BitAccess, StorageBuffer8BitAccess */
		return true;
	case 11:                        /* Int64 */
		return lim->int64;
	default:
		return c >= 61 && c <= 68; /* GroupNonUniform, Vote .. Quad */
	}
}

static const char *cap_name(uint32_t c)
{
	switch (c) {
	case 2: return "Geometry";
	case 3: return "Tessellation";
	case 4: return "Addresses";
	case 5: return "Linkage";
	case 6: return "Kernel";
	case 10: return "Float64";
	case 11: return "Int64";
	case 12: return "Int64Atomics";
	case 4441: return "VariablePointersStorageBuffer";
	case 4442: return "VariablePointers";
	case 4434: return "UniformAndStorageBuffer16BitAccess";
	case 4435: return "StoragePushConstant16";
	case 4449: return "UniformAndStorageBuffer8BitAccess";
	case 4450: return "StoragePushConstant8";
	case 5345: return "VulkanMemoryModel";
	case 5347: return "PhysicalStorageBufferAddresses";
	default: return "";
	}
}

static bool ext_allowed(const char *e)
{
	return !strcmp(e, "SPV_KHR_storage_buffer_storage_class") ||
	       !strcmp(e, "SPV_KHR_16bit_storage") || !strcmp(e, "SPV_KHR_8bit_storage");
}

/* Input (built-ins), Uniform (BufferBlock storage buffers), Workgroup,
 * Private, Function, PushConstant, StorageBuffer. */
static bool sc_allowed(uint32_t sc)
{
	return sc == 1 || sc == 2 || sc == 4 || sc == 6 || sc == 7 || sc == 9 || sc == 12;
}

/* A literal string in words [at, end) as printable text. */
static void text_of(const uint32_t *w, size_t at, size_t end, char *out, size_t cap)
{
	size_t k = 0;

	for (size_t i = at; i < end && k + 1 < cap; i++)
		for (unsigned b = 0; b < 4 && k + 1 < cap; b++) {
			unsigned char ch = (unsigned char)(w[i] >> (8 * b));

			if (!ch)
				goto done;
			out[k++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
		}
done:
	out[k] = '\0';
}

int spirv_allow(const uint32_t *w, size_t n, const struct spv_limits *lim, char *why, size_t cap)
{
	static const struct spv_limits none = { 0 };
	char s[80];

	if (!lim)
		lim = &none;
	if (!w || n < 5 || n > SPV_MAX_WORDS)
		return refuse(why, cap, "%zu words is not a SPIR-V module tensord takes", n);
	for (size_t i = 5; i < n;) {
		uint32_t len = w[i] >> 16, op = w[i] & 0xffff;

		if (len == 0 || len > n - i)
			return refuse(why, cap, "instruction at word %zu has a bad length", i);
		if (!op_allowed(op))
			return refuse(why, cap, "opcode %u (at word %zu) is not allowed in a kernel "
				      "(docs/kernels.md lists the allowed SPIR-V)", op, i);
		switch (op) {
		case OP_CAPABILITY:
			if (len >= 2 && !cap_allowed(w[i + 1], lim))
				return refuse(why, cap, "capability %s%s%u is not allowed in a kernel",
					      cap_name(w[i + 1]), *cap_name(w[i + 1]) ? " " : "",
					      w[i + 1]);
			break;
		case OP_EXTENSION:
			text_of(w, i + 1, i + len, s, sizeof(s));
			if (!ext_allowed(s))
				return refuse(why, cap, "extension %s is not allowed in a kernel", s);
			break;
		case OP_EXT_INST_IMPORT:
			text_of(w, i + 2, i + len, s, sizeof(s));
			if (strcmp(s, "GLSL.std.450"))
				return refuse(why, cap, "extended instruction set %s is not allowed in a "
					      "kernel", s);
			break;
		case OP_MEMORY_MODEL:
			if (len < 3 || w[i + 1] != 0 || w[i + 2] != 1)
				return refuse(why, cap, "memory model %u %u is not allowed in a kernel "
					      "(only Logical GLSL450)", len > 1 ? w[i + 1] : 0,
					      len > 2 ? w[i + 2] : 0);
			break;
		case OP_ENTRY_POINT:
			if (len < 2 || w[i + 1] != 5)
				return refuse(why, cap, "execution model %u is not allowed (GLCompute only)",
					      len > 1 ? w[i + 1] : 0);
			break;
		case OP_EXECUTION_MODE:
		case OP_EXECUTION_MODE_ID:
			/* LocalSize, LocalSizeId */
			if (len < 3 || (w[i + 2] != 17 && w[i + 2] != 38))
				return refuse(why, cap, "execution mode %u is not allowed (LocalSize and "
					      "LocalSizeId only)", len > 2 ? w[i + 2] : 0);
			break;
		case OP_TYPE_POINTER:
		case OP_VARIABLE:
			if (len >= 4 && !sc_allowed(w[i + (op == OP_VARIABLE ? 3 : 2)]))
				return refuse(why, cap, "storage class %u (at word %zu) is not allowed in a "
					      "kernel", w[i + (op == OP_VARIABLE ? 3 : 2)], i);
			break;
		case OP_DECORATE:
			/* BuiltIn: the compute built-ins only (ids, sizes, subgroup). */
			if (len >= 4 && w[i + 2] == 11 &&
			    !((w[i + 3] >= 24 && w[i + 3] <= 29) || (w[i + 3] >= 36 && w[i + 3] <= 41) ||
			      (w[i + 3] >= 4416 && w[i + 3] <= 4420)))
				return refuse(why, cap, "built-in %u is not allowed in a kernel", w[i + 3]);
			break;
		}
		i += len;
	}
	return 0;
}

int spirv_validate(const uint32_t *words, size_t nwords, const struct spv_limits *lim, char *why,
		   size_t cap)
{
	spv_context ctx;
	spv_validator_options opt;
	spv_const_binary_t bin = { words, nwords };
	spv_diagnostic diag = NULL;
	spv_result_t r;
	int a = spirv_allow(words, nwords, lim, why, cap);

	if (a < 0)
		return a;
	ctx = spvContextCreate(SPV_ENV_VULKAN_1_2);
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
