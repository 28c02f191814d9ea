/* The Vulkan device tensord computes on: instance, physical-device choice,
 * logical device, one compute queue and the command buffers used to record
 * work on it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#include "base/gpu_choice.h"
#include "gpu/coopmat.h"
#include "gpu/memory.h"
#include "gpu/pipeline.h"
#include "gpu/timing.h"

/* What info reports about one physical device. */
struct gpu_device_desc {
	uint32_t index;
	char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
	const char *type;       /* "discrete", "integrated", "virtual", "cpu", "other" */
	char driver[VK_MAX_DRIVER_NAME_SIZE + VK_MAX_DRIVER_INFO_SIZE + 4];
	uint32_t vendor_id;
	uint32_t device_id;
	char api_version[32];
	uint64_t heap_size;     /* largest device-local heap */
	uint64_t max_storage_buffer_range;
	uint64_t max_allocation_size;
	uint32_t driver_id;     /* VkDriverId (VK_DRIVER_ID_MESA_LLVMPIPE: lavapipe) */
	bool usable;            /* Vulkan 1.2+ with a compute queue */
	int rank;               /* 0 discrete, 1 integrated, 2 virtual, 3 cpu, 4 other */
};

/* Command buffers per device: the synchronous two, then the asynchronous ones. */
#define GPU_CMD_SYNC 2
#define GPU_CMD_ASYNC 6
#define GPU_CMD_SLOTS (GPU_CMD_SYNC + GPU_CMD_ASYNC)

/* A command buffer with its fence, reused for every submission. */
struct gpu_cmd {
	VkCommandBuffer cb;
	VkFence fence;
	bool pending;           /* submitted, fence not yet waited for */
	uint64_t gpu_ns;        /* device time of its last completed submission (timing.c) */
	int64_t submit_ns;      /* CLOCK_MONOTONIC at submission */
};

struct gpu_device {
	uint32_t id;            /* tensord's device id: its place among the devices opened */
	VkInstance instance;
	VkPhysicalDevice phys;
	VkDevice dev;
	VkQueue queue;
	uint32_t queue_family;
	VkCommandPool pool;
	/* cmd[0] and cmd[1]: waited for by whoever submits (two, so a transfer
	 * can overlap host copies); cmd[GPU_CMD_SYNC..]: watched by the
	 * completion thread (gpu_rec_begin_async), several at once. */
	struct gpu_cmd cmd[GPU_CMD_SLOTS];
	struct gpu_device_desc desc;
	VkPhysicalDeviceProperties props;
	bool shader_int64;      /* shaderInt64 enabled (clients' kernels may use it) */
	VkPhysicalDeviceMemoryProperties mem_props;
	struct gpu_memory mem;
	struct gpu_pipelines *pipes;
	struct gpu_alloc dummy;  /* bound where a shader's buffer is empty */
	PFN_vkCmdPushDescriptorSetKHR push_descriptor;
	/* Cooperative matrices (gpu/coopmat.h): the kind chosen; f16 products on
	   them (NV or KHR: gpu_coopmat_gemm says which kernel); bf16 ones too
	   (KHR with VK_KHR_shader_bfloat16: matmul_cm_khr.bf16). */
	enum gpu_coopmat_kind coopmat_kind;
	bool coopmat_f16;
	bool coopmat_bf16;
	uint32_t compute_units; /* workgroups run at once, roughly (SMs; CPUs for
				   lavapipe): sizes matmul's split-K */
	bool lost;              /* VK_ERROR_DEVICE_LOST was seen */
	unsigned builds;        /* gpu_build_begin's builds on other threads (pipeline.c) */
	bool runaway;           /* lost because a submission outran its time limit: it
				   may still run, so the device cannot be freed */
	uint64_t fault_lost_at; /* TENSORD_FAULT_DEVICE_LOST: the submission (1-based,
				   counted from gpu_device_open) that reports a loss; 0: off */
	uint64_t submits;       /* submissions attempted since gpu_device_open */
	bool creation_feedback; /* VK_EXT_pipeline_creation_feedback enabled */
	/* VK_EXT_external_memory_host enabled: the alignment (a power of two, at
	 * least a page) of host memory it imports; 0: none (gpu/host_import.h). */
	uint64_t host_import_align;
	/* The driver imports read-only pages too (a sealed memfd's, for a put).
	 * Only Mesa's lavapipe, by default: NVIDIA's driver (580) refuses them,
	 * and after one refused import its later device allocations fail. */
	bool host_import_read_only;
	PFN_vkGetMemoryHostPointerPropertiesEXT host_pointer_props;
	VkQueryPool queries;    /* timestamps around cmd[i]: 2i, 2i+1 (timing.c) */
	bool host_query_reset;  /* hostQueryReset: queries reset by vkResetQueryPool */
	struct gpu_trace *trace; /* TENSORD_TRACE_DISPATCHES (trace.c); NULL: off */
	uint64_t ts_mask;       /* the queue's valid timestamp bits */
	struct gpu_stats stats;
	uint64_t load_busy_ns;  /* stats.busy_ns when the load was last sampled */
	int64_t load_at_ns;     /* CLOCK_MONOTONIC of that sample */
	double load;            /* busy fraction over the last sampling interval */
	/* The completion thread watching asynchronous submissions of cmd[0]
	 * (gpu/completion.h); NULL: every wait is synchronous. */
	struct gpu_completion *completion;
};

/* Options for gpu_device_open. */
struct gpu_open_options {
	uint32_t index;         /* the Vulkan physical device index to open */
	uint32_t id;            /* the id tensord gives it (struct gpu_device.id) */
	bool host_mapped;       /* allow direct CPU mapping of tensor memory when the
				   device offers host-visible, coherent device memory */
	uint64_t block_size;    /* VkDeviceMemory block size; 0 picks a default */
	uint64_t max_bytes;     /* device memory tensord may take; 0: the whole heap */
	const char *pipeline_cache; /* file for the VkPipelineCache, or NULL */
	struct loop *loop;      /* watch asynchronous submissions' completions from this
				   loop (gpu/completion.h); NULL: none */
};

/* The Vulkan indexes `c` selects among the `nfound` devices `found`
 * (gpu_enumerate), in id order: *ret_n entries into ret_index (room for
 * GPU_MAX_DEVICES). Returns 0, or -ENODEV with a reason logged when a listed
 * index does not exist or is unusable, or nothing usable matches. */
int gpu_choose(const struct gpu_device_desc *found, uint32_t nfound, const struct gpu_choice *c,
	       uint32_t *ret_index, uint32_t *ret_n);

/* Enumerate the Vulkan devices: on success *ret_list is a malloc'd array of
 * *ret_count descriptions (free() it). -ENODEV when Vulkan has none. */
int gpu_enumerate(struct gpu_device_desc **ret_list, uint32_t *ret_count);

/* Open Vulkan device opts->index and prepare it for work. On success *ret is
 * ready; -ENODEV when it does not exist or is unusable, -EIO on a Vulkan failure. A
 * readable reason goes to the log. The fault-injection switch
 * TENSORD_FAULT_DEVICE_LOST=N (docs/durability.md) is read here: the Nth
 * submission on this device then reports VK_ERROR_DEVICE_LOST. */
int gpu_device_open(const struct gpu_open_options *opts, struct gpu_device **ret);

/* Wait for outstanding work and release everything; NULL is accepted. A
 * device whose runaway submission (`runaway`) still runs is left alone
 * (logged): its teardown would wait for that work or free memory under it. */
void gpu_device_free(struct gpu_device *g);

/* Begin recording into cmd[i] (waits for its previous submission first). */
int gpu_cmd_begin(struct gpu_device *g, unsigned i);

/* End and submit cmd[i] without waiting. */
int gpu_cmd_submit(struct gpu_device *g, unsigned i);

/* Wait for cmd[i]'s submission, if any. Returns 0, -EIO, or -ENODEV when the
 * device is lost. */
int gpu_cmd_wait(struct gpu_device *g, unsigned i);

/* gpu_cmd_wait giving up after `timeout_ns` (UINT64_MAX: never): a work
 * that has not finished by then is a runaway kernel, and since it cannot be
 * stopped the device is marked lost; returns -ETIMEDOUT. */
int gpu_cmd_wait_for(struct gpu_device *g, unsigned i, uint64_t timeout_ns);

/* Whether cmd[i]'s submission has finished (its fence signalled, or the
 * device failed it): a poll that never waits. */
bool gpu_cmd_finished(struct gpu_device *g, unsigned i);

/* Finish the wait for cmd[i], whose fence the completion thread saw
 * signalled (or failing): as gpu_cmd_wait_for, without waiting. */
int gpu_cmd_reap(struct gpu_device *g, unsigned i);

/* Mark the device lost to cmd[i]'s submission, which ran past `limit_ns`:
 * logs it, sets `lost` and `runaway`. Returns -ETIMEDOUT. */
int gpu_cmd_expired(struct gpu_device *g, unsigned i, uint64_t limit_ns);

/* The time limit of a wait asked to last at most `timeout_ns` under the
 * wait policy below (UINT64_MAX: none). */
uint64_t gpu_wait_limit(uint64_t timeout_ns);

/* Call the wait policy's hook (feeds the watchdog while the loop waits). */
void gpu_wait_tick(void);

/* Every fence wait (gpu_cmd_wait, gpu_cmd_wait_for) gives up after at most
 * `limit_ns` (0: no limit beyond the caller's), marking the device lost as
 * a runaway would; it sleeps in slices of at most 250 ms and calls `hook`
 * (if not NULL) with `data` between them, so a long wait keeps the systemd
 * watchdog fed. Process-wide; set at start-up and on reload. */
void gpu_set_wait_policy(uint64_t limit_ns, void (*hook)(void *data), void *data);

/* While the device is lost to a runaway submission (`runaway`): poll, without
 * waiting, whether that work has ended (its fence signalled, or the driver
 * reports the device lost, as NVIDIA's does once its watchdog ends long
 * work). Returns true once nothing is pending any more: `runaway` is then
 * cleared (the device stays lost) and the device may be freed without
 * waiting on the work. */
bool gpu_device_runaway_ended(struct gpu_device *g);

/* Map a VkResult to -errno, noting device loss. */
int gpu_result_errno(struct gpu_device *g, VkResult r);
