#include "checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "errorf.h"
#include "log.h"
#include "loop.h"
#include "pack.h"
#include "params.h"
#include "persist.h"
#include "persist_model.h"
#include "request.h"
#include "rpc.h"
#include "status.h"
#include "store.h"

/* One tick of the periodic checkpoint writes at most this much, then yields
 * to the event loop for CHECKPOINT_YIELD_NS, so requests keep flowing while
 * a large dirty set drains. */
#define CHECKPOINT_TICK_TENSORS 8
#define CHECKPOINT_TICK_BYTES ((uint64_t)32 << 20)
#define CHECKPOINT_YIELD_NS 5000000

struct checkpoint {
	struct loop_source src;
	struct daemon *d;
};

static void arm(struct checkpoint *c, uint64_t ns)
{
	struct itimerspec its = { 0 };

	its.it_value.tv_sec = (time_t)(ns / 1000000000u);
	its.it_value.tv_nsec = (long)(ns % 1000000000u);
	if (timerfd_settime(c->src.fd, 0, &its, NULL) < 0)
		log_error("cannot arm the checkpoint timer: %s", strerror(errno));
}

static void arm_interval(struct checkpoint *c)
{
	arm(c, c->d->cfg.checkpoint_interval * 1000000000u);
}

int checkpoint_flush(struct daemon *d, uint64_t max_tensors, uint64_t max_bytes,
		     struct checkpoint_result *ret, char *err, size_t err_len)
{
	struct checkpoint_result out = { 0 };
	char name[TDP_MAX_NAME_LEN + 1];
	int64_t t0 = daemon_now_ns(CLOCK_MONOTONIC);
	struct tensor *t;
	size_t len;
	int r = 0, c;

	if (!d->persist)
		return tdp_errorf(err, err_len, -ENOTCONN, "persistence is off");
	if (store_take_lost_deletions(d->store) && (c = persist_reconcile(d->persist, d->store)) < 0)
		log_error("checkpoint: cannot remove the files of deleted tensors: %s", strerror(-c));
	while ((len = store_take_deleted(d->store, name)) > 0) {
		c = persist_remove(d->persist, name, len);
		if (c < 0)
			log_error("checkpoint: cannot remove the file of '%s': %s", name, strerror(-c));
		else
			out.removed++;
	}
	while ((t = store_first_dirty(d->store)) && (!max_tensors || out.written < max_tensors) &&
	       (!max_bytes || out.bytes < max_bytes)) {
		r = persist_write(d->persist, d, t, err, err_len);
		if (r < 0) {
			char why[TDP_MAX_ERROR_MESSAGE];

			snprintf(why, sizeof(why), "%s", err);
			r = tdp_errorf(err, err_len, r, "writing '%s': %s", t->name, why);
			break;
		}
		store_mark_clean(d->store, t);
		out.written++;
		out.bytes += t->bytes;
	}
	c = persist_commit(d->persist);
	if (c < 0 && r == 0)
		r = tdp_errorf(err, err_len, c, "fsync of the checkpoint directory: %s", strerror(-c));
	if (r == 0 && d->model_persist) {
		uint64_t mw, mr;

		r = model_persist_flush(d->model_persist, d, &mw, &mr, err, err_len);
		out.models = r == 0 ? mw + mr : 0;
	}
	if (r < 0)
		return r;
	out.seconds = (double)(daemon_now_ns(CLOCK_MONOTONIC) - t0) / 1e9;
	*ret = out;
	return 0;
}

static void on_timer(void *data, uint32_t events)
{
	struct checkpoint *c = data;
	struct checkpoint_result res;
	uint64_t expirations;
	char err[TDP_MAX_ERROR_MESSAGE];

	(void)events;
	if (read(c->src.fd, &expirations, sizeof(expirations)) < 0)
		return;
	if (checkpoint_flush(c->d, CHECKPOINT_TICK_TENSORS, CHECKPOINT_TICK_BYTES, &res, err,
			     sizeof(err)) < 0) {
		log_error("checkpoint failed, retrying in %" PRIu64 " s: %s",
			  c->d->cfg.checkpoint_interval, err);
		arm_interval(c);
		return;
	}
	if (res.written || res.removed || res.models)
		log_debug("checkpoint: %" PRIu64 " tensors (%" PRIu64 " bytes) written, %" PRIu64
			  " removed in %.3f s", res.written, res.bytes, res.removed, res.seconds);
	if (store_first_dirty(c->d->store) && c->d->cfg.checkpoint_interval)
		arm(c, CHECKPOINT_YIELD_NS);
	else
		arm_interval(c);
}

int checkpoint_start(struct daemon *d, struct checkpoint **ret)
{
	struct checkpoint *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	c->d = d;
	c->src.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (c->src.fd < 0) {
		r = -errno;
		free(c);
		return r;
	}
	c->src.fn = on_timer;
	c->src.data = c;
	r = loop_add(d->loop, &c->src, EPOLLIN);
	if (r < 0) {
		close(c->src.fd);
		free(c);
		return r;
	}
	arm_interval(c);
	*ret = c;
	return 0;
}

void checkpoint_rearm(struct checkpoint *c)
{
	if (c)
		arm_interval(c);
}

void checkpoint_free(struct checkpoint *c)
{
	if (!c)
		return;
	loop_remove(c->d->loop, &c->src);
	close(c->src.fd);
	free(c);
}

int method_store_sync(struct request *req)
{
	struct checkpoint_result res;
	char err[TDP_MAX_ERROR_MESSAGE];
	msgpack_packer *pk = req->pk;
	int r;

	if (params_parse(req, NULL, 0) < 0)
		return -1;
	if (!req->d->persist)
		return request_fail(req, TDP_FAILED_PRECONDITION,
				    "persistence is off: start tensord with --state-dir (or state_dir in "
				    "its config) and persist not 'no'");
	r = checkpoint_flush(req->d, 0, 0, &res, err, sizeof(err));
	if (r < 0) {
		return request_fail(req, r == -ENOSPC || r == -EDQUOT ? TDP_RESOURCE_EXHAUSTED : TDP_UNAVAILABLE,
				    "%s", err);
	}
	if (tdp_write_result_head(pk, req->msgid) < 0 || msgpack_pack_map(pk, 5) ||
	    tdp_pack_cstr(pk, "written") || msgpack_pack_uint64(pk, res.written) ||
	    tdp_pack_cstr(pk, "bytes") || msgpack_pack_uint64(pk, res.bytes) ||
	    tdp_pack_cstr(pk, "removed") || msgpack_pack_uint64(pk, res.removed) ||
	    tdp_pack_cstr(pk, "models") || msgpack_pack_uint64(pk, res.models) ||
	    tdp_pack_cstr(pk, "seconds") || msgpack_pack_double(pk, res.seconds))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}
