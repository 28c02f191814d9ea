#include "methods/memfd.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "base/copy_pool.h"
#include "methods/request.h"
#include "status.h"

#define TMPFS_MAGIC_ 0x01021994
/* From this size, when copies are split over helper threads, a mapping is
 * not populated by mmap on one thread (memfd_map_param). */
#define MEMFD_SPLIT_MIN ((uint64_t)16 << 20)

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/* The seals a mapping needs: the file cannot shrink under the mapping
 * (a read past its end would be SIGBUS in the daemon), and a put's bytes
 * cannot change while they are copied. F_SEAL_FUTURE_WRITE is not enough
 * for that: writable mappings made before it still write. */
#define SEALS_PUT (F_SEAL_SHRINK | F_SEAL_WRITE)
#define SEALS_GET F_SEAL_SHRINK

/* The length to map for `len` bytes at page `start` of a file of `size`
 * bytes: `len` rounded up to `align` (a power of two) where the file's pages
 * hold that much, so the whole mapping can be imported by the device; else
 * `len`. */
static uint64_t map_length(uint64_t start, uint64_t len, uint64_t size, uint64_t page, uint64_t align)
{
	uint64_t room = ((size + page - 1) & ~(page - 1)) - start;
	uint64_t want;

	if (align < page || len > UINT64_MAX - align)
		return len;
	want = (len + align - 1) & ~(align - 1);
	return want <= room ? want : len;
}

/* Whether every page of [from, to) of `fd` is in memory: no hole
 * (SEEK_HOLE) begins before `to`. Touching a hole would allocate it, in
 * the daemon, charged to the daemon's memory cgroup while the client keeps
 * the page. Pages only fallocate()d count as holes here, though they are
 * the client's. */
static bool range_in_memory(int fd, uint64_t from, uint64_t to)
{
	off_t hole;

	if (from >= to)
		return true;
	hole = lseek(fd, (off_t)from, SEEK_HOLE);
	return hole >= 0 && (uint64_t)hole >= to;
}

int memfd_map_param(struct request *req, uint64_t index, uint64_t offset, uint64_t bytes,
		    bool writable, uint64_t align, struct memfd_map *ret_map)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t start, len, maplen;
	struct stat st;
	struct statfs sfs;
	void *base;
	int fd, seals;
	bool split;

	if (req->nfds == 0)
		return request_fail(req, TDP_INVALID_ARGUMENT, "fd %llu: no file descriptor came with "
				    "this request (send it with SCM_RIGHTS in the sendmsg() that starts "
				    "the message)", (unsigned long long)index);
	if (index >= req->nfds)
		return request_fail(req, TDP_INVALID_ARGUMENT, "fd %llu: only %u file descriptor%s "
				    "came with this request", (unsigned long long)index, req->nfds,
				    req->nfds == 1 ? "" : "s");
	fd = req->fds[index];
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return request_fail(req, TDP_INVALID_ARGUMENT, "fd %llu is not a memfd that allows "
				    "sealing (memfd_create with MFD_ALLOW_SEALING)",
				    (unsigned long long)index);
	if (writable && (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)))
		return request_fail(req, TDP_INVALID_ARGUMENT, "fd %llu is sealed against writing; "
				    "tensor.get writes into it", (unsigned long long)index);
	if ((seals & (writable ? SEALS_GET : SEALS_PUT)) != (writable ? SEALS_GET : SEALS_PUT))
		return request_fail(req, TDP_FAILED_PRECONDITION, "fd %llu must be sealed with %s first "
				    "(fcntl F_ADD_SEALS)", (unsigned long long)index,
				    writable ? "F_SEAL_SHRINK" : "F_SEAL_SHRINK and F_SEAL_WRITE");
	/* Only shmem: a hugetlbfs memfd could fault (SIGBUS) when its pool runs
	 * dry during the copy. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || fstatfs(fd, &sfs) < 0 ||
	    sfs.f_type != TMPFS_MAGIC_)
		return request_fail(req, TDP_INVALID_ARGUMENT, "fd %llu is no plain memfd (not one "
				    "made with MFD_HUGETLB)", (unsigned long long)index);
	if (writable && (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDWR)
		return request_fail(req, TDP_INVALID_ARGUMENT, "fd %llu is open read-only; tensor.get "
				    "writes into it", (unsigned long long)index);
	if (offset > (uint64_t)st.st_size || bytes > (uint64_t)st.st_size - offset)
		return request_fail(req, TDP_INVALID_ARGUMENT, "fd %llu holds %llu bytes; %llu at "
				    "offset %llu do not fit", (unsigned long long)index,
				    (unsigned long long)st.st_size, (unsigned long long)bytes,
				    (unsigned long long)offset);
	start = offset - offset % (uint64_t)page;
	len = bytes + (offset - start);
	if (len == 0) {
		*ret_map = (struct memfd_map){ 0 };
		return 0;
	}
	/* Only pages the client made (written or faulted in), checked before
	 * anything is mapped: a get's write, and a put's read too (a read
	 * fault of a shmem hole allocates a page), would otherwise make the
	 * daemon allocate the client's memory (docs/protocol.md). */
	if (!range_in_memory(fd, offset, offset + bytes))
		return request_fail(req, TDP_INVALID_ARGUMENT, "fd %llu: the %llu bytes at offset %llu "
				    "are not all in memory yet: the memfd has unwritten pages (holes, "
				    "a sparse memfd); write or touch every page first",
				    (unsigned long long)index, (unsigned long long)bytes,
				    (unsigned long long)offset);
	/* Reading maps privately: a shared mapping of a write-sealed memfd is
	 * refused before Linux 6.7, and the sealed bytes are the same.
	 * MAP_POPULATE: one pass over the page tables instead of a fault per
	 * page during the copy (twice as fast for 256 MiB on lavapipe), unless
	 * a put's copy is split over helper threads, whose read faults (each
	 * maps 16 pages) then run side by side: on an H100 host populating
	 * 1 GiB took 45 ms on the loop, half of a memfd put (docs/performance.md).
	 * A get's write faults map one page each (slower than populating), so
	 * its mapping is populated for writing by the helpers side by side.
	 * Either way no page can go away under the copy: the memfd is sealed
	 * against shrinking. */
	maplen = map_length(start, len, (uint64_t)st.st_size, (uint64_t)page, align);
	split = copy_pool_threads() > 1 && maplen >= MEMFD_SPLIT_MIN;
	/* The pages added for the import must be in memory too: populating or
	 * pinning a hole would allocate it, charged to the daemon. */
	if (maplen != len) {
		uint64_t end = start + maplen < (uint64_t)st.st_size ? start + maplen : (uint64_t)st.st_size;

		if (!range_in_memory(fd, offset + bytes, end))
			maplen = len;
	}
	base = MAP_FAILED;
	/* A device import (gpu/host_import.h) pins the pages: a shared
	 * read-only mapping (Linux 6.7 and later allow one of a write-sealed
	 * memfd) leaves no doubt that they are the file's own. */
	if (!writable && align)
		base = mmap(NULL, maplen, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, (off_t)start);
	if (base == MAP_FAILED)
		base = mmap(NULL, maplen, writable ? PROT_READ | PROT_WRITE : PROT_READ,
			    (writable ? MAP_SHARED : MAP_PRIVATE) | (split ? 0 : MAP_POPULATE), fd,
			    (off_t)start);
	if (base == MAP_FAILED)
		return request_fail(req, errno == ENOMEM ? TDP_RESOURCE_EXHAUSTED : TDP_INVALID_ARGUMENT,
				    "fd %llu cannot be mapped for %s (%s)", (unsigned long long)index,
				    writable ? "writing (open it read-write)" : "reading", strerror(errno));
	if (split && writable)
		copy_pool_populate(base, maplen);
	*ret_map = (struct memfd_map){ .base = base, .len = maplen, .data = (uint8_t *)base + (offset - start) };
	return 0;
}

void memfd_unmap(struct memfd_map *m)
{
	if (m->base)
		munmap(m->base, m->len);
	m->base = NULL;
}
