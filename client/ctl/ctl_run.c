/* tensorctl run (op.run) and graph (graph.run). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl_cmd.h"
#include "dtype.h"
#include "json.h"
#include "json_parse.h"
#include "pack.h"
#include "print.h"
#include "wire_limits.h"

#define MSG_MAX 512

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
		ctl_print_stored(&info);
	} else {
		ctl_print_inline(c, (int)info.dtype, info.rank, info.shape, data, len);
		if (c->json)
			fputc('\n', stdout);
	}
out:
	free(data);
	msgpack_sbuffer_destroy(&sb);
	return status;
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
