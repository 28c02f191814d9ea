#include "methods/tensor_import.h"

#include "base/copy_pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/copy_pool.h"
#include "base/log.h"
#include "gpu/device.h"
#include "gpu/host_import.h"
#include "gpu/memory.h"
#include "gpu/recorder.h"
#include "methods/async_request.h"
#include "methods/methods_tensor.h"
#include "status.h"

/* One imported transfer. The mapping is the daemon's own (memfd_map_param):
 * a client that closes its fd or unmaps its memory mid-copy changes
 * nothing here; the pages stay until the copy completed and `release`
 * unmapped them. */
struct import_job {
	struct async_req a;
	struct gpu_recorder rec;
	struct gpu_device *g;
	struct memfd_map map;
	struct gpu_host_import h;
	bool put;
	struct tensor *t;               /* put: the new tensor, until stored */
	struct tensor meta;             /* get: the tensor as it was asked for */
	struct gpu_alloc dev;           /* the tensor's memory */
	uint64_t at;                    /* where the range starts in the import */
	uint64_t done;                  /* bytes copied by the completed chunks */
	uint64_t pending;               /* bytes of the chunk submitted last */
	uint32_t msgid;                 /* the request's, for the log */
	uint32_t mode;
	bool has_mode;
};

uint64_t tensor_import_align(const struct gpu_device *g, uint64_t bytes, bool put)
{
	if (bytes < TENSOR_IMPORT_MIN || g->mem.host_mapped || (put && !gpu_host_import_read_only(g)))
		return 0;
	/* With four or more copy threads the staged copy is faster: an import
	 * pins the pages anew each time, on the loop (H100, 1 GiB get: 7.0 GB/s
	 * imported, 8.6 through staging with 4 threads, 11.9 with 8). */
	if (copy_pool_threads() >= TENSOR_IMPORT_MAX_COPY_THREADS)
		return 0;
	return gpu_host_import_align(g);
}

static void import_release(struct async_req *a)
{
	struct import_job *j = (struct import_job *)a;

	/* A runaway submission may still use the pages: they stay mapped. */
	if (gpu_host_import_free(j->g, &j->h) == 0)
		memfd_unmap(&j->map);
	else
		log_warning("a memfd transfer's pages stay mapped: the device ran away with them");
	if (j->t) {
		gpu_memory_free(j->g, &j->t->alloc);
		free(j->t);
	}
	free(j);
}

/* Record and submit the next chunk of at most TENSOR_IMPORT_CHUNK bytes.
 * Returns 0 or -errno. */
static int submit_chunk(struct import_job *j)
{
	uint64_t n = j->dev.size - j->done;
	struct gpu_binding host, dev;
	int r;

	/* Only a put is chunked: its tensor is the job's until stored. A get
	 * reads a stored tensor, which another connection may delete or
	 * replace meanwhile; its memory is kept (gpu_memory_free defers) only
	 * until the submissions pending then completed, so a later chunk
	 * could read memory already given to another tensor. */
	if (j->put && n > TENSOR_IMPORT_CHUNK)
		n = TENSOR_IMPORT_CHUNK;
	r = gpu_rec_begin_async(&j->rec, j->g);
	if (r < 0)
		return r;
	host = (struct gpu_binding){ j->h.buffer, j->at + j->done, n, !j->put };
	dev = gpu_rec_bind(j->g, &j->dev, j->done, n, j->put);
	if (j->put)
		gpu_rec_copy(&j->rec, &host, &dev);
	else
		gpu_rec_copy(&j->rec, &dev, &host);
	j->pending = n;
	log_debug("msgid %u: %s of %llu bytes: the device copies the memfd itself (bytes %llu..%llu)",
		  j->msgid, j->put ? "tensor.put" : "tensor.get", (unsigned long long)j->dev.size,
		  (unsigned long long)j->done, (unsigned long long)(j->done + n));
	/* The final barrier makes the device's writes visible to the host. */
	return gpu_rec_submit(&j->rec);
}

static int import_finish(struct async_req *a, struct request *req)
{
	struct import_job *j = (struct import_job *)a;
	struct tensor *t = j->t;
	int r = gpu_rec_wait(&j->rec);

	if (r < 0)
		return tensor_device_error(req, j->g, r, j->put ? "uploading" : "downloading");
	j->done += j->pending;
	j->pending = 0;
	/* A put's next chunk: other work queued meanwhile runs between the
	 * two, and each has its own time limit. It goes on for a departed
	 * client and still takes effect. */
	if (j->done < j->dev.size) {
		r = submit_chunk(j);
		if (r < 0)
			return tensor_device_error(req, j->g, r, j->put ? "uploading" : "downloading");
		a->again_rec = &j->rec;
		return ASYNC_REQ_AGAIN;
	}
	if (!j->put)
		return tensor_write_meta_result(req, &j->meta);
	if (tensor_store_new(req, j->g, t, j->mode) < 0) {
		j->t = NULL; /* tensor_store_new freed its memory */
		free(t);
		return -1;
	}
	j->t = NULL;
	if (j->has_mode)
		t->mode = j->mode;
	return tensor_write_meta_result(req, t);
}

/* Import j->map, record the copy between it and `a` and submit it; then
 * answer now or at completion. Returns TENSOR_IMPORT_NOT_TAKEN when the
 * import was refused (j freed, its mapping and tensor back with the
 * caller), else TENSOR_IMPORT_TAKEN with the handler's return in
 * *ret_result. */
static enum tensor_import_taken import_run(struct request *req, struct import_job *j,
					   const struct gpu_alloc *a, int *ret_result)
{
	int r;

	j->a.finish = import_finish;
	j->a.release = import_release;
	j->dev = *a;
	j->at = (uint64_t)(j->map.data - (uint8_t *)j->map.base);
	r = gpu_host_import(j->g, j->map.base, j->map.len, j->put, &j->h);
	if (r == -EOPNOTSUPP) {
		free(j);
		return TENSOR_IMPORT_NOT_TAKEN;
	}
	j->msgid = req->msgid;
	if (r == 0) {
		if ((r = submit_chunk(j)) == 0) {
			*ret_result = async_req_run_rec(req, &j->a, &j->rec); /* releases j */
			return TENSOR_IMPORT_TAKEN;
		}
	}
	tensor_device_error(req, j->g, r, j->put ? "uploading" : "downloading");
	import_release(&j->a);
	*ret_result = REQUEST_FAILED;
	return TENSOR_IMPORT_TAKEN;
}

enum tensor_import_taken tensor_import_put(struct request *req, struct gpu_device *g,
					   struct tensor *t, struct memfd_map *map, uint32_t mode,
					   bool has_mode, int *ret_result)
{
	struct import_job *j;
	enum tensor_import_taken r;

	if (!tensor_import_align(g, t->bytes, true) || map->len % gpu_host_import_align(g))
		return TENSOR_IMPORT_NOT_TAKEN;
	j = calloc(1, sizeof(*j));
	if (!j)
		return TENSOR_IMPORT_NOT_TAKEN;
	*j = (struct import_job){ .g = g, .map = *map, .put = true, .t = t, .mode = mode,
				  .has_mode = has_mode };
	r = import_run(req, j, &t->alloc, ret_result);
	if (r == TENSOR_IMPORT_TAKEN)
		*map = (struct memfd_map){ 0 };
	return r;
}

enum tensor_import_taken tensor_import_get(struct request *req, struct gpu_device *g,
					   const struct tensor *t, struct memfd_map *map,
					   int *ret_result)
{
	struct import_job *j;
	enum tensor_import_taken r;

	if (!tensor_import_align(g, t->bytes, false) || map->len % gpu_host_import_align(g))
		return TENSOR_IMPORT_NOT_TAKEN;
	j = calloc(1, sizeof(*j));
	if (!j)
		return TENSOR_IMPORT_NOT_TAKEN;
	*j = (struct import_job){ .g = g, .map = *map, .meta = *t };
	r = import_run(req, j, &t->alloc, ret_result);
	if (r == TENSOR_IMPORT_TAKEN)
		*map = (struct memfd_map){ 0 };
	return r;
}
