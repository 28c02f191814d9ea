/* A stand-in for the daemon's device layer (daemon/gpu/memory.c, transfer.c,
 * pipeline.c, recorder.c) so the request handlers can be fuzzed without a GPU.
 *
 * Device memory is host memory (calloc), uploads and downloads are memcpy,
 * pipelines are looked up in the embedded shader table (an op asking for a
 * kernel variant that does not exist gets -ENOENT, as from the real layer),
 * and dispatches compute nothing. What the stub adds is checking: every
 * binding must lie inside a live allocation, be aligned like a real device
 * demands and fit the binding range; every dispatch must respect the grid and
 * push-constant limits. A violation would be an out-of-bounds access on a real
 * GPU, so it aborts (the fuzzer reports it as a crash). Freed blocks are freed
 * for real, so ASan reports a dispatch that binds a tensor already released. */
#include "fuzz_gpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/completion.h"
#include "gpu/device.h"
#include "gpu/host_import.h"
#include "gpu/memory.h"
#include "gpu/pipeline.h"
#include "gpu/recorder.h"
#include "gpu/trace.h"
#include "gpu/transfer.h"
#include "shaders.h"

#define STUB_ALIGN 64

static struct gpu_block dummy_block = { .size = 16 };
static struct gpu_pipeline *pipelines;
static uint64_t live_blocks;
static uint64_t live_pipelines;   /* gpu_pipeline_build's, not yet destroyed */

static void stub_bug(const char *what)
{
	fprintf(stderr, "fuzz gpu stub: %s\n", what);
	abort();
}

void fuzz_gpu_init(struct gpu_device *g, uint64_t heap_bytes)
{
	memset(g, 0, sizeof(*g));
	g->desc.index = 0;
	snprintf(g->desc.name, sizeof(g->desc.name), "fuzz stub device");
	g->desc.type = "cpu";
	snprintf(g->desc.driver, sizeof(g->desc.driver), "stub");
	snprintf(g->desc.api_version, sizeof(g->desc.api_version), "1.2.0");
	g->desc.heap_size = heap_bytes;
	g->desc.usable = true;
	/* Small on purpose: tensors of a few KiB already need windowed binding. */
	g->props.limits.maxStorageBufferRange = 1u << 16;
	g->props.limits.minStorageBufferOffsetAlignment = 16;
	g->props.limits.maxComputeWorkGroupCount[0] = 65535;
	g->props.limits.maxComputeWorkGroupCount[1] = 65535;
	g->props.limits.maxComputeWorkGroupCount[2] = 65535;
	g->desc.max_storage_buffer_range = g->props.limits.maxStorageBufferRange;
	g->mem.align = STUB_ALIGN;
	g->mem.heap_size = heap_bytes;
	g->mem.max_allocation = heap_bytes;
	g->mem.limit = heap_bytes;
	g->desc.max_allocation_size = heap_bytes;
	g->mem.host_mapped = true;
	dummy_block.buffer = (VkBuffer)(uintptr_t)&dummy_block;
	g->dummy.block = &dummy_block;
	g->dummy.size = 16;
	g->dummy.reserved = 16;
}

uint64_t fuzz_gpu_live_blocks(void)
{
	return live_blocks;
}

uint64_t fuzz_gpu_live_pipelines(void)
{
	return live_pipelines;
}

int gpu_memory_alloc(struct gpu_device *g, uint64_t size, struct gpu_alloc *ret)
{
	uint64_t reserved = (size + STUB_ALIGN - 1) / STUB_ALIGN * STUB_ALIGN;
	struct gpu_block *b;

	if (size == 0) {
		*ret = (struct gpu_alloc){ 0 };
		return 0;
	}
	if (size > g->mem.max_allocation)
		return -EFBIG;
	if (g->mem.reserved + reserved > g->mem.heap_size)
		return -ENOMEM;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->map = calloc(1, reserved);
	if (!b->map) {
		free(b);
		return -ENOMEM;
	}
	b->size = reserved;
	b->dedicated = true;
	b->buffer = (VkBuffer)(uintptr_t)b;
	g->mem.used += size;
	g->mem.reserved += reserved;
	live_blocks++;
	*ret = (struct gpu_alloc){ .block = b, .offset = 0, .size = size, .reserved = reserved };
	return 0;
}

void gpu_memory_free(struct gpu_device *g, struct gpu_alloc *a)
{
	if (!a->block)
		return;
	if (a->block == &dummy_block)
		stub_bug("freeing the dummy binding");
	g->mem.used -= a->size;
	g->mem.reserved -= a->reserved;
	free(a->block->map);
	free(a->block);
	live_blocks--;
	*a = (struct gpu_alloc){ 0 };
}

void gpu_memory_free_unused(struct gpu_device *g, struct gpu_alloc *a)
{
	gpu_memory_free(g, a);
}

int gpu_upload(struct gpu_device *g, const struct gpu_alloc *a, const void *src)
{
	(void)g;
	if (a->size)
		memcpy((uint8_t *)a->block->map + a->offset, src, a->size);
	return 0;
}

int gpu_download(struct gpu_device *g, const struct gpu_alloc *a, void *dst)
{
	(void)g;
	if (a->size)
		memcpy(dst, (const uint8_t *)a->block->map + a->offset, a->size);
	return 0;
}

int gpu_pipeline_get(struct gpu_device *g, const char *name, const struct gpu_pipeline **ret)
{
	int idx = shader_index(name);

	(void)g;
	if (idx < 0)
		return -ENOENT;
	if (!pipelines) {
		pipelines = calloc(shader_count, sizeof(*pipelines));
		if (!pipelines)
			return -ENOMEM;
	}
	pipelines[idx].shader = shader_table[idx].name;
	*ret = &pipelines[idx];
	return 0;
}

uint32_t gpu_pipeline_count(const struct gpu_device *g)
{
	(void)g;
	return 0;
}

void gpu_pipeline_stats(const struct gpu_device *g, struct gpu_pipeline_stats *ret)
{
	(void)g;
	memset(ret, 0, sizeof(*ret));
}

int gpu_rec_begin(struct gpu_recorder *rec, struct gpu_device *g)
{
	memset(rec, 0, sizeof(*rec));
	rec->g = g;
	return 0;
}

struct gpu_binding gpu_rec_bind(struct gpu_device *g, const struct gpu_alloc *a, uint64_t offset,
				uint64_t size, bool write)
{
	if (!a->block || size == 0)
		return (struct gpu_binding){ g->dummy.block->buffer, g->dummy.offset, 16, false };
	if (offset > a->reserved || size > a->reserved - offset)
		stub_bug("a binding reaches past its allocation");
	return (struct gpu_binding){ a->block->buffer, a->offset + offset, size, write };
}

void gpu_rec_barrier(struct gpu_recorder *rec)
{
	rec->nwritten = 0;
	rec->barriers++;
}

/* Every binding inside its (live) buffer, aligned, bindable at once. */
static void check_bindings(const struct gpu_recorder *rec, const struct gpu_binding *bindings,
			   unsigned nbindings)
{
	const VkPhysicalDeviceLimits *lim = &rec->g->props.limits;

	for (unsigned i = 0; i < nbindings; i++) {
		const struct gpu_binding *b = &bindings[i];
		/* The handle is the block itself: reading it finds freed blocks. */
		const struct gpu_block *blk = (const struct gpu_block *)(uintptr_t)b->buffer;

		if (!blk)
			stub_bug("a binding without a buffer");
		if (b->range == 0 || b->offset > blk->size || b->range > blk->size - b->offset)
			stub_bug("a binding outside its buffer");
		if (b->offset % lim->minStorageBufferOffsetAlignment)
			stub_bug("a binding offset the device cannot bind (alignment)");
		if (b->range > lim->maxStorageBufferRange)
			stub_bug("a binding larger than maxStorageBufferRange");
	}
}

/* No dispatch trace on the stand-in. */
bool gpu_trace_on(const struct gpu_device *g)
{
	(void)g;
	return false;
}

void gpu_trace_label(struct gpu_recorder *rec, const char *label)
{
	(void)rec;
	(void)label;
}

int gpu_rec_dispatch(struct gpu_recorder *rec, const struct gpu_pipeline *p,
		     const struct gpu_binding *bindings, unsigned nbindings,
		     const void *push, uint32_t push_size, uint64_t invocations,
		     uint32_t local_size)
{
	const VkPhysicalDeviceLimits *lim = &rec->g->props.limits;
	uint64_t groups, gx, gy;

	if (!p || !p->shader)
		stub_bug("a dispatch without a pipeline");
	if (local_size == 0)
		stub_bug("a dispatch with local size 0");
	if (nbindings > GPU_MAX_BINDINGS || push_size > GPU_PUSH_BYTES)
		return -EINVAL;
	if (push_size && !push)
		stub_bug("push constants without data");
	check_bindings(rec, bindings, nbindings);
	groups = (invocations + local_size - 1) / local_size;
	if (groups == 0)
		return 0;
	gx = groups < lim->maxComputeWorkGroupCount[0] ? groups : lim->maxComputeWorkGroupCount[0];
	gy = (groups + gx - 1) / gx;
	if (gy > lim->maxComputeWorkGroupCount[1])
		return -E2BIG;
	rec->dispatches++;
	return 0;
}

int gpu_rec_submit_wait(struct gpu_recorder *rec)
{
	(void)rec;
	return 0;
}

void gpu_rec_abort(struct gpu_recorder *rec)
{
	(void)rec;
}

void gpu_memory_trim(struct gpu_device *g, int64_t older_than_ns)
{
	(void)g;
	(void)older_than_ns;
}

/* kernel.create: any module that got past validation and reflection "builds". */
int gpu_pipeline_build(struct gpu_device *g, const uint32_t *code, size_t size, const char *entry,
		       VkPipeline *ret)
{
	(void)g;
	(void)entry;
	if (!code || size < 20)
		return -EINVAL;
	*ret = (VkPipeline)(uintptr_t)0x1000;
	live_pipelines++;
	return 0;
}

void gpu_pipeline_destroy(struct gpu_device *g, VkPipeline p)
{
	(void)g;
	if (p != VK_NULL_HANDLE) {
		if (!live_pipelines)
			stub_bug("a pipeline destroyed twice");
		live_pipelines--;
	}
}

/* The stub device's builds run where they are called (kernel_build_job.c
 * builds on the loop when loop_add fails, as here). */
void gpu_build_begin(struct gpu_device *g)
{
	(void)g;
}

void gpu_build_end(struct gpu_device *g)
{
	(void)g;
}

int gpu_rec_dispatch_groups(struct gpu_recorder *rec, const struct gpu_pipeline *p,
			    const struct gpu_binding *bindings, unsigned nbindings,
			    const void *push, uint32_t push_size, const uint32_t groups[3])
{
	(void)push;
	if (!p || nbindings > GPU_MAX_BINDINGS || push_size > GPU_PUSH_BYTES)
		return -EINVAL;
	check_bindings(rec, bindings, nbindings);
	for (unsigned k = 0; k < 3; k++)
		if (groups[k] > rec->g->props.limits.maxComputeWorkGroupCount[k])
			return -E2BIG;
	rec->dispatches++;
	return 0;
}

/* Opening devices is main.c's business, never reached from a handler; these
 * satisfy devices.c's references. */
int gpu_enumerate(struct gpu_device_desc **ret_list, uint32_t *ret_count)
{
	(void)ret_list;
	(void)ret_count;
	return -ENODEV;
}

int gpu_choose(const struct gpu_device_desc *found, uint32_t nfound, const struct gpu_choice *c,
	       uint32_t *ret_index, uint32_t *ret_n)
{
	(void)found;
	(void)nfound;
	(void)c;
	(void)ret_index;
	(void)ret_n;
	return -ENODEV;
}

int gpu_device_open(const struct gpu_open_options *opts, struct gpu_device **ret)
{
	(void)opts;
	(void)ret;
	return -ENODEV;
}

void gpu_device_free(struct gpu_device *g)
{
	(void)g;
}

int gpu_rec_submit(struct gpu_recorder *rec)
{
	(void)rec;
	return 0;
}

int gpu_rec_wait(struct gpu_recorder *rec)
{
	(void)rec;
	return 0;
}

int gpu_copy(struct gpu_device *sg, const struct gpu_alloc *src, struct gpu_device *dg,
	     const struct gpu_alloc *dst)
{
	if (src->size != dst->size)
		return -EINVAL;
	if (sg->lost || dg->lost)
		return -ENODEV;
	if (src->size)
		memcpy((uint8_t *)dst->block->map + dst->offset, (uint8_t *)src->block->map + src->offset,
		       src->size);
	return 0;
}

/* A host buffer is host memory behind a small header; its VkBuffer handle
 * points at the header, so a recorded copy can check its range. */
struct stub_host {
	uint64_t size;
	uint8_t data[];
};

int gpu_host_buffer_create(struct gpu_device *g, uint64_t size, struct gpu_host_buffer *ret)
{
	struct stub_host *h = calloc(1, sizeof(*h) + size);

	(void)g;
	if (!h)
		return -ENOMEM;
	h->size = size;
	*ret = (struct gpu_host_buffer){ .buffer = (VkBuffer)(uintptr_t)h, .map = h->data, .size = size };
	return 0;
}

void gpu_host_buffer_free(struct gpu_device *g, struct gpu_host_buffer *b)
{
	(void)g;
	free((void *)(uintptr_t)b->buffer);
	*b = (struct gpu_host_buffer){ 0 };
}

int gpu_host_buffer_get(struct gpu_device *g, uint64_t size, struct gpu_host_buffer *ret)
{
	return gpu_host_buffer_create(g, size, ret);
}

void gpu_host_buffer_put(struct gpu_device *g, struct gpu_host_buffer *b)
{
	gpu_host_buffer_free(g, b);
}

int gpu_host_lease_new(struct gpu_device *g, uint64_t size, struct gpu_host_lease **ret)
{
	struct gpu_host_lease *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	if (gpu_host_buffer_create(g, size, &l->b) < 0) {
		free(l);
		return -ENOMEM;
	}
	*ret = l;
	return 0;
}

void gpu_host_lease_free(struct gpu_device *g, struct gpu_host_lease *l)
{
	if (!l)
		return;
	gpu_host_buffer_free(g, &l->b);
	free(l);
}

/* Copied at once: the stub's dispatches compute nothing anyway. */
void gpu_rec_host_copy(struct gpu_recorder *rec, const struct gpu_alloc *a, VkBuffer host, uint64_t offset,
		       bool to_device)
{
	struct stub_host *h = (struct stub_host *)(uintptr_t)host;

	(void)rec;
	if (!a->size)
		return;
	if (!a->block || a->offset + a->size > a->block->size || offset > h->size || a->size > h->size - offset)
		stub_bug("a host copy outside its buffers");
	if (to_device)
		memcpy((uint8_t *)a->block->map + a->offset, h->data + offset, a->size);
	else
		memcpy(h->data + offset, (uint8_t *)a->block->map + a->offset, a->size);
}

/* The stub imports no host memory: data parallel averages on the host. */
int gpu_rec_host_mean(struct gpu_recorder *rec, VkBuffer host, uint64_t base, uint64_t stride, unsigned n,
		      unsigned self, const struct gpu_alloc *out)
{
	(void)base;
	(void)self;
	(void)rec;
	(void)host;
	(void)stride;
	(void)n;
	(void)out;
	return -EOPNOTSUPP;
}

/* Data parallel's signal and wait (dp_sync.h): written at once; the stub
 * has one device, so no step waits for another's. */
void gpu_rec_host_signal(struct gpu_recorder *rec, VkBuffer host, uint64_t offset, uint32_t value)
{
	struct stub_host *h = (struct stub_host *)(uintptr_t)host;

	(void)rec;
	if (offset > h->size || h->size - offset < 4)
		stub_bug("a host signal outside its buffer");
	memcpy(h->data + offset, &value, 4);
}

void gpu_rec_wait_host_event(struct gpu_recorder *rec, VkEvent event)
{
	(void)rec;
	(void)event;
}

int gpu_event_create(struct gpu_device *g, VkEvent *ret)
{
	static int token;

	(void)g;
	*ret = (VkEvent)(uintptr_t)&token;
	return 0;
}

void gpu_event_destroy(struct gpu_device *g, VkEvent event)
{
	(void)g;
	(void)event;
}

int gpu_event_set(struct gpu_device *g, VkEvent event, bool set)
{
	(void)g;
	(void)event;
	(void)set;
	return 0;
}

/* A kernel node's copy of a writable binding: checked like a dispatch's. */
void gpu_rec_copy(struct gpu_recorder *rec, const struct gpu_binding *src,
		  const struct gpu_binding *dst)
{
	check_bindings(rec, src, 1);
	check_bindings(rec, dst, 1);
	if (src->range != dst->range)
		stub_bug("a copy between ranges of different sizes");
	if (!dst->write)
		stub_bug("a copy into a range not marked written");
}

/* The multi-tensor optimizer's table: checked like a dispatch's binding. */
void gpu_rec_update(struct gpu_recorder *rec, const struct gpu_binding *dst, const void *data)
{
	(void)data;
	check_bindings(rec, dst, 1);
	if (!dst->write || dst->range % 4 || dst->range > 65536)
		stub_bug("an update of a range not written, not of whole words or past 64 KiB");
}

/* No completion thread on the stub: the engine waits synchronously. */
int gpu_rec_watch(struct gpu_recorder *rec, void (*done)(void *data), void *data)
{
	(void)rec;
	(void)done;
	(void)data;
	return -EOPNOTSUPP;
}

bool gpu_completion_on(const struct gpu_device *g)
{
	(void)g;
	return false;
}

bool gpu_completion_busy(const struct gpu_device *g)
{
	(void)g;
	return false;
}

/* Dispatches compute nothing: every submission has finished. */
bool gpu_cmd_finished(struct gpu_device *g, unsigned i)
{
	(void)g;
	(void)i;
	return true;
}

bool gpu_recs_finished_within(struct gpu_recorder *recs, uint32_t n, uint64_t spin_ns)
{
	(void)recs;
	(void)n;
	(void)spin_ns;
	return true;
}

int gpu_rec_begin_async(struct gpu_recorder *rec, struct gpu_device *g)
{
	return gpu_rec_begin(rec, g);
}

/* No host memory import on the stub: memfd transfers copy, data parallel
 * averages on the host. */
uint64_t gpu_host_import_align(const struct gpu_device *g)
{
	(void)g;
	return 0;
}

bool gpu_host_import_read_only(const struct gpu_device *g)
{
	(void)g;
	return false;
}

int gpu_host_import(struct gpu_device *g, void *ptr, uint64_t size, bool read_only,
		    struct gpu_host_import *ret)
{
	(void)g;
	(void)ptr;
	(void)size;
	(void)read_only;
	(void)ret;
	return -EOPNOTSUPP;
}

int gpu_host_import_free(struct gpu_device *g, struct gpu_host_import *h)
{
	(void)g;
	*h = (struct gpu_host_import){ 0 };
	return 0;
}
