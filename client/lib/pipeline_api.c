/* libtensord: taking pipelined answers (tensord_next_reply, tensord_recv) and
 * driving a connection from an event loop (tensord_fd, tensord_flush,
 * tensord_consume_input). The requests are queued by tensord_append_* in
 * tensor_api.c and op_api.c; the queue and the reading are connection.c's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "connection.h"

size_t tensord_pending(const struct tensord *td)
{
	return td ? td->npending : 0;
}

int tensord_recv(struct tensord *td, uint32_t *ret_msgid, void **ret_result, size_t *ret_len)
{
	const msgpack_object *res = NULL;
	enum tdc_kind kind;
	uint32_t msgid;
	void *copy = NULL;
	size_t len = 0;
	int r;

	if (!td)
		return -EINVAL;
	if (td->broken)
		return td->broken;
	if (!ret_result || !ret_len)
		return tdc_fail(td, -EINVAL, "missing argument");
	r = tdc_take_pending(td, &msgid, &kind, &res);
	if (r < 0 && r != -TENSORD_EREMOTE)
		return r;
	if (r == 0)
		r = tdc_copy_object(td, res, &copy, &len);
	tdc_request_end(td);
	/* The answer is used up whatever came of it. */
	if (ret_msgid)
		*ret_msgid = msgid;
	if (r < 0)
		return r;
	*ret_result = copy;
	*ret_len = len;
	return 0;
}

/* Parse the answer `res` of a request of `kind` as its blocking call does:
 * *ret_info, and *ret_data the data bin when there is one (else NULL). */
static int parse_reply(struct tensord *td, enum tdc_kind kind, const msgpack_object *res,
		       struct tensord_tensor_info *ret_info, const msgpack_object **ret_data)
{
	*ret_data = NULL;
	switch (kind) {
	case TD_KIND_INFO:
		return tdc_result_info(td, res, ret_info);
	case TD_KIND_GET:
		return tdc_result_get(td, res, ret_info, ret_data);
	case TD_KIND_DELETE:
		if (res->type != MSGPACK_OBJECT_MAP)
			return tdc_fail(td, -EPROTO, "malformed reply to tensor.delete");
		return 0;
	case TD_KIND_OP_STORED:
	case TD_KIND_OP_INLINE:
		return tdc_result_op(td, res, kind == TD_KIND_OP_STORED, ret_info, ret_data);
	case TD_KIND_RAW:
	default:
		return 0;
	}
}

int tensord_next_reply(struct tensord *td, uint32_t *ret_msgid, struct tensord_tensor_info *ret_info,
		       void **ret_data, size_t *ret_len)
{
	struct tensord_tensor_info info;
	const msgpack_object *res = NULL, *data = NULL;
	enum tdc_kind kind;
	uint32_t msgid;
	void *copy = NULL;
	size_t len = 0;
	int r;

	if (!td)
		return -EINVAL;
	memset(&info, 0, sizeof(info));
	r = tdc_take_pending(td, &msgid, &kind, &res);
	if (r < 0 && r != -TENSORD_EREMOTE)
		return r;
	if (r == 0 && kind == TD_KIND_RAW) {
		r = tdc_copy_object(td, res, &copy, &len);
	} else if (r == 0 && (r = parse_reply(td, kind, res, &info, &data)) == 0 && data) {
		len = data->via.bin.size;
		/* May release the reply: `data` is dead after this. */
		if (len > 0 && ret_data && !(copy = tdc_take_reply_bytes(td, data->via.bin.ptr, len)))
			r = tdc_fail(td, -ENOMEM, "out of memory for %zu bytes", len);
	}
	tdc_request_end(td);
	/* The answer is used up whatever came of it. */
	if (ret_msgid)
		*ret_msgid = msgid;
	if (r < 0) {
		free(copy);
		return r;
	}
	if (ret_info)
		*ret_info = info;
	if (ret_data)
		*ret_data = copy;
	else
		free(copy);
	if (ret_len)
		*ret_len = len;
	return 0;
}

int tensord_fd(const struct tensord *td)
{
	if (!td)
		return -EINVAL;
	if (td->broken)
		return td->broken;
	return td->fd;
}

int tensord_flush(struct tensord *td)
{
	if (!td)
		return -EINVAL;
	if (td->broken)
		return td->broken;
	if (td->in_notify)
		return tdc_fail(td, -EBUSY, "called from a callback of the same handle");
	return tdc_flush(td, false);
}

int tensord_consume_input(struct tensord *td)
{
	if (!td)
		return -EINVAL;
	if (td->broken)
		return td->broken;
	if (td->in_notify)
		return tdc_fail(td, -EBUSY, "called from a callback of the same handle");
	tdc_request_end(td);
	return tdc_poll_reply(td);
}
