/* libtensord: running ops (op.run) and graphs (graph.run). */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "connection.h"
#include "dtype.h"
#include "methods.h"
#include "name.h"
#include "pack.h"
#include "wire_limits.h"

#define TD_OP_NAME_MAX 64

/* The inline result {dtype, shape, bytes, data} of op.run into *ret_info and
 * *ret_data (the bin, pointing into the reply). */
static int parse_inline(struct tensord *td, const msgpack_object *res,
			struct tensord_tensor_info *ret_info, const msgpack_object **ret_data)
{
	struct tensord_tensor_info info;
	const msgpack_object *dt, *shape, *data;
	uint64_t count;
	int dtype;

	memset(&info, 0, sizeof(info));
	dt = tdp_map_find(res, "dtype");
	shape = tdp_map_find(res, "shape");
	data = tdp_map_find(res, "data");
	if (!dt || dt->type != MSGPACK_OBJECT_STR || !shape || shape->type != MSGPACK_OBJECT_ARRAY ||
	    !data || data->type != MSGPACK_OBJECT_BIN)
		return tdc_fail(td, -EPROTO, "malformed reply to op.run: no dtype, shape or data");
	dtype = tdp_dtype_parse(dt->via.str.ptr, dt->via.str.size);
	if (dtype < 0 || shape->via.array.size > TDP_MAX_RANK)
		return tdc_fail(td, -EPROTO, "malformed reply to op.run: bad dtype or rank");
	info.dtype = (enum tensord_dtype)dtype;
	info.rank = shape->via.array.size;
	for (uint32_t i = 0; i < info.rank; i++)
		if (tdp_obj_uint(&shape->via.array.ptr[i], &info.shape[i]) < 0)
			return tdc_fail(td, -EPROTO, "malformed reply to op.run: bad shape");
	if (tdp_shape_count(info.shape, info.rank, tdp_dtype_size(dtype), &count) < 0 ||
	    count * tdp_dtype_size(dtype) != data->via.bin.size)
		return tdc_fail(td, -EPROTO, "malformed reply to op.run: %u data bytes do not match the shape",
			        data->via.bin.size);
	info.bytes = data->via.bin.size;
	*ret_info = info;
	*ret_data = data;
	return 0;
}

/* Check the arguments of tensord_op_run before anything is sent. */
static int check_op_args(struct tensord *td, const char *op, size_t ninputs,
			 const char *const *inputs, const void *attrs, size_t attrs_len,
			 const char *out, void **ret_data, size_t *ret_len)
{
	size_t n = op ? strnlen(op, TD_OP_NAME_MAX + 1) : 0;

	if (n == 0 || n > TD_OP_NAME_MAX)
		return tdc_fail(td, -EINVAL, "op name must be 1-%d bytes", TD_OP_NAME_MAX);
	if (ninputs > 0 && !inputs)
		return tdc_fail(td, -EINVAL, "missing argument");
	if (ninputs > 64)
		return tdc_fail(td, -EINVAL, "%zu inputs are more than any op takes", ninputs);
	for (size_t i = 0; i < ninputs; i++) {
		size_t len = inputs[i] ? strnlen(inputs[i], TDP_MAX_NAME_LEN + 1) : 0;

		if (!inputs[i] || !tdp_ref_valid(inputs[i], len, false))
			return tdc_fail(td, -EINVAL, "input %zu is no valid tensor name", i);
	}
	if (out && !tdp_ref_valid(out, strnlen(out, TDP_MAX_NAME_LEN + 1), false))
		return tdc_fail(td, -EINVAL,
			        "invalid out name (1-%d bytes of A-Z a-z 0-9 . _ : / -)", TDP_MAX_NAME_LEN);
	if (attrs && !tdc_is_one_map(attrs, attrs_len))
		return tdc_fail(td, -EINVAL, "attrs must be one packed msgpack map");
	if (!out && (!ret_data || !ret_len))
		return tdc_fail(td, -EINVAL, "missing argument: the result has nowhere to go");
	return 0;
}

int tdc_result_op(struct tensord *td, const msgpack_object *res, bool stored,
		  struct tensord_tensor_info *ret_info, const msgpack_object **ret_data)
{
	char why[160];

	if (!stored)
		return parse_inline(td, res, ret_info, ret_data);
	if (tdc_parse_tensor_info(res, ret_info, why, sizeof(why)) < 0)
		return tdc_fail(td, -EPROTO, "malformed reply: %s", why);
	*ret_data = NULL;
	return 0;
}

/* Pack op.run's params into the request begun, attrs left for the tail. */
static int pack_op_run(struct tensord *td, msgpack_packer *pk, const char *op, size_t ninputs,
		       const char *const *inputs, const void *attrs, const char *out, int device)
{
	/* attrs go last: their packed bytes are sent as they are, after the key. */
	if (msgpack_pack_array(pk, 1) ||
	    msgpack_pack_map(pk, 2 + !!out + !!attrs + (device >= 0 ? 1 : 0)) ||
	    tdp_pack_cstr(pk, "op") || tdp_pack_cstr(pk, op) ||
	    tdp_pack_cstr(pk, "inputs") || msgpack_pack_array(pk, (uint32_t)ninputs))
		return tdc_fail(td, -ENOMEM, "out of memory");
	for (size_t i = 0; i < ninputs; i++)
		if (tdp_pack_cstr(pk, inputs[i]))
			return tdc_fail(td, -ENOMEM, "out of memory");
	if ((out && (tdp_pack_cstr(pk, "out") || tdp_pack_cstr(pk, out))) ||
	    (device >= 0 && (tdp_pack_cstr(pk, "device") || msgpack_pack_int(pk, device))) ||
	    (attrs && tdp_pack_cstr(pk, "attrs")))
		return tdc_fail(td, -ENOMEM, "out of memory");
	return 0;
}

int tensord_op_run(struct tensord *td, const char *op, size_t ninputs, const char *const *inputs,
		   const void *attrs, size_t attrs_len, const char *out,
		   struct tensord_tensor_info *ret_info, void **ret_data, size_t *ret_len)
{
	return tensord_op_run_on(td, op, ninputs, inputs, attrs, attrs_len, out, TENSORD_DEVICE_ANY,
				 ret_info, ret_data, ret_len);
}

/* The size of struct tensord_op_run_options in its first release. */
#define OP_RUN_OPTIONS_V1 (offsetof(struct tensord_op_run_options, device) + sizeof(int))

int tensord_op_run_opts(struct tensord *td, const char *op, size_t ninputs,
			const char *const *inputs, const void *attrs, size_t attrs_len,
			const char *out, const struct tensord_op_run_options *opts,
			struct tensord_tensor_info *ret_info, void **ret_data, size_t *ret_len)
{
	struct tensord_op_run_options o = TENSORD_OP_RUN_OPTIONS_INIT;
	int r;

	if (!td)
		return -EINVAL;
	if (opts && (r = tdc_read_options(td, opts, OP_RUN_OPTIONS_V1, &o, sizeof(o))) < 0)
		return r;
	return tensord_op_run_on(td, op, ninputs, inputs, attrs, attrs_len, out, o.device,
				 ret_info, ret_data, ret_len);
}

int tensord_op_run_on(struct tensord *td, const char *op, size_t ninputs,
		      const char *const *inputs, const void *attrs, size_t attrs_len,
		      const char *out, int device, struct tensord_tensor_info *ret_info,
		      void **ret_data, size_t *ret_len)
{
	struct tensord_tensor_info info;
	const msgpack_object *res, *data = NULL;
	msgpack_packer *pk;
	void *copy = NULL;
	size_t len = 0;
	int r;

	if (!td)
		return -EINVAL;
	if ((r = check_op_args(td, op, ninputs, inputs, attrs, attrs_len, out, ret_data, ret_len)) < 0 ||
	    (r = tdc_check_device(td, device)) < 0)
		return r;
	if ((r = tdc_request_begin(td, TDP_METHOD_OP_RUN, &pk)) < 0)
		return r;
	if ((r = pack_op_run(td, pk, op, ninputs, inputs, attrs, out, device)) < 0)
		goto out;
	if ((r = tdc_request_finish(td, attrs, attrs ? attrs_len : 0, &res)) < 0)
		goto out;
	if ((r = tdc_result_op(td, res, out != NULL, &info, &data)) < 0)
		goto out;
	if (data) {
		len = data->via.bin.size;
		/* May release the reply: `data` is dead after this. */
		if (len > 0 && !(copy = tdc_take_reply_bytes(td, data->via.bin.ptr, len))) {
			r = tdc_fail(td, -ENOMEM, "out of memory for %zu bytes", len);
			goto out;
		}
	}
	if (ret_info)
		*ret_info = info;
	if (ret_data)
		*ret_data = copy;
	if (ret_len)
		*ret_len = len;
out:
	tdc_request_end(td);
	return r;
}

int tensord_append_op_run(struct tensord *td, const char *op, size_t ninputs,
			  const char *const *inputs, const void *attrs, size_t attrs_len,
			  const char *out, const struct tensord_op_run_options *opts,
			  uint32_t *ret_msgid)
{
	struct tensord_op_run_options o = TENSORD_OP_RUN_OPTIONS_INIT;
	msgpack_packer *pk;
	uint32_t msgid;
	void *unused_data;
	size_t unused_len;
	int r;

	if (!td)
		return -EINVAL;
	if (td->broken)
		return td->broken;
	if (opts && (r = tdc_read_options(td, opts, OP_RUN_OPTIONS_V1, &o, sizeof(o))) < 0)
		return r;
	/* The inline result goes to tensord_next_reply(): nothing to check here. */
	if ((r = check_op_args(td, op, ninputs, inputs, attrs, attrs_len, out, &unused_data,
			       &unused_len)) < 0 ||
	    (r = tdc_check_device(td, o.device)) < 0)
		return r;
	if ((r = tdc_request_begin_pipelined(td, TDP_METHOD_OP_RUN, &pk)) < 0)
		return r;
	if ((r = pack_op_run(td, pk, op, ninputs, inputs, attrs, out, o.device)) == 0 &&
	    (r = tdc_request_queue(td, attrs, attrs ? attrs_len : 0,
				   out ? TD_KIND_OP_STORED : TD_KIND_OP_INLINE, &msgid)) == 0 &&
	    ret_msgid)
		*ret_msgid = msgid;
	tdc_request_end(td);
	return r;
}

int tensord_graph_run_raw(struct tensord *td, const void *params, size_t len, void **ret_result,
			  size_t *ret_len)
{
	if (!td)
		return -EINVAL;
	if (!params)
		return tdc_fail(td, -EINVAL, "graph.run needs params {\"nodes\": [...]}");
	return tensord_call_raw(td, TDP_METHOD_GRAPH_RUN, params, len, ret_result, ret_len);
}

/* Until proto/methods.h names it (the daemon side lands separately). */
#ifndef TDP_METHOD_TRAIN_RUN
#define TDP_METHOD_TRAIN_RUN "train.run"
#endif

int tensord_train_step_raw(struct tensord *td, const void *params, size_t len, void **ret_result,
			   size_t *ret_len)
{
	if (!td)
		return -EINVAL;
	if (!params)
		return tdc_fail(td, -EINVAL, "train.step needs params {\"nodes\", \"loss\", \"params\"}");
	return tensord_call_raw(td, TDP_METHOD_TRAIN_STEP, params, len, ret_result, ret_len);
}

int tensord_train_run_raw(struct tensord *td, const void *params, size_t len, void **ret_result,
			  size_t *ret_len)
{
	if (!td)
		return -EINVAL;
	if (!params)
		return tdc_fail(td, -EINVAL,
			        "train.run needs params {\"nodes\", \"loss\", \"params\", \"data\", ...}");
	return tensord_call_raw(td, TDP_METHOD_TRAIN_RUN, params, len, ret_result, ret_len);
}
