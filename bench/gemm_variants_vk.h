/* The Vulkan side of bench/gemm_variants.c: one device, buffers, compute
 * pipelines of SPIR-V files and timed dispatches, through the loader only
 * (no tensord code). Functions return 0 or -errno (-EIO for a Vulkan error,
 * with a line on stderr). */
#ifndef GEMM_VARIANTS_VK_H
#define GEMM_VARIANTS_VK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <vulkan/vulkan.h>

/* Storage buffers a variant binds: cm uses 0 A, 1 B, 2 out; v4 also 3
 * (split-K partials, unused here: the output) and 4 (bias, unused: A). */
#define GV_BINDINGS 5
#define GV_PUSH_BYTES 112

struct gv_buf {
	VkBuffer buf;
	VkDeviceMemory mem;
	VkDeviceSize size;
	void *map;   /* host-visible buffers only */
};

struct gv_dev {
	VkInstance inst;
	VkPhysicalDevice phys;
	VkDevice dev;
	VkQueue queue;
	uint32_t qfam;
	char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
	bool coopmat;   /* VK_KHR_cooperative_matrix enabled, compute stage */
	bool bf16;      /* VK_KHR_shader_bfloat16 with bf16 matrices enabled */
	bool fp16;      /* shaderFloat16 and storageBuffer16BitAccess enabled */
	uint32_t max_shared;
	uint32_t max_groups[2];
	double ts_period_ns;
	VkDescriptorSetLayout dsl;
	VkPipelineLayout layout;
	VkDescriptorPool pool;
	VkDescriptorSet set;
	VkCommandPool cpool;
	VkCommandBuffer cmd;
	VkQueryPool qpool;
	uint32_t nqueries;
	struct gv_buf staging;
};

/* Open device `index` (or, when negative, the first that lists
 * VK_KHR_cooperative_matrix, else the first) with what the variants need
 * that it offers. */
int gv_dev_open(struct gv_dev *d, int index);
/* Release everything gv_dev_open and the functions below made. */
void gv_dev_close(struct gv_dev *d);

/* A device-local storage buffer of `size` bytes. */
int gv_buf_create(struct gv_dev *d, VkDeviceSize size, struct gv_buf *ret_buf);
void gv_buf_destroy(struct gv_dev *d, struct gv_buf *b);
/* Copy `size` bytes of `src` into `dst` at offset 0, through the staging buffer. */
int gv_upload(struct gv_dev *d, struct gv_buf *dst, const void *src, size_t size);
/* Fill `b` with the 32-bit word `word` (a NaN pattern before a check). */
int gv_fill(struct gv_dev *d, struct gv_buf *b, uint32_t word);
/* Gather `n` pieces of `elem` bytes at byte offsets `off` of `b` into `dst`. */
int gv_download(struct gv_dev *d, struct gv_buf *b, const uint64_t *off, size_t n, size_t elem,
		void *dst);

/* A compute pipeline of the SPIR-V file at `path`. */
int gv_pipeline(struct gv_dev *d, const char *path, VkPipeline *ret_pipe);
/* Bind A, B, out to the descriptor set (see GV_BINDINGS). */
void gv_bind(struct gv_dev *d, struct gv_buf *a, struct gv_buf *b, struct gv_buf *out);
/* Record `warmup` untimed dispatches of `groups` workgroups then `reps`
 * timed ones (a barrier after each), run them, wait, and write each timed
 * dispatch's GPU time into ret_ns[reps]. reps may be 0 (one untimed run). */
int gv_run(struct gv_dev *d, VkPipeline pipe, const void *push, uint32_t push_size, uint64_t groups,
	   unsigned warmup, unsigned reps, double *ret_ns);

#endif
