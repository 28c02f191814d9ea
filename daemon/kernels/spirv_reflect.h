/* Reflection of a client's SPIR-V compute module: the entry point, its local
 * size, the storage buffers it binds and its push-constant block. Pure
 * parsing, no Vulkan, every read bounds-checked: the input is whatever a
 * client sent (tests/unit/test_spirv_reflect.c feeds it garbage). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPV_MAX_BINDINGS 8       /* GPU_MAX_BINDINGS: the shared pipeline layout */
#define SPV_MAX_PUSH_BYTES 128   /* GPU_PUSH_BYTES */
#define SPV_MAX_PUSH_MEMBERS 32
#define SPV_MAX_NAME 64
#define SPV_MAX_WORDS ((size_t)1 << 20) /* 4 MiB of SPIR-V */

enum spv_scalar {
	SPV_SCALAR_OTHER = 0,    /* vectors, arrays, 64-bit, structs: not settable by name */
	SPV_SCALAR_F32 = 1,
	SPV_SCALAR_I32 = 2,
	SPV_SCALAR_U32 = 3,
};

#define SPV_MAX_PRIVATE_BYTES ((uint64_t)64 << 10) /* Function + Private, per invocation */
#define SPV_MAX_VALUE_BYTES ((uint64_t)64 << 10)   /* one SSA value (a loaded array) */

/* What the device allows (0 fields: Vulkan's minimum, 128x128x64, 128
 * invocations, 16 KiB shared memory). */
struct spv_limits {
	uint32_t max_wg[3];      /* maxComputeWorkGroupSize */
	uint32_t max_invocations; /* maxComputeWorkGroupInvocations */
	uint32_t max_shared;     /* maxComputeSharedMemorySize */
	bool int64;              /* shaderInt64 is enabled */
};

/* Storage buffer at binding i of set 0 (bindings are 0..nbindings-1). */
struct spv_binding {
	/* Declared NonWritable (on the variable or on every member) and never
	 * written: no store, atomic, copy, extended instruction or function
	 * call reaches it through any pointer derived from the variable. The
	 * tensor then needs read access only. */
	bool readonly;
	uint64_t min_bytes;      /* bytes before the runtime array (or the whole block) */
	uint32_t stride;         /* runtime array stride; 0 when the block has none */
};

struct spv_push_member {
	char name[SPV_MAX_NAME];
	uint32_t offset;
	enum spv_scalar type;
};

struct spv_info {
	char entry[SPV_MAX_NAME];
	uint32_t local_size[3];
	uint64_t shared_bytes;   /* Workgroup variables together */
	uint64_t private_bytes;  /* Function and Private variables together */
	unsigned nbindings;
	struct spv_binding bindings[SPV_MAX_BINDINGS];
	uint32_t push_bytes;     /* 0: no push-constant block */
	unsigned npush;
	struct spv_push_member push[SPV_MAX_PUSH_MEMBERS];
};

/* Reflect `nwords` words of SPIR-V for GLCompute entry point `entry` ("main"
 * when NULL) on a device of limits `lim` (NULL: Vulkan's minimum). Fills
 * *ret on success and returns 0; returns -EINVAL for anything malformed or
 * outside what tensord binds (descriptor sets other than 0, anything but
 * storage buffers, bindings not 0..n-1, more than SPV_MAX_BINDINGS, a push
 * block over SPV_MAX_PUSH_BYTES) or the device runs (a local size or
 * Workgroup memory over `lim`, Function/Private variables over
 * SPV_MAX_PRIVATE_BYTES, a value over SPV_MAX_VALUE_BYTES, a size it cannot
 * bound), with the reason in `why` (`cap` bytes). */
int spv_reflect(const uint32_t *words, size_t nwords, const char *entry,
		const struct spv_limits *lim, struct spv_info *ret, char *why, size_t cap);
