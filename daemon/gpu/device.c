#include "gpu/device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sanitize.h"
#include "gpu/completion.h"
#include "gpu/pipeline.h"

static VkResult create_instance(VkInstance *ret)
{
	VkApplicationInfo app = {
		.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
		.pApplicationName = "tensord",
		.applicationVersion = 1,
		.pEngineName = "tensord",
		.apiVersion = VK_API_VERSION_1_2,
	};
	VkInstanceCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
		.pApplicationInfo = &app,
	};

	return vkCreateInstance(&ci, NULL, ret);
}

static const char *type_name(VkPhysicalDeviceType t)
{
	switch (t) {
	case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
	case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
	case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
	case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
	default: return "other";
	}
}

/* Lower is better for --device auto. */
static int type_rank(VkPhysicalDeviceType t)
{
	switch (t) {
	case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
	case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
	case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
	case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
	default: return 4;
	}
}

static int find_compute_queue(VkPhysicalDevice phys, uint32_t *ret)
{
	VkQueueFamilyProperties qf[16];
	uint32_t n = 16, best = UINT32_MAX;

	vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, qf);
	for (uint32_t i = 0; i < n; i++) {
		if (!(qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT))
			continue;
		/* Prefer a family that also does graphics: on most drivers it is the
		 * full-featured one with timestamps. */
		if (best == UINT32_MAX || (qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
			best = i;
		if (qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)
			break;
	}
	if (best == UINT32_MAX)
		return -ENODEV;
	*ret = best;
	return 0;
}

static void describe(VkPhysicalDevice phys, uint32_t index, struct gpu_device_desc *d)
{
	VkPhysicalDeviceDriverProperties drv = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES,
	};
	VkPhysicalDeviceMaintenance3Properties m3 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
		.pNext = &drv,
	};
	VkPhysicalDeviceProperties2 p2 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
		.pNext = &m3,
	};
	VkPhysicalDeviceMemoryProperties mp;
	uint32_t qf;

	memset(d, 0, sizeof(*d));
	vkGetPhysicalDeviceProperties2(phys, &p2);
	vkGetPhysicalDeviceMemoryProperties(phys, &mp);
	d->index = index;
	snprintf(d->name, sizeof(d->name), "%s", p2.properties.deviceName);
	d->type = type_name(p2.properties.deviceType);
	d->rank = type_rank(p2.properties.deviceType);
	d->vendor_id = p2.properties.vendorID;
	d->device_id = p2.properties.deviceID;
	snprintf(d->api_version, sizeof(d->api_version), "%u.%u.%u",
		 VK_API_VERSION_MAJOR(p2.properties.apiVersion),
		 VK_API_VERSION_MINOR(p2.properties.apiVersion),
		 VK_API_VERSION_PATCH(p2.properties.apiVersion));
	d->max_storage_buffer_range = p2.properties.limits.maxStorageBufferRange;
	d->max_allocation_size = m3.maxMemoryAllocationSize;
	d->driver_id = (uint32_t)drv.driverID;
	d->usable = p2.properties.apiVersion >= VK_API_VERSION_1_2 &&
		    find_compute_queue(phys, &qf) == 0;
	if (d->usable)
		snprintf(d->driver, sizeof(d->driver), "%s %s", drv.driverName, drv.driverInfo);
	for (uint32_t i = 0; i < mp.memoryHeapCount; i++)
		if ((mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
		    mp.memoryHeaps[i].size > d->heap_size)
			d->heap_size = mp.memoryHeaps[i].size;
}

static int list_physical(VkInstance inst, VkPhysicalDevice **ret, uint32_t *ret_n)
{
	VkPhysicalDevice *list;
	uint32_t n = 0;

	if (vkEnumeratePhysicalDevices(inst, &n, NULL) != VK_SUCCESS || n == 0)
		return -ENODEV;
	list = calloc(n, sizeof(*list));
	if (!list)
		return -ENOMEM;
	if (vkEnumeratePhysicalDevices(inst, &n, list) < 0) {
		free(list);
		return -ENODEV;
	}
	*ret = list;
	*ret_n = n;
	return 0;
}

/* Log the device groups of more than one physical device (memory of one
 * such device is addressable from the others: not used yet, docs/devices.md). */
static void log_groups(VkInstance inst)
{
	VkPhysicalDeviceGroupProperties groups[GPU_MAX_DEVICES];
	uint32_t n = GPU_MAX_DEVICES;

	for (uint32_t i = 0; i < n; i++)
		groups[i] = (VkPhysicalDeviceGroupProperties){ .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_GROUP_PROPERTIES };
	if (vkEnumeratePhysicalDeviceGroups(inst, &n, groups) < 0)
		return;
	for (uint32_t i = 0; i < n; i++)
		if (groups[i].physicalDeviceCount > 1)
			log_info("Vulkan device group %u: %u physical devices", i, groups[i].physicalDeviceCount);
}

int gpu_enumerate(struct gpu_device_desc **ret_list, uint32_t *ret_count)
{
	VkInstance inst;
	VkPhysicalDevice *phys = NULL;
	struct gpu_device_desc *list;
	uint32_t n;
	int r;

	if (create_instance(&inst) != VK_SUCCESS)
		return -ENODEV;
	r = list_physical(inst, &phys, &n);
	if (r < 0)
		goto out;
	list = calloc(n, sizeof(*list));
	if (!list) {
		r = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++)
		describe(phys[i], i, &list[i]);
	log_groups(inst);
	*ret_list = list;
	*ret_count = n;
	r = 0;
out:
	free(phys);
	vkDestroyInstance(inst, NULL);
	return r;
}

int gpu_choose(const struct gpu_device_desc *found, uint32_t nfound, const struct gpu_choice *c,
	       uint32_t *ret_index, uint32_t *ret_n)
{
	uint32_t out[GPU_MAX_DEVICES], n = 0;
	int best = 99;

	if (c->pick == GPU_PICK_LIST) {
		for (uint32_t k = 0; k < c->n && k < GPU_MAX_DEVICES; k++) {
			if (c->index[k] >= nfound) {
				log_error("no device with index %u (found %u)", c->index[k], nfound);
				return -ENODEV;
			}
			if (!found[c->index[k]].usable) {
				log_error("device %u (%s) lacks Vulkan 1.2 or a compute queue", c->index[k],
					  found[c->index[k]].name);
				return -ENODEV;
			}
			out[n++] = c->index[k];
		}
	} else {
		for (uint32_t i = 0; i < nfound; i++)
			if (found[i].usable && found[i].rank < best)
				best = found[i].rank;
		for (uint32_t i = 0; i < nfound && n < GPU_MAX_DEVICES; i++) {
			if (!found[i].usable)
				continue;
			if (c->pick == GPU_PICK_CPU ? strcmp(found[i].type, "cpu") != 0 :
			    c->pick != GPU_PICK_ALL && found[i].rank != best)
				continue;
			out[n++] = i;
			/* One CPU device: lavapipe twice would only halve each one's threads. */
			if (c->pick == GPU_PICK_CPU || (c->pick != GPU_PICK_ALL && best == 3))
				break;
		}
	}
	if (n == 0) {
		log_error("no usable %sVulkan device found", c->pick == GPU_PICK_CPU ? "CPU " : "");
		return -ENODEV;
	}
	if (c->pick == GPU_PICK_LOCAL) {
		out[0] = out[c->local_rank % n];
		n = 1;
	}
	memcpy(ret_index, out, n * sizeof(*out));
	*ret_n = n;
	return 0;
}

static bool has_extension(VkPhysicalDevice phys, const char *name)
{
	VkExtensionProperties *ext;
	uint32_t n = 0;
	bool found = false;

	if (vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL) != VK_SUCCESS || !n)
		return false;
	ext = calloc(n, sizeof(*ext));
	if (!ext)
		return false;
	if (vkEnumerateDeviceExtensionProperties(phys, NULL, &n, ext) == VK_SUCCESS)
		for (uint32_t i = 0; i < n && !found; i++)
			found = strcmp(ext[i].extensionName, name) == 0;
	free(ext);
	return found;
}

/* VK_EXT_external_memory_host's minImportedHostPointerAlignment, rounded
 * up to the page size; 0 when the device cannot import host memory. */
static uint64_t host_import_alignment(struct gpu_device *g)
{
	VkPhysicalDeviceExternalMemoryHostPropertiesEXT hp = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT,
	};
	VkPhysicalDeviceProperties2 p2 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
		.pNext = &hp,
	};
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), a;

	if (getenv("TENSORD_NO_HOST_IMPORT") ||
	    !has_extension(g->phys, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME))
		return 0;
	vkGetPhysicalDeviceProperties2(g->phys, &p2);
	a = hp.minImportedHostPointerAlignment;
	if (a == 0 || (a & (a - 1)))
		return 0;
	return a < page ? page : a;
}

/* How many workgroups the device runs at once, roughly: its SMs where the
 * driver says (VK_NV_shader_sm_builtins), the host's CPUs for a CPU device
 * (lavapipe runs a workgroup per thread), else a middle-sized GPU's 64.
 * Only sizes heuristics (matmul's split-K); never a result. */
static uint32_t count_compute_units(struct gpu_device *g)
{
	VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV,
	};
	VkPhysicalDeviceProperties2 p2 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
		.pNext = &sm,
	};
	long cpus;

	if (has_extension(g->phys, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) {
		vkGetPhysicalDeviceProperties2(g->phys, &p2);
		if (sm.shaderSMCount > 0)
			return sm.shaderSMCount;
	}
	if (g->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) {
		cpus = sysconf(_SC_NPROCESSORS_ONLN);
		return cpus > 0 && cpus < 4096 ? (uint32_t)cpus : 1;
	}
	return 64;
}

/* With VK_EXT_external_memory_host enabled: its entry point, or no import
 * at all (host_import_align 0). */
static void host_import_setup(struct gpu_device *g)
{
	const char *ro = getenv("TENSORD_HOST_IMPORT_READ_ONLY");

	if (!g->host_import_align)
		return;
	g->host_pointer_props = (PFN_vkGetMemoryHostPointerPropertiesEXT)
		vkGetDeviceProcAddr(g->dev, "vkGetMemoryHostPointerPropertiesEXT");
	if (!g->host_pointer_props) {
		g->host_import_align = 0;
		return;
	}
	/* Read-only pages only where the driver is known to take them: a
	 * refused import is not harmless everywhere (device.h). The variable
	 * (tests) overrides: "0" never, "1" always. */
	g->host_import_read_only = g->desc.driver_id == VK_DRIVER_ID_MESA_LLVMPIPE;
	if (ro && *ro)
		g->host_import_read_only = strcmp(ro, "0") != 0;
	log_info("host memory import: memfd gets%s and the data-parallel exchange "
		 "(VK_EXT_external_memory_host, alignment %llu)",
		 g->host_import_read_only ? ", memfd puts" : "",
		 (unsigned long long)g->host_import_align);
}

static int create_logical(struct gpu_device *g)
{
	float prio = 1.0f;
	VkDeviceQueueCreateInfo qci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
		.queueFamilyIndex = g->queue_family,
		.queueCount = 1,
		.pQueuePriorities = &prio,
	};
	/* 8- and 16-bit storage let shaders read and write f16, bf16 and u8
	 * tensors element by element; push descriptors bind buffers without a
	 * descriptor pool. */
	const char *extensions[6] = { VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME };
	struct gpu_coopmat_features want_cm;
	VkPhysicalDeviceVulkan12Features f12 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
	};
	VkPhysicalDeviceVulkan11Features f11 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
		.pNext = &f12,
	};
	VkPhysicalDeviceFeatures2 f2 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
		.pNext = &f11,
	};
	VkPhysicalDeviceVulkan12Features want12 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
	};
	VkPhysicalDeviceVulkan11Features want11 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
		.pNext = &want12,
	};
	VkPhysicalDeviceFeatures2 want = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
		.pNext = &want11,
	};
	VkDeviceCreateInfo dci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
		.pNext = &want,
		.queueCreateInfoCount = 1,
		.pQueueCreateInfos = &qci,
		.enabledExtensionCount = 1,
		.ppEnabledExtensionNames = extensions,
	};
	VkCommandPoolCreateInfo pci = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
		.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
		.queueFamilyIndex = g->queue_family,
	};
	VkCommandBuffer cbs[GPU_CMD_SLOTS];
	VkCommandBufferAllocateInfo cai = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
		.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
		.commandBufferCount = GPU_CMD_SLOTS,
	};
	VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };

	vkGetPhysicalDeviceFeatures2(g->phys, &f2);
	if (!f11.storageBuffer16BitAccess || !f12.storageBuffer8BitAccess || !f2.features.shaderInt16 ||
	    !f12.shaderInt8 || !f12.shaderFloat16) {
		log_error("%s lacks 8/16-bit storage or arithmetic, which tensord needs", g->desc.name);
		return -ENODEV;
	}
	want.features.shaderInt16 = VK_TRUE;
	/* Clients' kernels (kernel.run) must not reach past their buffers. */
	want.features.robustBufferAccess = f2.features.robustBufferAccess;
	want.features.shaderInt64 = f2.features.shaderInt64;
	g->shader_int64 = f2.features.shaderInt64; /* clients' kernels may use Int64 */
	want11.storageBuffer16BitAccess = VK_TRUE;
	want12.storageBuffer8BitAccess = VK_TRUE;
	want12.shaderInt8 = VK_TRUE;
	want12.shaderFloat16 = VK_TRUE;
	/* Optional: timestamp queries reset from the host (gpu/timing.c). */
	want12.hostQueryReset = f12.hostQueryReset;
	g->host_query_reset = f12.hostQueryReset;
	gpu_coopmat_choose(g, f12.vulkanMemoryModel);
	if (g->coopmat_f16) {
		want12.vulkanMemoryModel = VK_TRUE; /* the subgroup-scope loads use it */
		dci.enabledExtensionCount += gpu_coopmat_enable(g, &want_cm, &want12.pNext,
								 extensions + dci.enabledExtensionCount);
	}
	/* Optional: tells pipeline-cache hits apart from compiles (metrics). */
	g->creation_feedback = has_extension(g->phys, VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME);
	if (g->creation_feedback)
		extensions[dci.enabledExtensionCount++] = VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME;
	/* Optional: memfd puts and gets copied by the device straight from and
	 * into the client's pages (gpu/host_import.h). */
	g->host_import_align = host_import_alignment(g);
	if (g->host_import_align)
		extensions[dci.enabledExtensionCount++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
	if (vkCreateDevice(g->phys, &dci, NULL, &g->dev) != VK_SUCCESS)
		return -EIO;
	sanitize_device_created(g->dev);
	host_import_setup(g);
	g->push_descriptor = (PFN_vkCmdPushDescriptorSetKHR)
		vkGetDeviceProcAddr(g->dev, "vkCmdPushDescriptorSetKHR");
	if (!g->push_descriptor)
		return -EIO;
	vkGetDeviceQueue(g->dev, g->queue_family, 0, &g->queue);
	if (vkCreateCommandPool(g->dev, &pci, NULL, &g->pool) != VK_SUCCESS)
		return -EIO;
	cai.commandPool = g->pool;
	if (vkAllocateCommandBuffers(g->dev, &cai, cbs) != VK_SUCCESS)
		return -EIO;
	for (unsigned i = 0; i < GPU_CMD_SLOTS; i++) {
		g->cmd[i].cb = cbs[i];
		if (vkCreateFence(g->dev, &fci, NULL, &g->cmd[i].fence) != VK_SUCCESS)
			return -EIO;
	}
	gpu_timing_init(g);
	return 0;
}

/* TENSORD_FAULT_DEVICE_LOST=N, a test switch: N >= 1 makes the Nth
 * submission fail as a lost device would. Unset, empty or 0: off. */
static uint64_t fault_lost_at(void)
{
	const char *v = getenv("TENSORD_FAULT_DEVICE_LOST");
	unsigned long long n;
	char *end;

	if (!v || !*v)
		return 0;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || *end || v[0] == '-') {
		log_warning("TENSORD_FAULT_DEVICE_LOST=%s is not a submission count; ignored", v);
		return 0;
	}
	if (n)
		log_warning("fault injection: submission %llu on this device will report a lost device", n);
	return n;
}

int gpu_device_open(const struct gpu_open_options *opts, struct gpu_device **ret)
{
	VkPhysicalDevice *phys = NULL;
	struct gpu_device *g;
	uint32_t n, index;
	int r;

	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	if (create_instance(&g->instance) != VK_SUCCESS) {
		log_error("cannot create a Vulkan 1.2 instance (is a Vulkan driver installed?)");
		r = -ENODEV;
		goto fail;
	}
	r = list_physical(g->instance, &phys, &n);
	if (r < 0) {
		log_error("Vulkan reports no physical device");
		goto fail;
	}
	index = opts->index;
	if (index >= n) {
		log_error("no device with index %u (found %u)", index, n);
		r = -ENODEV;
		goto fail;
	}
	g->id = opts->id;
	g->phys = phys[index];
	describe(g->phys, index, &g->desc);
	if (!g->desc.usable) {
		log_error("device %u (%s) lacks Vulkan 1.2 or a compute queue", index, g->desc.name);
		r = -ENODEV;
		goto fail;
	}
	vkGetPhysicalDeviceProperties(g->phys, &g->props);
	vkGetPhysicalDeviceMemoryProperties(g->phys, &g->mem_props);
	g->compute_units = count_compute_units(g);
	r = find_compute_queue(g->phys, &g->queue_family);
	if (r < 0)
		goto fail;
	r = create_logical(g);
	if (r < 0) {
		log_error("cannot create the Vulkan device on %s", g->desc.name);
		goto fail;
	}
	r = gpu_memory_init(g, opts->host_mapped, opts->block_size, opts->max_bytes);
	if (r < 0) {
		log_error("device %s has no device-local memory type usable for storage buffers",
			  g->desc.name);
		goto fail;
	}
	r = gpu_memory_alloc(g, 256, &g->dummy);
	if (r < 0)
		goto fail;
	g->mem.used -= g->dummy.size; /* not tensor data; freed with the blocks */
	g->fault_lost_at = fault_lost_at();
	r = gpu_pipelines_init(g, opts->pipeline_cache);
	if (r < 0) {
		log_error("cannot set up compute pipelines on %s", g->desc.name);
		goto fail;
	}
	if (opts->loop && (r = gpu_completion_start(g, opts->loop)) < 0) {
		log_error("cannot start the completion thread of %s: %s", g->desc.name, strerror(-r));
		goto fail;
	}
	free(phys);
	*ret = g;
	return 0;
fail:
	free(phys);
	gpu_device_free(g);
	return r;
}

void gpu_device_free(struct gpu_device *g)
{
	if (!g)
		return;
	/* Pending asynchronous work finishes (and is answered) first, and
	 * pipeline builds on other threads end (kernel.create). */
	gpu_completion_stop(g);
	gpu_builds_wait(g);
	if (g->dev && g->runaway && !gpu_device_runaway_ended(g)) {
		/* Waiting for the device to go idle would wait for the runaway
		 * work, perhaps for ever, and freeing what it uses under it is
		 * not safe: leave it all to the process's exit. */
		log_error("%s still runs a submission that outran its time limit: its "
			  "teardown is skipped", g->desc.name);
		return;
	}
	if (g->dev) {
		vkDeviceWaitIdle(g->dev);
		gpu_pipelines_fini(g);
		gpu_memory_fini(g);
		gpu_timing_fini(g);
		for (unsigned i = 0; i < GPU_CMD_SLOTS; i++)
			if (g->cmd[i].fence)
				vkDestroyFence(g->dev, g->cmd[i].fence, NULL);
		if (g->pool)
			vkDestroyCommandPool(g->dev, g->pool, NULL);
		vkDestroyDevice(g->dev, NULL);
	}
	if (g->instance)
		vkDestroyInstance(g->instance, NULL);
	free(g);
}

int gpu_result_errno(struct gpu_device *g, VkResult r)
{
	switch (r) {
	case VK_SUCCESS:
		return 0;
	case VK_ERROR_DEVICE_LOST:
		if (!g->lost)
			log_error("the Vulkan device was lost");
		g->lost = true;
		return -ENODEV;
	case VK_ERROR_OUT_OF_HOST_MEMORY:
	case VK_ERROR_OUT_OF_DEVICE_MEMORY:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

/* How long gpu_cmd_wait polls a fence before it sleeps on it. */
#define GPU_FENCE_SPIN_NS 200000
/* A fence wait sleeps at most this long at a time, then calls the wait hook
 * (the systemd watchdog keeps being fed while a submission runs). */
#define GPU_WAIT_SLICE_NS ((uint64_t)250000000)

static struct {
	uint64_t limit_ns;      /* every submission's time limit; 0: none */
	void (*hook)(void *data);
	void *data;
} wait_policy;

void gpu_set_wait_policy(uint64_t limit_ns, void (*hook)(void *data), void *data)
{
	wait_policy.limit_ns = limit_ns;
	wait_policy.hook = hook;
	wait_policy.data = data;
}

int gpu_cmd_wait(struct gpu_device *g, unsigned i)
{
	return gpu_cmd_wait_for(g, i, UINT64_MAX);
}

/* Wait for `fence` at most `limit_ns` (UINT64_MAX: never give up), in
 * slices, calling the wait hook after each one. */
static VkResult wait_sliced(struct gpu_device *g, VkFence fence, uint64_t limit_ns)
{
	int64_t t0 = gpu_timing_now_ns();

	for (;;) {
		uint64_t spent = (uint64_t)(gpu_timing_now_ns() - t0), slice = GPU_WAIT_SLICE_NS;
		VkResult r;

		if (limit_ns != UINT64_MAX) {
			if (spent >= limit_ns)
				return vkGetFenceStatus(g->dev, fence) == VK_SUCCESS ? VK_SUCCESS : VK_TIMEOUT;
			if (limit_ns - spent < slice)
				slice = limit_ns - spent;
		}
		r = vkWaitForFences(g->dev, 1, &fence, VK_TRUE, slice);
		if (r != VK_TIMEOUT)
			return r;
		if (wait_policy.hook)
			wait_policy.hook(wait_policy.data);
	}
}

int gpu_cmd_expired(struct gpu_device *g, unsigned i, uint64_t limit_ns)
{
	(void)i;
	/* The work cannot be cancelled and still uses the command buffer:
	 * nothing may be submitted again (docs/kernels.md). */
	log_error("a submission ran past its %.1f s limit: the device is marked lost", (double)limit_ns / 1e9);
	g->lost = true;
	g->runaway = true;
	return -ETIMEDOUT;
}

uint64_t gpu_wait_limit(uint64_t timeout_ns)
{
	if (wait_policy.limit_ns && wait_policy.limit_ns < timeout_ns)
		return wait_policy.limit_ns;
	return timeout_ns;
}

void gpu_wait_tick(void)
{
	if (wait_policy.hook)
		wait_policy.hook(wait_policy.data);
}

static int cmd_wait(struct gpu_device *g, unsigned i, uint64_t timeout_ns)
{
	struct gpu_cmd *c = &g->cmd[i];
	int64_t t0;
	VkResult r;

	if (!c->pending)
		return 0;
	if (g->lost)
		return -ENODEV; /* a runaway's: it would only time out again */
	timeout_ns = gpu_wait_limit(timeout_ns);
	t0 = gpu_timing_now_ns();
	r = VK_NOT_READY;
	/* Small requests finish within microseconds on a GPU, sooner than a
	 * sleeping wait wakes up: poll briefly first (not on a CPU device, whose
	 * worker threads need the cores this would take). */
	if (g->props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU)
		while ((r = vkGetFenceStatus(g->dev, c->fence)) == VK_NOT_READY &&
		       gpu_timing_now_ns() - t0 < GPU_FENCE_SPIN_NS)
			;
	if (r == VK_NOT_READY)
		r = wait_sliced(g, c->fence, timeout_ns);
	if (r == VK_TIMEOUT)
		return gpu_cmd_expired(g, i, timeout_ns);
	c->pending = false;
	if (r != VK_SUCCESS)
		return gpu_result_errno(g, r);
	gpu_timing_completed(g, i, (uint64_t)(gpu_timing_now_ns() - t0));
	return gpu_result_errno(g, vkResetFences(g->dev, 1, &c->fence));
}

int gpu_cmd_wait_for(struct gpu_device *g, unsigned i, uint64_t timeout_ns)
{
	/* An asynchronous submission's fence belongs to the completion thread
	 * until it reported it: wait for that report instead. Synchronous work
	 * queued behind watched work waits for that first too, so its own time
	 * limit counts from when the queue ahead of it ended. */
	if (g->completion && g->cmd[i].pending && (i >= GPU_CMD_SYNC || gpu_completion_busy(g)))
		gpu_completion_drain(g);
	return cmd_wait(g, i, timeout_ns);
}

bool gpu_cmd_finished(struct gpu_device *g, unsigned i)
{
	return !g->cmd[i].pending || vkGetFenceStatus(g->dev, g->cmd[i].fence) != VK_NOT_READY;
}

int gpu_cmd_reap(struct gpu_device *g, unsigned i)
{
	return cmd_wait(g, i, UINT64_MAX);
}

bool gpu_device_runaway_ended(struct gpu_device *g)
{
	for (unsigned i = 0; i < GPU_CMD_SLOTS; i++) {
		struct gpu_cmd *c = &g->cmd[i];
		VkResult r;

		if (!c->pending)
			continue;
		r = vkGetFenceStatus(g->dev, c->fence);
		if (r == VK_NOT_READY)
			return false;
		c->pending = false;
		if (r != VK_SUCCESS)
			gpu_result_errno(g, r);
	}
	g->runaway = false;
	return true;
}

int gpu_cmd_begin(struct gpu_device *g, unsigned i)
{
	VkCommandBufferBeginInfo bi = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
		.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
	};
	int r;

	if (g->lost)
		return -ENODEV;
	r = gpu_cmd_wait(g, i);
	if (r < 0)
		return r;
	r = gpu_result_errno(g, vkResetCommandBuffer(g->cmd[i].cb, 0));
	if (r < 0)
		return r;
	r = gpu_result_errno(g, vkBeginCommandBuffer(g->cmd[i].cb, &bi));
	if (r < 0)
		return r;
	gpu_timing_begin(g, i);
	return 0;
}

int gpu_cmd_submit(struct gpu_device *g, unsigned i)
{
	struct gpu_cmd *c = &g->cmd[i];
	VkSubmitInfo si = {
		.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
		.commandBufferCount = 1,
		.pCommandBuffers = &c->cb,
	};
	int r;

	gpu_timing_end(g, i);
	r = gpu_result_errno(g, vkEndCommandBuffer(c->cb));
	if (r < 0)
		return r;
	/* An injected loss takes the path a real one takes (docs/durability.md). */
	g->submits++;
	r = gpu_result_errno(g, g->fault_lost_at && g->submits == g->fault_lost_at ?
				VK_ERROR_DEVICE_LOST : vkQueueSubmit(g->queue, 1, &si, c->fence));
	if (r < 0)
		return r;
	c->pending = true;
	gpu_timing_submitted(g, i);
	return 0;
}
