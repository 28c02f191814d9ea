/* The Vulkan side of gemm_variants (gemm_variants_vk.h): plain loader calls,
 * one queue, one command buffer reused for every step, waited on each time. */
#include "gemm_variants_vk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* VK_KHR_cooperative_matrix and VK_KHR_shader_bfloat16, which Debian 12's
 * headers predate (values from the registry, as daemon/gpu/coopmat.h). */
#define GV_EXT_COOPMAT "VK_KHR_cooperative_matrix"
#define GV_EXT_BF16 "VK_KHR_shader_bfloat16"
#define GV_STYPE_COOPMAT_FEATURES ((VkStructureType)1000506000)
#define GV_STYPE_BF16_FEATURES ((VkStructureType)1000141000)

struct gv_coopmat_features {
	VkStructureType sType;
	void *pNext;
	VkBool32 cooperativeMatrix;
	VkBool32 cooperativeMatrixRobustBufferAccess;
};

struct gv_bf16_features {
	VkStructureType sType;
	void *pNext;
	VkBool32 shaderBFloat16Type;
	VkBool32 shaderBFloat16DotProduct;
	VkBool32 shaderBFloat16CooperativeMatrix;
};

#define VKCHECK(call) do { VkResult r_ = (call); if (r_ != VK_SUCCESS) { \
	fprintf(stderr, "gemm_variants: %s failed: %d\n", #call, (int)r_); return -EIO; } } while (0)

static bool has_ext(VkPhysicalDevice phys, const char *name)
{
	VkExtensionProperties *ext;
	uint32_t n = 0;
	bool found = false;

	if (vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL) != VK_SUCCESS || !n)
		return false;
	ext = calloc(n, sizeof(*ext));
	if (ext && vkEnumerateDeviceExtensionProperties(phys, NULL, &n, ext) == VK_SUCCESS)
		for (uint32_t i = 0; i < n && !found; i++)
			found = strcmp(ext[i].extensionName, name) == 0;
	free(ext);
	return found;
}

static int pick_physical(struct gv_dev *d, int index)
{
	VkPhysicalDevice phys[16];
	uint32_t n = 16;

	VKCHECK(vkEnumeratePhysicalDevices(d->inst, &n, phys));
	if (!n || (index >= 0 && (uint32_t)index >= n)) {
		fprintf(stderr, "gemm_variants: no Vulkan device %d (%u found)\n", index, n);
		return -ENODEV;
	}
	d->phys = phys[index >= 0 ? (uint32_t)index : 0];
	if (index < 0)
		for (uint32_t i = 0; i < n; i++)
			if (has_ext(phys[i], GV_EXT_COOPMAT)) {
				d->phys = phys[i];
				break;
			}
	return 0;
}

static int pick_queue(struct gv_dev *d)
{
	VkQueueFamilyProperties q[16];
	uint32_t n = 16;

	vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &n, q);
	for (uint32_t i = 0; i < n; i++)
		if ((q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && q[i].timestampValidBits) {
			d->qfam = i;
			return 0;
		}
	fprintf(stderr, "gemm_variants: no compute queue with timestamps\n");
	return -ENODEV;
}

/* The device with the features the modules use that it offers;
 * robustBufferAccess stays off. */
static int create_device(struct gv_dev *d)
{
	struct gv_bf16_features bf = { .sType = GV_STYPE_BF16_FEATURES };
	struct gv_coopmat_features cm = { .sType = GV_STYPE_COOPMAT_FEATURES };
	VkPhysicalDeviceVulkan12Features f12 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES };
	VkPhysicalDeviceVulkan11Features f11 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
						 .pNext = &f12 };
	VkPhysicalDeviceFeatures2 f2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11 };
	bool has_cm = has_ext(d->phys, GV_EXT_COOPMAT), has_bf = has_ext(d->phys, GV_EXT_BF16);
	const char *ext[2];
	uint32_t next = 0;
	float prio = 1.0f;
	VkDeviceQueueCreateInfo qci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
		.queueFamilyIndex = d->qfam, .queueCount = 1, .pQueuePriorities = &prio,
	};
	VkDeviceCreateInfo dci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
		.queueCreateInfoCount = 1, .pQueueCreateInfos = &qci, .ppEnabledExtensionNames = ext,
	};

	if (has_cm) {
		cm.pNext = f2.pNext;
		f2.pNext = &cm;
	}
	if (has_cm && has_bf) {
		bf.pNext = f2.pNext;
		f2.pNext = &bf;
	}
	vkGetPhysicalDeviceFeatures2(d->phys, &f2);
	d->fp16 = f12.shaderFloat16 && f11.storageBuffer16BitAccess;
	d->coopmat = has_cm && cm.cooperativeMatrix && f12.vulkanMemoryModel && d->fp16;
	d->bf16 = d->coopmat && has_bf && bf.shaderBFloat16Type && bf.shaderBFloat16CooperativeMatrix;
	/* Keep what is wanted and offered; everything else off. */
	memset(&f2.features, 0, sizeof(f2.features));
	f11 = (VkPhysicalDeviceVulkan11Features){ .sType = f11.sType, .pNext = &f12,
		.storageBuffer16BitAccess = d->fp16 };
	f12 = (VkPhysicalDeviceVulkan12Features){ .sType = f12.sType,
		.shaderFloat16 = d->fp16, .vulkanMemoryModel = d->coopmat };
	f2.pNext = &f11;
	if (d->coopmat) {
		cm = (struct gv_coopmat_features){ .sType = cm.sType, .pNext = f12.pNext,
						   .cooperativeMatrix = VK_TRUE };
		f12.pNext = &cm;
		ext[next++] = GV_EXT_COOPMAT;
	}
	if (d->bf16) {
		bf = (struct gv_bf16_features){ .sType = bf.sType, .pNext = f12.pNext,
						.shaderBFloat16Type = VK_TRUE,
						.shaderBFloat16CooperativeMatrix = VK_TRUE };
		f12.pNext = &bf;
		ext[next++] = GV_EXT_BF16;
	}
	dci.pNext = &f2;
	dci.enabledExtensionCount = next;
	VKCHECK(vkCreateDevice(d->phys, &dci, NULL, &d->dev));
	vkGetDeviceQueue(d->dev, d->qfam, 0, &d->queue);
	return 0;
}

/* Descriptor set, pipeline layout, command buffer. */
static int create_objects(struct gv_dev *d)
{
	VkDescriptorSetLayoutBinding bind[GV_BINDINGS];
	VkDescriptorSetLayoutCreateInfo dlci = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
		.bindingCount = GV_BINDINGS, .pBindings = bind,
	};
	VkPushConstantRange range = { VK_SHADER_STAGE_COMPUTE_BIT, 0, GV_PUSH_BYTES };
	VkPipelineLayoutCreateInfo plci = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
		.setLayoutCount = 1, .pSetLayouts = &d->dsl,
		.pushConstantRangeCount = 1, .pPushConstantRanges = &range,
	};
	VkDescriptorPoolSize ps = { VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, GV_BINDINGS };
	VkDescriptorPoolCreateInfo dpci = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
		.maxSets = 1, .poolSizeCount = 1, .pPoolSizes = &ps,
	};
	VkDescriptorSetAllocateInfo dsai = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
		.descriptorSetCount = 1, .pSetLayouts = &d->dsl,
	};
	VkCommandPoolCreateInfo cpci = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
		.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = d->qfam,
	};
	VkCommandBufferAllocateInfo cbai = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
		.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1,
	};

	for (uint32_t i = 0; i < GV_BINDINGS; i++)
		bind[i] = (VkDescriptorSetLayoutBinding){ i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
							  VK_SHADER_STAGE_COMPUTE_BIT, NULL };
	VKCHECK(vkCreateDescriptorSetLayout(d->dev, &dlci, NULL, &d->dsl));
	VKCHECK(vkCreatePipelineLayout(d->dev, &plci, NULL, &d->layout));
	VKCHECK(vkCreateDescriptorPool(d->dev, &dpci, NULL, &d->pool));
	dsai.descriptorPool = d->pool;
	VKCHECK(vkAllocateDescriptorSets(d->dev, &dsai, &d->set));
	VKCHECK(vkCreateCommandPool(d->dev, &cpci, NULL, &d->cpool));
	cbai.commandPool = d->cpool;
	VKCHECK(vkAllocateCommandBuffers(d->dev, &cbai, &d->cmd));
	return 0;
}

int gv_dev_open(struct gv_dev *d, int index)
{
	VkApplicationInfo app = {
		.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
		.pApplicationName = "gemm_variants", .apiVersion = VK_API_VERSION_1_2,
	};
	VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
	VkPhysicalDeviceProperties props;
	int r;

	memset(d, 0, sizeof(*d));
	VKCHECK(vkCreateInstance(&ici, NULL, &d->inst));
	if ((r = pick_physical(d, index)) < 0 || (r = pick_queue(d)) < 0 || (r = create_device(d)) < 0 ||
	    (r = create_objects(d)) < 0)
		return r;
	vkGetPhysicalDeviceProperties(d->phys, &props);
	snprintf(d->name, sizeof(d->name), "%s", props.deviceName);
	d->max_shared = props.limits.maxComputeSharedMemorySize;
	d->max_groups[0] = props.limits.maxComputeWorkGroupCount[0];
	d->max_groups[1] = props.limits.maxComputeWorkGroupCount[1];
	d->ts_period_ns = props.limits.timestampPeriod;
	return 0;
}

void gv_dev_close(struct gv_dev *d)
{
	if (!d->inst)
		return;
	if (d->dev) {
		vkDeviceWaitIdle(d->dev);
		gv_buf_destroy(d, &d->staging);
		if (d->qpool)
			vkDestroyQueryPool(d->dev, d->qpool, NULL);
		if (d->cpool)
			vkDestroyCommandPool(d->dev, d->cpool, NULL);
		if (d->pool)
			vkDestroyDescriptorPool(d->dev, d->pool, NULL);
		if (d->layout)
			vkDestroyPipelineLayout(d->dev, d->layout, NULL);
		if (d->dsl)
			vkDestroyDescriptorSetLayout(d->dev, d->dsl, NULL);
		vkDestroyDevice(d->dev, NULL);
	}
	vkDestroyInstance(d->inst, NULL);
	memset(d, 0, sizeof(*d));
}

static int buf_make(struct gv_dev *d, VkDeviceSize size, VkMemoryPropertyFlags want, struct gv_buf *ret)
{
	VkBufferCreateInfo bci = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
		.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
			 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
	};
	VkPhysicalDeviceMemoryProperties mp;
	VkMemoryRequirements req;
	VkMemoryAllocateInfo mai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO };
	struct gv_buf b = { .size = size };
	uint32_t t;

	VKCHECK(vkCreateBuffer(d->dev, &bci, NULL, &b.buf));
	vkGetBufferMemoryRequirements(d->dev, b.buf, &req);
	vkGetPhysicalDeviceMemoryProperties(d->phys, &mp);
	for (t = 0; t < mp.memoryTypeCount; t++)
		if ((req.memoryTypeBits & (1u << t)) && (mp.memoryTypes[t].propertyFlags & want) == want)
			break;
	mai.allocationSize = req.size;
	mai.memoryTypeIndex = t;
	if (t == mp.memoryTypeCount || vkAllocateMemory(d->dev, &mai, NULL, &b.mem) != VK_SUCCESS ||
	    vkBindBufferMemory(d->dev, b.buf, b.mem, 0) != VK_SUCCESS ||
	    ((want & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
	     vkMapMemory(d->dev, b.mem, 0, VK_WHOLE_SIZE, 0, &b.map) != VK_SUCCESS)) {
		fprintf(stderr, "gemm_variants: no memory for a buffer of %llu bytes\n", (unsigned long long)size);
		gv_buf_destroy(d, &b);
		return -ENOMEM;
	}
	*ret = b;
	return 0;
}

int gv_buf_create(struct gv_dev *d, VkDeviceSize size, struct gv_buf *ret_buf)
{
	return buf_make(d, size, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, ret_buf);
}

void gv_buf_destroy(struct gv_dev *d, struct gv_buf *b)
{
	if (b->buf)
		vkDestroyBuffer(d->dev, b->buf, NULL);
	if (b->mem)
		vkFreeMemory(d->dev, b->mem, NULL);
	memset(b, 0, sizeof(*b));
}

static int staging(struct gv_dev *d, VkDeviceSize size)
{
	if (d->staging.size >= size)
		return 0;
	gv_buf_destroy(d, &d->staging);
	return buf_make(d, size, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
			&d->staging);
}

static int cmd_begin(struct gv_dev *d)
{
	VkCommandBufferBeginInfo bi = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
		.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
	};

	VKCHECK(vkResetCommandBuffer(d->cmd, 0));
	VKCHECK(vkBeginCommandBuffer(d->cmd, &bi));
	return 0;
}

static int cmd_submit_wait(struct gv_dev *d)
{
	VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
			    .pCommandBuffers = &d->cmd };

	VKCHECK(vkEndCommandBuffer(d->cmd));
	VKCHECK(vkQueueSubmit(d->queue, 1, &si, VK_NULL_HANDLE));
	VKCHECK(vkQueueWaitIdle(d->queue));
	return 0;
}

/* Everything before it (transfers, shaders) before everything after. */
static void barrier_all(struct gv_dev *d)
{
	VkMemoryBarrier mb = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
		.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
				 VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
	};
	VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;

	vkCmdPipelineBarrier(d->cmd, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
}

int gv_upload(struct gv_dev *d, struct gv_buf *dst, const void *src, size_t size)
{
	VkBufferCopy reg = { 0, 0, size };
	int r;

	if ((r = staging(d, size)) < 0 || (r = cmd_begin(d)) < 0)
		return r;
	memcpy(d->staging.map, src, size);
	vkCmdCopyBuffer(d->cmd, d->staging.buf, dst->buf, 1, &reg);
	barrier_all(d);
	return cmd_submit_wait(d);
}

int gv_fill(struct gv_dev *d, struct gv_buf *b, uint32_t word)
{
	int r = cmd_begin(d);

	if (r < 0)
		return r;
	vkCmdFillBuffer(d->cmd, b->buf, 0, VK_WHOLE_SIZE, word);
	barrier_all(d);
	return cmd_submit_wait(d);
}

int gv_download(struct gv_dev *d, struct gv_buf *b, const uint64_t *off, size_t n, size_t elem, void *dst)
{
	VkBufferCopy *reg = calloc(n ? n : 1, sizeof(*reg));
	int r;

	if (!reg)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		reg[i] = (VkBufferCopy){ off[i], i * elem, elem };
	if ((r = staging(d, n * elem)) == 0 && (r = cmd_begin(d)) == 0) {
		vkCmdCopyBuffer(d->cmd, b->buf, d->staging.buf, (uint32_t)n, reg);
		if ((r = cmd_submit_wait(d)) == 0)
			memcpy(dst, d->staging.map, n * elem);
	}
	free(reg);
	return r;
}

int gv_pipeline(struct gv_dev *d, const char *path, VkPipeline *ret_pipe)
{
	VkShaderModuleCreateInfo smci = { .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO };
	VkComputePipelineCreateInfo cpci = {
		.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
		.stage = { .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
			   .stage = VK_SHADER_STAGE_COMPUTE_BIT, .pName = "main" },
		.layout = d->layout,
	};
	VkShaderModule mod;
	VkPipeline pipe;
	FILE *f = fopen(path, "rb");
	uint32_t *code = NULL;
	long size;
	VkResult vr;

	if (!f)
		return -errno;
	if (fseek(f, 0, SEEK_END) < 0 || (size = ftell(f)) <= 0 || size % 4 || fseek(f, 0, SEEK_SET) < 0 ||
	    !(code = malloc((size_t)size)) || fread(code, 1, (size_t)size, f) != (size_t)size) {
		fclose(f);
		free(code);
		return -EINVAL;
	}
	fclose(f);
	smci.codeSize = (size_t)size;
	smci.pCode = code;
	vr = vkCreateShaderModule(d->dev, &smci, NULL, &mod);
	free(code);
	if (vr != VK_SUCCESS)
		return -EINVAL;
	cpci.stage.module = mod;
	vr = vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &cpci, NULL, &pipe);
	vkDestroyShaderModule(d->dev, mod, NULL);
	if (vr != VK_SUCCESS)
		return -EINVAL;
	*ret_pipe = pipe;
	return 0;
}

void gv_bind(struct gv_dev *d, struct gv_buf *a, struct gv_buf *b, struct gv_buf *out)
{
	struct gv_buf *which[GV_BINDINGS] = { a, b, out, out, a };
	VkDescriptorBufferInfo info[GV_BINDINGS];
	VkWriteDescriptorSet w[GV_BINDINGS];

	for (int i = 0; i < GV_BINDINGS; i++) {
		info[i] = (VkDescriptorBufferInfo){ which[i]->buf, 0, VK_WHOLE_SIZE };
		w[i] = (VkWriteDescriptorSet){
			.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = d->set,
			.dstBinding = (uint32_t)i, .descriptorCount = 1,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &info[i],
		};
	}
	vkUpdateDescriptorSets(d->dev, GV_BINDINGS, w, 0, NULL);
}

static int queries(struct gv_dev *d, uint32_t n)
{
	VkQueryPoolCreateInfo qci = {
		.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
		.queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = n,
	};

	if (d->nqueries >= n)
		return 0;
	if (d->qpool)
		vkDestroyQueryPool(d->dev, d->qpool, NULL);
	d->qpool = VK_NULL_HANDLE;
	d->nqueries = 0;
	VKCHECK(vkCreateQueryPool(d->dev, &qci, NULL, &d->qpool));
	d->nqueries = n;
	return 0;
}

int gv_run(struct gv_dev *d, VkPipeline pipe, const void *push, uint32_t push_size, uint64_t groups,
	   unsigned warmup, unsigned reps, double *ret_ns)
{
	uint64_t gx = groups < d->max_groups[0] ? groups : d->max_groups[0], gy = (groups + gx - 1) / gx;
	uint64_t *ts;
	int r;

	if (!groups || gy > d->max_groups[1] || push_size > GV_PUSH_BYTES)
		return -E2BIG;
	if ((r = queries(d, 2 * (reps ? reps : 1))) < 0 || (r = cmd_begin(d)) < 0)
		return r;
	vkCmdResetQueryPool(d->cmd, d->qpool, 0, 2 * (reps ? reps : 1));
	vkCmdBindPipeline(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
	vkCmdBindDescriptorSets(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, d->layout, 0, 1, &d->set, 0, NULL);
	vkCmdPushConstants(d->cmd, d->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size, push);
	for (unsigned i = 0; i < warmup + (reps ? reps : 1); i++) {
		bool timed = reps && i >= warmup;

		if (timed)
			vkCmdWriteTimestamp(d->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, d->qpool, 2 * (i - warmup));
		vkCmdDispatch(d->cmd, (uint32_t)gx, (uint32_t)gy, 1);
		if (timed)
			vkCmdWriteTimestamp(d->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, d->qpool,
					    2 * (i - warmup) + 1);
		barrier_all(d);
	}
	if ((r = cmd_submit_wait(d)) < 0 || !reps)
		return r;
	if (!(ts = calloc(2 * reps, sizeof(*ts))))
		return -ENOMEM;
	if (vkGetQueryPoolResults(d->dev, d->qpool, 0, 2 * reps, 2 * reps * sizeof(*ts), ts, sizeof(*ts),
				  VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS) {
		free(ts);
		return -EIO;
	}
	for (unsigned i = 0; i < reps; i++)
		ret_ns[i] = (double)(ts[2 * i + 1] - ts[2 * i]) * d->ts_period_ns;
	free(ts);
	return 0;
}
