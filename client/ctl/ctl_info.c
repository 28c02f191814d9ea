/* tensorctl info: the daemon's `info` result printed for people. */
#include <inttypes.h>
#include <math.h>
#include <pwd.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "ctl_cmd.h"
#include "json.h"
#include "pack.h"
#include "print.h"

static bool get_uint(const msgpack_object *map, const char *key, uint64_t *ret)
{
	return tdp_obj_uint(tdp_map_find(map, key), ret) == 0;
}

/* A str field as printf's "%.*s" arguments; "?" when absent or no string. */
static const char *get_str(const msgpack_object *map, const char *key, int *ret_len)
{
	const msgpack_object *o = tdp_map_find(map, key);

	if (!o || o->type != MSGPACK_OBJECT_STR) {
		*ret_len = 1;
		return "?";
	}
	*ret_len = o->via.str.size > 200 ? 200 : (int)o->via.str.size;
	return o->via.str.ptr;
}

static bool ends_with(const msgpack_object *key, const char *suffix)
{
	size_t n = strlen(suffix);

	return key->type == MSGPACK_OBJECT_STR && key->via.str.size >= n &&
	       memcmp(key->via.str.ptr + key->via.str.size - n, suffix, n) == 0;
}

/* Width of the first column of a section's lines: the longest key + 2. */
static int key_width(const msgpack_object *map, int min)
{
	int w = min;

	for (uint32_t i = 0; i < map->via.map.size; i++) {
		const msgpack_object *k = &map->via.map.ptr[i].key;

		if (k->type == MSGPACK_OBJECT_STR && (int)k->via.str.size + 2 > w)
			w = k->via.str.size > 62 ? 64 : (int)k->via.str.size + 2;
	}
	return w;
}

/* One value for people: numbers and strings as text, sizes with units for
 * *_bytes keys, maps and arrays summarised (--json has them whole). */
static void print_value(FILE *f, const msgpack_object *k, const msgpack_object *v)
{
	char text[64];

	switch (v->type) {
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		if (ends_with(k, "_bytes")) {
			ctl_format_size(text, sizeof(text), v->via.u64);
			fprintf(f, "%s (%" PRIu64 ")", text, v->via.u64);
		} else {
			fprintf(f, "%" PRIu64, v->via.u64);
		}
		break;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: fprintf(f, "%" PRId64, v->via.i64); break;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: fprintf(f, "%.6g", v->via.f64); break;
	case MSGPACK_OBJECT_BOOLEAN: fputs(v->via.boolean ? "yes" : "no", f); break;
	case MSGPACK_OBJECT_NIL: fputs("-", f); break;
	case MSGPACK_OBJECT_STR:
		fprintf(f, "%.*s", v->via.str.size > 200 ? 200 : (int)v->via.str.size, v->via.str.ptr);
		break;
	case MSGPACK_OBJECT_MAP: fprintf(f, "%" PRIu32 " fields (see --json)", v->via.map.size); break;
	case MSGPACK_OBJECT_ARRAY: fprintf(f, "%" PRIu32 " entries (see --json)", v->via.array.size); break;
	default: fputs("?", f); break;
	}
}

/* A title line, then every entry of `map` as an aligned "  key  value" line. */
static void print_section(FILE *f, const char *title, const msgpack_object *map)
{
	int w;

	fprintf(f, "%s\n", title);
	if (map->type != MSGPACK_OBJECT_MAP)
		return;
	w = key_width(map, 13);
	for (uint32_t i = 0; i < map->via.map.size; i++) {
		const msgpack_object *k = &map->via.map.ptr[i].key;
		bool str = k->type == MSGPACK_OBJECT_STR;

		fprintf(f, "  %-*.*s", w, str ? (int)(k->via.str.size > 62 ? 62 : k->via.str.size) : 1,
			str ? k->via.str.ptr : "?");
		print_value(f, k, &map->via.map.ptr[i].val);
		fputc('\n', f);
	}
}

/* The (up to) three methods of counters.requests with the most requests,
 * "tensor.put 3 (1 failed), info 1"; "none yet" when all are 0. */
static void print_busiest(FILE *f, const msgpack_object *req, const msgpack_object *err)
{
	bool used[256] = { false };
	uint32_t n = req->via.map.size < 256 ? req->via.map.size : 256;
	int shown = 0;

	for (; shown < 3; shown++) {
		const msgpack_object *k;
		uint64_t best = 0, v, e;
		uint32_t at = n;
		char key[72];

		for (uint32_t i = 0; i < n; i++)
			if (!used[i] && req->via.map.ptr[i].key.type == MSGPACK_OBJECT_STR &&
			    tdp_obj_uint(&req->via.map.ptr[i].val, &v) == 0 && v > best) {
				best = v;
				at = i;
			}
		if (at == n)
			break;
		used[at] = true;
		k = &req->via.map.ptr[at].key;
		snprintf(key, sizeof(key), "%.*s", k->via.str.size > 64 ? 64 : (int)k->via.str.size,
			 k->via.str.ptr);
		fprintf(f, "%s%s %" PRIu64, shown ? ", " : "", key, best);
		if (err && err->type == MSGPACK_OBJECT_MAP && get_uint(err, key, &e) && e)
			fprintf(f, " (%" PRIu64 " failed)", e);
	}
	if (!shown)
		fputs("none yet", f);
}

/* `requests` and `counters` as one section of summaries (--json: all). */
static void print_requests(FILE *f, const msgpack_object *info)
{
	const msgpack_object *req = tdp_map_find(info, "requests"), *cnt = tdp_map_find(info, "counters");
	const msgpack_object *by = cnt ? tdp_map_find(cnt, "requests") : NULL, *sub;
	uint64_t a, b, c2;
	char x[32], y[32];
	double s;

	if (!req && !cnt)
		return;
	fputs("requests", f);
	if (req && get_uint(req, "total", &a)) {
		fprintf(f, "      %" PRIu64, a);
		if (get_uint(req, "failed", &b))
			fprintf(f, " (%" PRIu64 " failed)", b);
	}
	fputc('\n', f);
	if (!cnt || cnt->type != MSGPACK_OBJECT_MAP)
		return;
	if (by && by->type == MSGPACK_OBJECT_MAP) {
		fprintf(f, "  %-12s", "busiest");
		print_busiest(f, by, tdp_map_find(cnt, "errors"));
		fputc('\n', f);
	}
	if (get_uint(cnt, "bytes_in", &a) && get_uint(cnt, "bytes_out", &b)) {
		ctl_format_size(x, sizeof(x), a);
		ctl_format_size(y, sizeof(y), b);
		fprintf(f, "  %-12s%s in, %s out\n", "traffic", x, y);
	}
	if (get_uint(cnt, "connections_accepted", &a) && get_uint(cnt, "connections_refused", &b)) {
		fprintf(f, "  %-12s%" PRIu64 " accepted, %" PRIu64 " refused", "connections", a, b);
		if (get_uint(cnt, "protocol_errors", &c2))
			fprintf(f, ", %" PRIu64 " closed for protocol errors", c2);
		fputc('\n', f);
	}
	if (get_uint(cnt, "reloads", &a) && get_uint(cnt, "reload_failures", &b))
		fprintf(f, "  %-12s%" PRIu64 " applied, %" PRIu64 " refused\n", "reloads", a, b);
	if ((sub = tdp_map_find(cnt, "gpu")) && get_uint(sub, "submissions", &a)) {
		fprintf(f, "  %-12s%" PRIu64 " submissions", "gpu", a);
		if (ctl_map_number(sub, "busy_seconds", &s))
			fprintf(f, ", busy %.3g s", s);
		if (ctl_map_number(sub, "wait_seconds", &s))
			fprintf(f, ", waited %.3g s", s);
		fputc('\n', f);
	}
	if ((sub = tdp_map_find(cnt, "pipelines")) && get_uint(sub, "built", &a)) {
		fprintf(f, "  %-12s%" PRIu64 " built", "pipelines", a);
		if (get_uint(sub, "hits", &b))
			fprintf(f, ", %" PRIu64 " hits", b);
		if (get_uint(sub, "compiles", &b))
			fprintf(f, ", %" PRIu64 " compiles", b);
		if (get_uint(sub, "cache_hits", &b))
			fprintf(f, " (%" PRIu64 " from the cache)", b);
		if (ctl_map_number(sub, "compile_seconds", &s))
			fprintf(f, ", %.3g s compiling", s);
		fputc('\n', f);
	}
}

static bool is_key(const msgpack_object *k, const char *const *known)
{
	for (; *known; known++)
		if (tdp_obj_str_eq(k, *known))
			return true;
	return false;
}

/* daemon, uptime, connections, tensors, you, resets: the lines at the top. */
static void print_head(FILE *f, const msgpack_object *info)
{
	const msgpack_object *user = tdp_map_find(info, "user");
	const msgpack_object *tensors = tdp_map_find(info, "tensors");
	char text[64];
	uint64_t v, bytes = 0;
	double up;
	int n;
	const char *s;

	s = get_str(info, "version", &n);
	fprintf(f, "%-13s tensord %.*s", "daemon", n, s);
	if (get_uint(info, "protocol", &v))
		fprintf(f, ", protocol %" PRIu64, v);
	if (get_uint(info, "pid", &v))
		fprintf(f, ", pid %" PRIu64, v);
	fputc('\n', f);
	if (ctl_map_number(info, "uptime", &up)) {
		ctl_format_duration(text, sizeof(text), up);
		fprintf(f, "%-13s %s\n", "uptime", text);
	}
	if (get_uint(info, "connections", &v))
		fprintf(f, "%-13s %" PRIu64 "\n", "connections", v);
	if (tensors && get_uint(tensors, "count", &v)) {
		fprintf(f, "%-13s %" PRIu64, "tensors", v);
		if (get_uint(tensors, "bytes", &bytes)) {
			ctl_format_size(text, sizeof(text), bytes);
			fprintf(f, ", %s", text);
		}
		fputc('\n', f);
	}
	if (user && get_uint(user, "uid", &v)) {
		uint64_t gid = 0, count = 0, max = 0;

		get_uint(user, "gid", &gid);
		get_uint(user, "tensors", &count);
		get_uint(user, "bytes", &bytes);
		ctl_format_size(text, sizeof(text), bytes);
		fprintf(f, "%-13s uid %" PRIu64 " gid %" PRIu64 ": %" PRIu64 " tensors", "you", v, gid, count);
		if (get_uint(user, "max_tensors", &max) && max)
			fprintf(f, " of %" PRIu64, max);
		fprintf(f, ", %s", text);
		if (get_uint(user, "max_bytes", &max) && max) {
			ctl_format_size(text, sizeof(text), max);
			fprintf(f, " of %s", text);
		}
		fputc('\n', f);
	}
	if (get_uint(info, "device_resets", &v)) {
		const msgpack_object *last = tdp_map_find(info, "last_reset");

		fprintf(f, "%-13s %" PRIu64, "resets", v);
		if (last && last->type == MSGPACK_OBJECT_MAP && get_uint(last, "lost_count", &bytes))
			fprintf(f, " (the last rolled back %" PRIu64 " tensors)", bytes);
		fputc('\n', f);
	}
}

/* Top-level entries this tensorctl does not know: scalars as aligned lines
 * (maps == false), or maps as a section each (maps == true). */
static void print_unknown(FILE *f, const msgpack_object *info, const char *const *known, bool maps)
{
	for (uint32_t i = 0; i < info->via.map.size; i++) {
		const msgpack_object *k = &info->via.map.ptr[i].key;
		const msgpack_object *v = &info->via.map.ptr[i].val;
		char title[72];

		if (is_key(k, known) || k->type != MSGPACK_OBJECT_STR || (v->type == MSGPACK_OBJECT_MAP) != maps)
			continue;
		snprintf(title, sizeof(title), "%.*s", k->via.str.size > 64 ? 64 : (int)k->via.str.size,
			 k->via.str.ptr);
		if (maps) {
			print_section(f, title, v);
		} else {
			fprintf(f, "%-13s ", title);
			print_value(f, k, v);
			fputc('\n', f);
		}
	}
}

/* info's "persistence" as one line (docs/durability.md). */
static void print_persistence(FILE *f, const msgpack_object *info)
{
	const msgpack_object *p = tdp_map_find(info, "persistence"), *o;
	uint64_t n = 0, failed = 0;
	double when, secs;

	if (!p || p->type != MSGPACK_OBJECT_MAP)
		return;
	o = tdp_map_find(p, "enabled");
	if (!o || o->type != MSGPACK_OBJECT_BOOLEAN || !o->via.boolean) {
		fprintf(f, "%-13s off: tensors, models and jobs end with the daemon\n", "persistence");
		return;
	}
	fprintf(f, "%-13s on", "persistence");
	o = tdp_map_find(p, "state_dir");
	if (o && o->type == MSGPACK_OBJECT_STR)
		fprintf(f, " in %.*s", o->via.str.size > 200 ? 200 : (int)o->via.str.size, o->via.str.ptr);
	get_uint(p, "checkpoints", &n);
	get_uint(p, "failed_writes", &failed);
	fprintf(f, ", %" PRIu64 " checkpoints", n);
	o = tdp_map_find(p, "last_checkpoint_status");
	if (ctl_map_number(p, "last_checkpoint", &when) && ctl_map_number(p, "last_checkpoint_seconds", &secs) &&
	    o && o->type == MSGPACK_OBJECT_STR)
		fprintf(f, ", the last %.0f s ago (%.3f s, %.*s)", difftime(time(NULL), (time_t)when), secs,
			o->via.str.size > 16 ? 16 : (int)o->via.str.size, o->via.str.ptr);
	fprintf(f, ", %" PRIu64 " failed writes\n", failed);
}

/* info's "users" as a table (root sees every user, others themselves). */
static void print_users(FILE *f, const msgpack_object *info)
{
	const msgpack_object *users = tdp_map_find(info, "users");
	char size[32];

	if (!users || users->type != MSGPACK_OBJECT_ARRAY || !users->via.array.size)
		return;
	fprintf(f, "\n%-8s %-12s %10s %9s %6s %8s %10s %5s\n", "UID", "USER", "GPU_S", "REQUESTS", "CONNS",
		"TENSORS", "BYTES", "JOBS");
	for (uint32_t i = 0; i < users->via.array.size; i++) {
		const msgpack_object *u = &users->via.array.ptr[i];
		uint64_t uid, req = 0, conns = 0, tensors = 0, bytes = 0, jobs = 0;
		struct passwd pw, *found = NULL;
		char buf[1024];
		double gpu = 0;

		if (u->type != MSGPACK_OBJECT_MAP || !get_uint(u, "uid", &uid) || uid > UINT32_MAX)
			continue;
		ctl_map_number(u, "gpu_seconds", &gpu);
		get_uint(u, "requests", &req);
		get_uint(u, "connections", &conns);
		get_uint(u, "tensors", &tensors);
		get_uint(u, "bytes", &bytes);
		get_uint(u, "jobs", &jobs);
		getpwuid_r((uid_t)uid, &pw, buf, sizeof(buf), &found);
		ctl_format_size(size, sizeof(size), bytes);
		fprintf(f, "%-8" PRIu64 " %-12.12s %10.3f %9" PRIu64 " %6" PRIu64 " %8" PRIu64 " %10s %5" PRIu64 "\n",
			uid, found ? found->pw_name : "-", gpu, req, conns, tensors, size, jobs);
	}
}

/* Print the `info` result for people: known fields formatted with units, any
 * others as JSON. Missing or mistyped fields are skipped, never trusted. */
static void print_info(FILE *f, const msgpack_object *info)
{
	static const char *const known[] = { "version", "protocol", "pid", "uptime", "connections",
					     "tensors", "devices", "limits", "user", "requests",
					     "counters", "device_resets", "last_reset", "jobs", "persistence",
					     "users", NULL };
	const msgpack_object *devices = tdp_map_find(info, "devices");
	const msgpack_object *limits = tdp_map_find(info, "limits");

	if (info->type != MSGPACK_OBJECT_MAP) {
		ctl_json_msgpack(f, info);
		fputc('\n', f);
		return;
	}
	print_head(f, info);
	print_persistence(f, info);
	print_unknown(f, info, known, false);
	if (devices)
		ctl_print_devices(f, devices);
	ctl_print_running_jobs(f, info);
	print_users(f, info);
	print_requests(f, info);
	if (limits)
		print_section(f, "limits", limits);
	print_unknown(f, info, known, true);
}

int ctl_cmd_info(struct ctl *c)
{
	msgpack_unpacked u;
	void *res = NULL;
	size_t len;
	int r, status;

	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	if ((r = tensord_info_raw(c->td, &res, &len)) < 0)
		return ctl_call_failed(c, r);
	status = ctl_unpack_result(res, len, &u);
	if (status != CTL_EXIT_OK) {
		free(res);
		return status;
	}
	if (c->json) {
		ctl_json_msgpack(stdout, &u.data);
		fputc('\n', stdout);
	} else {
		print_info(stdout, &u.data);
	}
	msgpack_unpacked_destroy(&u);
	free(res);
	return CTL_EXIT_OK;
}
