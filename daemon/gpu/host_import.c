/* Host pages imported into several devices, and their mean kernel (host_import.h). */
#include "gpu/host_import.h"

#include <errno.h>

#include "gpu/device.h"
#include "gpu/pipeline.h"
#include "gpu/recorder.h"

uint64_t gpu_host_import_align(struct gpu_device *g)
{
	VkPhysicalDeviceExternalMemoryHostPropertiesEXT hp = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT,
	};
	VkPhysicalDeviceProperties2 p2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &hp };
	uint64_t a;

	if (!g->host_import)
		return 0;
	vkGetPhysicalDeviceProperties2(g->phys, &p2);
	a = hp.minImportedHostPointerAlignment;
	if (a < 4096)
		a = 4096;
	return (a & (a - 1)) ? 0 : a;
}

/* A host-visible, host-coherent memory type among `bits`, or -1. */
static int coherent_type(const struct gpu_device *g, uint32_t bits)
{
	const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;

	for (uint32_t i = 0; i < g->mem_props.memoryTypeCount; i++)
		if ((bits & (1u << i)) && (g->mem_props.memoryTypes[i].propertyFlags & want) == want)
			return (int)i;
	return -1;
}

int gpu_host_import(struct gpu_device *g, void *ptr, uint64_t size, struct gpu_host_import *ret)
{
	const VkExternalMemoryHandleTypeFlagBits ht = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
	PFN_vkGetMemoryHostPointerPropertiesEXT props_of;
	VkMemoryHostPointerPropertiesEXT hpp = { .sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT };
	VkExternalMemoryBufferCreateInfo ebi = {
		.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO, .handleTypes = ht,
	};
	VkBufferCreateInfo bci = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
		.pNext = &ebi,
		.size = size,
		.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
			 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
		.sharingMode = VK_SHARING_MODE_EXCLUSIVE,
	};
	VkImportMemoryHostPointerInfoEXT imp = {
		.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT, .handleType = ht, .pHostPointer = ptr,
	};
	VkMemoryAllocateInfo mai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &imp,
				     .allocationSize = size };
	VkMemoryRequirements req;
	struct gpu_host_import b = { .size = size };
	uint64_t align = gpu_host_import_align(g);
	int type;

	if (!align || !size || ((uintptr_t)ptr | size) & (align - 1))
		return -EOPNOTSUPP;
	props_of = (PFN_vkGetMemoryHostPointerPropertiesEXT)vkGetDeviceProcAddr(g->dev,
										   "vkGetMemoryHostPointerPropertiesEXT");
	if (!props_of || props_of(g->dev, ht, ptr, &hpp) != VK_SUCCESS)
		return -EOPNOTSUPP;
	if (vkCreateBuffer(g->dev, &bci, NULL, &b.buffer) != VK_SUCCESS)
		return -ENOMEM;
	vkGetBufferMemoryRequirements(g->dev, b.buffer, &req);
	type = coherent_type(g, hpp.memoryTypeBits & req.memoryTypeBits);
	if (type < 0 || req.size > size) {
		vkDestroyBuffer(g->dev, b.buffer, NULL);
		return -EOPNOTSUPP;
	}
	mai.memoryTypeIndex = (uint32_t)type;
	if (vkAllocateMemory(g->dev, &mai, NULL, &b.memory) != VK_SUCCESS) {
		vkDestroyBuffer(g->dev, b.buffer, NULL);
		return -ENOMEM;
	}
	if (vkBindBufferMemory(g->dev, b.buffer, b.memory, 0) != VK_SUCCESS) {
		gpu_host_import_free(g, &b);
		return -ENOMEM;
	}
	*ret = b;
	return 0;
}

void gpu_host_import_free(struct gpu_device *g, struct gpu_host_import *b)
{
	if (b->buffer)
		vkDestroyBuffer(g->dev, b->buffer, NULL);
	if (b->memory)
		vkFreeMemory(g->dev, b->memory, NULL);
	*b = (struct gpu_host_import){ 0 };
}

int gpu_rec_host_mean(struct gpu_recorder *rec, VkBuffer host, uint64_t stride, unsigned n,
		      unsigned self, const struct gpu_alloc *out)
{
	struct gpu_device *g = rec->g;
	struct gpu_binding b[GPU_MAX_BINDINGS];
	const struct gpu_pipeline *p;
	uint32_t push[2];
	uint64_t count = out->size / 4;
	int r;

	if (n < 1 || n > GPU_MAX_BINDINGS - 1 || self >= n || out->size % 4 || stride < out->size ||
	    stride % g->props.limits.minStorageBufferOffsetAlignment)
		return -EINVAL;
	if (count == 0)
		return 0;
	if (out->size > g->props.limits.maxStorageBufferRange || count > UINT32_MAX)
		return -E2BIG;
	r = gpu_pipeline_get(g, "dp_mean.f32", &p);
	if (r < 0)
		return r;
	for (unsigned k = 0; k < GPU_MAX_BINDINGS - 1; k++)
		b[k] = (struct gpu_binding){ host, (k < n ? k : 0) * stride, out->size, false };
	b[self] = gpu_rec_bind(g, out, 0, out->size, false);
	b[GPU_MAX_BINDINGS - 1] = gpu_rec_bind(g, out, 0, out->size, true);
	push[0] = (uint32_t)count;
	push[1] = n;
	gpu_rec_barrier(rec);
	r = gpu_rec_dispatch(rec, p, b, GPU_MAX_BINDINGS, push, sizeof(push), count, 256);
	gpu_rec_barrier(rec);
	return r;
}
