/* libtensord: models (model.define, model.list, model.stat, model.delete,
 * model.evaluate, model.predict). Training a model is train.step/train.run
 * with "model" in their params (tensord_train_step_raw/_run_raw). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "connection.h"
#include "methods.h"
#include "name.h"
#include "pack.h"
#include "wire_limits.h"

static int check_model_name(struct tensord *td, const char *name)
{
	if (!name || !tdp_ref_valid(name, strnlen(name, TDP_MAX_NAME_LEN + 1), false))
		return tdc_fail(td, -EINVAL, "invalid model name (1-%d bytes of A-Z a-z 0-9 . _ : / -)",
			        TDP_MAX_NAME_LEN);
	return 0;
}

/* Call `method` with {"name": name} plus, when `tensors` >= 0, {"tensors": bool}. */
static int call_named(struct tensord *td, const char *method, const char *name, int tensors,
		      void **ret_result, size_t *ret_len)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int r;

	if ((r = check_model_name(td, name)) < 0)
		return r;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (msgpack_pack_map(&pk, tensors >= 0 ? 2 : 1) || tdp_pack_cstr(&pk, "name") || tdp_pack_cstr(&pk, name) ||
	    (tensors >= 0 && (tdp_pack_cstr(&pk, "tensors") ||
			      (tensors ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk))))) {
		msgpack_sbuffer_destroy(&sb);
		return tdc_fail(td, -ENOMEM, "out of memory");
	}
	r = tensord_call_raw(td, method, sb.data, sb.size, ret_result, ret_len);
	msgpack_sbuffer_destroy(&sb);
	return r;
}

int tensord_model_define_raw(struct tensord *td, const void *params, size_t len, void **ret_result,
			     size_t *ret_len)
{
	if (!td)
		return -EINVAL;
	if (!params)
		return tdc_fail(td, -EINVAL, "model.define needs params {\"name\", \"nodes\", \"loss\", \"params\"}");
	return tensord_call_raw(td, TDP_METHOD_MODEL_DEFINE, params, len, ret_result, ret_len);
}

int tensord_model_list_raw(struct tensord *td, void **ret_result, size_t *ret_len)
{
	if (!td)
		return -EINVAL;
	return tensord_call_raw(td, TDP_METHOD_MODEL_LIST, NULL, 0, ret_result, ret_len);
}

int tensord_model_stat_raw(struct tensord *td, const char *name, void **ret_result, size_t *ret_len)
{
	if (!td)
		return -EINVAL;
	return call_named(td, TDP_METHOD_MODEL_STAT, name, -1, ret_result, ret_len);
}

int tensord_model_delete(struct tensord *td, const char *name, int tensors)
{
	void *res = NULL;
	size_t len;
	int r;

	if (!td)
		return -EINVAL;
	r = call_named(td, TDP_METHOD_MODEL_DELETE, name, tensors ? 1 : 0, &res, &len);
	free(res);
	return r;
}

int tensord_model_evaluate_raw(struct tensord *td, const void *params, size_t len, void **ret_result,
			       size_t *ret_len)
{
	if (!td)
		return -EINVAL;
	if (!params)
		return tdc_fail(td, -EINVAL, "model.evaluate needs params {\"model\", \"data\"}");
	return tensord_call_raw(td, TDP_METHOD_MODEL_EVALUATE, params, len, ret_result, ret_len);
}

int tensord_model_predict_raw(struct tensord *td, const void *params, size_t len, void **ret_result,
			      size_t *ret_len)
{
	if (!td)
		return -EINVAL;
	if (!params)
		return tdc_fail(td, -EINVAL, "model.predict needs params {\"model\", \"inputs\"}");
	return tensord_call_raw(td, TDP_METHOD_MODEL_PREDICT, params, len, ret_result, ret_len);
}
