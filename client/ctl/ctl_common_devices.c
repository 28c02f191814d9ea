/* tensorctl's common layer (ctl_common.h), several devices (docs/devices.md):
 * info's devices shown for people (the table of `tensorctl info` and the
 * devices of `tensorctl info --watch`) and the --device and --devices
 * options. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_common.h"
#include "json.h"
#include "pack.h"
#include "print.h"

/* Characters of a device name shown in tables. */
#define NAME_SHOWN 40

static bool get_uint(const msgpack_object *map, const char *key, uint64_t *ret)
{
	return map && tdp_obj_uint(tdp_map_find(map, key), ret) == 0;
}

bool ctl_device_active(const msgpack_object *d)
{
	const msgpack_object *a = d && d->type == MSGPACK_OBJECT_MAP ? tdp_map_find(d, "active") : NULL;

	return a && a->type == MSGPACK_OBJECT_BOOLEAN && a->via.boolean;
}

/* The id of an active device; UINT64_MAX (sorted last) when it has none
 * (a daemon from before several devices). */
static uint64_t device_id(const msgpack_object *d)
{
	uint64_t id;

	return get_uint(d, "id", &id) ? id : UINT64_MAX;
}

size_t ctl_active_devices(const msgpack_object *devs, const msgpack_object **ret, size_t cap)
{
	size_t n = 0;

	if (!devs || devs->type != MSGPACK_OBJECT_ARRAY)
		return 0;
	for (uint32_t i = 0; i < devs->via.array.size && n < cap; i++) {
		const msgpack_object *d = &devs->via.array.ptr[i];
		size_t k = n++;

		if (!ctl_device_active(d)) {
			n--;
			continue;
		}
		/* insertion sort by id: a handful of devices */
		while (k > 0 && device_id(ret[k - 1]) > device_id(d)) {
			ret[k] = ret[k - 1];
			k--;
		}
		ret[k] = d;
	}
	return n;
}

/* A str field as printf's "%.*s" arguments, cut at `max`; "?" when absent. */
static const char *str_field(const msgpack_object *map, const char *key, int max, int *ret_len)
{
	const msgpack_object *o = tdp_map_find(map, key);

	if (!o || o->type != MSGPACK_OBJECT_STR) {
		*ret_len = 1;
		return "?";
	}
	*ret_len = o->via.str.size > (uint32_t)max ? max : (int)o->via.str.size;
	return o->via.str.ptr;
}

bool ctl_device_limit(const msgpack_object *d, uint64_t *ret)
{
	return get_uint(d, "memory_limit", ret) || get_uint(d, "memory_total", ret);
}

void ctl_device_cell(const msgpack_object *d, enum ctl_device_col col, char *buf, size_t cap)
{
	uint64_t v, limit;
	double load;
	const char *s;
	int n;

	snprintf(buf, cap, "-");
	switch (col) {
	case CTL_DEV_ID:
		if (get_uint(d, "id", &v))
			snprintf(buf, cap, "%" PRIu64, v);
		break;
	case CTL_DEV_INDEX:
		if (get_uint(d, "index", &v))
			snprintf(buf, cap, "%" PRIu64, v);
		break;
	case CTL_DEV_NAME:
		s = str_field(d, "name", NAME_SHOWN, &n);
		snprintf(buf, cap, "%.*s", n, s);
		break;
	case CTL_DEV_TYPE:
		s = str_field(d, "type", 16, &n);
		snprintf(buf, cap, "%.*s", n, s);
		break;
	case CTL_DEV_USED:
		if (get_uint(d, "memory_used", &v))
			ctl_format_size(buf, cap, v);
		break;
	case CTL_DEV_LIMIT:
		if (ctl_device_limit(d, &v))
			ctl_format_size(buf, cap, v);
		break;
	case CTL_DEV_TENSORS:
		if (get_uint(d, "tensors", &v))
			snprintf(buf, cap, "%" PRIu64, v);
		break;
	case CTL_DEV_LOAD:
		if (ctl_map_number(d, "load", &load) && isfinite(load))
			snprintf(buf, cap, "%.0f%%", (load < 0 ? 0 : load > 1 ? 1 : load) * 100);
		break;
	case CTL_DEV_USE:
		if (get_uint(d, "memory_used", &v) && ctl_device_limit(d, &limit) && limit > 0) {
			double frac = (double)v / (double)limit;
			int cells = (int)(frac * 10 + 0.5);

			cells = cells > 10 ? 10 : cells;
			snprintf(buf, cap, "[%.*s%.*s] %5.1f%%", cells, "##########", 10 - cells,
				 "..........", frac * 100);
		}
		break;
	case CTL_DEV_LOADBAR:
		if (ctl_map_number(d, "load", &load) && isfinite(load)) {
			int cells;

			load = load < 0 ? 0 : load > 1 ? 1 : load;
			cells = (int)(load * 10 + 0.5);
			snprintf(buf, cap, "[%.*s%.*s] %3.0f%%", cells, "##########", 10 - cells,
				 "..........", load * 100);
		}
		break;
	case CTL_DEV_COL_COUNT:
		break;
	}
}

static const char *const device_heads[CTL_DEV_COL_COUNT] = {
	[CTL_DEV_ID] = "ID", [CTL_DEV_INDEX] = "INDEX", [CTL_DEV_NAME] = "NAME",
	[CTL_DEV_TYPE] = "TYPE", [CTL_DEV_USED] = "USED", [CTL_DEV_LIMIT] = "LIMIT",
	[CTL_DEV_TENSORS] = "TENSORS", [CTL_DEV_LOAD] = "LOAD", [CTL_DEV_USE] = "USE",
	[CTL_DEV_LOADBAR] = "LOAD",
};

/* The cell of `col` for one device, names cut to `name_max` bytes (0: as is). */
static void cell_of(const msgpack_object *d, enum ctl_device_col col, int name_max, char *buf, size_t cap)
{
	ctl_device_cell(d, col, buf, cap);
	if (col == CTL_DEV_NAME && name_max > 0 && strlen(buf) > (size_t)name_max)
		buf[name_max] = '\0';
}

/* Column widths of a device table; returns the width of its widest line. */
static int table_widths(const msgpack_object *const *devs, size_t n, const enum ctl_device_col *cols,
			int ncols, int name_max, int *width)
{
	char cell[80];
	int total = 0;

	for (int k = 0; k < ncols; k++)
		width[k] = (int)strlen(device_heads[cols[k]]);
	for (size_t i = 0; i < n; i++)
		for (int k = 0; k < ncols; k++) {
			cell_of(devs[i], cols[k], name_max, cell, sizeof(cell));
			if ((int)strlen(cell) > width[k])
				width[k] = (int)strlen(cell);
		}
	for (int k = 0; k < ncols; k++)
		total += width[k] + (k + 1 < ncols ? 2 : 0);
	return total;
}

int ctl_device_table_width(const msgpack_object *const *devs, size_t n, const enum ctl_device_col *cols,
			   int ncols, int name_max)
{
	int width[CTL_DEV_COL_COUNT];

	return table_widths(devs, n, cols, ncols > CTL_DEV_COL_COUNT ? CTL_DEV_COL_COUNT : ncols, name_max,
			    width);
}

void ctl_print_device_table(FILE *f, const msgpack_object *const *devs, size_t n,
			    const enum ctl_device_col *cols, int ncols, const char *indent, int name_max)
{
	static const bool right[CTL_DEV_COL_COUNT] = {
		[CTL_DEV_ID] = true, [CTL_DEV_INDEX] = true, [CTL_DEV_USED] = true,
		[CTL_DEV_LIMIT] = true, [CTL_DEV_TENSORS] = true, [CTL_DEV_LOAD] = true,
	};
	int width[CTL_DEV_COL_COUNT] = { 0 };
	char cell[80];

	if (ncols > CTL_DEV_COL_COUNT)
		ncols = CTL_DEV_COL_COUNT;
	table_widths(devs, n, cols, ncols, name_max, width);
	for (size_t i = 0; i <= n; i++) {
		fputs(indent, f);
		for (int k = 0; k < ncols; k++) {
			const char *text = device_heads[cols[k]];
			bool last = k + 1 == ncols;

			if (i > 0) {
				cell_of(devs[i - 1], cols[k], name_max, cell, sizeof(cell));
				text = cell;
			}
			fprintf(f, "%*s%s", last ? 0 : right[cols[k]] ? width[k] : -width[k], text,
				last ? "\n" : "  ");
		}
	}
}

/* ", 16.0 MiB reserved" (label after) or ", largest allocation 2.0 GiB". */
static void size_part(FILE *f, const msgpack_object *d, const char *key, const char *label,
		      bool after, bool *first)
{
	char size[32];
	uint64_t v;

	if (!get_uint(d, key, &v))
		return;
	ctl_format_size(size, sizeof(size), v);
	fprintf(f, "%s%s %s", *first ? "" : ", ", after ? size : label, after ? label : size);
	*first = false;
}

/* "driver X, Vulkan Y; 16.0 MiB reserved, 2.0 GiB total; largest allocation
 * 2.0 GiB, storage buffer 128.0 MiB": what the table leaves out. */
static void print_details(FILE *f, const msgpack_object *d)
{
	bool first = true;
	const char *s;
	int n;

	s = str_field(d, "driver", 80, &n);
	fprintf(f, "driver %.*s", n, s);
	s = str_field(d, "api_version", 32, &n);
	fprintf(f, ", Vulkan %.*s; ", n, s);
	size_part(f, d, "memory_reserved", "reserved", true, &first);
	size_part(f, d, "memory_total", "total", true, &first);
	fputs(first ? "" : "; ", f);
	first = true;
	size_part(f, d, "max_allocation_size", "largest allocation", false, &first);
	size_part(f, d, "max_storage_buffer_range", "storage buffer", false, &first);
	fputc('\n', f);
}

void ctl_print_devices(FILE *f, const msgpack_object *devices)
{
	static const enum ctl_device_col cols[] = { CTL_DEV_ID, CTL_DEV_INDEX, CTL_DEV_NAME,
						   CTL_DEV_TYPE, CTL_DEV_USED, CTL_DEV_LIMIT,
						   CTL_DEV_TENSORS, CTL_DEV_LOAD };
	const msgpack_object *active[CTL_MAX_DEVICE_LIST];
	size_t n, others = 0;
	char cell[80];

	if (devices->type != MSGPACK_OBJECT_ARRAY) {
		fputs("devices       ", f);
		ctl_json_msgpack(f, devices);
		fputc('\n', f);
		return;
	}
	n = ctl_active_devices(devices, active, CTL_MAX_DEVICE_LIST);
	for (uint32_t i = 0; i < devices->via.array.size; i++)
		if (!ctl_device_active(&devices->via.array.ptr[i]))
			others++;
	fprintf(f, "%-13s %zu in use", "devices", n);
	if (others)
		fprintf(f, ", %zu other%s found", others, others == 1 ? "" : "s");
	fputc('\n', f);
	if (n > 0)
		ctl_print_device_table(f, active, n, cols, (int)(sizeof(cols) / sizeof(cols[0])), "  ", 0);
	for (size_t i = 0; i < n; i++) {
		ctl_device_cell(active[i], CTL_DEV_ID, cell, sizeof(cell));
		fprintf(f, "  device %s: ", cell);
		print_details(f, active[i]);
	}
	for (uint32_t i = 0; i < devices->via.array.size; i++) {
		const msgpack_object *d = &devices->via.array.ptr[i];
		const char *s;
		int len;

		if (ctl_device_active(d))
			continue;
		if (d->type != MSGPACK_OBJECT_MAP) {
			fputs("  not used: ", f);
			ctl_json_msgpack(f, d);
			fputc('\n', f);
			continue;
		}
		ctl_device_cell(d, CTL_DEV_INDEX, cell, sizeof(cell));
		s = str_field(d, "name", 200, &len);
		fprintf(f, "  not used: index %s, %.*s (", cell, len, s);
		s = str_field(d, "type", 16, &len);
		fprintf(f, "%.*s), ", len, s);
		print_details(f, d);
	}
}

int ctl_parse_device(const char *opt, const char *text, int *ret)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno || end == text || *end || text[0] < '0' || text[0] > '9' || v > INT_MAX)
		return ctl_usage_error("%s takes a device id (0, 1, ...: the ID column of tensorctl info), "
				       "not '%.64s'", opt, text);
	*ret = (int)v;
	return CTL_EXIT_OK;
}

int ctl_pack_device_list(msgpack_packer *pk, const char *opt, const char *text)
{
	int ids[CTL_MAX_DEVICE_LIST], n = 0, status;
	const char *p = text;
	char one[32];

	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);

		if (n == CTL_MAX_DEVICE_LIST)
			return ctl_usage_error("%s: more than %d devices", opt, CTL_MAX_DEVICE_LIST);
		if (len == 0 || len >= sizeof(one))
			return ctl_usage_error("%s takes device ids separated by commas (0,1), not '%.64s'",
					       opt, text);
		memcpy(one, p, len);
		one[len] = '\0';
		if ((status = ctl_parse_device(opt, one, &ids[n])) != CTL_EXIT_OK)
			return status;
		n++;
		if (!comma)
			break;
		p = comma + 1;
	}
	if (msgpack_pack_array(pk, (uint32_t)n))
		return ctl_error("out of memory");
	for (int i = 0; i < n; i++)
		if (msgpack_pack_int(pk, ids[i]))
			return ctl_error("out of memory");
	return CTL_EXIT_OK;
}
