#include "methods/tensor_stream.h"

#include <errno.h>
#include <stdlib.h>

#include "daemon.h"
#include "devices.h"
#include "gpu/device.h"
#include "gpu/completion.h"
#include "gpu/memory.h"
#include "gpu/recorder.h"
#include "gpu/transfer.h"
#include "methods/deferred_answer.h"
#include "persist/recover.h"
#include "status.h"

/* The snapshot goes to the client through NPARTS parts of host-visible
 * memory, CHUNK bytes each: while the socket takes one part straight from
 * that memory (request_deferred.window), the device copies the next ones
 * into the others (watched submissions: the loop does not wait for them),
 * so the device copy, the socket and the client's reads overlap. */
#define CHUNK ((uint64_t)4 << 20)
#define NPARTS 3

struct part {
	struct tensor_stream *s;
	struct gpu_recorder rec;
	uint64_t len;                   /* bytes of the snapshot it holds */
	bool busy;                      /* submitted, outcome not taken yet */
	bool watched;                   /* ... and its `done` is still due */
	int result;
};

struct tensor_stream {
	/* The connection's handle and where the answer goes; da.gone: the
	 * client left, free once nwatched is 0. */
	struct deferred_answer da;
	struct daemon *d;
	uint32_t dev;                   /* the device id ... */
	struct gpu_device *g;           /* ... as it was when the snapshot was made */
	uint64_t resets;                /* resets of that device then (recover.h) */
	struct gpu_alloc snap;
	struct gpu_host_lease *host;    /* the parts: NPARTS * chunk bytes */
	uint64_t chunk;
	struct part parts[NPARTS];      /* chunk k of the snapshot in parts[k % NPARTS] */
	uint64_t sent;                  /* bytes the connection took */
	uint64_t queued;                /* bytes whose copy was submitted */
	unsigned nwatched;              /* parts whose `done` is still due */
	bool showing;                   /* the part of chunk sent / chunk is in def.window */
	bool waiting;                   /* the connection waits for that part: wake it */
};

/* Whether the snapshot's device is still the one it was made on and not
 * lost: a reset re-opens lost devices (a new gpu_device, all their memory
 * gone with the old one), so a snapshot on a device that was lost is left
 * alone (never freed twice, never touched on a freed device). A device that
 * was not lost keeps its memory across another's reset: the snapshot still
 * streams and is freed as usual (the counter, not the pointer, tells a
 * re-created device from the old one). The parts' host memory is a lease
 * (gpu/memory.h) and goes the same way. */
static bool device_same(const struct tensor_stream *s)
{
	const struct recovery *rc = s->d->recovery;

	return s->d->gpus[s->dev] == s->g && !s->g->lost &&
	       (!rc || rc->device_resets[s->dev] == s->resets);
}

/* request_deferred.window_gone: the window's parts went with a lost device. */
static bool window_gone(const struct request_deferred *def)
{
	return !device_same((const struct tensor_stream *)deferred_answer_of(def));
}

void tensor_stream_free(struct tensor_stream *s)
{
	if (!s)
		return;
	if (device_same(s)) {
		/* A copy submitted without a completion thread still writes
		 * into the parts: wait for it (watched ones were done). */
		for (unsigned i = 0; i < NPARTS; i++)
			if (s->parts[i].busy && !s->parts[i].watched)
				gpu_rec_wait(&s->parts[i].rec);
		gpu_memory_free(s->g, &s->snap);
		gpu_host_lease_free(s->g, s->host);
	}
	free(s);
}

static void stream_cancel(struct deferred_answer *da)
{
	struct tensor_stream *s = (struct tensor_stream *)da;

	/* Watched copies still write into the parts: the last `done` frees. */
	if (!s->nwatched)
		tensor_stream_free(s);
}

/* A watched copy finished (from the loop; during a device reset, before
 * the lost device is released). */
static void part_done(void *data)
{
	struct part *p = data;
	struct tensor_stream *s = p->s;

	p->result = gpu_rec_wait(&p->rec);
	p->busy = p->watched = false;
	s->nwatched--;
	if (s->da.gone) {
		if (!s->nwatched)
			tensor_stream_free(s);
		return;
	}
	if (s->waiting) {
		s->waiting = false;
		request_wake(&s->da.req);
	}
}

static bool any_busy(const struct tensor_stream *s)
{
	for (unsigned i = 0; i < NPARTS; i++)
		if (s->parts[i].busy)
			return true;
	return false;
}

/* Whether a command buffer for watched submissions is free on `g` now:
 * gpu_rec_begin_async would otherwise wait for the oldest one, which may be
 * another client's long submission. */
static bool async_slot_free(const struct gpu_device *g)
{
	for (unsigned i = GPU_CMD_SYNC; i < GPU_CMD_SLOTS; i++)
		if (!g->cmd[i].pending)
			return true;
	return false;
}

/* Submit copies of the next chunks into the parts that are free. Copies
 * ahead of the part to show next are taken only where a watched command
 * buffer is free (that part's own is always submitted). Without a
 * completion thread one at a time: it runs while the socket takes the part
 * before it. Returns 0 or -errno. */
static int fill(struct tensor_stream *s)
{
	bool async = gpu_completion_on(s->g);

	while (s->queued < s->snap.size && s->queued / s->chunk - s->sent / s->chunk < NPARTS) {
		unsigned i = (unsigned)(s->queued / s->chunk % NPARTS);
		struct part *p = &s->parts[i];
		struct gpu_alloc w = s->snap;
		bool ahead = s->queued / s->chunk != s->sent / s->chunk;
		int r;

		if (async ? ahead && !async_slot_free(s->g) : any_busy(s))
			break;
		w.offset += s->queued;
		w.size = s->snap.size - s->queued < s->chunk ? s->snap.size - s->queued : s->chunk;
		r = gpu_rec_begin_async(&p->rec, s->g);
		if (r < 0)
			return r;
		gpu_rec_host_copy(&p->rec, &w, s->host->b.buffer, i * s->chunk, false);
		r = gpu_rec_submit(&p->rec);
		if (r < 0)
			return r;
		p->s = s;
		p->len = w.size;
		p->busy = true;
		p->result = 0;
		s->queued += w.size;
		if (async && gpu_rec_watch(&p->rec, part_done, p) == 0) {
			p->watched = true;
			s->nwatched++;
		}
	}
	return 0;
}

/* The connection took what was shown, or has nothing left to send: show
 * the next part once its copy finished. */
static int stream_more(struct request_deferred *def)
{
	struct tensor_stream *s = (struct tensor_stream *)deferred_answer_of(def);
	struct part *p;
	int r;

	if (!device_same(s))
		return -ENODEV;
	if (s->showing) {
		s->showing = false;
		s->sent += s->parts[s->sent / s->chunk % NPARTS].len;
		s->da.def.held_bytes = s->snap.size - s->sent;
		if (s->sent == s->snap.size) {
			tensor_stream_free(s);
			return 1;
		}
	}
	if ((r = fill(s)) < 0)
		return r;
	p = &s->parts[s->sent / s->chunk % NPARTS];
	if (p->watched) {
		s->waiting = true;
		return 0;
	}
	if (p->busy) {
		p->result = gpu_rec_wait(&p->rec);
		p->busy = false;
	}
	if (p->result < 0)
		return p->result;
	s->da.def.window = (const uint8_t *)s->host->b.map + (s->sent / s->chunk % NPARTS) * s->chunk;
	s->da.def.window_len = p->len;
	s->showing = true;
	/* Without a completion thread the next copy starts now. */
	return fill(s);
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
	s->chunk = t->bytes < CHUNK ? t->bytes : CHUNK;
	if (gpu_memory_alloc(s->g, t->bytes, &s->snap) < 0) {
		free(s);
		return 0;
	}
	if (gpu_host_lease_new(s->g, NPARTS * s->chunk, &s->host) < 0) {
		tensor_stream_free(s);
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
	if (deferred_answer_start(&s->da, req, stream_cancel) < 0) {
		tensor_stream_free(s);
		return -1;
	}
	s->da.def.more = stream_more;
	s->da.def.window_gone = window_gone;
	s->da.def.held_bytes = s->snap.size;
	return REQUEST_DEFERRED;
}
