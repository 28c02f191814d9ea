#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
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

int config_set(struct config *c, const char *key, const char *value, char *err, size_t err_len)
{
	bool b;
	int r = -EINVAL;

	if (!strcmp(key, "socket"))
		r = set_string(c->socket_path, sizeof(c->socket_path), value);
	else if (!strcmp(key, "state_dir")) {
		r = set_string(c->state_dir, sizeof(c->state_dir), value);
		if (r == 0)
			c->state_dir_set = true;
	} else if (!strcmp(key, "persist")) {
		if (!strcmp(value, "auto"))
			c->persist = CONFIG_PERSIST_AUTO, r = 0;
		else if ((r = parse_bool(value, &b)) == 0)
			c->persist = b ? CONFIG_PERSIST_YES : CONFIG_PERSIST_NO;
	} else if (!strcmp(key, "checkpoint_interval"))
		r = parse_u64(value, 0, 86400, &c->checkpoint_interval);
	else if (!strcmp(key, "device"))
		r = set_device(c, value);
	else if (!strcmp(key, "max_tensors"))
		r = parse_u64(value, 1, UINT32_MAX, &c->max_tensors);
	else if (!strcmp(key, "max_connections"))
		r = parse_u64(value, 1, 1000000, &c->max_connections);
	else if (!strcmp(key, "max_tensor_bytes"))
		r = parse_size(value, 1, TDP_MAX_TENSOR_BYTES, &c->max_tensor_bytes);
	else if (!strcmp(key, "max_message_bytes"))
		r = parse_size(value, 4096, TDP_MAX_MESSAGE_BYTES, &c->max_message_bytes);
	else if (!strcmp(key, "block_size"))
		r = parse_size(value, 0, (uint64_t)1 << 40, &c->block_size);
	else if (!strcmp(key, "max_device_bytes"))
		r = parse_size(value, 0, (uint64_t)1 << 50, &c->max_device_bytes);
	else if (!strcmp(key, "user_max_tensors"))
		r = parse_u64(value, 0, UINT32_MAX, &c->user_max_tensors);
	else if (!strcmp(key, "user_max_bytes"))
		r = parse_size(value, 0, (uint64_t)1 << 50, &c->user_max_bytes);
	else if (!strcmp(key, "max_connections_per_user"))
		r = parse_u64(value, 0, 1000000, &c->max_connections_per_user);
	else if (!strcmp(key, "max_inflight"))
		r = parse_u64(value, 1, 65536, &c->max_inflight);
	else if (!strcmp(key, "max_output_backlog"))
		r = parse_size(value, (uint64_t)64 << 10, (uint64_t)1 << 40, &c->max_output_backlog);
	else if (!strcmp(key, "stall_timeout"))
		r = parse_u64(value, 0, 86400, &c->stall_timeout);
	else if (!strcmp(key, "input_timeout"))
		r = parse_u64(value, 0, 86400, &c->input_timeout);
	else if (!strcmp(key, "max_input_bytes"))
		r = parse_size(value, (uint64_t)64 << 10, (uint64_t)1 << 40, &c->max_input_bytes);
	else if (!strcmp(key, "user_max_buffer_bytes"))
		r = parse_size(value, 0, (uint64_t)1 << 50, &c->user_max_buffer_bytes);
	else if (!strcmp(key, "user_max_models"))
		r = parse_u64(value, 0, 1000000, &c->user_max_models);
	else if (!strcmp(key, "user_max_kernels"))
		r = parse_u64(value, 1, 64, &c->user_max_kernels);
	else if (!strcmp(key, "request_timeout"))
		r = parse_ms(value, 100, 3600 * 1000, &c->request_timeout_ms);
	else if (!strcmp(key, "stop_timeout"))
		r = parse_u64(value, 0, 3600, &c->stop_timeout);
	else if (!strcmp(key, "kernel_group"))
		r = parse_group(value, &c->kernel_group);
	else if (!strcmp(key, "kernel_timeout"))
		r = parse_ms(value, 100, 3600 * 1000, &c->kernel_timeout_ms);
	else if (!strcmp(key, "host_mapped"))
		r = parse_bool(value, &c->host_mapped);
	else if (!strcmp(key, "verbose")) {
		r = parse_bool(value, &b);
		if (r == 0)
			c->log_level = b ? LOG_DEBUG : LOG_NOTICE;
	} else {
		snprintf(err, err_len, "unknown setting '%s'", key);
		return -EINVAL;
	}
	if (r < 0)
		snprintf(err, err_len, "invalid value '%s' for '%s'", value, key);
	return r;
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
