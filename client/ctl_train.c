/* tensorctl train (train.run, with its progress notifications) and step
 * (train.step). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "ctl.h"
#include "json.h"
#include "name.h"
#include "pack.h"

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
static bool inum(const msgpack_object *map, const char *key, int64_t *ret)
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
	bool has_abs = inum(p, "step", &abs);

	if (!inum(p, "run_step", &own)) {
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
	if (total && inum(p, "steps", &b))
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
	if (inum(p, "epoch", &a)) {
		add(l, "%sepoch %" PRId64, l->n ? " " : "", a);
		if (inum(p, "epochs", &b))
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
		if (run_position(p, &step, &abs) && inum(p, "steps", &steps) && steps > 0)
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
	if (inum(e, "epoch", &a))
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

static int print_run_result(struct ctl *c, const msgpack_object *res)
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
	if (!inum(res, "steps", &steps) || !ctl_map_number(res, "seconds", &secs))
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
	printf("%s\n", l.s);
	return CTL_EXIT_OK;
}

/* Connect, call with the packed params in `sb` and unpack. The objects in
 * `u` point into *ret_res, which the caller frees after them. */
static int call_with_params(struct ctl *c, const msgpack_sbuffer *sb,
			    int (*call)(struct tensord *, const void *, size_t, void **, size_t *),
			    struct progress *pg, msgpack_unpacked *u, void **ret_res)
{
	void *res = NULL;
	size_t rlen = 0, off = 0;
	int r, status;

	if ((status = ctl_connect(c)) != CTL_EXIT_OK)
		goto out;
	if (pg)
		tensord_set_notify(c->td, on_notify, pg);
	r = call(c->td, sb->data, sb->size, &res, &rlen);
	if (pg)
		clear_bar(pg);
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

/* Read FILE, connect, call and unpack: what train and step share. */
static int call_with_file(struct ctl *c, const char *what,
			  int (*call)(struct tensord *, const void *, size_t, void **, size_t *),
			  struct progress *pg, msgpack_unpacked *u, void **ret_res)
{
	msgpack_sbuffer sb;
	int status;

	*ret_res = NULL;
	msgpack_sbuffer_init(&sb);
	if ((status = ctl_read_json_map(c->pos[0], what, &sb)) == CTL_EXIT_OK)
		status = call_with_params(c, &sb, call, pg, u, ret_res);
	msgpack_sbuffer_destroy(&sb);
	return status;
}

/* Whether map `m` has the key `key`. */
static bool map_has(const msgpack_object *m, const char *key)
{
	size_t n = strlen(key);

	if (m->type != MSGPACK_OBJECT_MAP)
		return false;
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		const msgpack_object *k = &m->via.map.ptr[i].key;

		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && !memcmp(k->via.str.ptr, key, n))
			return true;
	}
	return false;
}

/* train --model NAME FILE: "data" and "batch_size" from the options or the
 * file, else a usage error naming both. */
static int check_required(struct ctl *c, const msgpack_object *file, const msgpack_object *opts)
{
	if (!map_has(file, "data") && !map_has(opts, "data"))
		return ctl_usage_error("train --model: missing --data INPUT=TENSOR (or \"data\" in %.64s)",
				       c->pos[0]);
	if (!map_has(file, "batch_size") && !map_has(opts, "batch_size"))
		return ctl_usage_error("train --model: missing --batch-size N (or \"batch_size\" in %.64s)",
				       c->pos[0]);
	return CTL_EXIT_OK;
}

/* train --model NAME [FILE] --data ... : the train.run params of FILE (if
 * any) with the options' values put over them. */
static int model_run_params(struct ctl *c, msgpack_sbuffer *out)
{
	const char *what = "{\"data\": {...}, \"batch_size\", \"epochs\", ...}";
	msgpack_sbuffer file, extra;
	msgpack_unpacked u, ue;
	msgpack_packer pk;
	uint64_t batch = 0, epochs = 0, steps = 0;
	size_t off = 0, offe = 0;
	unsigned n;
	int status;

	if (!c->model)
		return ctl_usage_error("train: --data, --batch-size, --epochs and --steps go with --model");
	if ((c->batch_size && (status = ctl_parse_count("--batch-size", c->batch_size, &batch)) != CTL_EXIT_OK) ||
	    (c->epochs && (status = ctl_parse_count("--epochs", c->epochs, &epochs)) != CTL_EXIT_OK) ||
	    (c->steps && (status = ctl_parse_count("--steps", c->steps, &steps)) != CTL_EXIT_OK))
		return status;
	if (!tdp_ref_valid(c->model, strnlen(c->model, TENSORD_MAX_NAME_LEN + 1), false))
		return ctl_usage_error("invalid model name '%.64s'", c->model);
	if (epochs && steps)
		return ctl_usage_error("train: give --epochs or --steps, not both");
	/* Required: checked here, with the options' names (a FILE may give them). */
	if (c->npos == 0 && !c->ndata)
		return ctl_usage_error("train --model: missing --data INPUT=TENSOR");
	if (c->npos == 0 && !batch)
		return ctl_usage_error("train --model: missing --batch-size N");
	msgpack_sbuffer_init(&file);
	msgpack_sbuffer_init(&extra);
	msgpack_unpacked_init(&u);
	msgpack_unpacked_init(&ue);
	if (c->npos == 1 && (status = ctl_read_json_map(c->pos[0], what, &file)) != CTL_EXIT_OK)
		goto out;
	n = 1 + (c->ndata ? 1 : 0) + (batch ? 1 : 0) + (epochs ? 1 : 0) + (steps ? 1 : 0) +
	    (c->devices ? 1 : 0) + (c->detach ? 1 : 0);
	msgpack_packer_init(&pk, &extra, msgpack_sbuffer_write);
	if (msgpack_pack_map(&pk, n) || tdp_pack_cstr(&pk, "model") || tdp_pack_cstr(&pk, c->model)) {
		status = ctl_error("out of memory");
		goto out;
	}
	if (c->ndata && (tdp_pack_cstr(&pk, "data") ||
			 (status = ctl_pack_pairs(&pk, c->data, c->ndata, "--data")) != CTL_EXIT_OK))
		goto out;
	if (c->devices && (tdp_pack_cstr(&pk, "devices") ||
			   (status = ctl_pack_device_list(&pk, "--devices", c->devices)) != CTL_EXIT_OK))
		goto out;
	if ((c->detach && (tdp_pack_cstr(&pk, "detach") || msgpack_pack_true(&pk))) ||
	    (batch && (tdp_pack_cstr(&pk, "batch_size") || msgpack_pack_uint64(&pk, batch))) ||
	    (epochs && (tdp_pack_cstr(&pk, "epochs") || msgpack_pack_uint64(&pk, epochs))) ||
	    (steps && (tdp_pack_cstr(&pk, "steps") || msgpack_pack_uint64(&pk, steps))) ||
	    msgpack_unpack_next(&ue, extra.data, extra.size, &offe) != MSGPACK_UNPACK_SUCCESS ||
	    (c->npos == 1 && msgpack_unpack_next(&u, file.data, file.size, &off) != MSGPACK_UNPACK_SUCCESS)) {
		status = ctl_error("out of memory");
		goto out;
	}
	if (c->npos == 1 && (status = check_required(c, &u.data, &ue.data)) != CTL_EXIT_OK)
		goto out;
	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	status = ctl_pack_merged(&pk, c->npos == 1 ? &u.data : NULL, &ue.data) ? ctl_error("out of memory")
									       : CTL_EXIT_OK;
out:
	msgpack_unpacked_destroy(&u);
	msgpack_unpacked_destroy(&ue);
	msgpack_sbuffer_destroy(&file);
	msgpack_sbuffer_destroy(&extra);
	return status;
}

/* train FILE --devices ... --detach: the params of FILE with "devices" and
 * "detach" put over them. */
static int file_run_params(struct ctl *c, msgpack_sbuffer *out)
{
	const char *what = "{\"nodes\": [...], \"loss\", \"params\", \"data\", ...}";
	msgpack_sbuffer file, extra;
	msgpack_unpacked u, ue;
	msgpack_packer pk;
	size_t off = 0, offe = 0;
	int status;

	msgpack_sbuffer_init(&file);
	msgpack_sbuffer_init(&extra);
	msgpack_unpacked_init(&u);
	msgpack_unpacked_init(&ue);
	msgpack_packer_init(&pk, &extra, msgpack_sbuffer_write);
	/* The option first: a usage error is reported before the file is read. */
	if (msgpack_pack_map(&pk, (c->devices ? 1 : 0) + (c->detach ? 1 : 0)) ||
	    (c->detach && (tdp_pack_cstr(&pk, "detach") || msgpack_pack_true(&pk))) ||
	    (c->devices && tdp_pack_cstr(&pk, "devices"))) {
		status = ctl_error("out of memory");
		goto out;
	}
	if ((c->devices && (status = ctl_pack_device_list(&pk, "--devices", c->devices)) != CTL_EXIT_OK) ||
	    (status = ctl_read_json_map(c->pos[0], what, &file)) != CTL_EXIT_OK)
		goto out;
	if (msgpack_unpack_next(&ue, extra.data, extra.size, &offe) != MSGPACK_UNPACK_SUCCESS ||
	    msgpack_unpack_next(&u, file.data, file.size, &off) != MSGPACK_UNPACK_SUCCESS) {
		status = ctl_error("out of memory");
		goto out;
	}
	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	status = ctl_pack_merged(&pk, &u.data, &ue.data) ? ctl_error("out of memory") : CTL_EXIT_OK;
out:
	msgpack_unpacked_destroy(&u);
	msgpack_unpacked_destroy(&ue);
	msgpack_sbuffer_destroy(&file);
	msgpack_sbuffer_destroy(&extra);
	return status;
}

int ctl_cmd_train(struct ctl *c)
{
	struct progress pg = { .c = c, .columns = LINE_MAX_LEN };
	msgpack_unpacked u;
	void *res = NULL;
	int status;

	pg.bar = !c->json && isatty(STDERR_FILENO);
	if (pg.bar) {
		struct winsize ws;

		/* One column short: a full line would wrap on some terminals. */
		if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
			pg.columns = (size_t)ws.ws_col - 1;
	}
	msgpack_unpacked_init(&u);
	if (c->model || c->ndata || c->batch_size || c->epochs || c->steps) {
		msgpack_sbuffer sb;

		msgpack_sbuffer_init(&sb);
		status = model_run_params(c, &sb);
		if (status == CTL_EXIT_OK)
			status = call_with_params(c, &sb, tensord_train_run_raw, &pg, &u, &res);
		msgpack_sbuffer_destroy(&sb);
	} else if (c->npos == 0) {
		status = ctl_usage_error("train: missing FILE (or --model NAME)");
	} else if (c->devices || c->detach) {
		msgpack_sbuffer sb;

		msgpack_sbuffer_init(&sb);
		status = file_run_params(c, &sb);
		if (status == CTL_EXIT_OK)
			status = call_with_params(c, &sb, tensord_train_run_raw, &pg, &u, &res);
		msgpack_sbuffer_destroy(&sb);
	} else {
		status = call_with_file(c, "{\"nodes\": [...], \"loss\", \"params\", \"data\", ...}",
					tensord_train_run_raw, &pg, &u, &res);
	}
	if (status == CTL_EXIT_OK)
		status = c->detach ? ctl_print_job_started(c, &u.data) : print_run_result(c, &u.data);
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}

static int watch_call(struct tensord *td, const void *params, size_t len, void **ret, size_t *ret_len)
{
	return tensord_call_raw(td, "job.watch", params, len, ret, ret_len);
}

int ctl_train_follow(struct ctl *c, const msgpack_sbuffer *params, msgpack_unpacked *u, void **ret_res)
{
	struct progress pg = { .c = c, .columns = LINE_MAX_LEN };

	pg.bar = !c->json && isatty(STDERR_FILENO);
	if (pg.bar) {
		struct winsize ws;

		if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
			pg.columns = (size_t)ws.ws_col - 1;
	}
	return call_with_params(c, params, watch_call, &pg, u, ret_res);
}

int ctl_print_train_result(struct ctl *c, const msgpack_object *res)
{
	return print_run_result(c, res);
}

static int print_step_result(struct ctl *c, const msgpack_object *res)
{
	const msgpack_object *outs = tdp_map_find(res, "outputs");
	const msgpack_object *stored = tdp_map_find(res, "stored");
	int64_t step = 0;
	double loss, lr = 0;
	int status;

	if (res->type != MSGPACK_OBJECT_MAP || !ctl_map_number(res, "loss", &loss) ||
	    (outs && outs->type != MSGPACK_OBJECT_MAP) ||
	    (stored && stored->type != MSGPACK_OBJECT_ARRAY))
		return ctl_error("malformed reply: no loss, or bad outputs or stored");
	inum(res, "step", &step);
	ctl_map_number(res, "lr", &lr);
	if (c->json) {
		fputs("{\"loss\":", stdout);
		ctl_json_double(stdout, loss);
		printf(",\"step\":%" PRId64 ",\"lr\":", step);
		ctl_json_double(stdout, lr);
		fputs(",\"outputs\":{", stdout);
	} else {
		printf("step %" PRId64 ": loss %.6g", step, loss);
		if (lr > 0)
			printf(", lr %.4g", lr);
		fputc('\n', stdout);
	}
	for (uint32_t i = 0; outs && i < outs->via.map.size; i++) {
		if (c->json && i > 0)
			fputc(',', stdout);
		status = ctl_print_output(c, &outs->via.map.ptr[i].key, &outs->via.map.ptr[i].val);
		if (status != CTL_EXIT_OK)
			return status;
	}
	if (c->json) {
		fputs("},\"stored\":", stdout);
		if (stored)
			ctl_json_msgpack(stdout, stored);
		else
			fputs("[]", stdout);
		fputs("}\n", stdout);
		return CTL_EXIT_OK;
	}
	if (stored && stored->via.array.size > 0) {
		fputs("stored", stdout);
		for (uint32_t i = 0; i < stored->via.array.size; i++) {
			const msgpack_object *n = &stored->via.array.ptr[i];

			if (n->type == MSGPACK_OBJECT_STR)
				printf("%s %.*s", i ? "," : "",
				       n->via.str.size > 255 ? 255 : (int)n->via.str.size, n->via.str.ptr);
		}
		fputc('\n', stdout);
	}
	return CTL_EXIT_OK;
}

int ctl_cmd_step(struct ctl *c)
{
	msgpack_unpacked u;
	void *res = NULL;
	int status;

	msgpack_unpacked_init(&u);
	status = call_with_file(c, "{\"nodes\": [...], \"loss\", \"params\", ...}",
				tensord_train_step_raw, NULL, &u, &res);
	if (status == CTL_EXIT_OK)
		status = print_step_result(c, &u.data);
	msgpack_unpacked_destroy(&u);
	free(res);
	return status;
}
