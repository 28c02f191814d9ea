/* Clients' compute kernels (docs/kernels.md): each daemon's registry
 * (d->kernel_table), kept per owner uid,
 * and the checks and recording that kernel.run (methods_kernel.c) and a
 * kernel node of graph.run (kernel_node.c) share, so both refuse exactly the
 * same things with the same messages. The checks write a reason into `why`
 * and return a tdp_status (0 when fine); callers report it their own way. */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/device.h"
#include "gpu/pipeline.h"
#include "gpu/recorder.h"
#include "kernels/spirv_reflect.h"
#include "wire_limits.h"

#define KERNEL_MAX 256          /* kernels in the daemon, all owners together */
#define KERNEL_MAX_PER_USER 64

struct daemon;
struct gpu_device;

struct kernel {
	char name[TDP_MAX_NAME_LEN + 1];
	uint32_t owner;
	struct gpu_pipeline pipe[GPU_MAX_DEVICES]; /* one per device; .shader points at name */
	struct spv_info info;
	uint64_t spirv_bytes;
	int64_t created_ns;
	uint64_t runs;                  /* dispatches recorded */
};

/* Give `d` its empty kernel table (start-up; d->kernel_table). Returns 0 or
 * -ENOMEM. */
int kernels_init(struct daemon *d);

/* Owner's kernel `name` in d's table, or NULL. The pointer stays valid until
 * a kernel of that name is created again or deleted, or the device is lost:
 * within one request. */
struct kernel *kernel_find(const struct daemon *d, uint32_t owner, const char *name);

/* Kernels in the daemon; kernel_at(d, i) for i < kernel_count(d) (listing). */
unsigned kernel_count(const struct daemon *d);
const struct kernel *kernel_at(const struct daemon *d, unsigned i);

/* Kernels `owner` holds other than one named `name`. */
unsigned kernel_count_owner(const struct daemon *d, uint32_t owner, const char *name);

/* Store `k` (calloc'd; ownership passes), replacing the owner's kernel of the
 * same name. The caller checked the limits (KERNEL_MAX, KERNEL_MAX_PER_USER). */
void kernel_insert(struct daemon *d, struct kernel *k);

/* Destroy kernel `k` (its pipeline and memory); NULL is accepted. */
void kernel_free(struct daemon *d, struct kernel *k);

/* Remove and destroy owner's kernel `name`. Returns 0 or -ENOENT. */
int kernel_remove(struct daemon *d, uint32_t owner, const char *name);

/* Destroy every kernel (before the device goes: a device loss); the table
 * stays, empty. */
void kernels_clear(struct daemon *d);

/* kernels_clear, then free the table (shut-down); accepts a daemon that
 * kernels_init never gave one. */
void kernels_fini(struct daemon *d);

/* Read 1..3 integers (each at most `max`) of array `o` into out[3], missing
 * ones 1; `what` names the argument in the reason. */
int kernel_read_dims(const msgpack_object *o, const char *what, uint32_t max, uint32_t out[3],
		     char *why, size_t cap);

/* kernel_read_dims for a dispatch grid, each count also within the device's
 * maxComputeWorkGroupCount. */
int kernel_read_groups(const struct gpu_device *g, const msgpack_object *o, const char *what,
		       uint32_t out[3], char *why, size_t cap);

/* Fill k's push-constant bytes (`buf`, zeroed by the caller) from `o`: a map
 * of member name to number, or bin of exactly the block's size. */
int kernel_read_push(const struct kernel *k, const msgpack_object *o, uint8_t buf[SPV_MAX_PUSH_BYTES],
		     char *why, size_t cap);

/* Whether `n` tensors bind k's storage buffers (exactly nbindings). */
int kernel_check_count(const struct kernel *k, unsigned n, char *why, size_t cap);

/* Whether a tensor `tname` of `bytes` fits binding `i` of `k` (size against
 * the block's, and what the device binds at once); `what` names the
 * argument ("tensors[1]", "input 1"). */
int kernel_check_tensor(const struct gpu_device *g, const struct kernel *k, unsigned i,
			const char *what, const char *tname, uint64_t bytes, char *why, size_t cap);

/* Record one dispatch of `k` on bindings b[0..nbindings-1] with its push
 * bytes and grid. Returns 0 or -errno (gpu_rec_dispatch_groups). */
int kernel_record(struct gpu_recorder *rec, struct kernel *k, const struct gpu_binding *b,
		  const uint8_t *push, const uint32_t groups[3]);
