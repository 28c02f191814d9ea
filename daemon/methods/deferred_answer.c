/* A request answered later: the one holder and its done and fail paths
 * (deferred_answer.h). */
#include "methods/deferred_answer.h"

#include "base/log.h"
#include "base/metrics.h"
#include "buf.h"
#include "daemon.h"

/* request_deferred.cancel: the client went away. */
static void deferred_answer_cancel(struct request_deferred *def)
{
	struct deferred_answer *da = deferred_answer_of(def);

	da->gone = true;
	if (da->on_gone)
		da->on_gone(da);
}

int deferred_answer_start(struct deferred_answer *da, struct request *req,
			  void (*on_gone)(struct deferred_answer *da))
{
	if (request_defer(req, &da->def, &da->req, &da->pk) < 0)
		return -1;
	da->def.cancel = deferred_answer_cancel;
	da->on_gone = on_gone;
	da->gone = false;
	da->batched = false;
	return 0;
}

int deferred_answer_start_batched(struct deferred_answer *da, struct request *req)
{
	if (request_defer_batched(req, &da->req, &da->pk) < 0)
		return -1;
	da->on_gone = NULL;
	da->gone = false;
	da->batched = true;
	return 0;
}

void deferred_answer_done(struct deferred_answer *da)
{
	if (da->gone)
		return;
	if (da->batched)
		request_batch_done(&da->req);
	else
		request_deferred_done(&da->req);
}

void deferred_answer_fail(struct deferred_answer *da, size_t mark)
{
	struct request *req = &da->req;

	req->call.d->requests_failed++;
	metrics_request_error(&req->call.d->metrics, req->slot);
	if (da->gone) {
		/* Its output went with its connection: nothing to drop. */
		log_info("msgid %u of a departed client: %s", req->msgid, req->call.err.message);
		return;
	}
	/* Whatever was written is dropped, as request_dispatch does. */
	req->out->end = req->out->start + mark;
	log_debug("msgid %u: %s", req->msgid, req->call.err.message);
	if (request_pack_error(req, &da->pk) < 0)
		req->out->end = req->out->start + mark;
}
