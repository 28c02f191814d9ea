/* store.sync (docs/protocol.md, "Durability"): write everything dirty now
 * and say what was written (persist/checkpoint.h). */
#include "methods/methods_store.h"

#include <inttypes.h>

#include "daemon.h"
#include "methods/params.h"
#include "pack.h"
#include "persist/checkpoint.h"
#include "rpc.h"
#include "status.h"

int method_store_sync(struct request *req)
{
	struct checkpoint_result res;
	char err[TDP_MAX_ERROR_MESSAGE];
	msgpack_packer *pk = req->pk;
	int r;

	if (params_none(req) < 0)
		return -1;
	if (!req->call.d->persist)
		return request_fail(req, TDP_FAILED_PRECONDITION,
				    "persistence is off: start tensord with --state-dir (or state_dir in "
				    "its config) and persist not 'no'");
	r = checkpoint_sync(req->call.d, req->call.cred.uid, &res, err, sizeof(err));
	if (r < 0)
		return request_fail(req, TDP_UNAVAILABLE, "%s", err);
	/* The caller's own failures are its error; another user's are only
	 * counted (their names are that user's business). */
	if (res.failed_mine)
		return request_fail(req, TDP_UNAVAILABLE,
				    "%" PRIu64 " of your tensors or models could not be "
				    "written (they stay dirty and are retried; the rest were written): %s",
				    res.failed_mine, res.mine);
	if (tdp_write_result_head(pk, req->msgid) < 0 || msgpack_pack_map(pk, 6) ||
	    tdp_pack_cstr(pk, "failed") || msgpack_pack_uint64(pk, res.failed) ||
	    tdp_pack_cstr(pk, "written") || msgpack_pack_uint64(pk, res.written) ||
	    tdp_pack_cstr(pk, "bytes") || msgpack_pack_uint64(pk, res.bytes) ||
	    tdp_pack_cstr(pk, "removed") || msgpack_pack_uint64(pk, res.removed) ||
	    tdp_pack_cstr(pk, "models") || msgpack_pack_uint64(pk, res.models) ||
	    tdp_pack_cstr(pk, "seconds") || msgpack_pack_double(pk, res.seconds))
		return request_fail(req, TDP_INTERNAL, "out of memory");
	return 0;
}
