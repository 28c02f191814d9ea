/* tensorctl info: the daemon's `info` result printed for people. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "ctl.h"
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

void ctl_format_duration(char *buf, size_t cap, double s)
{
	uint64_t t;

	if (!isfinite(s) || s < 0 || s > 1e15) {
		snprintf(buf, cap, "?");
		return;
	}
	if (s < 60) {
		snprintf(buf, cap, "%.1f s", s);
		return;
	}
	t = (uint64_t)s;
	if (t < 86400)
		snprintf(buf, cap, "%" PRIu64 "h %02" PRIu64 "m %02" PRIu64 "s", t / 3600,
			 t / 60 % 60, t % 60);
	else
		snprintf(buf, cap, "%" PRIu64 "d %02" PRIu64 "h %02" PRIu64 "m", t / 86400,
			 t / 3600 % 24, t / 60 % 60);
}

static bool ends_with(const msgpack_object *key, const char *suffix)
{
	size_t n = strlen(suffix);

	return key->type == MSGPACK_OBJECT_STR && key->via.str.size >= n &&
	       memcmp(key->via.str.ptr + key->via.str.size - n, suffix, n) == 0;
}

static void print_limits(FILE *f, const msgpack_object *limits)
{
	char size[32];

	if (limits->type != MSGPACK_OBJECT_MAP) {
		ctl_json_msgpack(f, limits);
		fputc('\n', f);
		return;
	}
	fputc('\n', f);
	for (uint32_t i = 0; i < limits->via.map.size; i++) {
		const msgpack_object *k = &limits->via.map.ptr[i].key;
		const msgpack_object *v = &limits->via.map.ptr[i].val;
		int kw = k->type == MSGPACK_OBJECT_STR ? (int)(k->via.str.size > 40 ? 40 : k->via.str.size) : 1;

		fprintf(f, "  %-*.*s ", 20, kw, k->type == MSGPACK_OBJECT_STR ? k->via.str.ptr : "?");
		if (ends_with(k, "_bytes") && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
			ctl_format_size(size, sizeof(size), v->via.u64);
			fprintf(f, "%s (%" PRIu64 ")\n", size, v->via.u64);
		} else {
			ctl_json_msgpack(f, v);
			fputc('\n', f);
		}
	}
}

static bool is_key(const msgpack_object *k, const char *const *known)
{
	for (; *known; known++)
		if (tdp_obj_str_eq(k, *known))
			return true;
	return false;
}

void ctl_print_info(FILE *f, const msgpack_object *info)
{
	static const char *const known[] = { "version", "protocol", "pid", "uptime",
					     "connections", "tensors", "devices", "limits",
					     "user", NULL };
	const msgpack_object *user = tdp_map_find(info, "user");
	const msgpack_object *tensors = tdp_map_find(info, "tensors");
	const msgpack_object *devices = tdp_map_find(info, "devices");
	const msgpack_object *limits = tdp_map_find(info, "limits");
	char text[64];
	uint64_t v, bytes;
	double up;
	int n;
	const char *s;

	if (info->type != MSGPACK_OBJECT_MAP) {
		ctl_json_msgpack(f, info);
		fputc('\n', f);
		return;
	}
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
	if (devices)
		ctl_print_devices(f, devices);
	if (limits) {
		fputs("limits", f);
		print_limits(f, limits);
	}
	for (uint32_t i = 0; i < info->via.map.size; i++) {
		const msgpack_object *k = &info->via.map.ptr[i].key;

		if (is_key(k, known))
			continue;
		if (k->type == MSGPACK_OBJECT_STR)
			fprintf(f, "%-13.*s ", (int)(k->via.str.size > 64 ? 64 : k->via.str.size),
				k->via.str.ptr);
		else
			fputs("?             ", f);
		ctl_json_msgpack(f, &info->via.map.ptr[i].val);
		fputc('\n', f);
	}
}

bool ctl_map_number(const msgpack_object *map, const char *key, double *ret)
{
	const msgpack_object *o = map ? tdp_map_find(map, key) : NULL;

	if (!o)
		return false;
	switch (o->type) {
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: *ret = o->via.f64; return true;
	case MSGPACK_OBJECT_POSITIVE_INTEGER: *ret = (double)o->via.u64; return true;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: *ret = (double)o->via.i64; return true;
	default: return false;
	}
}
