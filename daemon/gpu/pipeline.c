#include "gpu/pipeline.h"

#include "gpu/completion.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "gpu/completion.h"
#include "gpu/device.h"
#include "shaders.h"

#define MAX_CACHE_FILE ((size_t)256 << 20)

struct gpu_pipelines {
	VkDescriptorSetLayout set_layout;
	VkPipelineLayout layout;
	VkPipelineCache cache;
	char *cache_path;
	struct gpu_pipeline *table;     /* one per embedded shader, by index */
	uint32_t compiled;
	struct gpu_pipeline_stats stats;
};

/* Read the cache file; a missing or unreadable file just means a cold start. */
static void *read_cache(const char *path, size_t *ret_len)
{
	struct stat st;
	void *data = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) == 0 && st.st_size > 0 && (size_t)st.st_size <= MAX_CACHE_FILE &&
	    (data = malloc((size_t)st.st_size)) &&
	    read(fd, data, (size_t)st.st_size) == st.st_size) {
		*ret_len = (size_t)st.st_size;
	} else {
		free(data);
		data = NULL;
	}
	close(fd);
	return data;
}

int gpu_pipelines_init(struct gpu_device *g, const char *cache_path)
{
	VkDescriptorSetLayoutBinding b[GPU_MAX_BINDINGS];
	VkDescriptorSetLayoutCreateInfo dci = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
		.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR,
		.bindingCount = GPU_MAX_BINDINGS,
		.pBindings = b,
	};
	VkPushConstantRange pcr = {
		.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
		.size = GPU_PUSH_BYTES,
	};
	VkPipelineLayoutCreateInfo lci = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
		.setLayoutCount = 1,
		.pushConstantRangeCount = 1,
		.pPushConstantRanges = &pcr,
	};
	VkPipelineCacheCreateInfo cci = { .sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO };
	struct gpu_pipelines *p = calloc(1, sizeof(*p));
	size_t len = 0;
	void *data = NULL;

	if (!p)
		return -ENOMEM;
	g->pipes = p;
	p->table = calloc(shader_count, sizeof(*p->table));
	if (!p->table)
		return -ENOMEM;
	for (uint32_t i = 0; i < GPU_MAX_BINDINGS; i++)
		b[i] = (VkDescriptorSetLayoutBinding){
			.binding = i,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			.descriptorCount = 1,
			.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
		};
	if (vkCreateDescriptorSetLayout(g->dev, &dci, NULL, &p->set_layout) != VK_SUCCESS)
		return -EIO;
	lci.pSetLayouts = &p->set_layout;
	if (vkCreatePipelineLayout(g->dev, &lci, NULL, &p->layout) != VK_SUCCESS)
		return -EIO;
	if (cache_path) {
		p->cache_path = strdup(cache_path);
		data = read_cache(cache_path, &len);
	}
	cci.initialDataSize = len;
	cci.pInitialData = data;
	if (vkCreatePipelineCache(g->dev, &cci, NULL, &p->cache) != VK_SUCCESS) {
		/* A cache the driver rejects is only a cold start. */
		cci.initialDataSize = 0;
		cci.pInitialData = NULL;
		if (vkCreatePipelineCache(g->dev, &cci, NULL, &p->cache) != VK_SUCCESS)
			p->cache = VK_NULL_HANDLE;
	}
	if (data)
		log_info("pipeline cache: %zu bytes from %s", len, cache_path);
	free(data);
	return 0;
}

static void save_cache(struct gpu_device *g)
{
	struct gpu_pipelines *p = g->pipes;
	char tmp[512];
	size_t len = 0;
	void *data;
	FILE *f;

	if (!p->cache || !p->cache_path || !p->compiled)
		return;
	if (vkGetPipelineCacheData(g->dev, p->cache, &len, NULL) != VK_SUCCESS || !len)
		return;
	data = malloc(len);
	if (!data || vkGetPipelineCacheData(g->dev, p->cache, &len, data) != VK_SUCCESS) {
		free(data);
		return;
	}
	/* Write beside, then rename: a crash never leaves half a cache. */
	snprintf(tmp, sizeof(tmp), "%s.tmp", p->cache_path);
	f = fopen(tmp, "we");
	if (f && fwrite(data, 1, len, f) == len && fclose(f) == 0) {
		f = NULL;
		if (rename(tmp, p->cache_path) < 0)
			unlink(tmp);
	} else {
		if (f)
			fclose(f);
		unlink(tmp);
		log_info("cannot save the pipeline cache to %s", p->cache_path);
	}
	free(data);
}

void gpu_pipelines_fini(struct gpu_device *g)
{
	struct gpu_pipelines *p = g->pipes;

	if (!p)
		return;
	save_cache(g);
	for (uint32_t i = 0; p->table && i < shader_count; i++)
		if (p->table[i].pipeline)
			vkDestroyPipeline(g->dev, p->table[i].pipeline, NULL);
	if (p->cache)
		vkDestroyPipelineCache(g->dev, p->cache, NULL);
	if (p->layout)
		vkDestroyPipelineLayout(g->dev, p->layout, NULL);
	if (p->set_layout)
		vkDestroyDescriptorSetLayout(g->dev, p->set_layout, NULL);
	free(p->cache_path);
	free(p->table);
	free(p);
	g->pipes = NULL;
}

static int compile(struct gpu_device *g, const struct shader_blob *s, VkPipeline *ret)
{
	VkShaderModuleCreateInfo mci = {
		.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
		.codeSize = s->size,
		.pCode = s->code,
	};
	VkComputePipelineCreateInfo pci = {
		.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
		.stage = {
			.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
			.stage = VK_SHADER_STAGE_COMPUTE_BIT,
			.pName = "main",
		},
		.layout = g->pipes->layout,
	};
	VkPipelineCreationFeedbackEXT fb = { 0 };
	VkPipelineCreationFeedbackCreateInfoEXT fci = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO_EXT,
		.pPipelineCreationFeedback = &fb,
	};
	struct gpu_pipeline_stats *st = &g->pipes->stats;
	VkShaderModule module;
	int64_t t0 = gpu_timing_now_ns();
	VkResult r;

	if (g->creation_feedback)
		pci.pNext = &fci;
	r = vkCreateShaderModule(g->dev, &mci, NULL, &module);
	if (r != VK_SUCCESS)
		return gpu_result_errno(g, r);
	pci.stage.module = module;
	r = vkCreateComputePipelines(g->dev, g->pipes->cache, 1, &pci, NULL, ret);
	vkDestroyShaderModule(g->dev, module, NULL);
	if (r != VK_SUCCESS) {
		log_error("cannot create the pipeline of shader %s (VkResult %d)", s->name, r);
		return gpu_result_errno(g, r);
	}
	st->compiles++;
	st->compile_ns += (uint64_t)(gpu_timing_now_ns() - t0);
	if ((fb.flags & VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT_EXT) &&
	    (fb.flags & VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT_EXT))
		st->cache_hits++;
	return 0;
}

int gpu_pipeline_get(struct gpu_device *g, const char *name, const struct gpu_pipeline **ret)
{
	struct gpu_pipelines *p = g->pipes;
	int idx = shader_index(name);
	int r;

	if (idx < 0)
		return -ENOENT;
	if (!p->table[idx].pipeline) {
		r = compile(g, &shader_table[idx], &p->table[idx].pipeline);
		if (r < 0)
			return r;
		p->table[idx].shader = shader_table[idx].name;
		p->compiled++;
	} else {
		p->stats.hits++;
	}
	*ret = &p->table[idx];
	return 0;
}

VkPipelineLayout gpu_pipeline_layout(const struct gpu_device *g)
{
	return g->pipes->layout;
}

uint32_t gpu_pipeline_count(const struct gpu_device *g)
{
	return g->pipes ? g->pipes->compiled : 0;
}

void gpu_pipeline_stats(const struct gpu_device *g, struct gpu_pipeline_stats *ret)
{
	if (!g->pipes) {
		*ret = (struct gpu_pipeline_stats){ 0 };
		return;
	}
	*ret = g->pipes->stats;
	ret->feedback = g->creation_feedback;
}

int gpu_pipeline_build(struct gpu_device *g, const uint32_t *code, size_t size, const char *entry,
		       VkPipeline *ret)
{
	VkShaderModuleCreateInfo mci = {
		.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
		.codeSize = size,
		.pCode = code,
	};
	VkComputePipelineCreateInfo pci = {
		.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
		.stage = {
			.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
			.stage = VK_SHADER_STAGE_COMPUTE_BIT,
			.pName = entry,
		},
		.layout = g->pipes->layout,
	};
	VkShaderModule module;
	VkPipeline pipe;
	VkResult r;

	if (g->lost)
		return -ENODEV;
	r = vkCreateShaderModule(g->dev, &mci, NULL, &module);
	if (r != VK_SUCCESS)
		return r == VK_ERROR_INVALID_SHADER_NV ? -EINVAL : gpu_result_errno(g, r);
	pci.stage.module = module;
	/* Not through the pipeline cache: clients' modules would grow the
	 * daemon's cache file without bound. */
	r = vkCreateComputePipelines(g->dev, VK_NULL_HANDLE, 1, &pci, NULL, &pipe);
	vkDestroyShaderModule(g->dev, module, NULL);
	if (r != VK_SUCCESS)
		return r == VK_ERROR_INVALID_SHADER_NV ? -EINVAL : gpu_result_errno(g, r);
	*ret = pipe;
	return 0;
}

/* Every device's gpu_device.builds: few builds at a time, a lock for all. */
static pthread_mutex_t builds_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t builds_ended = PTHREAD_COND_INITIALIZER;

void gpu_build_begin(struct gpu_device *g)
{
	pthread_mutex_lock(&builds_lock);
	g->builds++;
	pthread_mutex_unlock(&builds_lock);
}

void gpu_build_end(struct gpu_device *g)
{
	pthread_mutex_lock(&builds_lock);
	g->builds--;
	pthread_cond_broadcast(&builds_ended);
	pthread_mutex_unlock(&builds_lock);
}

void gpu_builds_wait(struct gpu_device *g)
{
	pthread_mutex_lock(&builds_lock);
	while (g->builds)
		pthread_cond_wait(&builds_ended, &builds_lock);
	pthread_mutex_unlock(&builds_lock);
}

void gpu_pipeline_destroy(struct gpu_device *g, VkPipeline p)
{
	/* A pending asynchronous submission (graph.run, kernel.run) may still
	 * run it. */
	if (p != VK_NULL_HANDLE && gpu_completion_defer_pipeline(g, p) == 0)
		return;
	if (p != VK_NULL_HANDLE)
		vkDestroyPipeline(g->dev, p, NULL);
}
