/* rm, stat and get of tensors: NAME... or --prefix P (docs/tensorctl.1).
 *
 * One name without --prefix keeps the one-tensor output (stat_one, rm_one,
 * get_one).
 * Otherwise every tensor is tried in turn: a failure is reported on stderr
 * (one line each) and the others still go ahead; the exit status is 1 when
 * any failed, 3 (at once) when the connection is lost. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl_cmd.h"
#include "json.h"
#include "npy.h"
#include "pack.h"
#include "print.h"
#include "safetensors.h"

#define MSG_MAX 512

/* get --out: one of the forms tensorctl writes, or a directory. */
enum out_kind { OUT_BAD, OUT_FILE, OUT_STDOUT, OUT_DIR };

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n > k && strcmp(s + n - k, suffix) == 0;
}

static enum out_kind out_kind(const char *out)
{
	struct stat st;

	if (strcmp(out, "-") == 0)
		return OUT_STDOUT;
	if (ends_with(out, "/") || (stat(out, &st) == 0 && S_ISDIR(st.st_mode)))
		return OUT_DIR;
	if (ends_with(out, ".npy") || ends_with(out, ".safetensors"))
		return OUT_FILE;
	return OUT_BAD;
}

/* Checks shared by the three commands, before connecting. */
static int check_args(struct ctl *c, const char *cmd)
{
	if (c->prefix && c->npos)
		return ctl_usage_error("%s: give NAME... or --prefix, not both", cmd);
	if (!c->prefix && !c->npos)
		return ctl_usage_error("%s: missing NAME (or --prefix P)", cmd);
	if (c->prefix && !*c->prefix)
		return ctl_usage_error("%s: --prefix must not be empty (ls lists everything)", cmd);
	return CTL_EXIT_OK;
}

/* The tensors named by --prefix (sorted by name, as tensor.list sends them). */
static int list_prefix(struct ctl *c, struct tensord_tensor_info **ret_list, size_t *ret_n)
{
	int r = tensord_list(c->td, c->prefix, ret_list, ret_n);

	return r < 0 ? ctl_call_failed(c, r) : CTL_EXIT_OK;
}

/* Keep the worse of two exit statuses (connection > failure > ok). */
static int worse(int a, int b)
{
	return a == CTL_EXIT_CONNECT || b == CTL_EXIT_CONNECT ? CTL_EXIT_CONNECT : a ? a : b;
}

/* One tensor of stat, rm and get. `element`: part of a list (JSON without
 * the newline; get prints "NAME =" before the array). Each returns an exit
 * status with any error printed. c->td is connected. */
static int stat_one(struct ctl *c, const char *name)
{
	struct tensord_tensor_info info;
	int r;

	if ((r = tensord_stat(c->td, name, &info)) < 0)
		return ctl_call_failed(c, r);
	if (c->json) {
		ctl_json_info(stdout, &info);
		fputc('\n', stdout);
	} else {
		ctl_print_tensor_table(stdout, &info, 1);
	}
	return CTL_EXIT_OK;
}

static int rm_one(struct ctl *c, const char *name, bool element)
{
	const msgpack_object *bytes;
	msgpack_unpacked u;
	void *buf = NULL;
	uint64_t freed;
	char size[32];
	int status;

	if ((status = ctl_call_named(c, "tensor.delete", name, &u, &buf)) != CTL_EXIT_OK)
		return status;
	if (c->json) {
		ctl_json_msgpack(stdout, &u.data);
		if (!element)
			fputc('\n', stdout);
	} else {
		bytes = tdp_map_find(&u.data, "bytes");
		if (bytes && tdp_obj_uint(bytes, &freed) == 0) {
			ctl_format_size(size, sizeof(size), freed);
			printf("deleted %s (%s freed)\n", name, size);
		} else {
			printf("deleted %s\n", name);
		}
	}
	msgpack_unpacked_destroy(&u);
	free(buf);
	return CTL_EXIT_OK;
}

/* `out`: NULL (print), "-" (.npy on stdout), F.npy or F.safetensors. */
static int get_one(struct ctl *c, const char *name, const char *out, bool element)
{
	struct tensord_tensor_info info;
	struct ctl_bar bar;
	char err[MSG_MAX], shape[256], size[32], label[300];
	const char *end = element ? "}" : "}\n";
	uint64_t count = 0;
	void *data = NULL, *map = NULL;
	size_t len = 0;
	int r, status = CTL_EXIT_OK, memfd = -1;

	snprintf(label, sizeof(label), "get %s", name);
	ctl_bar_start(&bar, c, label);
	/* Into a file: the daemon writes the bytes into a memfd of the size
	 * stat says (docs/tensorctl.1); when that fails (no such tensor, or it
	 * grew meanwhile) the plain get answers. */
	if (out && tensord_stat(c->td, name, &info) == 0 && info.bytes <= SIZE_MAX &&
	    tensord_memfd(NULL, (size_t)info.bytes, &memfd) == 0 &&
	    (r = tensord_get_fd(c->td, name, memfd, 0, &info)) < 0) {
		close(memfd);
		memfd = -1;
	}
	if (memfd >= 0) {
		len = (size_t)info.bytes;
		if (len > 0) {
			map = mmap(NULL, len, PROT_READ, MAP_SHARED, memfd, 0);
			if (map == MAP_FAILED) {
				close(memfd);
				ctl_bar_finish(&bar);
				return ctl_error("mapping the memfd of %zu bytes: %s", len, strerror(errno));
			}
		}
		close(memfd);
		data = map;
		if (r >= 0)
			ctl_bar_done(&bar, len);
	} else {
		r = tensord_get(c->td, name, &info, &data, &len);
	}
	ctl_bar_finish(&bar);
	if (r < 0)
		return ctl_call_failed(c, r);
	count = len / tensord_dtype_size(info.dtype);
	if (out && ctl_is_safetensors(out)) {
		struct st_entry e = { .name = info.name, .dtype = (enum st_dtype)st_dtype_from_tensord((int)info.dtype),
				      .rank = info.rank, .shape = info.shape, .data = data };

		if (st_write(out, &e, 1, NULL, 0, err, sizeof(err)) < 0) {
			status = ctl_error("%s: %s", out, err);
			goto out;
		}
	}
	if (out) {
		if (!ctl_is_safetensors(out) &&
		    npy_write(out, (int)info.dtype, info.rank, info.shape, data, len, err,
			      sizeof(err)) < 0) {
			status = ctl_error("%s: %s", out, err);
			goto out;
		}
		if (c->json) {
			ctl_json_info_open(stdout, &info);
			fputs(",\"file\":", stdout);
			ctl_json_string(stdout, out, strlen(out));
			fputs(end, stdout);
		} else if (strcmp(out, "-") != 0) {
			ctl_format_shape(shape, sizeof(shape), info.rank, info.shape);
			ctl_format_size(size, sizeof(size), info.bytes);
			printf("wrote %s: %s %s %s, %s\n", out, info.name,
			       tensord_dtype_name(info.dtype), shape, size);
		}
	} else if (c->json) {
		fputs("{\"name\":", stdout);
		ctl_json_string(stdout, info.name, strlen(info.name));
		fprintf(stdout, ",\"dtype\":\"%s\",\"shape\":", tensord_dtype_name(info.dtype));
		ctl_json_shape(stdout, info.rank, info.shape);
		fputs(",\"data\":", stdout);
		ctl_print_json_values(stdout, (int)info.dtype, data, count);
		fputs(end, stdout);
	} else {
		if (element)
			printf("%s =\n", info.name);
		ctl_print_array(stdout, (int)info.dtype, info.rank, info.shape, data);
	}
out:
	if (map)
		munmap(map, len);
	else
		free(data);
	return status;
}

int ctl_cmd_stat(struct ctl *c)
{
	struct tensord_tensor_info *list = NULL;
	size_t n = 0;
	int status;

	if ((status = check_args(c, "stat")) != CTL_EXIT_OK || (status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if (!c->prefix && c->npos == 1)
		return stat_one(c, c->pos[0]);
	if (c->prefix) {
		if ((status = list_prefix(c, &list, &n)) != CTL_EXIT_OK)
			return status;
		if (n == 0)
			status = ctl_error("stat: no tensor's name starts with '%.64s'", c->prefix);
	} else {
		list = calloc((size_t)c->npos, sizeof(*list));
		if (!list)
			return ctl_error("out of memory");
		for (int i = 0; i < c->npos && status != CTL_EXIT_CONNECT; i++) {
			int r = tensord_stat(c->td, c->pos[i], &list[n]);

			if (r < 0)
				status = worse(status, ctl_call_failed(c, r));
			else
				n++;
		}
	}
	if (c->json) {
		fputs("{\"tensors\":[", stdout);
		for (size_t i = 0; i < n; i++) {
			if (i > 0)
				fputc(',', stdout);
			ctl_json_info(stdout, &list[i]);
		}
		fputs("]}\n", stdout);
	} else if (n > 0) {
		ctl_print_tensor_table(stdout, list, n);
	}
	free(list);
	return status;
}

int ctl_cmd_rm(struct ctl *c)
{
	struct tensord_tensor_info *list = NULL;
	size_t n = 0, done = 0;
	int status;

	if ((status = check_args(c, "rm")) != CTL_EXIT_OK || (status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if (!c->prefix && c->npos == 1)
		return rm_one(c, c->pos[0], false);
	if (c->prefix && (status = list_prefix(c, &list, &n)) != CTL_EXIT_OK)
		return status;
	if (!c->prefix)
		n = (size_t)c->npos;
	if (c->json)
		fputs("{\"deleted\":[", stdout);
	for (size_t i = 0; i < n && status != CTL_EXIT_CONNECT; i++) {
		int s;

		if (c->json && done > 0)
			fputc(',', stdout);
		s = rm_one(c, list ? list[i].name : c->pos[i], true);
		done += s == CTL_EXIT_OK;
		status = worse(status, s);
	}
	if (c->json)
		fputs("]}\n", stdout);
	else if (c->prefix && n == 0)
		printf("no tensor's name starts with %s: nothing deleted\n", c->prefix);
	free(list);
	return status;
}

/* DIR/NAME.npy, '/' in NAME written as '_'. NULL when out of memory. */
static char *dir_path(const char *dir, const char *name)
{
	size_t d = strlen(dir), k = strlen(name);
	char *p = malloc(d + 1 + k + 5);

	if (!p)
		return NULL;
	memcpy(p, dir, d);
	if (d == 0 || dir[d - 1] != '/')
		p[d++] = '/';
	for (size_t i = 0; i < k; i++)
		p[d + i] = name[i] == '/' ? '_' : name[i];
	memcpy(p + d + k, ".npy", 5);
	return p;
}

/* How get writes: --out per name, or one directory; checked before connecting. */
static int check_outs(struct ctl *c, bool *ret_dir)
{
	bool several = c->prefix || c->npos > 1;

	*ret_dir = false;
	for (int i = 0; i < c->nouts; i++) {
		enum out_kind k = out_kind(c->outs[i]);

		if (k == OUT_BAD)
			return ctl_usage_error("get: --out '%.64s': unknown extension (.npy, .safetensors, "
					       "a directory, or - for .npy on stdout)", c->outs[i]);
		if (k == OUT_STDOUT && c->json)
			return ctl_usage_error("--json cannot be combined with --out -");
		if (k == OUT_STDOUT && several)
			return ctl_usage_error("get: --out - takes one tensor");
		if (k == OUT_DIR && c->nouts > 1)
			return ctl_usage_error("get: a directory --out goes alone");
		*ret_dir = k == OUT_DIR;
	}
	if (c->nouts > 1 && (c->prefix || c->nouts != c->npos))
		return ctl_usage_error("get: %d --out for %d names: give one per name, in order, "
				       "or one directory", c->nouts, c->prefix ? 0 : c->npos);
	if (c->nouts == 1 && several && !*ret_dir)
		return ctl_usage_error("get: several tensors need a directory --out (DIR/) or one "
				       "--out per name");
	if (*ret_dir && c->outs[0][strlen(c->outs[0]) - 1] == '/' && mkdir(c->outs[0], 0777) < 0 &&
	    errno != EEXIST)
		return ctl_error("%s: %s", c->outs[0], strerror(errno));
	return CTL_EXIT_OK;
}

int ctl_cmd_get(struct ctl *c)
{
	struct tensord_tensor_info *list = NULL;
	size_t n = 0;
	bool dir;
	int status;

	if ((status = check_args(c, "get")) != CTL_EXIT_OK || (status = check_outs(c, &dir)) != CTL_EXIT_OK ||
	    (status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if (!c->prefix && c->npos == 1 && !dir)
		return get_one(c, c->pos[0], c->nouts ? c->outs[0] : NULL, false);
	if (c->prefix) {
		if ((status = list_prefix(c, &list, &n)) != CTL_EXIT_OK)
			return status;
		if (n == 0)
			status = ctl_error("get: no tensor's name starts with '%.64s'", c->prefix);
	} else {
		n = (size_t)c->npos;
	}
	if (c->json)
		fputs("{\"tensors\":[", stdout);
	for (size_t i = 0, done = 0; i < n && status != CTL_EXIT_CONNECT; i++) {
		const char *name = list ? list[i].name : c->pos[i];
		char *path = dir ? dir_path(c->outs[0], name) : NULL;
		int s;

		if (dir && !path) {
			status = ctl_error("out of memory");
			break;
		}
		if (c->json && done > 0)
			fputc(',', stdout);
		else if (!c->json && done > 0 && !c->nouts)
			fputc('\n', stdout);
		s = get_one(c, name, dir ? path : c->nouts ? c->outs[i] : NULL, true);
		if (!c->json && !c->nouts && s == CTL_EXIT_OK)
			fputc('\n', stdout);
		done += s == CTL_EXIT_OK;
		status = worse(status, s);
		free(path);
	}
	if (c->json)
		fputs("]}\n", stdout);
	free(list);
	return status;
}
