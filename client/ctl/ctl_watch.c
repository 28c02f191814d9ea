/* tensorctl info --watch and tensorctl top: device memory, clients, request
 * rates and each user's share of the GPU, sampled every --interval seconds.
 * A full screen redrawn in place when stdout is a terminal; otherwise one
 * line per sample (one JSON object with --json). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "ctl_cmd.h"
#include "json.h"
#include "pack.h"
#include "print.h"

#define INTERVAL_MIN 0.05
#define INTERVAL_MAX 86400.0
#define COUNT_MAX 1000000000ull
#define WATCH_USERS 64

/* What one sample shows; fields the daemon did not send stay unset. */
struct sample {
	double at;              /* monotonic seconds */
	bool have_requests;
	uint64_t requests, failed;
	double req_rate, fail_rate; /* NAN until a previous sample exists */
	unsigned nusers;        /* info's users (root: everyone; else oneself) */
	struct {
		uint64_t uid;
		double gpu_seconds;
		double gpu_percent; /* of the interval's wall time; NAN until a previous sample */
		const msgpack_object *entry;
	} users[WATCH_USERS];
};

static bool get_uint(const msgpack_object *map, const char *key, uint64_t *ret)
{
	return map && tdp_obj_uint(tdp_map_find(map, key), ret) == 0;
}

static int parse_options(struct ctl *c, double *ret_interval, uint64_t *ret_count)
{
	double interval = 1.0;
	uint64_t count = 0;
	char *end;

	if (c->interval) {
		errno = 0;
		interval = strtod(c->interval, &end);
		if (errno || end == c->interval || *end || !isfinite(interval) ||
		    interval < INTERVAL_MIN || interval > INTERVAL_MAX)
			return ctl_usage_error("--interval '%.64s': want seconds from %g to %g",
					       c->interval, INTERVAL_MIN, INTERVAL_MAX);
	}
	if (c->count) {
		errno = 0;
		count = strtoull(c->count, &end, 10);
		if (errno || end == c->count || *end || c->count[0] == '-' || count == 0 ||
		    count > COUNT_MAX)
			return ctl_usage_error("--count '%.64s': want a whole number from 1 to %llu",
					       c->count, COUNT_MAX);
	}
	*ret_interval = interval;
	*ret_count = count;
	return CTL_EXIT_OK;
}

/* Memory used and limit summed over the devices in use, and their loads
 * ("35%,0%", by id) for the one-line form. */
static void device_totals(const msgpack_object *info, char *used, char *limit, size_t cap,
			  char *loads, size_t loads_cap)
{
	const msgpack_object *devs[CTL_MAX_DEVICE_LIST];
	size_t n = ctl_active_devices(tdp_map_find(info, "devices"), devs, CTL_MAX_DEVICE_LIST);
	uint64_t u = 0, l = 0, v;
	bool have_used = n > 0, have_limit = n > 0;
	size_t off = 0;

	snprintf(loads, loads_cap, "-");
	for (size_t i = 0; i < n; i++) {
		char cell[32];

		if (get_uint(devs[i], "memory_used", &v))
			u += v;
		else
			have_used = false;
		if (ctl_device_limit(devs[i], &v))
			l += v;
		else
			have_limit = false;
		ctl_device_cell(devs[i], CTL_DEV_LOAD, cell, sizeof(cell));
		if (off < loads_cap)
			off += (size_t)snprintf(loads + off, loads_cap - off, "%s%s", i ? "," : "", cell);
	}
	snprintf(used, cap, "-");
	snprintf(limit, cap, "-");
	if (have_used)
		ctl_format_size(used, cap, u);
	if (have_limit)
		ctl_format_size(limit, cap, l);
}

static void json_rate(FILE *f, double v)
{
	if (isnan(v))
		fputs("null", f);
	else
		fprintf(f, "%.3f", v);
}

/* The info map with "time" and "rates" added, on one line. */
static void print_json(const msgpack_object *info, const struct sample *s)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	fputc('{', stdout);
	for (uint32_t i = 0; info->type == MSGPACK_OBJECT_MAP && i < info->via.map.size; i++) {
		ctl_json_msgpack(stdout, &info->via.map.ptr[i].key);
		fputc(':', stdout);
		ctl_json_msgpack(stdout, &info->via.map.ptr[i].val);
		fputc(',', stdout);
	}
	printf("\"time\":%.3f,\"rates\":{\"requests_per_s\":",
	       (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
	json_rate(stdout, s->req_rate);
	fputs(",\"failed_per_s\":", stdout);
	json_rate(stdout, s->fail_rate);
	fputs(",\"users_gpu_percent\":{", stdout);
	for (unsigned k = 0; k < s->nusers; k++) {
		printf("%s\"%" PRIu64 "\":", k ? "," : "", s->users[k].uid);
		json_rate(stdout, s->users[k].gpu_percent);
	}
	fputs("}}}\n", stdout);
}

static void format_rate(char *buf, size_t cap, double v)
{
	if (isnan(v))
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, "%.1f", v);
}

static void clock_text(char *buf, size_t cap)
{
	struct tm tm;
	time_t t = time(NULL);

	if (!localtime_r(&t, &tm) || strftime(buf, cap, "%H:%M:%S", &tm) == 0)
		snprintf(buf, cap, "-");
}

/* One line per sample, for logs and pipes; the header comes first. */
static void print_line(const msgpack_object *info, const struct sample *s, bool header)
{
	const msgpack_object *tensors = tdp_map_find(info, "tensors");
	char when[16], tbytes[32] = "-", used[32], limit[32], loads[256], rate[32], frate[32];
	char clients[24] = "-", count[24] = "-";
	uint64_t v;

	if (header)
		printf("%-8s  %7s  %7s  %12s  %10s  %10s  %8s  %8s  %s\n", "TIME", "CLIENTS", "TENSORS",
		       "TENSOR SIZE", "MEM USED", "MEM LIMIT", "REQ/S", "FAILED/S", "LOAD");
	clock_text(when, sizeof(when));
	if (get_uint(info, "connections", &v))
		snprintf(clients, sizeof(clients), "%" PRIu64, v);
	if (get_uint(tensors, "count", &v))
		snprintf(count, sizeof(count), "%" PRIu64, v);
	if (get_uint(tensors, "bytes", &v))
		ctl_format_size(tbytes, sizeof(tbytes), v);
	device_totals(info, used, limit, sizeof(used), loads, sizeof(loads));
	format_rate(rate, sizeof(rate), s->req_rate);
	format_rate(frate, sizeof(frate), s->fail_rate);
	printf("%-8s  %7s  %7s  %12s  %10s  %10s  %8s  %8s  %s\n", when, clients, count, tbytes, used,
	       limit, rate, frate, loads);
}

static void print_screen_to(FILE *f, const msgpack_object *info, const struct sample *s, double interval,
			    int width);
static void print_users_share(FILE *f, const struct sample *s);

/* The terminal's width: TIOCGWINSZ on stdout, else $COLUMNS, else 0 (not
 * known: a pseudo-terminal nobody sized; nothing is cut). */
static int term_columns(void)
{
	struct winsize ws;
	const char *env = getenv("COLUMNS");
	char *end;
	long v;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	if (env && *env) {
		errno = 0;
		v = strtol(env, &end, 10);
		if (!errno && !*end && v > 0 && v <= 100000)
			return (int)v;
	}
	return 0;
}

/* Write `text` to stdout with each line cut to `width` columns (a UTF-8
 * continuation byte takes none), so that nothing wraps. */
static void write_clipped(const char *text, size_t len, int width)
{
	int col = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)text[i];

		if (ch == '\n') {
			col = 0;
			putchar('\n');
			continue;
		}
		if ((ch & 0xc0) != 0x80)
			col++;
		if (col <= width)
			putchar(ch);
	}
}

/* The device table that fits `width`: names cut first (down to 8), then
 * without the INDEX column; anything wider is cut by write_clipped(). */
static void print_fitting_table(FILE *f, const msgpack_object *const *active, size_t n, int width)
{
	static const enum ctl_device_col full[] = { CTL_DEV_ID, CTL_DEV_INDEX, CTL_DEV_NAME,
						    CTL_DEV_TENSORS, CTL_DEV_USED, CTL_DEV_LIMIT,
						    CTL_DEV_USE, CTL_DEV_LOADBAR };
	static const enum ctl_device_col narrow[] = { CTL_DEV_ID, CTL_DEV_NAME, CTL_DEV_TENSORS,
						      CTL_DEV_USED, CTL_DEV_LIMIT, CTL_DEV_USE,
						      CTL_DEV_LOADBAR };
	const int nfull = (int)(sizeof(full) / sizeof(full[0]));
	const int nnarrow = (int)(sizeof(narrow) / sizeof(narrow[0]));
	int name_max = 0;

	if (ctl_device_table_width(active, n, full, nfull, 0) > width) {
		for (name_max = 40; name_max > 8; name_max--)
			if (ctl_device_table_width(active, n, full, nfull, name_max) <= width)
				break;
		if (ctl_device_table_width(active, n, full, nfull, name_max) > width) {
			for (name_max = 40; name_max > 8; name_max--)
				if (ctl_device_table_width(active, n, narrow, nnarrow, name_max) <= width)
					break;
			ctl_print_device_table(f, active, n, narrow, nnarrow, "", name_max);
			return;
		}
	}
	ctl_print_device_table(f, active, n, full, nfull, "", name_max);
}

/* The whole screen, redrawn in place, fitted to the terminal's width. */
static void print_screen(const msgpack_object *info, const struct sample *s, double interval)
{
	char *buf = NULL;
	size_t len = 0;
	int cols = term_columns();
	int width = cols > 0 ? cols - 1 : INT_MAX; /* a full line wraps on some terminals */
	FILE *m = cols > 0 ? open_memstream(&buf, &len) : NULL;

	fputs("\033[H\033[J", stdout); /* home, clear to the end */
	if (!m) {
		print_screen_to(stdout, info, s, interval, width);
	} else {
		print_screen_to(m, info, s, interval, width < 20 ? 20 : width);
		if (fclose(m) == 0)
			write_clipped(buf, len, width < 20 ? 20 : width);
		free(buf);
	}
	fflush(stdout);
}

/* The screen's text on `f`. */
static void print_screen_to(FILE *f, const msgpack_object *info, const struct sample *s, double interval,
			    int width)
{
	const msgpack_object *tensors = tdp_map_find(info, "tensors");
	const msgpack_object *devs = tdp_map_find(info, "devices");
	const msgpack_object *ver = tdp_map_find(info, "version");
	const msgpack_object *active[CTL_MAX_DEVICE_LIST];
	char text[64], when[16], rate[32], frate[32];
	size_t n, others = 0;
	uint64_t v, w;
	double up;

	clock_text(when, sizeof(when));
	fprintf(f, "tensord %.*s", ver && ver->type == MSGPACK_OBJECT_STR && ver->via.str.size < 64
				       ? (int)ver->via.str.size : 1,
	       ver && ver->type == MSGPACK_OBJECT_STR && ver->via.str.size < 64 ? ver->via.str.ptr
									   : "?");
	if (get_uint(info, "pid", &v))
		fprintf(f, ", pid %" PRIu64, v);
	if (ctl_map_number(info, "uptime", &up)) {
		ctl_format_duration(text, sizeof(text), up);
		fprintf(f, ", up %s", text);
	}
	fprintf(f, "    %s, every %g s\n\n", when, interval);
	if (get_uint(info, "connections", &v))
		fprintf(f, "%-10s %" PRIu64 "\n", "clients", v);
	if (get_uint(tensors, "count", &v) && get_uint(tensors, "bytes", &w)) {
		ctl_format_size(text, sizeof(text), w);
		fprintf(f, "%-10s %" PRIu64 ", %s\n", "tensors", v, text);
	}
	if (s->have_requests) {
		format_rate(rate, sizeof(rate), s->req_rate);
		format_rate(frate, sizeof(frate), s->fail_rate);
		fprintf(f, "%-10s %s/s (%" PRIu64 " in all), failed %s/s (%" PRIu64 ")\n", "requests",
			rate, s->requests, frate, s->failed);
	}
	fputc('\n', f);
	if (!devs || devs->type != MSGPACK_OBJECT_ARRAY)
		return;
	n = ctl_active_devices(devs, active, CTL_MAX_DEVICE_LIST);
	for (uint32_t i = 0; i < devs->via.array.size; i++)
		if (!ctl_device_active(&devs->via.array.ptr[i]))
			others++;
	if (n > 0)
		print_fitting_table(f, active, n, width);
	else
		fprintf(f, "no device in use\n");
	if (others > 0)
		fprintf(f, "(%zu other device%s found, not used)\n", others, others == 1 ? "" : "s");
	print_users_share(f, s);
	ctl_print_running_jobs(f, info);
}

/* The users of `info` into `s`, each with its share of the GPU since `prev`:
 * its device time over the wall time between the samples (nvidia-smi's
 * per-process utilisation). */
static void take_users(const msgpack_object *info, struct sample *s, const struct sample *prev)
{
	const msgpack_object *users = tdp_map_find(info, "users");

	s->nusers = 0;
	for (uint32_t i = 0; users && users->type == MSGPACK_OBJECT_ARRAY && i < users->via.array.size &&
			     s->nusers < WATCH_USERS; i++) {
		const msgpack_object *e = &users->via.array.ptr[i];
		unsigned k = s->nusers;

		if (e->type != MSGPACK_OBJECT_MAP || !get_uint(e, "uid", &s->users[k].uid))
			continue;
		s->users[k].gpu_seconds = 0;
		ctl_map_number(e, "gpu_seconds", &s->users[k].gpu_seconds);
		s->users[k].gpu_percent = NAN;
		s->users[k].entry = e;
		for (unsigned j = 0; prev->at > 0 && s->at > prev->at && j < prev->nusers; j++)
			if (prev->users[j].uid == s->users[k].uid)
				s->users[k].gpu_percent = 100 * fmax(0, s->users[k].gpu_seconds - prev->users[j].gpu_seconds) /
							  (s->at - prev->at);
		if (isnan(s->users[k].gpu_percent) && prev->at > 0 && s->at > prev->at)
			s->users[k].gpu_percent = 100 * s->users[k].gpu_seconds / (s->at - prev->at); /* new since */
		s->nusers++;
	}
}

/* The users, busiest first: uid, name, GPU share, device time, tensors and
 * their bytes, detached jobs running, connections. */
static void print_users_share(FILE *f, const struct sample *s)
{
	bool done[WATCH_USERS] = { false };

	if (!s->nusers)
		return;
	fprintf(f, "\n%-8s %-12s %6s %10s %8s %10s %5s %6s\n", "UID", "USER", "GPU%", "GPU_S", "TENSORS", "BYTES",
		"JOBS", "CONNS");
	for (unsigned n = 0; n < s->nusers; n++) {
		uint64_t tensors = 0, bytes = 0, jobs = 0, conns = 0;
		struct passwd pw, *found = NULL;
		char name[1024], size[32], pct[16];
		int best = -1;

		for (unsigned k = 0; k < s->nusers; k++)
			if (!done[k] && (best < 0 || (s->users[k].gpu_percent > s->users[best].gpu_percent) ||
					 (isnan(s->users[best].gpu_percent) && !isnan(s->users[k].gpu_percent))))
				best = (int)k;
		done[best] = true;
		get_uint(s->users[best].entry, "tensors", &tensors);
		get_uint(s->users[best].entry, "bytes", &bytes);
		get_uint(s->users[best].entry, "jobs", &jobs);
		get_uint(s->users[best].entry, "connections", &conns);
		if (s->users[best].uid <= UINT32_MAX)
			getpwuid_r((uid_t)s->users[best].uid, &pw, name, sizeof(name), &found);
		ctl_format_size(size, sizeof(size), bytes);
		format_rate(pct, sizeof(pct), s->users[best].gpu_percent);
		fprintf(f, "%-8" PRIu64 " %-12.12s %6s %10.3f %8" PRIu64 " %10s %5" PRIu64 " %6" PRIu64 "\n",
			s->users[best].uid, found ? found->pw_name : "-", pct, s->users[best].gpu_seconds, tensors, size,
			jobs, conns);
	}
}

/* Sleep until `deadline` (monotonic seconds). */
static void sleep_until(double deadline)
{
	struct timespec ts = { .tv_sec = (time_t)deadline,
			       .tv_nsec = (long)((deadline - floor(deadline)) * 1e9) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

int ctl_cmd_info_watch(struct ctl *c)
{
	struct sample prev = { .at = 0 }, cur;
	bool tty = !c->json && isatty(STDOUT_FILENO);
	double interval = 1.0, start;
	uint64_t count = 0;
	int status;

	if ((status = parse_options(c, &interval, &count)) != CTL_EXIT_OK)
		return status;
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		return status;
	start = ctl_now();
	for (uint64_t i = 0; count == 0 || i < count; i++) {
		const msgpack_object *req;
		msgpack_unpacked u;
		size_t off = 0, len;
		void *res = NULL;
		int r;

		if (i > 0)
			sleep_until(start + (double)i * interval);
		if ((r = tensord_info_raw(c->td, &res, &len)) < 0)
			return ctl_call_failed(c, r);
		msgpack_unpacked_init(&u);
		if (msgpack_unpack_next(&u, res, len, &off) != MSGPACK_UNPACK_SUCCESS) {
			msgpack_unpacked_destroy(&u);
			free(res);
			return ctl_error("malformed reply");
		}
		cur = (struct sample){ .at = ctl_now(), .req_rate = NAN, .fail_rate = NAN };
		req = tdp_map_find(&u.data, "requests");
		cur.have_requests = get_uint(req, "total", &cur.requests) &&
				    get_uint(req, "failed", &cur.failed);
		take_users(&u.data, &cur, &prev);
		if (cur.have_requests && prev.have_requests && cur.at > prev.at) {
			/* Our own info request is one of them: leave it out. */
			uint64_t n = cur.requests - prev.requests;

			cur.req_rate = (double)(n > 0 ? n - 1 : 0) / (cur.at - prev.at);
			cur.fail_rate = (double)(cur.failed - prev.failed) / (cur.at - prev.at);
		}
		if (c->json)
			print_json(&u.data, &cur);
		else if (tty)
			print_screen(&u.data, &cur, interval);
		else
			print_line(&u.data, &cur, i == 0);
		fflush(stdout);
		msgpack_unpacked_destroy(&u);
		free(res);
		prev = cur;
		if (ferror(stdout))
			return ctl_error("writing to standard output failed");
	}
	return CTL_EXIT_OK;
}
