/* tensorctl run (op.run) and graph (graph.run), and the helpers that the
 * train commands share with graph. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "dtype.h"
#include "json.h"
#include "json_parse.h"
#include "pack.h"
#include "print.h"
#include "wire_limits.h"

#define MSG_MAX 512
/* Graph files larger than this are refused before reading them. */
#define GRAPH_FILE_MAX (64u << 20)

/* Pack --attr key=value... as one msgpack map into `sb`. */
static int pack_attrs(struct ctl *c, msgpack_sbuffer *sb)
{
	msgpack_packer pk;
	char err[MSG_MAX];

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_pack_map(&pk, (uint32_t)c->nattrs))
		return ctl_error("out of memory");
	for (int i = 0; i < c->nattrs; i++) {
		const char *eq = strchr(c->attrs[i], '=');

		if (!eq || eq == c->attrs[i])
			return ctl_usage_error("--attr '%s': expected key=value", c->attrs[i]);
		if (tdp_pack_strn(&pk, c->attrs[i], (size_t)(eq - c->attrs[i])))
			return ctl_error("out of memory");
		if (tdp_attr_value_to_msgpack(eq + 1, &pk, err, sizeof(err)) < 0)
			return ctl_usage_error("--attr %.*s: %s", (int)(eq - c->attrs[i]), c->attrs[i], err);
	}
	return CTL_EXIT_OK;
}

/* Print a result that came back inline: a NumPy-style array, or with --json
 * {"dtype", "shape", "data"} (no newline in JSON mode). */
static void print_inline(struct ctl *c, int dtype, uint32_t rank, const uint64_t *shape,
			 const void *data, size_t len)
{
	if (c->json) {
		fprintf(stdout, "{\"dtype\":\"%s\",\"shape\":", tdp_dtype_name(dtype));
		ctl_json_shape(stdout, rank, shape);
		fputs(",\"data\":", stdout);
		ctl_print_json_values(stdout, dtype, data, len / tdp_dtype_size(dtype));
		fputc('}', stdout);
	} else {
		ctl_print_array(stdout, dtype, rank, shape, data);
	}
}

static void print_stored(const struct tensord_tensor_info *info)
{
	char shape[256], size[32];

	ctl_format_shape(shape, sizeof(shape), info->rank, info->shape);
	ctl_format_size(size, sizeof(size), info->bytes);
	printf("stored %s: %s %s, %s, version %" PRIu64 ", device %" PRIu32 "\n", info->name,
	       tensord_dtype_name(info->dtype), shape, size, info->version, info->device);
}

int ctl_cmd_run(struct ctl *c)
{
	struct tensord_op_run_options ropts = TENSORD_OP_RUN_OPTIONS_INIT;
	struct tensord_tensor_info info;
	msgpack_sbuffer sb;
	void *data = NULL;
	size_t len = 0;
	int device = TENSORD_DEVICE_ANY, r, status;

	if (c->device && (status = ctl_parse_device("--device", c->device, &device)) != CTL_EXIT_OK)
		return status;
	msgpack_sbuffer_init(&sb);
	if (c->nattrs > 0 && (status = pack_attrs(c, &sb)) != CTL_EXIT_OK)
		goto out;
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		goto out;
	ropts.device = device;
	r = tensord_op_run_opts(c->td, c->pos[0], (size_t)(c->npos - 1), c->pos + 1,
				c->nattrs ? sb.data : NULL, sb.size, c->out, &ropts, &info, &data, &len);
	if (r < 0) {
		status = ctl_call_failed(c, r);
		goto out;
	}
	if (c->out && c->json) {
		ctl_json_info(stdout, &info);
		fputc('\n', stdout);
	} else if (c->out) {
		print_stored(&info);
	} else {
		print_inline(c, (int)info.dtype, info.rank, info.shape, data, len);
		if (c->json)
			fputc('\n', stdout);
	}
out:
	free(data);
	msgpack_sbuffer_destroy(&sb);
	return status;
}

int ctl_print_output(struct ctl *c, const msgpack_object *key, const msgpack_object *o)
{
	const msgpack_object *dt = tdp_map_find(o, "dtype"), *sh = tdp_map_find(o, "shape");
	const msgpack_object *data = tdp_map_find(o, "data");
	uint64_t shape[TDP_MAX_RANK], count;
	int dtype;

	if (key->type != MSGPACK_OBJECT_STR || !dt || dt->type != MSGPACK_OBJECT_STR || !sh ||
	    sh->type != MSGPACK_OBJECT_ARRAY || sh->via.array.size > TDP_MAX_RANK || !data ||
	    data->type != MSGPACK_OBJECT_BIN)
		return ctl_error("malformed reply: an output lacks dtype, shape or data");
	dtype = tdp_dtype_parse(dt->via.str.ptr, dt->via.str.size);
	for (uint32_t i = 0; i < sh->via.array.size; i++)
		if (tdp_obj_uint(&sh->via.array.ptr[i], &shape[i]) < 0)
			return ctl_error("malformed reply: a bad shape");
	if (dtype < 0 || tdp_shape_count(shape, sh->via.array.size, tdp_dtype_size(dtype), &count) < 0 ||
	    count * tdp_dtype_size(dtype) != data->via.bin.size)
		return ctl_error("malformed reply: output data does not match its dtype and shape");
	if (c->json) {
		ctl_json_string(stdout, key->via.str.ptr, key->via.str.size);
		fputc(':', stdout);
	} else {
		printf("%.*s =\n", (int)(key->via.str.size > 255 ? 255 : key->via.str.size),
		       key->via.str.ptr);
	}
	print_inline(c, dtype, sh->via.array.size, shape, data->via.bin.ptr, data->via.bin.size);
	return CTL_EXIT_OK;
}

/* The stored tensors of a graph result, for people: "stored NAME: ...". */
static int print_stored_meta(const msgpack_object *name, const msgpack_object *meta)
{
	const msgpack_object *dt = tdp_map_find(meta, "dtype"), *sh = tdp_map_find(meta, "shape");
	const msgpack_object *by = tdp_map_find(meta, "bytes"), *ve = tdp_map_find(meta, "version");
	const msgpack_object *dev = tdp_map_find(meta, "device");
	struct tensord_tensor_info info;
	uint64_t device = 0;
	int dtype;

	memset(&info, 0, sizeof(info));
	if ((dev && (tdp_obj_uint(dev, &device) < 0 || device > UINT32_MAX)) ||
	    tdp_obj_strcpy(name, info.name, sizeof(info.name)) < 0 || !dt ||
	    dt->type != MSGPACK_OBJECT_STR || !sh || sh->type != MSGPACK_OBJECT_ARRAY ||
	    sh->via.array.size > TDP_MAX_RANK || !by || tdp_obj_uint(by, &info.bytes) < 0 || !ve ||
	    tdp_obj_uint(ve, &info.version) < 0)
		return ctl_error("malformed reply: bad metadata of a stored tensor");
	dtype = tdp_dtype_parse(dt->via.str.ptr, dt->via.str.size);
	if (dtype < 0)
		return ctl_error("malformed reply: bad metadata of a stored tensor");
	info.dtype = (enum tensord_dtype)dtype;
	info.device = (uint32_t)device;
	info.rank = sh->via.array.size;
	for (uint32_t i = 0; i < info.rank; i++)
		if (tdp_obj_uint(&sh->via.array.ptr[i], &info.shape[i]) < 0)
			return ctl_error("malformed reply: bad metadata of a stored tensor");
	print_stored(&info);
	return CTL_EXIT_OK;
}

int ctl_print_graph_result(struct ctl *c, const msgpack_object *res)
{
	const msgpack_object *outs = tdp_map_find(res, "outputs"), *stored = tdp_map_find(res, "stored");
	int status;

	if (!outs || outs->type != MSGPACK_OBJECT_MAP || !stored || stored->type != MSGPACK_OBJECT_MAP)
		return ctl_error("malformed reply: no outputs or stored map");
	if (c->json)
		fputs("{\"outputs\":{", stdout);
	for (uint32_t i = 0; i < outs->via.map.size; i++) {
		if (c->json && i > 0)
			fputc(',', stdout);
		status = ctl_print_output(c, &outs->via.map.ptr[i].key, &outs->via.map.ptr[i].val);
		if (status != CTL_EXIT_OK)
			return status;
	}
	if (c->json) {
		/* the daemon's metadata maps, as they are */
		fputs("},\"stored\":", stdout);
		ctl_json_msgpack(stdout, stored);
		fputs("}\n", stdout);
		return CTL_EXIT_OK;
	}
	for (uint32_t i = 0; i < stored->via.map.size; i++)
		if ((status = print_stored_meta(&stored->via.map.ptr[i].key,
						&stored->via.map.ptr[i].val)) != CTL_EXIT_OK)
			return status;
	return CTL_EXIT_OK;
}

int ctl_read_json_map(const char *path, const char *what, msgpack_sbuffer *sb)
{
	msgpack_packer pk;
	char err[MSG_MAX], *text = NULL;
	size_t len = 0;
	int r, status;

	if ((status = ctl_read_input(path, GRAPH_FILE_MAX, &text, &len)) != CTL_EXIT_OK)
		return status;
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	r = tdp_json_to_msgpack(text, len, &pk, err, sizeof(err));
	free(text);
	if (r < 0)
		return ctl_error("%s: %s", path, err);
	if (sb->size == 0 || !(((uint8_t)sb->data[0] >= 0x80 && (uint8_t)sb->data[0] <= 0x8f) ||
			       (uint8_t)sb->data[0] == 0xde || (uint8_t)sb->data[0] == 0xdf))
		return ctl_error("%s: the file must hold one JSON object %s", path, what);
	return CTL_EXIT_OK;
}

int ctl_cmd_graph(struct ctl *c)
{
	msgpack_sbuffer sb;
	msgpack_unpacked u;
	void *res = NULL;
	size_t rlen = 0, off = 0;
	int r, status;

	msgpack_sbuffer_init(&sb);
	msgpack_unpacked_init(&u);
	if ((status = ctl_read_json_map(c->pos[0], "{\"nodes\": [...]}", &sb)) != CTL_EXIT_OK)
		goto out;
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		goto out;
	if ((r = tensord_graph_run_raw(c->td, sb.data, sb.size, &res, &rlen)) < 0) {
		status = ctl_call_failed(c, r);
		goto out;
	}
	if (msgpack_unpack_next(&u, res, rlen, &off) != MSGPACK_UNPACK_SUCCESS) {
		status = ctl_error("malformed reply");
		goto out;
	}
	status = ctl_print_graph_result(c, &u.data);
out:
	msgpack_unpacked_destroy(&u);
	free(res);
	msgpack_sbuffer_destroy(&sb);
	return status;
}
