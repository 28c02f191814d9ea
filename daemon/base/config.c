#include "base/config.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "wire_limits.h"

#define DEFAULT_SOCKET "/run/tensord/tensord.sock"

void config_defaults(struct config *c)
{
	const char *env = getenv("TENSORD_SOCKET");

	memset(c, 0, sizeof(*c));
	c->socket_set = env && *env && strlen(env) < sizeof(c->socket_path);
	snprintf(c->socket_path, sizeof(c->socket_path), "%s", c->socket_set ? env : DEFAULT_SOCKET);
	c->device.pick = GPU_PICK_AUTO;
	snprintf(c->state_dir, sizeof(c->state_dir), "/var/lib/tensord");
	/* systemd's StateDirectory= (the shipped unit's): a state directory given
	 * for this daemon, so persist = auto keeps tensors there. The first of a
	 * colon-separated list. */
	env = getenv("STATE_DIRECTORY");
	if (env && *env == '/' && strcspn(env, ":") < sizeof(c->state_dir)) {
		snprintf(c->state_dir, sizeof(c->state_dir), "%.*s", (int)strcspn(env, ":"), env);
		c->state_dir_set = true;
	}
	c->log_level = LOG_NOTICE;
	c->max_tensors = 65536;
	c->max_connections = 1024;
	c->max_tensor_bytes = TDP_MAX_TENSOR_BYTES;
	c->max_message_bytes = TDP_MAX_MESSAGE_BYTES;
	c->host_mapped = true;
	c->async_graphs = true;
	c->batch_requests = true;
	c->cluster = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
	c->cluster_timeout_ms = 30000;
	c->block_size = 0;
	c->max_device_bytes = 0;
	c->user_max_tensors = 0;
	c->user_max_bytes = 0;
	c->max_connections_per_user = 64;
	c->max_inflight = 64;
	c->max_output_backlog = (uint64_t)8 << 20;
	c->stall_timeout = 60;
	c->input_timeout = 30;
	c->max_input_bytes = (uint64_t)64 << 20;
	c->user_max_buffer_bytes = (uint64_t)1536 << 20;
	c->user_max_models = 64;
	c->user_max_kernels = 16;
	c->user_max_jobs = 4;
	c->request_timeout_ms = 10000;
	c->stop_timeout = 15;
	c->kernel_group = -1;
	c->kernel_timeout_ms = 10000;
	c->persist = CONFIG_PERSIST_AUTO;
	c->checkpoint_interval = 30;
}

static int parse_u64(const char *v, uint64_t min, uint64_t max, uint64_t *ret);

/* A group by number or name. */
static int parse_group(const char *v, int64_t *ret)
{
	struct group gr, *res = NULL;
	char buf[4096];
	uint64_t gid;

	if (!strcmp(v, "none")) {
		*ret = -1;
		return 0;
	}
	if (parse_u64(v, 0, UINT32_MAX - 1, &gid) == 0) {
		*ret = (int64_t)gid;
		return 0;
	}
	if (getgrnam_r(v, &gr, buf, sizeof(buf), &res) != 0 || !res)
		return -EINVAL;
	*ret = res->gr_gid;
	return 0;
}

/* Seconds with an optional fraction ("10", "0.5"), kept in milliseconds. */
static int parse_ms(const char *v, uint64_t min_ms, uint64_t max_ms, uint64_t *ret)
{
	char *end;
	double x;

	if (!isdigit((unsigned char)*v))
		return -EINVAL;
	errno = 0;
	x = strtod(v, &end);
	if (errno || *end || x * 1000 < (double)min_ms || x * 1000 > (double)max_ms)
		return -EINVAL;
	*ret = (uint64_t)(x * 1000 + 0.5);
	return 0;
}

bool config_persist_on(const struct config *c)
{
	return c->persist == CONFIG_PERSIST_YES || (c->persist == CONFIG_PERSIST_AUTO && c->state_dir_set);
}

static int parse_u64(const char *v, uint64_t min, uint64_t max, uint64_t *ret)
{
	char *end;
	unsigned long long x;

	if (!isdigit((unsigned char)*v))
		return -EINVAL;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || *end || x < min || x > max)
		return -EINVAL;
	*ret = x;
	return 0;
}

/* A byte count: decimal, optionally with a K, M, G or T suffix (powers of
 * 1024; "KiB", "MB"... are read the same way). */
static int parse_size(const char *v, uint64_t min, uint64_t max, uint64_t *ret)
{
	static const char units[] = "KMGT";
	char digits[32];
	size_t n = strspn(v, "0123456789");
	const char *u = v + n, *p;
	uint64_t x;
	unsigned shift = 0;

	if (n == 0 || n >= sizeof(digits))
		return -EINVAL;
	memcpy(digits, v, n);
	digits[n] = '\0';
	if (*u) {
		p = strchr(units, toupper((unsigned char)*u));
		if (!p || !*p)
			return -EINVAL;
		shift = 10 * (unsigned)(p - units + 1);
		u++;
		if (!strcmp(u, "iB") || !strcmp(u, "B"))
			u += strlen(u);
		if (*u)
			return -EINVAL;
	}
	if (parse_u64(digits, 0, UINT64_MAX >> shift, &x) < 0)
		return -EINVAL;
	x <<= shift;
	if (x < min || x > max)
		return -EINVAL;
	*ret = x;
	return 0;
}

static int parse_bool(const char *v, bool *ret)
{
	if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"))
		*ret = true;
	else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off"))
		*ret = false;
	else
		return -EINVAL;
	return 0;
}

/* The `device` values that name no index (docs/devices.md). */
static const char *const device_picks[] = {
	[GPU_PICK_AUTO] = "auto", [GPU_PICK_ALL] = "all", [GPU_PICK_CPU] = "cpu", [GPU_PICK_LOCAL] = "local",
};

static int set_device(struct config *c, const char *v)
{
	struct gpu_choice ch = { .pick = GPU_PICK_LIST };
	char buf[256], *save = NULL;
	uint64_t idx;

	for (unsigned i = 0; i < sizeof(device_picks) / sizeof(device_picks[0]); i++) {
		if (device_picks[i] && !strcmp(v, device_picks[i])) {
			c->device = (struct gpu_choice){ .pick = (enum gpu_pick)i };
			return 0;
		}
	}
	if (!*v || strlen(v) >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, v, strlen(v) + 1);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (ch.n == GPU_MAX_DEVICES || parse_u64(tok, 0, 255, &idx) < 0)
			return -EINVAL;
		ch.index[ch.n++] = (uint32_t)idx;
	}
	if (ch.n == 0 || v[strlen(v) - 1] == ',' || v[0] == ',' || strstr(v, ",,"))
		return -EINVAL;
	c->device = ch;
	return 0;
}

static int set_string(char *dst, size_t cap, const char *v)
{
	if (!*v || strlen(v) >= cap)
		return -EINVAL;
	memcpy(dst, v, strlen(v) + 1);
	return 0;
}

/* The configuration keys: how each is read and where it goes. A new key is
 * one row here (and its default in config_defaults); `tensord --print-config`
 * lists the rows, and the docs_drift test checks the man page and the shipped
 * tensord.conf against that list. */
enum key_kind {
	KEY_STRING,     /* a char array of `size` bytes, not empty */
	KEY_COUNT,      /* uint64_t, decimal, min..max */
	KEY_SIZE,       /* uint64_t bytes, with an optional K/M/G/T suffix, min..max */
	KEY_MS,         /* uint64_t ms, given in seconds with a fraction, min..max ms */
	KEY_BOOL,       /* bool */
	KEY_DEVICE,     /* struct gpu_choice */
	KEY_PERSIST,    /* int, CONFIG_PERSIST_* */
	KEY_GROUP,      /* int64_t gid, -1 = none */
	KEY_VERBOSE,    /* int log_level: LOG_DEBUG or LOG_NOTICE */
	KEY_USERS,      /* struct config_users of counts, min..max */
	KEY_USERS_SIZE, /* struct config_users of byte counts, min..max */
};

struct config_key {
	const char *name;
	enum key_kind kind;
	size_t offset, size;    /* of the field in struct config */
	uint64_t min, max;
	bool reload;            /* SIGHUP takes a new value (tensord(8): "Reloadable") */
};

#define RELOAD true
#define START_ONLY false

#define FIELD(f) offsetof(struct config, f), sizeof(((struct config *)0)->f)

static const struct config_key keys[] = {
	{ "socket", KEY_STRING, FIELD(socket_path), 0, 0, START_ONLY },
	{ "state_dir", KEY_STRING, FIELD(state_dir), 0, 0, START_ONLY },
	{ "persist", KEY_PERSIST, FIELD(persist), 0, 0, START_ONLY },
	{ "checkpoint_interval", KEY_COUNT, FIELD(checkpoint_interval), 0, 86400, RELOAD },
	{ "device", KEY_DEVICE, FIELD(device), 0, 0, START_ONLY },
	{ "max_tensors", KEY_COUNT, FIELD(max_tensors), 1, UINT32_MAX, RELOAD },
	{ "max_connections", KEY_COUNT, FIELD(max_connections), 1, 1000000, RELOAD },
	{ "max_tensor_bytes", KEY_SIZE, FIELD(max_tensor_bytes), 1, TDP_MAX_TENSOR_BYTES, RELOAD },
	{ "max_message_bytes", KEY_SIZE, FIELD(max_message_bytes), 4096, TDP_MAX_MESSAGE_BYTES, RELOAD },
	{ "block_size", KEY_SIZE, FIELD(block_size), 0, (uint64_t)1 << 40, START_ONLY },
	{ "max_device_bytes", KEY_SIZE, FIELD(max_device_bytes), 0, (uint64_t)1 << 50, START_ONLY },
	{ "user_max_tensors", KEY_COUNT, FIELD(user_max_tensors), 0, UINT32_MAX, RELOAD },
	{ "user_max_bytes", KEY_SIZE, FIELD(user_max_bytes), 0, (uint64_t)1 << 50, RELOAD },
	{ "max_connections_per_user", KEY_COUNT, FIELD(max_connections_per_user), 0, 1000000, RELOAD },
	{ "max_inflight", KEY_COUNT, FIELD(max_inflight), 1, 65536, RELOAD },
	{ "max_output_backlog", KEY_SIZE, FIELD(max_output_backlog), (uint64_t)64 << 10,
	  (uint64_t)1 << 40, RELOAD },
	{ "stall_timeout", KEY_COUNT, FIELD(stall_timeout), 0, 86400, RELOAD },
	{ "input_timeout", KEY_COUNT, FIELD(input_timeout), 0, 86400, RELOAD },
	{ "max_input_bytes", KEY_SIZE, FIELD(max_input_bytes), (uint64_t)64 << 10, (uint64_t)1 << 40, RELOAD },
	{ "user_max_buffer_bytes", KEY_SIZE, FIELD(user_max_buffer_bytes), 0, (uint64_t)1 << 50, RELOAD },
	{ "user_max_models", KEY_COUNT, FIELD(user_max_models), 0, 1000000, RELOAD },
	{ "user_max_kernels", KEY_COUNT, FIELD(user_max_kernels), 1, 64, RELOAD },
	{ "user_max_jobs", KEY_COUNT, FIELD(user_max_jobs), 1, 1000, RELOAD },
	{ "user_weights", KEY_USERS, FIELD(user_weights), 1, 1000, RELOAD },
	{ "user_quota_tensors", KEY_USERS, FIELD(user_quota_tensors), 0, UINT32_MAX, RELOAD },
	{ "user_quota_bytes", KEY_USERS_SIZE, FIELD(user_quota_bytes), 0, (uint64_t)1 << 50, RELOAD },
	{ "user_quota_jobs", KEY_USERS, FIELD(user_quota_jobs), 1, 1000, RELOAD },
	{ "user_gpu_hour", KEY_USERS, FIELD(user_gpu_hour), 1, 3600 * 1000, RELOAD },
	{ "request_timeout", KEY_MS, FIELD(request_timeout_ms), 100, 3600 * 1000, RELOAD },
	{ "stop_timeout", KEY_COUNT, FIELD(stop_timeout), 0, 3600, RELOAD },
	{ "kernel_group", KEY_GROUP, FIELD(kernel_group), 0, 0, RELOAD },
	{ "kernel_timeout", KEY_MS, FIELD(kernel_timeout_ms), 100, 3600 * 1000, RELOAD },
	{ "host_mapped", KEY_BOOL, FIELD(host_mapped), 0, 0, START_ONLY },
	{ "async_graphs", KEY_BOOL, FIELD(async_graphs), 0, 0, RELOAD },
	{ "batch_requests", KEY_BOOL, FIELD(batch_requests), 0, 0, RELOAD },
	{ "cluster", KEY_BOOL, FIELD(cluster), 0, 0, START_ONLY },
	{ "cluster_timeout", KEY_MS, FIELD(cluster_timeout_ms), 100, 3600 * 1000, START_ONLY },
	{ "verbose", KEY_VERBOSE, FIELD(log_level), 0, 0, RELOAD },
};

#undef FIELD
#undef RELOAD
#undef START_ONLY

static int set_key(struct config *c, const struct config_key *k, const char *value)
{
	void *field = (char *)c + k->offset;
	bool b;
	int r;

	switch (k->kind) {
	case KEY_STRING:
		return set_string(field, k->size, value);
	case KEY_COUNT:
		return parse_u64(value, k->min, k->max, field);
	case KEY_SIZE:
		return parse_size(value, k->min, k->max, field);
	case KEY_MS:
		return parse_ms(value, k->min, k->max, field);
	case KEY_BOOL:
		return parse_bool(value, field);
	case KEY_DEVICE:
		return set_device(c, value);
	case KEY_PERSIST:
		if (!strcmp(value, "auto")) {
			c->persist = CONFIG_PERSIST_AUTO;
			return 0;
		}
		if ((r = parse_bool(value, &b)) == 0)
			c->persist = b ? CONFIG_PERSIST_YES : CONFIG_PERSIST_NO;
		return r;
	case KEY_GROUP:
		return parse_group(value, field);
	case KEY_VERBOSE:
		if ((r = parse_bool(value, &b)) == 0)
			c->log_level = b ? LOG_DEBUG : LOG_NOTICE;
		return r;
	case KEY_USERS:
		return config_users_parse(value, parse_u64, k->min, k->max, field);
	case KEY_USERS_SIZE:
		return config_users_parse(value, parse_size, k->min, k->max, field);
	}
	return -EINVAL;
}

int config_set(struct config *c, const char *key, const char *value, char *err, size_t err_len)
{
	const struct config_key *k = NULL;
	int r;

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]) && !k; i++)
		if (!strcmp(key, keys[i].name))
			k = &keys[i];
	if (!k) {
		snprintf(err, err_len, "unknown setting '%s'", key);
		return -EINVAL;
	}
	r = set_key(c, k, value);
	if (r < 0)
		snprintf(err, err_len, "invalid value '%s' for '%s'", value, key);
	else if (k->offset == offsetof(struct config, state_dir))
		c->state_dir_set = true;
	else if (k->offset == offsetof(struct config, socket_path))
		c->socket_set = true;
	return r;
}

/* A byte count as config_set reads it back: the largest of K, M, G, T that
 * divides it exactly, else plain bytes. */
static void print_size(FILE *f, uint64_t v)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (v && u < 3 && (v & 1023) == 0) {
		v >>= 10;
		u++;
	}
	fprintf(f, "%" PRIu64 "%.*s", v, u >= 0 ? 1 : 0, u >= 0 ? &units[u] : "");
}

static void print_count(FILE *f, uint64_t v)
{
	fprintf(f, "%" PRIu64, v);
}

/* The value of key `k` in `c` as config_set reads it back. */
static void print_value(FILE *f, const struct config *c, const struct config_key *k)
{
	const void *field = (const char *)c + k->offset;
	const struct gpu_choice *dev = &c->device;
	uint64_t v;

	switch (k->kind) {
	case KEY_STRING:
		fprintf(f, "%s", (const char *)field);
		break;
	case KEY_COUNT:
		fprintf(f, "%" PRIu64, *(const uint64_t *)field);
		break;
	case KEY_SIZE:
		print_size(f, *(const uint64_t *)field);
		break;
	case KEY_MS:
		v = *(const uint64_t *)field;
		fprintf(f, "%" PRIu64, v / 1000);
		if (v % 1000)
			fprintf(f, ".%03" PRIu64, v % 1000);
		break;
	case KEY_BOOL:
		fprintf(f, "%s", *(const bool *)field ? "yes" : "no");
		break;
	case KEY_DEVICE:
		if (dev->pick != GPU_PICK_LIST)
			fprintf(f, "%s", device_picks[dev->pick]);
		for (uint32_t i = 0; dev->pick == GPU_PICK_LIST && i < dev->n; i++)
			fprintf(f, "%s%" PRIu32, i ? "," : "", dev->index[i]);
		break;
	case KEY_PERSIST:
		fprintf(f, "%s", c->persist == CONFIG_PERSIST_YES ? "yes" : c->persist == CONFIG_PERSIST_NO ? "no" : "auto");
		break;
	case KEY_GROUP:
		if (c->kernel_group < 0)
			fprintf(f, "none");
		else
			fprintf(f, "%" PRId64, c->kernel_group);
		break;
	case KEY_VERBOSE:
		fprintf(f, "%s", c->log_level >= LOG_DEBUG ? "yes" : "no");
		break;
	case KEY_USERS:
		config_users_print(f, field, print_count);
		break;
	case KEY_USERS_SIZE:
		config_users_print(f, field, print_size);
		break;
	}
}

void config_print(FILE *f, const struct config *c)
{
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		fprintf(f, "%s = ", keys[i].name);
		print_value(f, c, &keys[i]);
		fputc('\n', f);
	}
}

/* print_value into `buf` (size `len`, at least 1), cut to fit. */
static void value_text(const struct config *c, const struct config_key *k, char *buf, size_t len)
{
	FILE *f = fmemopen(buf, len, "w");

	buf[0] = '\0';
	if (!f)
		return;
	setbuf(f, NULL);
	print_value(f, c, k);
	fclose(f);
	buf[len - 1] = '\0';
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* Where load() reports an error: "FILE:LINE: reason" or "FILE: reason". */
struct load_errors {
	char *err;              /* the first error (config_load) */
	size_t err_len;
	FILE *out;              /* every error, one per line (config_check) */
	unsigned n;
};

static void load_error(struct load_errors *e, const char *path, unsigned lineno, const char *why)
{
	char where[32] = "";

	if (lineno)
		snprintf(where, sizeof(where), ":%u", lineno);
	if (e->n++ == 0 && e->err)
		snprintf(e->err, e->err_len, "%s%s: %s", path, where, why);
	if (e->out)
		fprintf(e->out, "%s%s: %s\n", path, where, why);
}

/* One line of the file, trimmed of its newline and surrounding blanks.
 * Returns 1 when a line was read, 0 at the end, -EINVAL for a line longer
 * than `cap` - 1 (skipped to its end), -errno for a read error. */
static int read_line(FILE *f, char *line, size_t cap)
{
	int ch;

	if (!fgets(line, (int)cap, f))
		return ferror(f) ? -(errno ? errno : EIO) : 0;
	if (strchr(line, '\n') || feof(f))
		return 1;
	while ((ch = getc(f)) != EOF && ch != '\n')
		;
	return ferror(f) ? -(errno ? errno : EIO) : -EINVAL;
}

/* Read `path` into `c`; every error goes to `e`. With `all`, goes on past a
 * bad line (to report them all). Returns 0, -EINVAL after a bad line or
 * -errno when the file cannot be read. */
static int load(struct config *c, const char *path, bool all, struct load_errors *e)
{
	char line[1024], why[256];
	unsigned lineno = 0;
	FILE *f;
	int r = 0, got;

	f = fopen(path, "re");
	if (!f) {
		r = -errno;
		load_error(e, path, 0, strerror(-r));
		return r;
	}
	while ((got = read_line(f, line, sizeof(line))) != 0) {
		char *s, *eq;

		lineno++;
		if (got == -EINVAL) {
			load_error(e, path, lineno, "line too long");
			r = -EINVAL;
		} else if (got < 0) {
			/* A directory, an I/O error: not a file the daemon can take. */
			load_error(e, path, 0, strerror(-got));
			r = got;
			break;
		} else {
			s = trim(line);
			if (!*s || *s == '#')
				continue;
			eq = strchr(s, '=');
			if (!eq) {
				load_error(e, path, lineno, "expected 'key = value'");
				r = -EINVAL;
			} else {
				*eq = '\0';
				if (config_set(c, trim(s), trim(eq + 1), why, sizeof(why)) < 0) {
					load_error(e, path, lineno, why);
					r = -EINVAL;
				}
			}
		}
		if (r < 0 && !all)
			break;
	}
	fclose(f);
	return r;
}

int config_load(struct config *c, const char *path, char *err, size_t err_len)
{
	struct load_errors e = { .err = err, .err_len = err_len };

	return load(c, path, false, &e);
}

unsigned config_check(const char *path, FILE *out)
{
	struct load_errors e = { .out = out };
	struct config c;

	config_defaults(&c);
	load(&c, path, true, &e);
	return e.n;
}

unsigned config_apply_reload(struct config *cur, const struct config *next,
			     config_change_fn *changed, void *userdata)
{
	char before[320], after[320];
	unsigned n = 0;

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const struct config_key *k = &keys[i];

		value_text(cur, k, before, sizeof(before));
		value_text(next, k, after, sizeof(after));
		if (!strcmp(before, after))
			continue;
		n++;
		if (k->reload)
			memcpy((char *)cur + k->offset, (const char *)next + k->offset, k->size);
		if (changed)
			changed(userdata, k->name, before, after, k->reload);
	}
	return n;
}

/* The user's home: $HOME, else the password database's. */
static int home_dir(char *buf, size_t len)
{
	const char *home = getenv("HOME");
	struct passwd pw, *res = NULL;
	char pwbuf[4096];

	if ((!home || *home != '/') && getpwuid_r(geteuid(), &pw, pwbuf, sizeof(pwbuf), &res) == 0 && res)
		home = res->pw_dir;
	if (!home || *home != '/' || (size_t)snprintf(buf, len, "%s", home) >= len)
		return -EINVAL;
	return 0;
}

int config_private_paths(struct config *c, char *err, size_t err_len)
{
	const char *base = getenv("XDG_STATE_HOME"), *env;
	char home[256];
	int n;

	c->state_dir_private = c->socket_private = false;
	if (geteuid() == 0)
		return 0;
	/* $STATE_DIRECTORY (systemd's StateDirectory=) counts as given. */
	if (!c->state_dir_set) {
		if (base && *base == '/')
			n = snprintf(c->state_dir, sizeof(c->state_dir), "%s/tensord", base);
		else if (home_dir(home, sizeof(home)) == 0)
			n = snprintf(c->state_dir, sizeof(c->state_dir), "%s/.local/state/tensord", home);
		else
			n = -1;
		if (n < 0 || (size_t)n >= sizeof(c->state_dir)) {
			snprintf(err, err_len, "no state directory for a daemon run by a user: $XDG_STATE_HOME "
				 "and $HOME are unset or too long; give --state-dir DIR");
			return -EINVAL;
		}
		c->state_dir_private = true;
	}
	/* A socket passed by systemd, or systemd's RuntimeDirectory=: the
	 * service's own socket path stays. */
	env = getenv("LISTEN_FDS");
	if (c->socket_set || (env && *env) || getenv("RUNTIME_DIRECTORY"))
		return 0;
	base = getenv("XDG_RUNTIME_DIR");
	if (!base || *base != '/') {
		snprintf(err, err_len, "no socket path for a daemon run by a user: $XDG_RUNTIME_DIR is unset; "
			 "give --socket PATH (or set socket in the config file, or $TENSORD_SOCKET)");
		return -EINVAL;
	}
	n = snprintf(c->socket_path, sizeof(c->socket_path), "%s/tensord/tensord.sock", base);
	if (n < 0 || (size_t)n >= sizeof(c->socket_path)) {
		snprintf(err, err_len, "$XDG_RUNTIME_DIR is too long for a socket path; give --socket PATH");
		return -EINVAL;
	}
	c->socket_private = true;
	return 0;
}
