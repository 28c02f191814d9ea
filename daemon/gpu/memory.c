#include "gpu/memory.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "gpu/completion.h"
#include "gpu/device.h"

#define DEFAULT_BLOCK_SIZE ((uint64_t)256 << 20)
#define MIN_BLOCK_SIZE ((uint64_t)16 << 20)
#define STAGING_SIZE ((uint64_t)64 << 20)
#define BUFFER_USAGE (VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | \
		      VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT)

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* Memory types a storage buffer may live in, learnt from a probe buffer. */
static uint32_t buffer_type_bits(struct gpu_device *g, VkBufferUsageFlags usage)
{
	VkBufferCreateInfo bci = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
		.size = 4096,
		.usage = usage,
		.sharingMode = VK_SHARING_MODE_EXCLUSIVE,
	};
	VkMemoryRequirements req;
	VkBuffer b;

	if (vkCreateBuffer(g->dev, &bci, NULL, &b) != VK_SUCCESS)
		return 0;
	vkGetBufferMemoryRequirements(g->dev, b, &req);
	vkDestroyBuffer(g->dev, b, NULL);
	return req.memoryTypeBits;
}

static int pick_tensor_type(struct gpu_device *g, uint32_t bits)
{
	const VkPhysicalDeviceMemoryProperties *mp = &g->mem_props;
	bool discrete = g->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
	int best = -1;
	uint64_t best_score = 0;

	for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
		VkMemoryPropertyFlags f = mp->memoryTypes[i].propertyFlags;
		uint64_t heap = mp->memoryHeaps[mp->memoryTypes[i].heapIndex].size;
		uint64_t score;

		if (!(bits & (1u << i)) || !(f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))
			continue;
		if (f & (VK_MEMORY_PROPERTY_PROTECTED_BIT | VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT))
			continue;
		/* The biggest heap wins; on a discrete GPU a host-visible type is the
		 * small BAR window, so plain device memory comes first there. */
		score = heap >> 20;
		if (discrete && !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
			score += (uint64_t)1 << 40;
		if (best < 0 || score > best_score) {
			best = (int)i;
			best_score = score;
		}
	}
	return best;
}

static int pick_staging_type(struct gpu_device *g, uint32_t bits)
{
	const VkPhysicalDeviceMemoryProperties *mp = &g->mem_props;
	const VkMemoryPropertyFlags need = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
					   VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
	int best = -1;

	for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
		VkMemoryPropertyFlags f = mp->memoryTypes[i].propertyFlags;

		if (!(bits & (1u << i)) || (f & need) != need)
			continue;
		/* Cached memory makes reading back (tensor.get) fast. */
		if (best < 0 || ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) &&
				 !(mp->memoryTypes[best].propertyFlags & VK_MEMORY_PROPERTY_HOST_CACHED_BIT)))
			best = (int)i;
	}
	return best;
}

/* Whether the device offers VK_EXT_memory_budget (a physical-device query,
 * usable without enabling the extension). */
static bool has_memory_budget(struct gpu_device *g)
{
	VkExtensionProperties *ext;
	uint32_t n = 0;
	bool found = false;

	if (vkEnumerateDeviceExtensionProperties(g->phys, NULL, &n, NULL) != VK_SUCCESS || n == 0)
		return false;
	ext = calloc(n, sizeof(*ext));
	if (!ext)
		return false;
	if (vkEnumerateDeviceExtensionProperties(g->phys, NULL, &n, ext) == VK_SUCCESS)
		for (uint32_t i = 0; i < n && !found; i++)
			found = !strcmp(ext[i].extensionName, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
	free(ext);
	return found;
}

int gpu_memory_init(struct gpu_device *g, bool host_mapped, uint64_t block_size, uint64_t max_bytes)
{
	struct gpu_memory *m = &g->mem;
	const VkMemoryPropertyFlags coherent = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
					       VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
	uint32_t bits = buffer_type_bits(g, BUFFER_USAGE);
	int t = pick_tensor_type(g, bits);
	int s = pick_staging_type(g, buffer_type_bits(g, VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
							 VK_BUFFER_USAGE_TRANSFER_DST_BIT));

	memset(m, 0, sizeof(*m));
	if (t < 0 || s < 0)
		return -ENODEV;
	m->type_index = (uint32_t)t;
	m->heap_index = g->mem_props.memoryTypes[t].heapIndex;
	m->heap_size = g->mem_props.memoryHeaps[m->heap_index].size;
	m->limit = max_bytes && max_bytes < m->heap_size ? max_bytes : m->heap_size;
	m->has_budget = has_memory_budget(g);
	m->staging_type = (uint32_t)s;
	m->host_mapped = host_mapped &&
			 (g->mem_props.memoryTypes[t].propertyFlags & coherent) == coherent;
	m->align = 256;
	if (g->props.limits.minStorageBufferOffsetAlignment > m->align)
		m->align = g->props.limits.minStorageBufferOffsetAlignment;
	if (g->props.limits.nonCoherentAtomSize > m->align)
		m->align = g->props.limits.nonCoherentAtomSize;
	m->max_allocation = g->desc.max_allocation_size ? g->desc.max_allocation_size : m->heap_size;
	m->max_allocation &= ~(m->align - 1);
	m->block_size = block_size ? block_size : DEFAULT_BLOCK_SIZE;
	if (m->block_size > m->max_allocation)
		m->block_size = m->max_allocation;
	if (m->block_size > m->limit / 4)
		m->block_size = round_up(m->limit / 4, m->align);
	log_info("tensor memory: type %d (heap %u, %llu MiB, using up to %llu MiB%s), %s, blocks of %llu MiB",
		 t, m->heap_index, (unsigned long long)(m->heap_size >> 20),
		 (unsigned long long)(m->limit >> 20), m->has_budget ? " within the driver's budget" : "",
		 m->host_mapped ? "mapped by the host" : "reached through staging",
		 (unsigned long long)(m->block_size >> 20));
	return 0;
}

static void block_destroy(struct gpu_device *g, struct gpu_block *b)
{
	/* Work that outran its time limit may still use the block: keep it
	 * until the device is freed, after that work ended. */
	if (g->runaway) {
		b->next = g->mem.retired;
		g->mem.retired = b;
		return;
	}
	if (b->map)
		vkUnmapMemory(g->dev, b->memory);
	if (b->buffer)
		vkDestroyBuffer(g->dev, b->buffer, NULL);
	if (b->memory) {
		vkFreeMemory(g->dev, b->memory, NULL);
		g->mem.reserved -= b->size;
	}
	range_alloc_fini(&b->ranges);
	free(b);
}

/* A VkBuffer of `size` bytes bound to fresh memory of type `type`. */
static int create_bound_buffer(struct gpu_device *g, uint64_t size, VkBufferUsageFlags usage,
			       uint32_t type, VkBuffer *ret_buffer, VkDeviceMemory *ret_memory)
{
	VkBufferCreateInfo bci = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
		.size = size,
		.usage = usage,
		.sharingMode = VK_SHARING_MODE_EXCLUSIVE,
	};
	VkMemoryAllocateInfo mai = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO };
	VkMemoryRequirements req;
	VkBuffer buffer;
	VkDeviceMemory memory;
	VkResult vr;

	vr = vkCreateBuffer(g->dev, &bci, NULL, &buffer);
	if (vr != VK_SUCCESS)
		return gpu_result_errno(g, vr);
	vkGetBufferMemoryRequirements(g->dev, buffer, &req);
	if (!(req.memoryTypeBits & (1u << type)) || req.size > g->mem.max_allocation + g->mem.align) {
		vkDestroyBuffer(g->dev, buffer, NULL);
		return -ENOMEM;
	}
	mai.allocationSize = req.size;
	mai.memoryTypeIndex = type;
	vr = vkAllocateMemory(g->dev, &mai, NULL, &memory);
	if (vr != VK_SUCCESS) {
		vkDestroyBuffer(g->dev, buffer, NULL);
		return gpu_result_errno(g, vr);
	}
	vr = vkBindBufferMemory(g->dev, buffer, memory, 0);
	if (vr != VK_SUCCESS) {
		vkDestroyBuffer(g->dev, buffer, NULL);
		vkFreeMemory(g->dev, memory, NULL);
		return gpu_result_errno(g, vr);
	}
	*ret_buffer = buffer;
	*ret_memory = memory;
	return 0;
}

/* Whether the driver's budget (VK_EXT_memory_budget) has room for `size`
 * more bytes in the tensor heap: other processes on the GPU count too. */
static bool budget_allows(struct gpu_device *g, uint64_t size)
{
	VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT,
	};
	VkPhysicalDeviceMemoryProperties2 mp2 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
		.pNext = &budget,
	};
	uint64_t have, usage;

	if (!g->mem.has_budget)
		return true;
	vkGetPhysicalDeviceMemoryProperties2(g->phys, &mp2);
	have = budget.heapBudget[g->mem.heap_index];
	usage = budget.heapUsage[g->mem.heap_index];
	if (have == 0)
		return true; /* the driver does not know */
	if (usage > have || size > have - usage) {
		log_info("device memory budget: %llu MiB in use of %llu MiB; %llu MiB more refused",
			 (unsigned long long)(usage >> 20), (unsigned long long)(have >> 20),
			 (unsigned long long)(size >> 20));
		return false;
	}
	return true;
}

static int block_create(struct gpu_device *g, uint64_t size, bool dedicated,
			struct gpu_block **ret)
{
	struct gpu_block *b;
	int r;

	for (unsigned i = 0; i < GPU_SPARE_BLOCKS; i++) {
		b = g->mem.spare[i];
		if (!b || b->size != size || b->dedicated != dedicated)
			continue;
		g->mem.spare[i] = NULL;
		b->next = g->mem.blocks;
		g->mem.blocks = b;
		*ret = b;
		return 0;
	}
	/* Spares of other sizes must not make this one fail. */
	if (size > g->mem.limit || g->mem.reserved > g->mem.limit - size || !budget_allows(g, size))
		gpu_memory_trim(g, INT64_MAX);

	/* Drivers such as lavapipe allocate past their heap; stay inside it, and
	 * inside what the configuration and the driver's budget allow. */
	if (size > g->mem.limit || g->mem.reserved > g->mem.limit - size || !budget_allows(g, size))
		return -ENOMEM;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	if (range_alloc_init(&b->ranges, size) < 0) {
		free(b);
		return -ENOMEM;
	}
	r = create_bound_buffer(g, size, BUFFER_USAGE, g->mem.type_index, &b->buffer, &b->memory);
	if (r < 0) {
		range_alloc_fini(&b->ranges);
		free(b);
		return r;
	}
	b->size = size;
	b->dedicated = dedicated;
	g->mem.reserved += size;
	if (g->mem.host_mapped &&
	    vkMapMemory(g->dev, b->memory, 0, VK_WHOLE_SIZE, 0, &b->map) != VK_SUCCESS) {
		b->map = NULL;
		block_destroy(g, b);
		return -ENOMEM;
	}
	b->next = g->mem.blocks;
	g->mem.blocks = b;
	*ret = b;
	return 0;
}

/* Blocks start small and double with use, up to block_size, so a daemon
 * holding a few small tensors does not pin a large block. */
static uint64_t next_block_size(const struct gpu_memory *m, uint64_t reserved)
{
	uint64_t shared = 0, size = MIN_BLOCK_SIZE;

	for (const struct gpu_block *b = m->blocks; b; b = b->next)
		if (!b->dedicated)
			shared += b->size;
	while (size < shared || size < 2 * reserved)
		size *= 2;
	if (size > m->block_size)
		size = m->block_size;
	return round_up(size, m->align);
}

int gpu_memory_alloc(struct gpu_device *g, uint64_t size, struct gpu_alloc *ret)
{
	struct gpu_memory *m = &g->mem;
	struct gpu_block *b;
	uint64_t reserved, offset;
	int r;

	if (size == 0) {
		*ret = (struct gpu_alloc){ 0 };
		return 0;
	}
	if (size > gpu_memory_largest(m))
		return -EFBIG;
	reserved = round_up(size, m->align);
	if (reserved > m->block_size / 2) {
		r = block_create(g, reserved, true, &b);
		if (r < 0)
			return r;
		if (range_alloc_take(&b->ranges, reserved, m->align, &offset) < 0)
			return -ENOMEM; /* cannot happen: the block is empty and exactly this big */
		goto done;
	}
	for (b = m->blocks; b; b = b->next)
		if (!b->dedicated && range_alloc_take(&b->ranges, reserved, m->align, &offset) == 0)
			goto done;
	r = block_create(g, next_block_size(m, reserved), false, &b);
	if (r < 0)
		return r;
	r = range_alloc_take(&b->ranges, reserved, m->align, &offset);
	if (r < 0)
		return r;
done:
	m->used += size;
	*ret = (struct gpu_alloc){ .block = b, .offset = offset, .size = size, .reserved = reserved };
	return 0;
}

void gpu_memory_free(struct gpu_device *g, struct gpu_alloc *a)
{
	if (!a->block)
		return;
	/* A pending asynchronous submission may still read it. */
	if (gpu_completion_busy(g)) {
		gpu_completion_defer_free(g, a);
		return;
	}
	gpu_memory_free_unused(g, a);
}

void gpu_memory_free_unused(struct gpu_device *g, struct gpu_alloc *a)
{
	struct gpu_block *b = a->block, **pp;

	if (!b)
		return;
	range_alloc_give(&b->ranges, a->offset, a->reserved);
	g->mem.used -= a->size;
	*a = (struct gpu_alloc){ 0 };
	if (!range_alloc_empty(&b->ranges))
		return;
	for (pp = &g->mem.blocks; *pp; pp = &(*pp)->next) {
		if (*pp == b) {
			*pp = b->next;
			break;
		}
	}
	/* Parked, not freed: a training step empties its blocks at its end and
	 * fills blocks of the same sizes again at the next one. */
	{
		unsigned slot = 0;

		/* An empty slot, else the one parked longest. */
		for (unsigned i = 0; i < GPU_SPARE_BLOCKS; i++) {
			if (!g->mem.spare[i]) {
				slot = i;
				break;
			}
			if (g->mem.spare_since_ns[i] < g->mem.spare_since_ns[slot])
				slot = i;
		}
		if (g->mem.spare[slot])
			block_destroy(g, g->mem.spare[slot]);
		b->next = NULL;
		g->mem.spare[slot] = b;
		g->mem.spare_since_ns[slot] = gpu_timing_now_ns();
	}
}

void gpu_memory_trim(struct gpu_device *g, int64_t older_than_ns)
{
	for (unsigned i = 0; i < GPU_SPARE_BLOCKS; i++)
		if (g->mem.spare[i] && g->mem.spare_since_ns[i] < older_than_ns) {
			block_destroy(g, g->mem.spare[i]);
			g->mem.spare[i] = NULL;
		}
}

int gpu_host_buffer_create(struct gpu_device *g, uint64_t size, struct gpu_host_buffer *ret)
{
	struct gpu_host_buffer b = { .size = size };
	int r = create_bound_buffer(g, size, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
				    g->mem.staging_type, &b.buffer, &b.memory);

	if (r < 0)
		return r;
	if (vkMapMemory(g->dev, b.memory, 0, VK_WHOLE_SIZE, 0, &b.map) != VK_SUCCESS) {
		vkDestroyBuffer(g->dev, b.buffer, NULL);
		vkFreeMemory(g->dev, b.memory, NULL);
		return -ENOMEM;
	}
	*ret = b;
	return 0;
}

void gpu_host_buffer_free(struct gpu_device *g, struct gpu_host_buffer *b)
{
	if (b->map)
		vkUnmapMemory(g->dev, b->memory);
	if (b->buffer)
		vkDestroyBuffer(g->dev, b->buffer, NULL);
	if (b->memory)
		vkFreeMemory(g->dev, b->memory, NULL);
	*b = (struct gpu_host_buffer){ 0 };
}

int gpu_host_buffer_get(struct gpu_device *g, uint64_t size, struct gpu_host_buffer *ret)
{
	struct gpu_memory *m = &g->mem;

	for (unsigned i = 0; i < m->nhost_spare; i++) {
		struct gpu_host_buffer_slot *s = &m->host_spare[i];

		if (s->size < size)
			continue;
		*ret = (struct gpu_host_buffer){ .buffer = s->buffer, .memory = s->memory, .map = s->map,
						 .size = s->size };
		*s = m->host_spare[--m->nhost_spare];
		return 0;
	}
	return gpu_host_buffer_create(g, (size + 4095) & ~(uint64_t)4095, ret);
}

void gpu_host_buffer_put(struct gpu_device *g, struct gpu_host_buffer *b)
{
	struct gpu_memory *m = &g->mem;

	if (!b->buffer)
		return;
	if (b->size > ((uint64_t)1 << 20) || m->nhost_spare == GPU_SPARE_BLOCKS) {
		gpu_host_buffer_free(g, b);
		return;
	}
	m->host_spare[m->nhost_spare++] = (struct gpu_host_buffer_slot){ .buffer = b->buffer, .memory = b->memory,
									  .map = b->map, .size = b->size };
	*b = (struct gpu_host_buffer){ 0 };
}

int gpu_host_lease_new(struct gpu_device *g, uint64_t size, struct gpu_host_lease **ret)
{
	struct gpu_host_lease *l = calloc(1, sizeof(*l));
	int r;

	if (!l)
		return -ENOMEM;
	r = gpu_host_buffer_create(g, size, &l->b);
	if (r < 0) {
		free(l);
		return r;
	}
	l->next = g->mem.leases;
	if (l->next)
		l->next->prev = &l->next;
	l->prev = &g->mem.leases;
	g->mem.leases = l;
	*ret = l;
	return 0;
}

void gpu_host_lease_free(struct gpu_device *g, struct gpu_host_lease *l)
{
	if (!l)
		return;
	*l->prev = l->next;
	if (l->next)
		l->next->prev = l->prev;
	gpu_host_buffer_free(g, &l->b);
	free(l);
}

int gpu_memory_staging(struct gpu_device *g)
{
	struct gpu_memory *m = &g->mem;
	struct gpu_host_buffer b;
	int r;

	if (m->staging_map)
		return 0;
	r = gpu_host_buffer_create(g, STAGING_SIZE, &b);
	if (r < 0)
		return r;
	m->staging_buffer = b.buffer;
	m->staging_memory = b.memory;
	m->staging_map = b.map;
	m->staging_size = b.size;
	return 0;
}

void gpu_memory_fini(struct gpu_device *g)
{
	struct gpu_memory *m = &g->mem;

	while (m->nhost_spare) {
		struct gpu_host_buffer_slot *s = &m->host_spare[--m->nhost_spare];
		struct gpu_host_buffer b = { .buffer = s->buffer, .memory = s->memory, .map = s->map,
					     .size = s->size };

		gpu_host_buffer_free(g, &b);
	}

	while (m->leases)
		gpu_host_lease_free(g, m->leases);
	gpu_memory_trim(g, INT64_MAX);
	while (m->retired) {
		struct gpu_block *b = m->retired;

		m->retired = b->next;
		block_destroy(g, b);
	}
	while (m->blocks) {
		struct gpu_block *b = m->blocks;

		m->blocks = b->next;
		block_destroy(g, b);
	}
	if (m->staging_map)
		vkUnmapMemory(g->dev, m->staging_memory);
	if (m->staging_buffer)
		vkDestroyBuffer(g->dev, m->staging_buffer, NULL);
	if (m->staging_memory)
		vkFreeMemory(g->dev, m->staging_memory, NULL);
	m->staging_map = NULL;
}
