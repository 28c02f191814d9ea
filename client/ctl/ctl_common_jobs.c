/* tensorctl's common layer (ctl_common.h), training runs and jobs: the jobs
 * table (jobs, logs, info), a run's progress on stderr while it goes (train,
 * logs -f) and its result line. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "ctl_common.h"
#include "json.h"
#include "pack.h"

/* ---- the jobs table ---- */

/* A str field for "%.*s"; "-" when absent or nil. */
const char *ctl_job_str(const msgpack_object *m, const char *key, int *ret_len)
{
	const msgpack_object *o = tdp_map_find(m, key);

	if (!o || o->type != MSGPACK_OBJECT_STR) {
		*ret_len = 1;
		return "-";
	}
	*ret_len = o->via.str.size > 64 ? 64 : (int)o->via.str.size;
	return o->via.str.ptr;
}

uint64_t ctl_job_uint(const msgpack_object *m, const char *key)
{
	uint64_t v = 0;

	(void)tdp_obj_uint(tdp_map_find(m, key), &v);
	return v;
}

/* The devices of a job map as "0" or "0,1". */
static void devices_text(const msgpack_object *m, char *buf, size_t cap)
{
	const msgpack_object *d = tdp_map_find(m, "devices");
	size_t n = 0;

	buf[0] = 0;
	for (uint32_t i = 0; d && d->type == MSGPACK_OBJECT_ARRAY && i < d->via.array.size && n + 24 < cap; i++) {
		uint64_t id;

		if (tdp_obj_uint(&d->via.array.ptr[i], &id) == 0)
			n += (size_t)snprintf(buf + n, cap - n, "%s%" PRIu64, i ? "," : "", id);
	}
	if (!buf[0])
		snprintf(buf, cap, "-");
}

void ctl_print_job_header(FILE *f)
{
	fprintf(f, "%-6s %-7s %-11s %-4s %-21s %-11s %-9s %s\n", "JOB", "OWNER", "STATE", "DEV", "STEP",
		"LOSS", "ELAPSED", "MODEL");
}

/* A running job's elapsed time now (from its start), not as of its last
 * progress note (issue 34); an ended one's as reported. */
static double elapsed_of(const msgpack_object *j, bool running)
{
	double elapsed = 0, started = 0;
	struct timespec now;

	if (running && ctl_map_number(j, "started", &started) && started > 0 &&
	    clock_gettime(CLOCK_REALTIME, &now) == 0) {
		double e = (double)now.tv_sec + (double)now.tv_nsec / 1e9 - started;

		if (e >= 0)
			return e;
	}
	ctl_map_number(j, "elapsed", &elapsed);
	return elapsed;
}

void ctl_print_job_row(FILE *f, const msgpack_object *j)
{
	char step[48], dev[64], el[32], lossbuf[24] = "-";
	int sl, ml;
	const char *state = ctl_job_str(j, "state", &sl), *model = ctl_job_str(j, "model", &ml);
	bool running = sl == 7 && !strncmp(state, "running", 7);
	double loss = 0;

	snprintf(step, sizeof(step), "%" PRIu64 "/%" PRIu64, ctl_job_uint(j, "run_step"), ctl_job_uint(j, "steps"));
	devices_text(j, dev, sizeof(dev));
	/* No step reported yet: no loss to show ("-", not 0). */
	if (ctl_job_uint(j, "run_step") > 0 && ctl_map_number(j, "loss", &loss))
		snprintf(lossbuf, sizeof(lossbuf), "%.4g", loss);
	ctl_format_duration(el, sizeof(el), elapsed_of(j, running));
	fprintf(f, "%-6" PRIu64 " %-7" PRIu64 " %-11.*s %-4s %-21s %-11s %-9s %.*s\n", ctl_job_uint(j, "job"),
		ctl_job_uint(j, "owner"), sl, state, dev, step, lossbuf, el, ml, model);
}

void ctl_print_running_jobs(FILE *f, const msgpack_object *info)
{
	const msgpack_object *jobs = tdp_map_find(info, "jobs");

	if (!jobs || jobs->type != MSGPACK_OBJECT_ARRAY || jobs->via.array.size == 0)
		return;
	fprintf(f, "\njobs running\n");
	ctl_print_job_header(f);
	for (uint32_t i = 0; i < jobs->via.array.size; i++)
		ctl_print_job_row(f, &jobs->via.array.ptr[i]);
}

int ctl_print_job_started(struct ctl *c, const msgpack_object *res)
{
	uint64_t id;

	if (tdp_obj_uint(tdp_map_find(res, "job"), &id) < 0)
		return ctl_error("malformed reply: no job id");
	if (c->json)
		printf("{\"job\":%" PRIu64 "}\n", id);
	else
		printf("%" PRIu64 "\n", id);
	return CTL_EXIT_OK;
}

/* ---- a training run as it goes ---- */

#define BAR_WIDTH 20
#define LINE_MAX_LEN 512

/* What train prints while the run goes on. */
struct progress {
	struct ctl *c;
	bool bar;                  /* draw a one-line bar on stderr (a TTY) */
	size_t columns;            /* the terminal's width; lines are cut to it */
	size_t shown;              /* characters of the bar now on stderr; 0: none */
	char last[LINE_MAX_LEN];   /* the bar's text, redrawn after an eval line */
};

/* A bounded string builder: appends are cut at the capacity, never overrun. */
struct line {
	char s[LINE_MAX_LEN];
	size_t n;
};

__attribute__((format(printf, 2, 3)))
static void add(struct line *l, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (l->n >= sizeof(l->s) - 1)
		return;
	va_start(ap, fmt);
	k = vsnprintf(l->s + l->n, sizeof(l->s) - l->n, fmt, ap);
	va_end(ap);
	if (k > 0)
		l->n += (size_t)k < sizeof(l->s) - l->n ? (size_t)k : sizeof(l->s) - 1 - l->n;
}

/* map[key] as an integer, if it is one. */
bool ctl_map_int(const msgpack_object *map, const char *key, int64_t *ret)
{
	const msgpack_object *o = tdp_map_find(map, key);

	return o && tdp_obj_int(o, ret) == 0;
}

/* "12.3k" and the like: a rate for people. */
static void add_rate(struct line *l, double v)
{
	if (v < 1e3)
		add(l, "%.0f", v);
	else if (v < 1e6)
		add(l, "%.1fk", v / 1e3);
	else if (v < 1e9)
		add(l, "%.1fM", v / 1e6);
	else
		add(l, "%.1fG", v / 1e9);
}

/* " loss 0.05 acc 0.97": the loss and the metrics of an eval map. */
static void add_eval(struct line *l, const msgpack_object *ev)
{
	const msgpack_object *m = tdp_map_find(ev, "metrics");
	double v;

	if (ctl_map_number(ev, "loss", &v))
		add(l, " loss %.4g", v);
	if (!m || m->type != MSGPACK_OBJECT_MAP)
		return;
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		const msgpack_object *k = &m->via.map.ptr[i].key, *val = &m->via.map.ptr[i].val;

		if (k->type != MSGPACK_OBJECT_STR ||
		    (val->type != MSGPACK_OBJECT_FLOAT32 && val->type != MSGPACK_OBJECT_FLOAT64 &&
		     val->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
		     val->type != MSGPACK_OBJECT_NEGATIVE_INTEGER))
			continue;
		v = val->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (double)val->via.u64
		    : val->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? (double)val->via.i64
								   : val->via.f64;
		add(l, " %.*s %.4g", k->via.str.size > 64 ? 64 : (int)k->via.str.size,
		    k->via.str.ptr, v);
	}
}

/* The step a progress or eval map is at within this run (run_step, 1 to the
 * run's steps; from a daemon that predates it, step) in *ret_own, and the
 * step's number for the optimizer (step: counted on from the model's earlier
 * runs or start_step) in *ret_abs, or -1 when the map has none. False when
 * the map has neither. */
static bool run_position(const msgpack_object *p, int64_t *ret_own, int64_t *ret_abs)
{
	int64_t own, abs = -1;
	bool has_abs = ctl_map_int(p, "step", &abs);

	if (!ctl_map_int(p, "run_step", &own)) {
		if (!has_abs)
			return false;
		own = abs;
	}
	*ret_own = own;
	*ret_abs = has_abs ? abs : -1;
	return true;
}

/* "step 21/30 (model step 171)": the run's own step of its total, then the
 * optimizer's count when it differs (a model trained before, a start_step). */
static void add_step(struct line *l, const struct progress *pg, const msgpack_object *p, bool total)
{
	int64_t own, abs, b;

	if (!run_position(p, &own, &abs))
		return;
	add(l, "%sstep %" PRId64, l->n ? " " : "", own);
	if (total && ctl_map_int(p, "steps", &b))
		add(l, "/%" PRId64, b);
	if (abs >= 0 && abs != own)
		add(l, " (%s step %" PRId64 ")", pg->c->model ? "model" : "optimizer", abs);
}

/* "step 450/1000 epoch 3/10 loss 0.1234": the fields a progress map has. */
static void add_position(struct line *l, const struct progress *pg, const msgpack_object *p)
{
	int64_t a, b;
	double v;

	add_step(l, pg, p, true);
	if (ctl_map_int(p, "epoch", &a)) {
		add(l, "%sepoch %" PRId64, l->n ? " " : "", a);
		if (ctl_map_int(p, "epochs", &b))
			add(l, "/%" PRId64, b);
	}
	if (ctl_map_number(p, "loss", &v))
		add(l, "%sloss %.4g", l->n ? " " : "", v);
}

/* Wipe the bar off stderr so a line can be printed in its place. */
static void clear_bar(struct progress *pg)
{
	if (!pg->shown)
		return;
	fprintf(stderr, "\r%*s\r", (int)pg->shown, "");
	fflush(stderr);
	pg->shown = 0;
}

static void draw_bar(struct progress *pg, const char *text)
{
	size_t n = strlen(text);

	if (n > pg->columns)
		n = pg->columns;
	fprintf(stderr, "\r%.*s", (int)n, text);
	if (pg->shown > n)
		fprintf(stderr, "%*s\r%.*s", (int)(pg->shown - n), "", (int)n, text);
	fflush(stderr);
	pg->shown = n;
}

static void on_progress(struct progress *pg, const msgpack_object *p)
{
	struct line l = { .n = 0 };
	int64_t step, abs, steps;
	double v, frac = 0;

	if (pg->bar) {
		if (run_position(p, &step, &abs) && ctl_map_int(p, "steps", &steps) && steps > 0)
			frac = (double)step / (double)steps;
		frac = frac < 0 ? 0 : frac > 1 ? 1 : frac;
		add(&l, "[");
		for (int i = 0; i < BAR_WIDTH; i++)
			add(&l, "%c", i < (int)(frac * BAR_WIDTH) ? '#' : '.');
		add(&l, "] %3d%% ", (int)(frac * 100));
	}
	add_position(&l, pg, p);
	if (!pg->bar && ctl_map_number(p, "lr", &v))
		add(&l, " lr %.4g", v);
	if (ctl_map_number(p, "samples_per_s", &v)) {
		add(&l, " ");
		add_rate(&l, v);
		add(&l, " samples/s");
	}
	if (!pg->bar && ctl_map_number(p, "elapsed", &v))
		add(&l, " %.1f s", v);
	if (pg->bar) {
		snprintf(pg->last, sizeof(pg->last), "%s", l.s);
		draw_bar(pg, l.s);
	} else {
		printf("%s\n", l.s);
		fflush(stdout);
	}
}

static void on_eval(struct progress *pg, const msgpack_object *e)
{
	struct line l = { .n = 0 };
	int64_t a;

	add(&l, "eval");
	add_step(&l, pg, e, false);
	if (ctl_map_int(e, "epoch", &a))
		add(&l, " epoch %" PRId64, a);
	add(&l, ":");
	add_eval(&l, e);
	clear_bar(pg);
	printf("%s\n", l.s);
	fflush(stdout);
	if (pg->bar && pg->last[0])
		draw_bar(pg, pg->last);
}

/* {"event": EVENT, ...the map's own fields} as one line. */
static void print_event(const char *event, const msgpack_object *m)
{
	printf("{\"event\":\"%s\"", event);
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		const msgpack_object *k = &m->via.map.ptr[i].key;

		if (tdp_obj_str_eq(k, "event"))
			continue;
		fputc(',', stdout);
		if (k->type == MSGPACK_OBJECT_STR)
			ctl_json_string(stdout, k->via.str.ptr, k->via.str.size);
		else
			fputs("\"?\"", stdout);
		fputc(':', stdout);
		ctl_json_msgpack(stdout, &m->via.map.ptr[i].val);
	}
	fputs("}\n", stdout);
	fflush(stdout);
}

static void on_notify(void *userdata, const char *method, const void *params, size_t len)
{
	struct progress *pg = userdata;
	const char *event;
	msgpack_unpacked u;
	size_t off = 0;

	if (strcmp(method, "train.progress") == 0)
		event = "progress";
	else if (strcmp(method, "train.eval") == 0)
		event = "eval";
	else
		return; /* other events are not about this run */
	if (!params)
		return;
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, params, len, &off) == MSGPACK_UNPACK_SUCCESS &&
	    u.data.type == MSGPACK_OBJECT_MAP) {
		if (pg->c->json)
			print_event(event, &u.data);
		else if (event[0] == 'p')
			on_progress(pg, &u.data);
		else
			on_eval(pg, &u.data);
	}
	msgpack_unpacked_destroy(&u);
}

int ctl_print_train_result(struct ctl *c, const msgpack_object *res)
{
	const msgpack_object *stopped = tdp_map_find(res, "stopped");
	const msgpack_object *ev = tdp_map_find(res, "eval");
	const msgpack_object *devs = tdp_map_find(res, "devices");
	struct line l = { .n = 0 };
	int64_t steps;
	double secs, v;

	if (res->type != MSGPACK_OBJECT_MAP)
		return ctl_error("malformed reply: the result is not a map");
	if (c->json) {
		print_event("result", res);
		return CTL_EXIT_OK;
	}
	if (!ctl_map_int(res, "steps", &steps) || !ctl_map_number(res, "seconds", &secs))
		return ctl_error("malformed reply: no steps or seconds");
	add(&l, "trained %" PRId64 " step%s in %.*f s", steps, steps == 1 ? "" : "s",
	    secs < 10 ? 2 : 1, secs);
	if (ctl_map_number(res, "samples_per_s", &v)) {
		add(&l, " (");
		add_rate(&l, v);
		add(&l, " samples/s)");
	}
	if (ctl_map_number(res, "loss", &v))
		add(&l, ", final loss %.4g", v);
	if (ev && ev->type == MSGPACK_OBJECT_MAP) {
		add(&l, ", eval");
		add_eval(&l, ev);
	}
	if (devs && devs->type == MSGPACK_OBJECT_ARRAY) {
		add(&l, "; devices");
		for (uint32_t i = 0; i < devs->via.array.size; i++) {
			int64_t id;

			if (tdp_obj_int(&devs->via.array.ptr[i], &id) == 0)
				add(&l, "%s%" PRId64, i ? "," : " ", id);
		}
		if (ctl_map_number(res, "replica_max_diff", &v))
			add(&l, ", replica_max_diff %.3g", v);
	}
	if (stopped && tdp_obj_str_eq(stopped, "stop_loss"))
		add(&l, "; stopped early: the loss reached stop_loss");
	/* precision f16: dynamic loss scaling (docs/training.md). */
	if (ctl_map_number(res, "loss_scale", &v)) {
		int64_t skipped = 0;

		ctl_map_int(res, "skipped_steps", &skipped);
		add(&l, "; loss scale %.6g, %" PRId64 " step%s skipped", v, skipped, skipped == 1 ? "" : "s");
	}
	printf("%s\n", l.s);
	return CTL_EXIT_OK;
}

int ctl_call_run(struct ctl *c, const msgpack_sbuffer *sb, ctl_raw_call_fn call, bool progress,
		 msgpack_unpacked *u, void **ret_res)
{
	struct progress pg = { .c = c, .columns = LINE_MAX_LEN };
	void *res = NULL;
	size_t rlen = 0, off = 0;
	int r, status;

	pg.bar = progress && !c->json && isatty(STDERR_FILENO);
	if (pg.bar) {
		struct winsize ws;

		/* One column short: a full line would wrap on some terminals. */
		if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
			pg.columns = (size_t)ws.ws_col - 1;
	}
	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		goto out;
	if (progress)
		tensord_set_notify(c->td, on_notify, &pg);
	r = call(c->td, sb->data, sb->size, &res, &rlen);
	if (progress) {
		clear_bar(&pg);
		/* pg ends with this call: no later notification may reach it. */
		tensord_set_notify(c->td, NULL, NULL);
	}
	if (r < 0) {
		status = ctl_call_failed(c, r);
		goto out;
	}
	if (msgpack_unpack_next(u, res, rlen, &off) != MSGPACK_UNPACK_SUCCESS)
		status = ctl_error("malformed reply");
out:
	*ret_res = res;
	return status;
}
