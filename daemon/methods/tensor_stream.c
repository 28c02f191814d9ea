#include "methods/tensor_stream.h"

#include <errno.h>
#include <stdlib.h>

#include "daemon.h"
#include "devices.h"
#include "gpu/memory.h"
#include "gpu/transfer.h"
#include "persist/recover.h"
#include "status.h"

/* Bytes appended per turn while the output is below one chunk. */
#define CHUNK ((uint64_t)4 << 20)

struct tensor_stream {
	struct request_deferred def;    /* first: the connection's handle */
	struct request later;
	msgpack_packer pk;
	struct daemon *d;
	uint32_t dev;                   /* the device id ... */
	struct gpu_device *g;           /* ... as it was when the snapshot was made */
	uint64_t resets;                /* resets of that device then (recover.h) */
	struct gpu_alloc snap;
	uint64_t done;
};

/* Whether the snapshot's device is still the one it was made on and not
 * lost: a reset re-opens lost devices (a new gpu_device, all their memory
 * gone with the old one), so a snapshot on a device that was lost is left
 * alone (never freed twice, never touched on a freed device). A device that
 * was not lost keeps its memory across another's reset: the snapshot still
 * streams and is freed as usual (the counter, not the pointer, tells a
 * re-created device from the old one). */
static bool device_same(const struct tensor_stream *s)
{
	const struct recovery *rc = s->d->recovery;

	return s->d->gpus[s->dev] == s->g && !s->g->lost &&
	       (!rc || rc->device_resets[s->dev] == s->resets);
}

void tensor_stream_free(struct tensor_stream *s)
{
	if (!s)
		return;
	if (device_same(s))
		gpu_memory_free(s->g, &s->snap);
	free(s);
}

static void stream_cancel(struct request_deferred *def)
{
	tensor_stream_free((struct tensor_stream *)def);
}

/* The connection's output is low: append the next chunk. */
static int stream_more(struct request_deferred *def)
{
	struct tensor_stream *s = (struct tensor_stream *)def;
	uint64_t n = s->snap.size - s->done < CHUNK ? s->snap.size - s->done : CHUNK;
	struct gpu_alloc w = s->snap;
	void *dst;
	int r;

	if (!device_same(s))
		return -ENODEV;
	dst = tdp_buf_extend(s->later.out, n);
	if (!dst)
		return -ENOMEM;
	w.offset += s->done;
	w.size = n;
	r = gpu_download(s->g, &w, dst);
	if (r < 0)
		return r;
	s->done += n;
	s->def.held_bytes = s->snap.size - s->done;
	if (s->done < s->snap.size)
		return 0;
	tensor_stream_free(s);
	return 1;
}

int tensor_stream_new(struct request *req, const struct tensor *t, struct tensor_stream **ret_s)
{
	struct daemon *d = req->call.d;
	struct tensor_stream *s;
	int r;

	uint64_t limit, buffered;

	/* Host-mapped device memory (lavapipe, integrated GPUs): a snapshot
	 * would take as much host memory as the plain answer, plus a copy. */
	if (!req->conn || devices_of(d, t)->mem.host_mapped)
		return 0;
	/* The snapshot counts as the uid's buffered bytes: a user whose
	 * clients leave large answers unread gets the plain path and meets
	 * user_max_buffer_bytes there, as before streaming. */
	buffered = request_user_buffered(req, &limit);
	if (limit && (buffered > limit || t->bytes > limit - buffered))
		return 0;
	s = calloc(1, sizeof(*s));
	if (!s)
		return request_fail(req, TDP_INTERNAL, "out of memory");
	s->d = d;
	s->dev = t->device < d->ngpus ? t->device : 0;
	s->g = devices_of(d, t);
	s->resets = d->recovery ? d->recovery->device_resets[s->dev] : 0;
	if (gpu_memory_alloc(s->g, t->bytes, &s->snap) < 0) {
		free(s);
		return 0;
	}
	r = gpu_copy(s->g, &t->alloc, s->g, &s->snap);
	if (r < 0) {
		tensor_stream_free(s);
		return request_fail(req, r == -ENODEV ? TDP_DEVICE_LOST : TDP_INTERNAL,
				    "snapshotting the tensor failed (%d)", r);
	}
	*ret_s = s;
	return 1;
}

int tensor_stream_start(struct request *req, struct tensor_stream *s)
{
	if (request_defer(req, &s->def, &s->later, &s->pk) < 0) {
		tensor_stream_free(s);
		return -1;
	}
	s->def.cancel = stream_cancel;
	s->def.more = stream_more;
	s->def.held_bytes = s->snap.size;
	return REQUEST_DEFERRED;
}
