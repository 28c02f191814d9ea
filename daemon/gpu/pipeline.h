/* Compute pipelines, created once per shader and reused.
 *
 * Every op shader uses one layout: set 0 holds up to GPU_MAX_BINDINGS storage
 * buffers bound with push descriptors (no descriptor pool, nothing allocated
 * per dispatch), and up to GPU_PUSH_BYTES of push constants. Pipelines are
 * compiled on first use through a VkPipelineCache that is kept in the state
 * directory, so a restarted daemon does not recompile. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#define GPU_MAX_BINDINGS 8
#define GPU_PUSH_BYTES 128

struct gpu_device;

struct gpu_pipeline {
	const char *shader;     /* name in the embedded shader table */
	VkPipeline pipeline;
};

struct gpu_pipelines;

/* Set up the shared layout and the pipeline cache, loading `cache_path`
 * (may be NULL or missing). Returns 0 or -errno. */
int gpu_pipelines_init(struct gpu_device *g, const char *cache_path);

/* Save the pipeline cache (if a path was given) and destroy every pipeline. */
void gpu_pipelines_fini(struct gpu_device *g);

/* The pipeline of embedded shader `name` ("binary.f32"), compiled on first
 * use. Returns 0, -ENOENT for an unknown shader, or -EIO. */
int gpu_pipeline_get(struct gpu_device *g, const char *name, const struct gpu_pipeline **ret);

/* The pipeline layout every op shader shares. */
VkPipelineLayout gpu_pipeline_layout(const struct gpu_device *g);

/* Number of pipelines compiled so far (for info and tests). */
uint32_t gpu_pipeline_count(const struct gpu_device *g);

/* How pipelines were obtained (info "counters.pipelines"). */
struct gpu_pipeline_stats {
	uint64_t hits;          /* lookups served by a pipeline already built */
	uint64_t compiles;      /* pipelines built (first use of a shader) */
	uint64_t cache_hits;    /* builds the VkPipelineCache satisfied, as the
				   driver reports (VK_EXT_pipeline_creation_feedback) */
	uint64_t compile_ns;    /* time spent building */
	bool feedback;          /* the driver reports cache hits at all */
};

/* The counters above; zeros before gpu_pipelines_init. */
void gpu_pipeline_stats(const struct gpu_device *g, struct gpu_pipeline_stats *ret);

/* Build a pipeline from a client's SPIR-V (`size` bytes, entry point
 * `entry`) on the shared layout: storage buffers at set 0 bindings
 * 0..GPU_MAX_BINDINGS-1 and GPU_PUSH_BYTES of push constants, which the
 * caller has checked the module stays within (spirv_reflect.h). The caller
 * owns *ret and frees it with gpu_pipeline_destroy. Returns 0, -EINVAL when
 * the driver rejects the module, or -errno. */
int gpu_pipeline_build(struct gpu_device *g, const uint32_t *code, size_t size, const char *entry,
		       VkPipeline *ret);

/* gpu_pipeline_build on another thread: the loop calls gpu_build_begin(g)
 * before the thread may use `g`, the thread gpu_build_end(g) when it no
 * longer does; gpu_device_free waits for the device's builds to end
 * (gpu_builds_wait), so a device is never freed under a build. */
void gpu_build_begin(struct gpu_device *g);
void gpu_build_end(struct gpu_device *g);
void gpu_builds_wait(struct gpu_device *g);

/* Destroy a pipeline gpu_pipeline_build made (VK_NULL_HANDLE is ignored). */
void gpu_pipeline_destroy(struct gpu_device *g, VkPipeline p);
