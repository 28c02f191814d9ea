/* The shared-memory gradient exchange of a group on one host (group_shm.h). */
#include "train/group_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/graph_core.h"
#include "gpu/device.h"
#include "gpu/pipeline.h"
#include "train/train_parallel.h"

/* The most members of one host the mean kernel reads (its bindings). */
#define SHM_MAX_MEMBERS (GPU_MAX_BINDINGS - 1)

uint64_t group_shm_token(void)
{
	uint64_t t = 0;

	while (t == 0)
		if (getrandom(&t, sizeof(t), 0) != (ssize_t)sizeof(t))
			t = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	return t;
}

static void shm_name(uint64_t token, char *buf, size_t size)
{
	snprintf(buf, size, "/tensord-%u-%016" PRIx64, (unsigned)geteuid(), token);
}

void group_shm_unlink(uint64_t token)
{
	char name[64];

	shm_name(token, name, sizeof(name));
	shm_unlink(name);
}

/* Map the region of fd (created, or checked to be ours and of `size`). */
static int map_region(int fd, bool create, uint64_t size, void **ret)
{
	struct stat st;
	void *p;
	int r;

	if (create) {
		/* Reserve the pages now: a tmpfs short of room would otherwise
		 * answer a later write with SIGBUS. */
		r = posix_fallocate(fd, 0, (off_t)size);
		if (r)
			return -r;
	} else if (fstat(fd, &st) < 0) {
		return -errno;
	} else if (st.st_uid != geteuid() || (st.st_mode & 077) || (uint64_t)st.st_size != size) {
		return -EPERM;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*ret = p;
	return 0;
}

int group_shm_open(struct gpu_device *g, uint64_t token, bool create, unsigned n, unsigned self,
		   uint64_t flat_count, struct group_shm **ret)
{
	uint64_t align = gpu_host_import_align(g), bytes = flat_count * 4;
	struct group_shm *s;
	char name[64];
	int fd, r;

	if (!align || n < 2 || n > SHM_MAX_MEMBERS || self >= n || !token)
		return -EOPNOTSUPP;
	if (g->props.limits.minStorageBufferOffsetAlignment > align)
		align = g->props.limits.minStorageBufferOffsetAlignment;
	if (align & (align - 1) || bytes > g->props.limits.maxStorageBufferRange || flat_count > UINT32_MAX)
		return -EOPNOTSUPP;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	*s = (struct group_shm){ .g = g, .flat_count = flat_count, .n = n, .self = self };
	s->stride = (bytes + align - 1) & ~(align - 1);
	s->flags = 2 * n * s->stride;
	s->size = s->flags + ((n * 4 + align - 1) & ~(align - 1));
	shm_name(token, name, sizeof(name));
	fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT | O_EXCL : 0), 0600);
	if (fd < 0) {
		r = -errno;
		goto fail;
	}
	r = map_region(fd, create, s->size, &s->map);
	close(fd);
	if (r < 0)
		goto fail;
	r = gpu_host_import(g, s->map, s->size, false, &s->imp);
	if (r < 0)
		goto fail;
	s->imported = true;
	*ret = s;
	return 0;
fail:
	log_warning("group exchange: %s shared memory %s (%llu bytes) failed (%s); the gradients go through MPI",
		 create ? "creating" : "opening", name, (unsigned long long)s->size, strerror(-r));
	group_shm_free(s);
	return r;
}

/* Where slot `k` of the step's parity starts. */
static uint64_t slot_at(const struct group_shm *s, int64_t step, unsigned k)
{
	return ((uint64_t)(step & 1) * s->n + k) * s->stride;
}

unsigned group_shm_out(const struct group_shm *s, int64_t step, const struct graph *gr, int flat,
		       struct graph_copy *ret, unsigned max, struct graph_copy *whole)
{
	uint64_t at = slot_at(s, step, s->self);

	*whole = (struct graph_copy){ .node = flat, .host = s->imp.buffer, .offset = at };
	return dp_flat_buckets(gr, flat, s->flat_count, s->imp.buffer, at, ret, max);
}

const volatile uint32_t *group_shm_signal(const struct group_shm *s, unsigned k)
{
	return (const volatile uint32_t *)((const uint8_t *)s->map + s->flags + 4 * (uint64_t)k);
}

void group_shm_signal_host(const struct group_shm *s, uint32_t value)
{
	volatile uint32_t *own = (volatile uint32_t *)((uint8_t *)s->map + s->flags + 4 * (uint64_t)s->self);

	__atomic_store_n(own, value, __ATOMIC_RELEASE);
}

int group_shm_record_exchange(const struct group_shm *s, struct gpu_recorder *rec, int64_t step,
			      const struct gpu_alloc *grad, bool bucketed, uint32_t tag, VkEvent event)
{
	if (!bucketed)
		gpu_rec_host_copy(rec, grad, s->imp.buffer, slot_at(s, step, s->self), false);
	gpu_rec_host_signal(rec, s->imp.buffer, s->flags + 4 * (uint64_t)s->self, tag);
	gpu_rec_wait_host_event(rec, event);
	return gpu_rec_host_mean(rec, s->imp.buffer, slot_at(s, step, 0), s->stride, s->n, s->self, grad);
}

void group_shm_free(struct group_shm *s)
{
	if (!s)
		return;
	/* A device lost to a runaway submission may still touch the pages:
	 * then they stay mapped for good. */
	if (s->imported && gpu_host_import_free(s->g, &s->imp) == 1)
		s->map = NULL;
	if (s->map)
		munmap(s->map, s->size);
	free(s);
}
