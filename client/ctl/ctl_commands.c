/* tensorctl ping, ls, sync, chmod, put and copy. Like every command, each
 * talks to the daemon through libtensord and prints either text for people
 * or exactly one JSON document. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl_cmd.h"
#include "dtype.h"
#include "json.h"
#include "mode.h"
#include "npy.h"
#include "pack.h"
#include "print.h"
#include "safetensors.h"
#include "values.h"

#define MSG_MAX 512

static double now_ms(void)
{
	return ctl_now() * 1e3;
}

int ctl_cmd_ping(struct ctl *c)
{
	const msgpack_object *res, *version, *proto;
	msgpack_unpacked u;
	void *buf = NULL;
	double t0, ms;
	int status;

	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	t0 = now_ms();
	if ((status = ctl_call_named(c, "ping", NULL, &u, &buf)) != CTL_EXIT_OK)
		return status;
	ms = now_ms() - t0;
	res = &u.data;
	version = tdp_map_find(res, "version");
	proto = tdp_map_find(res, "protocol");
	if (c->json) {
		fputc('{', stdout);
		for (uint32_t i = 0; res->type == MSGPACK_OBJECT_MAP && i < res->via.map.size; i++) {
			ctl_json_msgpack(stdout, &res->via.map.ptr[i].key);
			fputc(':', stdout);
			ctl_json_msgpack(stdout, &res->via.map.ptr[i].val);
			fputc(',', stdout);
		}
		printf("\"rtt_ms\":%.3f}\n", ms);
	} else {
		printf("pong from tensord ");
		if (version && version->type == MSGPACK_OBJECT_STR)
			printf("%.*s", (int)(version->via.str.size > 64 ? 64 : version->via.str.size),
			       version->via.str.ptr);
		else
			printf("(unknown version)");
		if (proto && proto->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			printf(" (protocol %" PRIu64 ")", proto->via.u64);
		printf(" in %.3f ms\n", ms);
	}
	msgpack_unpacked_destroy(&u);
	free(buf);
	return CTL_EXIT_OK;
}

int ctl_cmd_ls(struct ctl *c)
{
	struct tensord_tensor_info *list = NULL;
	size_t n = 0;
	int r, status;

	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((r = tensord_list(c->td, c->npos ? c->pos[0] : NULL, &list, &n)) < 0)
		return ctl_call_failed(c, r);
	if (c->json) {
		fputs("{\"tensors\":[", stdout);
		for (size_t i = 0; i < n; i++) {
			if (i > 0)
				fputc(',', stdout);
			ctl_json_info(stdout, &list[i]);
		}
		fputs("]}\n", stdout);
	} else {
		ctl_print_tensor_table(stdout, list, n);
	}
	free(list);
	return CTL_EXIT_OK;
}

int ctl_cmd_sync(struct ctl *c)
{
	const msgpack_object *written, *bytes, *removed, *seconds;
	uint64_t w = 0, b = 0, r = 0;
	msgpack_unpacked u;
	void *buf = NULL;
	char size[32];
	int status;

	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((status = ctl_call_named(c, "store.sync", NULL, &u, &buf)) != CTL_EXIT_OK)
		return status;
	if (c->json) {
		ctl_json_msgpack(stdout, &u.data);
		fputc('\n', stdout);
	} else {
		written = tdp_map_find(&u.data, "written");
		bytes = tdp_map_find(&u.data, "bytes");
		removed = tdp_map_find(&u.data, "removed");
		seconds = tdp_map_find(&u.data, "seconds");
		if (written)
			tdp_obj_uint(written, &w);
		if (bytes)
			tdp_obj_uint(bytes, &b);
		if (removed)
			tdp_obj_uint(removed, &r);
		ctl_format_size(size, sizeof(size), b);
		printf("synced: %" PRIu64 " tensors written (%s), %" PRIu64 " removed in %.3f s\n", w, size, r,
		       seconds && seconds->type == MSGPACK_OBJECT_FLOAT64 ? seconds->via.f64 : 0.0);
	}
	msgpack_unpacked_destroy(&u);
	free(buf);
	return CTL_EXIT_OK;
}

int ctl_cmd_chmod(struct ctl *c)
{
	const char *mode = strcmp(c->pos[0], "-") ? c->pos[0] : NULL;
	struct tensord_tensor_info info;
	int64_t group = -1;
	uint32_t bits;
	char *end;
	int r, status;

	if (c->group) {
		errno = 0;
		group = (int64_t)strtoll(c->group, &end, 10);
		if (errno || end == c->group || *end || group < 0 || group >= (int64_t)UINT32_MAX)
			return ctl_usage_error("chmod: --group takes a numeric gid, not '%.64s'", c->group);
	}
	if (!mode && group < 0)
		return ctl_usage_error("chmod: MODE '-' (keep the mode) needs --group");
	if (mode && tdp_mode_parse(mode, strlen(mode), &bits) < 0)
		return ctl_usage_error("chmod: invalid mode '%.64s' (private, or a comma list of group-read, "
				       "group-write, world-read, world-write)", mode);
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((r = tensord_chmod(c->td, c->pos[1], mode, group, &info)) < 0)
		return ctl_call_failed(c, r);
	if (c->json) {
		ctl_json_info(stdout, &info);
		fputc('\n', stdout);
	} else {
		printf("%s: owner %" PRIu32 ", group %" PRIu32 ", mode %s\n", info.name, info.owner,
		       info.group, info.mode);
	}
	return CTL_EXIT_OK;
}

/* The tensor `put` stores, from --values or --file. */
struct put_source {
	int dtype;
	uint32_t rank;
	uint64_t shape[TDP_MAX_RANK];
	const void *data;
	size_t len;
	void *owned;          /* malloc'd data to free */
	struct npy_file npy;  /* the mapped file */
	struct st_file st;    /* or the mapped .safetensors file */
};

/* put --file F.safetensors: the file's one tensor, or the one named like
 * the target when it holds several. No dtype conversion. */
static int source_from_safetensors(struct ctl *c, struct put_source *s, int want)
{
	char err[MSG_MAX];
	const struct st_tensor *t = NULL;
	int dt;

	if (st_load(c->file, &s->st, err, sizeof(err)) < 0)
		return ctl_error("%s: %s", c->file, err);
	if (s->st.ntensors == 1)
		t = &s->st.tensors[0];
	for (size_t i = 0; !t && i < s->st.ntensors; i++)
		if (strcmp(s->st.tensors[i].name, c->pos[0]) == 0)
			t = &s->st.tensors[i];
	if (!t)
		return ctl_error("%s holds %zu tensors, none named '%s' (tensorctl load puts them all)",
				 c->file, s->st.ntensors, c->pos[0]);
	dt = st_dtype_to_tensord((int)t->dtype);
	if (dt < 0)
		return ctl_error("%s: tensor '%s' is %s, which tensord does not store", c->file, t->name,
				 st_dtype_name((int)t->dtype));
	if (want >= 0 && want != dt)
		return ctl_usage_error("%s: tensor '%s' is %s; safetensors input is not converted (--dtype %s)",
				       c->file, t->name, tdp_dtype_name(dt), tdp_dtype_name(want));
	s->dtype = dt;
	s->rank = t->rank;
	for (uint32_t d = 0; d < t->rank; d++)
		s->shape[d] = t->shape[d];
	s->data = t->data;
	s->len = (size_t)(t->end - t->begin);
	return CTL_EXIT_OK;
}

static int source_from_values(struct ctl *c, struct put_source *s)
{
	char err[MSG_MAX], shape[256];
	uint64_t count = 0;
	size_t n;
	int r;

	if (ctl_parse_values(c->values, s->dtype, &s->owned, &n, err, sizeof(err)) < 0)
		return ctl_usage_error("--values: %s", err);
	/* An empty list is more often an empty shell variable than a wish. */
	if (n == 0 && !c->shape)
		return ctl_usage_error("--values is empty (add --shape 0 to store an empty tensor)");
	if (!c->shape) {
		s->rank = 1;
		s->shape[0] = n;
	} else if (ctl_parse_shape(c->shape, s->shape, &s->rank, err, sizeof(err)) < 0) {
		return ctl_usage_error("--shape: %s", err);
	}
	r = tdp_shape_count(s->shape, s->rank, tdp_dtype_size(s->dtype), &count);
	if (r < 0 || count != n) {
		ctl_format_shape(shape, sizeof(shape), s->rank, s->shape);
		if (r < 0)
			return ctl_usage_error("shape %s is too large", shape);
		return ctl_usage_error("%zu value%s given, shape %s needs %" PRIu64, n,
				       n == 1 ? "" : "s", shape, count);
	}
	s->data = s->owned;
	s->len = n * tdp_dtype_size(s->dtype);
	return CTL_EXIT_OK;
}

static int source_from_file(struct ctl *c, struct put_source *s, int want)
{
	char err[MSG_MAX];
	const struct npy_header *h = &s->npy.hdr;
	size_t size;

	if (npy_load(c->file, &s->npy, err, sizeof(err)) < 0)
		return ctl_error("%s: %s", c->file, err);
	s->dtype = npy_target_dtype(h->elem, want, err, sizeof(err));
	if (s->dtype < 0)
		return ctl_usage_error("%s: %s", c->file, err);
	s->rank = h->rank;
	memcpy(s->shape, h->shape, sizeof(s->shape));
	size = tdp_dtype_size(s->dtype);
	if (h->count > SIZE_MAX / size)
		return ctl_error("%s: too large", c->file);
	s->len = (size_t)h->count * size;
	if (npy_same_bytes(h->elem, s->dtype)) {
		s->data = s->npy.data;
		return CTL_EXIT_OK;
	}
	s->owned = malloc(s->len ? s->len : 1);
	if (!s->owned)
		return ctl_error("out of memory converting %s", c->file);
	if (npy_convert(h->elem, s->npy.data, s->dtype, s->owned, h->count, err, sizeof(err)) < 0)
		return ctl_error("%s: %s", c->file, err);
	s->data = s->owned;
	return CTL_EXIT_OK;
}

int ctl_cmd_put(struct ctl *c)
{
	struct put_source s = { .dtype = TDP_DTYPE_F32 };
	struct tensord_put_options popts = TENSORD_PUT_OPTIONS_INIT;
	struct tensord_tensor_info info;
	struct ctl_bar bar;
	char shape[256], size[32], label[300];
	int want = -1, device = TENSORD_DEVICE_ANY, r, status, memfd;

	if (!c->file == !c->values) {
		return ctl_usage_error("put needs exactly one of --file or --values");
	}
	if (c->device && (status = ctl_parse_device("--device", c->device, &device)) != CTL_EXIT_OK)
		return status;
	if (c->file && c->shape)
		return ctl_usage_error("--shape goes with --values; a .npy file has its own");
	if (c->dtype) {
		want = tdp_dtype_parse(c->dtype, strlen(c->dtype));
		if (want < 0)
			return ctl_usage_error("unknown dtype '%s' (f32 f16 bf16 i32 u8)", c->dtype);
		s.dtype = want;
	}
	if (c->values)
		status = source_from_values(c, &s);
	else if (ctl_is_safetensors(c->file))
		status = source_from_safetensors(c, &s, want);
	else
		status = source_from_file(c, &s, want);
	if (status != CTL_EXIT_OK)
		goto out;
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		goto out;
	snprintf(label, sizeof(label), "put %s", c->pos[0]);
	ctl_bar_start(&bar, c, label);
	popts.device = device;
	/* A large file travels in a memfd, not through the socket (docs/tensorctl.1). */
	if (s.len >= CTL_MEMFD_MIN && tensord_memfd(s.data, s.len, &memfd) == 0) {
		r = tensord_put_fd(c->td, c->pos[0], (enum tensord_dtype)s.dtype, s.rank, s.shape,
				   memfd, 0, &popts, &info);
		close(memfd);
		if (r >= 0)
			ctl_bar_done(&bar, s.len);
	} else {
		r = tensord_put_opts(c->td, c->pos[0], (enum tensord_dtype)s.dtype, s.rank, s.shape,
				     s.data, s.len, &popts, &info);
	}
	ctl_bar_finish(&bar);
	if (r < 0) {
		status = ctl_call_failed(c, r);
		goto out;
	}
	if (c->json) {
		ctl_json_info(stdout, &info);
		fputc('\n', stdout);
	} else {
		ctl_format_shape(shape, sizeof(shape), info.rank, info.shape);
		ctl_format_size(size, sizeof(size), info.bytes);
		printf("stored %s: %s %s, %s, version %" PRIu64 ", device %" PRIu32 "\n", info.name,
		       tensord_dtype_name(info.dtype), shape, size, info.version, info.device);
	}
out:
	free(s.owned);
	npy_close(&s.npy);
	st_close(&s.st);
	return status;
}

int ctl_cmd_copy(struct ctl *c)
{
	struct tensord_tensor_info info;
	char shape[256], size[32];
	int device = TENSORD_DEVICE_ANY, r, status;

	if (c->device && (status = ctl_parse_device("--device", c->device, &device)) != CTL_EXIT_OK)
		return status;
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((r = tensord_copy(c->td, c->pos[0], c->pos[1], device, &info)) < 0)
		return ctl_call_failed(c, r);
	if (c->json) {
		ctl_json_info(stdout, &info);
		fputc('\n', stdout);
		return CTL_EXIT_OK;
	}
	ctl_format_shape(shape, sizeof(shape), info.rank, info.shape);
	ctl_format_size(size, sizeof(size), info.bytes);
	if (strcmp(c->pos[0], c->pos[1]) == 0)
		printf("moved %s to device %" PRIu32 ": %s %s, %s\n", info.name, info.device,
		       tensord_dtype_name(info.dtype), shape, size);
	else
		printf("copied %s to %s on device %" PRIu32 ": %s %s, %s, version %" PRIu64 "\n",
		       c->pos[0], info.name, info.device, tensord_dtype_name(info.dtype), shape, size,
		       info.version);
	return CTL_EXIT_OK;
}
