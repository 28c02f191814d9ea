/* Host memory imported into a device (host_import.h). */
#include "gpu/host_import.h"

#include <errno.h>

#include "base/log.h"
#include "gpu/device.h"

uint64_t gpu_host_import_align(const struct gpu_device *g)
{
	return g->host_import_align;
}

/* A memory type among `bits` (the import's own, from
 * vkGetMemoryHostPointerPropertiesEXT, that the buffer accepts): the lowest
 * host-coherent one (the host and other devices read the pages while this
 * one writes them: data-parallel exchange), else the lowest; -1 if none. */
static int pick_type(const struct gpu_device *g, uint32_t bits)
{
	const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;

	for (uint32_t i = 0; i < g->mem_props.memoryTypeCount; i++)
		if ((bits & (1u << i)) && (g->mem_props.memoryTypes[i].propertyFlags & want) == want)
			return (int)i;
	for (int i = 0; i < 32; i++)
		if (bits & (1u << i))
			return i;
	return -1;
}

bool gpu_host_import_read_only(const struct gpu_device *g)
{
	return g->host_import_align && g->host_import_read_only;
}

int gpu_host_import(struct gpu_device *g, void *ptr, uint64_t size, bool read_only,
		    struct gpu_host_import *ret)
{
	const VkExternalMemoryHandleTypeFlagBits type =
		VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
	VkExternalMemoryBufferCreateInfo ext = {
		.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
		.handleTypes = type,
	};
	VkBufferCreateInfo bci = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
		.pNext = &ext,
		.size = size,
		.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
			 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
		.sharingMode = VK_SHARING_MODE_EXCLUSIVE,
	};
	VkMemoryHostPointerPropertiesEXT hpp = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT,
	};
	VkImportMemoryHostPointerInfoEXT imp = {
		.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
		.handleType = type,
		.pHostPointer = ptr,
	};
	VkMemoryAllocateInfo mai = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
		.pNext = &imp,
		.allocationSize = size,
	};
	uint64_t align = g->host_import_align;
	struct gpu_host_import h = { .size = size };
	VkMemoryRequirements req;
	VkResult vr;
	int t;

	if (g->lost)
		return -ENODEV;
	if (!align || size == 0 || ((uintptr_t)ptr & (align - 1)) || (size & (align - 1)) ||
	    (read_only && !g->host_import_read_only))
		return -EOPNOTSUPP;
	vr = g->host_pointer_props(g->dev, type, ptr, &hpp);
	if (vr != VK_SUCCESS)
		return vr == VK_ERROR_DEVICE_LOST ? gpu_result_errno(g, vr) : -EOPNOTSUPP;
	if (vkCreateBuffer(g->dev, &bci, NULL, &h.buffer) != VK_SUCCESS)
		return -EOPNOTSUPP;
	vkGetBufferMemoryRequirements(g->dev, h.buffer, &req);
	t = pick_type(g, hpp.memoryTypeBits & req.memoryTypeBits);
	if (t < 0 || req.size > size) {
		vkDestroyBuffer(g->dev, h.buffer, NULL);
		return -EOPNOTSUPP;
	}
	mai.memoryTypeIndex = (uint32_t)t;
	vr = vkAllocateMemory(g->dev, &mai, NULL, &h.memory);
	if (vr == VK_SUCCESS)
		vr = vkBindBufferMemory(g->dev, h.buffer, h.memory, 0);
	if (vr != VK_SUCCESS) {
		/* A refused import can leave the driver refusing ordinary
		 * allocations after it (NVIDIA 580): no more attempts. */
		if (vr != VK_ERROR_DEVICE_LOST) {
			log_warning("importing %llu bytes of host memory failed (VkResult %d); this "
				    "device copies through staging from now on",
				    (unsigned long long)size, (int)vr);
			g->host_import_align = 0;
		}
		gpu_host_import_free(g, &h);
		return vr == VK_ERROR_DEVICE_LOST ? gpu_result_errno(g, vr) : -EOPNOTSUPP;
	}
	*ret = h;
	return 0;
}

int gpu_host_import_free(struct gpu_device *g, struct gpu_host_import *h)
{
	if (!h->buffer && !h->memory)
		return 0;
	if (g->runaway) {
		*h = (struct gpu_host_import){ 0 };
		return 1;
	}
	if (h->buffer)
		vkDestroyBuffer(g->dev, h->buffer, NULL);
	if (h->memory)
		vkFreeMemory(g->dev, h->memory, NULL);
	*h = (struct gpu_host_import){ 0 };
	return 0;
}
