#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "wire_limits.h"

#define DEFAULT_SOCKET "/run/tensord/tensord.sock"

void config_defaults(struct config *c)
{
	const char *env = getenv("TENSORD_SOCKET");

	memset(c, 0, sizeof(*c));
	snprintf(c->socket_path, sizeof(c->socket_path), "%s",
		 env && *env && strlen(env) < sizeof(c->socket_path) ? env : DEFAULT_SOCKET);
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

static int set_device(struct config *c, const char *v)
{
	struct gpu_choice ch = { .pick = GPU_PICK_LIST };
	char buf[256], *save = NULL;
	uint64_t idx;

	if (!strcmp(v, "auto") || !strcmp(v, "all") || !strcmp(v, "cpu")) {
		c->device = (struct gpu_choice){
			.pick = !strcmp(v, "auto") ? GPU_PICK_AUTO : !strcmp(v, "all") ? GPU_PICK_ALL : GPU_PICK_CPU,
		};
		return 0;
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
};

struct config_key {
	const char *name;
	enum key_kind kind;
	size_t offset, size;    /* of the field in struct config */
	uint64_t min, max;
};

#define FIELD(f) offsetof(struct config, f), sizeof(((struct config *)0)->f)

static const struct config_key keys[] = {
	{ "socket", KEY_STRING, FIELD(socket_path), 0, 0 },
	{ "state_dir", KEY_STRING, FIELD(state_dir), 0, 0 },
	{ "persist", KEY_PERSIST, FIELD(persist), 0, 0 },
	{ "checkpoint_interval", KEY_COUNT, FIELD(checkpoint_interval), 0, 86400 },
	{ "device", KEY_DEVICE, FIELD(device), 0, 0 },
	{ "max_tensors", KEY_COUNT, FIELD(max_tensors), 1, UINT32_MAX },
	{ "max_connections", KEY_COUNT, FIELD(max_connections), 1, 1000000 },
	{ "max_tensor_bytes", KEY_SIZE, FIELD(max_tensor_bytes), 1, TDP_MAX_TENSOR_BYTES },
	{ "max_message_bytes", KEY_SIZE, FIELD(max_message_bytes), 4096, TDP_MAX_MESSAGE_BYTES },
	{ "block_size", KEY_SIZE, FIELD(block_size), 0, (uint64_t)1 << 40 },
	{ "max_device_bytes", KEY_SIZE, FIELD(max_device_bytes), 0, (uint64_t)1 << 50 },
	{ "user_max_tensors", KEY_COUNT, FIELD(user_max_tensors), 0, UINT32_MAX },
	{ "user_max_bytes", KEY_SIZE, FIELD(user_max_bytes), 0, (uint64_t)1 << 50 },
	{ "max_connections_per_user", KEY_COUNT, FIELD(max_connections_per_user), 0, 1000000 },
	{ "max_inflight", KEY_COUNT, FIELD(max_inflight), 1, 65536 },
	{ "max_output_backlog", KEY_SIZE, FIELD(max_output_backlog), (uint64_t)64 << 10,
	  (uint64_t)1 << 40 },
	{ "stall_timeout", KEY_COUNT, FIELD(stall_timeout), 0, 86400 },
	{ "input_timeout", KEY_COUNT, FIELD(input_timeout), 0, 86400 },
	{ "max_input_bytes", KEY_SIZE, FIELD(max_input_bytes), (uint64_t)64 << 10, (uint64_t)1 << 40 },
	{ "user_max_buffer_bytes", KEY_SIZE, FIELD(user_max_buffer_bytes), 0, (uint64_t)1 << 50 },
	{ "user_max_models", KEY_COUNT, FIELD(user_max_models), 0, 1000000 },
	{ "user_max_kernels", KEY_COUNT, FIELD(user_max_kernels), 1, 64 },
	{ "request_timeout", KEY_MS, FIELD(request_timeout_ms), 100, 3600 * 1000 },
	{ "stop_timeout", KEY_COUNT, FIELD(stop_timeout), 0, 3600 },
	{ "kernel_group", KEY_GROUP, FIELD(kernel_group), 0, 0 },
	{ "kernel_timeout", KEY_MS, FIELD(kernel_timeout_ms), 100, 3600 * 1000 },
	{ "host_mapped", KEY_BOOL, FIELD(host_mapped), 0, 0 },
	{ "verbose", KEY_VERBOSE, FIELD(log_level), 0, 0 },
};

#undef FIELD

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

static void print_key(FILE *f, const struct config *c, const struct config_key *k)
{
	const void *field = (const char *)c + k->offset;
	const struct gpu_choice *dev = &c->device;
	uint64_t v;

	fprintf(f, "%s = ", k->name);
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
			fprintf(f, "%s", dev->pick == GPU_PICK_AUTO ? "auto" : dev->pick == GPU_PICK_ALL ? "all" : "cpu");
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
	}
	fputc('\n', f);
}

void config_print(FILE *f, const struct config *c)
{
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		print_key(f, c, &keys[i]);
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

int config_load(struct config *c, const char *path, char *err, size_t err_len)
{
	char line[1024], why[256];
	unsigned lineno = 0;
	FILE *f;
	int r = 0;

	f = fopen(path, "re");
	if (!f) {
		r = -errno;
		snprintf(err, err_len, "%s: %s", path, strerror(errno));
		return r;
	}
	while (fgets(line, sizeof(line), f)) {
		char *s, *eq;

		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			snprintf(err, err_len, "%s:%u: line too long", path, lineno);
			r = -EINVAL;
			break;
		}
		s = trim(line);
		if (!*s || *s == '#')
			continue;
		eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, err_len, "%s:%u: expected 'key = value'", path, lineno);
			r = -EINVAL;
			break;
		}
		*eq = '\0';
		r = config_set(c, trim(s), trim(eq + 1), why, sizeof(why));
		if (r < 0) {
			snprintf(err, err_len, "%s:%u: %s", path, lineno, why);
			break;
		}
	}
	fclose(f);
	return r;
}

void config_apply_reload(struct config *cur, const struct config *next, char *fixed,
			 size_t fixed_len)
{
	size_t used = 0;

	if (fixed_len)
		fixed[0] = '\0';
#define FIXED(cond, key)                                                                   \
	do {                                                                               \
		if ((cond) && used < fixed_len) {                                          \
			int k = snprintf(fixed + used, fixed_len - used, "%s%s",           \
					 used ? ", " : "", key);                           \
			used = k < 0 ? fixed_len : used + (size_t)k;                       \
		}                                                                          \
	} while (0)
	FIXED(strcmp(cur->socket_path, next->socket_path) != 0, "socket");
	FIXED(strcmp(cur->state_dir, next->state_dir) != 0, "state_dir");
	FIXED(memcmp(&cur->device, &next->device, sizeof(cur->device)) != 0, "device");
	FIXED(cur->host_mapped != next->host_mapped, "host_mapped");
	FIXED(cur->block_size != next->block_size, "block_size");
	FIXED(cur->max_device_bytes != next->max_device_bytes, "max_device_bytes");
	FIXED(config_persist_on(cur) != config_persist_on(next), "persist");
#undef FIXED
	cur->log_level = next->log_level;
	cur->max_tensors = next->max_tensors;
	cur->max_connections = next->max_connections;
	cur->max_tensor_bytes = next->max_tensor_bytes;
	cur->max_message_bytes = next->max_message_bytes;
	cur->user_max_tensors = next->user_max_tensors;
	cur->user_max_bytes = next->user_max_bytes;
	cur->max_connections_per_user = next->max_connections_per_user;
	cur->max_inflight = next->max_inflight;     /* connections opened from now on */
	cur->max_output_backlog = next->max_output_backlog;
	cur->stall_timeout = next->stall_timeout;
	cur->kernel_group = next->kernel_group;
	cur->kernel_timeout_ms = next->kernel_timeout_ms;
	cur->input_timeout = next->input_timeout;
	cur->max_input_bytes = next->max_input_bytes;
	cur->user_max_buffer_bytes = next->user_max_buffer_bytes;
	cur->user_max_models = next->user_max_models;
	cur->user_max_kernels = next->user_max_kernels;
	cur->request_timeout_ms = next->request_timeout_ms;
	cur->stop_timeout = next->stop_timeout;
	cur->checkpoint_interval = next->checkpoint_interval;
}
