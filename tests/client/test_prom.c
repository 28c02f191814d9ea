/* tensorctl metrics' formatter (client/util/prom.c) on info results a daemon
 * could send: well-formed, mistyped, hostile label text, duplicates, NaN.
 * Whatever comes in, every line that goes out must be valid exposition text. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <msgpack.h>

#include "prom.h"

struct built {
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacked u;
};

static void build_begin(struct built *b)
{
	msgpack_sbuffer_init(&b->sb);
	msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
}

static const msgpack_object *build_end(struct built *b)
{
	size_t off = 0;

	msgpack_unpacked_init(&b->u);
	assert_int_equal(msgpack_unpack_next(&b->u, b->sb.data, b->sb.size, &off),
			 MSGPACK_UNPACK_SUCCESS);
	return &b->u.data;
}

static void build_free(struct built *b)
{
	msgpack_unpacked_destroy(&b->u);
	msgpack_sbuffer_destroy(&b->sb);
}

static void str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

static void strn(msgpack_packer *pk, const char *s, size_t n)
{
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static int count(const char *text, const char *needle)
{
	int n = 0;

	for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* Run the formatter; *ret_text is malloc'd output. */
static int run(const msgpack_object *o, char **ret_text)
{
	size_t len = 0;
	FILE *f = open_memstream(ret_text, &len);
	int r;

	assert_non_null(f);
	r = ctl_prom_write(f, o);
	assert_int_equal(fclose(f), 0);
	return r;
}

/* Every line is "# HELP name text", "# TYPE name type" or a sample
 * "name{k="v",...} value" with a well-escaped label set; one HELP per family;
 * no series twice. Returns the number of samples. */
static int check_valid(const char *text)
{
	char *copy = strdup(text), *save = NULL, *line;
	static char seen[128][1024];
	int nseen = 0, samples = 0;

	assert_non_null(copy);
	assert_true(text[0] == '\0' || text[strlen(text) - 1] == '\n');
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		const char *p = line;

		if (!strncmp(line, "# HELP ", 7) || !strncmp(line, "# TYPE ", 7)) {
			p = line + 7;
			assert_true((*p >= 'a' && *p <= 'z') || *p == '_');
			continue;
		}
		/* name */
		assert_true((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_');
		while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		       *p == '_' || *p == ':')
			p++;
		if (*p == '{') {
			p++;
			while (*p != '}') {
				while ((*p >= 'a' && *p <= 'z') || *p == '_')
					p++;
				assert_int_equal(*p++, '=');
				assert_int_equal(*p++, '"');
				while (*p != '"') {
					assert_true((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f);
					if (*p == '\\') {
						p++;
						assert_true(*p == '\\' || *p == '"' || *p == 'n');
					}
					p++;
				}
				p++;
				if (*p == ',')
					p++;
				else
					assert_int_equal(*p, '}');
			}
			p++;
		}
		assert_int_equal(*p++, ' ');
		{
			char *end;

			if (strcmp(p, "NaN") && strcmp(p, "+Inf") && strcmp(p, "-Inf")) {
				strtod(p, &end);
				assert_true(end != p && *end == '\0');
			}
		}
		/* The series (everything before the value) is unique. */
		{
			size_t n = (size_t)(p - line - 1);

			assert_true(n < sizeof(seen[0]));
			for (int i = 0; i < nseen; i++)
				assert_false(strlen(seen[i]) == n && !memcmp(seen[i], line, n));
			if (nseen < 128) {
				memcpy(seen[nseen], line, n);
				seen[nseen++][n] = '\0';
			}
		}
		samples++;
	}
	free(copy);
	return samples;
}

static void not_a_map(void **state)
{
	struct built b;
	char *text = NULL;

	build_begin(&b);
	msgpack_pack_array(&b.pk, 1);
	msgpack_pack_int(&b.pk, 1);
	assert_int_equal(run(build_end(&b), &text), -EPROTO);
	assert_string_equal(text, "");
	free(text);
	build_free(&b);
	assert_int_equal(ctl_prom_write(stdout, NULL), -EPROTO);
}

static void empty_and_unknown_map(void **state)
{
	struct built b;
	char *text = NULL;

	build_begin(&b);
	msgpack_pack_map(&b.pk, 1);
	str(&b.pk, "whatever");
	msgpack_pack_int(&b.pk, 3);
	assert_int_equal(run(build_end(&b), &text), -EPROTO);
	assert_string_equal(text, "");
	free(text);
	build_free(&b);
}

/* Every known field with the wrong type: nothing printed for them. */
static void wrong_types(void **state)
{
	struct built b;
	char *text = NULL;

	build_begin(&b);
	msgpack_pack_map(&b.pk, 7);
	str(&b.pk, "uptime"); str(&b.pk, "long");
	str(&b.pk, "connections"); msgpack_pack_nil(&b.pk);
	str(&b.pk, "tensors"); msgpack_pack_array(&b.pk, 0);
	str(&b.pk, "devices"); msgpack_pack_map(&b.pk, 0);
	str(&b.pk, "limits"); msgpack_pack_int(&b.pk, 7);
	str(&b.pk, "counters");
	msgpack_pack_map(&b.pk, 4);
	str(&b.pk, "requests"); msgpack_pack_array(&b.pk, 2);
	msgpack_pack_int(&b.pk, 1); msgpack_pack_int(&b.pk, 2);
	str(&b.pk, "errors"); msgpack_pack_map(&b.pk, 2);
	msgpack_pack_int(&b.pk, 5); msgpack_pack_int(&b.pk, 5);  /* key not a string */
	str(&b.pk, "x"); str(&b.pk, "not a number");
	str(&b.pk, "gpu"); str(&b.pk, "fast");
	str(&b.pk, "bytes_in"); msgpack_pack_bin(&b.pk, 0);
	str(&b.pk, "version"); msgpack_pack_int(&b.pk, 12);
	/* Only tensord_info, whose labels make do with "?" for a non-string version. */
	assert_int_equal(run(build_end(&b), &text), 1);
	assert_int_equal(check_valid(text), 1);
	assert_non_null(strstr(text, "tensord_info{version=\"12\",protocol=\"?\"} 1\n"));
	free(text);
	build_free(&b);
}

static void hostile_labels(void **state)
{
	static const char name[] = "GPU \"fast\" \\ 2\nX\x01\xc3\xa9";
	struct built b;
	char *text = NULL;
	char longname[600];

	memset(longname, 'n', sizeof(longname));
	build_begin(&b);
	msgpack_pack_map(&b.pk, 1);
	str(&b.pk, "devices");
	msgpack_pack_array(&b.pk, 4);
	/* a device with every hostile byte in its name */
	msgpack_pack_map(&b.pk, 3);
	str(&b.pk, "index"); msgpack_pack_uint32(&b.pk, 0);
	str(&b.pk, "name"); strn(&b.pk, name, sizeof(name) - 1);
	str(&b.pk, "memory_used"); msgpack_pack_uint64(&b.pk, 42);
	/* the same index again: dropped, not a duplicate series */
	msgpack_pack_map(&b.pk, 2);
	str(&b.pk, "index"); msgpack_pack_uint32(&b.pk, 0);
	str(&b.pk, "memory_used"); msgpack_pack_uint64(&b.pk, 7);
	/* no index: dropped */
	msgpack_pack_map(&b.pk, 1);
	str(&b.pk, "memory_used"); msgpack_pack_uint64(&b.pk, 9);
	/* a long name: cut, still one valid line */
	msgpack_pack_map(&b.pk, 2);
	str(&b.pk, "index"); msgpack_pack_uint32(&b.pk, 1);
	str(&b.pk, "name"); strn(&b.pk, longname, sizeof(longname));
	assert_int_equal(run(build_end(&b), &text), 3);
	assert_int_equal(check_valid(text), 3);
	assert_non_null(strstr(text, "name=\"GPU \\\"fast\\\" \\\\ 2\\nX???\""));
	assert_non_null(strstr(text, "tensord_device_memory_used_bytes{device=\"0\"} 42\n"));
	assert_null(strstr(text, "} 7\n"));
	assert_null(strstr(text, "} 9\n"));
	free(text);
	build_free(&b);
}

/* Several devices in use, two of them the same Vulkan device (--device 0,0):
 * the per-device families of devices in use are keyed by id. */
/* info's persistence map: the families it gives, and none from a daemon
 * that has not checkpointed yet (nil) but the enabled gauge and counters. */
static void persistence(void **state)
{
	struct built b;
	char *text = NULL;

	(void)state;
	build_begin(&b);
	msgpack_pack_map(&b.pk, 1);
	str(&b.pk, "persistence");
	msgpack_pack_map(&b.pk, 6);
	str(&b.pk, "enabled"); msgpack_pack_true(&b.pk);
	str(&b.pk, "checkpoints"); msgpack_pack_uint32(&b.pk, 3);
	str(&b.pk, "failed_writes"); msgpack_pack_uint32(&b.pk, 1);
	str(&b.pk, "last_checkpoint"); msgpack_pack_double(&b.pk, 1700000000.5);
	str(&b.pk, "last_checkpoint_seconds"); msgpack_pack_double(&b.pk, 0.25);
	str(&b.pk, "last_checkpoint_status"); str(&b.pk, "failed");
	assert_int_equal(run(build_end(&b), &text), 6);
	assert_int_equal(check_valid(text), 6);
	assert_non_null(strstr(text, "tensord_persist_enabled 1\n"));
	assert_non_null(strstr(text, "# TYPE tensord_checkpoints_total counter\n"));
	assert_non_null(strstr(text, "tensord_checkpoints_total 3\n"));
	assert_non_null(strstr(text, "tensord_checkpoint_failed_writes_total 1\n"));
	assert_non_null(strstr(text, "tensord_last_checkpoint_duration_seconds 0.25\n"));
	assert_non_null(strstr(text, "tensord_last_checkpoint_ok 0\n"));
	free(text);
	build_free(&b);

	build_begin(&b);
	msgpack_pack_map(&b.pk, 1);
	str(&b.pk, "persistence");
	msgpack_pack_map(&b.pk, 4);
	str(&b.pk, "enabled"); msgpack_pack_false(&b.pk);
	str(&b.pk, "checkpoints"); msgpack_pack_uint32(&b.pk, 0);
	str(&b.pk, "last_checkpoint"); msgpack_pack_nil(&b.pk);
	str(&b.pk, "last_checkpoint_status"); msgpack_pack_nil(&b.pk);
	assert_int_equal(run(build_end(&b), &text), 2);
	assert_non_null(strstr(text, "tensord_persist_enabled 0\n"));
	assert_null(strstr(text, "tensord_last_checkpoint"));
	free(text);
	build_free(&b);
}

/* info's users: a family per figure, a sample per uid, a repeated uid
 * dropped. */
static void users(void **state)
{
	struct built b;
	char *text = NULL;

	(void)state;
	build_begin(&b);
	msgpack_pack_map(&b.pk, 1);
	str(&b.pk, "users");
	msgpack_pack_array(&b.pk, 3);
	for (int k = 0; k < 3; k++) {
		msgpack_pack_map(&b.pk, 3);
		str(&b.pk, "uid"); msgpack_pack_uint32(&b.pk, k == 2 ? 1000 : (uint32_t)(k * 1000));
		str(&b.pk, "gpu_seconds"); msgpack_pack_double(&b.pk, 1.5 + k);
		str(&b.pk, "jobs"); msgpack_pack_uint32(&b.pk, (uint32_t)k);
	}
	assert_int_equal(run(build_end(&b), &text), 4);
	assert_int_equal(check_valid(text), 4);
	assert_non_null(strstr(text, "# TYPE tensord_user_gpu_seconds_total counter\n"));
	/* the user name where the machine knows the uid: root always */
	assert_non_null(strstr(text, "tensord_user_gpu_seconds_total{uid=\"0\",user=\"root\"} 1.5\n"));
	assert_non_null(strstr(text, "tensord_user_gpu_seconds_total{uid=\"1000\""));
	assert_non_null(strstr(text, "} 2.5\n"));
	assert_non_null(strstr(text, "tensord_user_jobs{uid=\"1000\""));
	assert_null(strstr(text, "} 3.5\n"));
	free(text);
	build_free(&b);
}

static void devices_in_use(void **state)
{
	struct built b;
	char *text = NULL;

	(void)state;
	build_begin(&b);
	msgpack_pack_map(&b.pk, 1);
	str(&b.pk, "devices");
	msgpack_pack_array(&b.pk, 5);
	for (int id = 0; id < 2; id++) {
		msgpack_pack_map(&b.pk, 7);
		str(&b.pk, "index"); msgpack_pack_uint32(&b.pk, 0);
		str(&b.pk, "active"); msgpack_pack_true(&b.pk);
		str(&b.pk, "id"); msgpack_pack_uint32(&b.pk, (uint32_t)id);
		str(&b.pk, "tensors"); msgpack_pack_uint32(&b.pk, 10 + (uint32_t)id);
		str(&b.pk, "load"); msgpack_pack_double(&b.pk, 0.25 * (id + 1));
		str(&b.pk, "busy_seconds"); msgpack_pack_double(&b.pk, 1.5 + id);
		str(&b.pk, "submissions"); msgpack_pack_uint32(&b.pk, 7);
	}
	/* an id seen before: dropped */
	msgpack_pack_map(&b.pk, 4);
	str(&b.pk, "index"); msgpack_pack_uint32(&b.pk, 3);
	str(&b.pk, "active"); msgpack_pack_true(&b.pk);
	str(&b.pk, "id"); msgpack_pack_uint32(&b.pk, 1);
	str(&b.pk, "tensors"); msgpack_pack_uint32(&b.pk, 99);
	/* not in use, or no id: none of these families */
	msgpack_pack_map(&b.pk, 3);
	str(&b.pk, "index"); msgpack_pack_uint32(&b.pk, 1);
	str(&b.pk, "active"); msgpack_pack_false(&b.pk);
	str(&b.pk, "tensors"); msgpack_pack_uint32(&b.pk, 98);
	msgpack_pack_map(&b.pk, 3);
	str(&b.pk, "index"); msgpack_pack_uint32(&b.pk, 2);
	str(&b.pk, "active"); msgpack_pack_true(&b.pk);
	str(&b.pk, "tensors"); msgpack_pack_uint32(&b.pk, 97);
	/* device_info and device_active for indexes 0, 3, 1, 2; 4 x 2 of devices in use */
	assert_int_equal(run(build_end(&b), &text), 16);
	assert_int_equal(check_valid(text), 16);
	assert_non_null(strstr(text, "tensord_device_tensors{id=\"0\",device=\"0\"} 10\n"));
	assert_non_null(strstr(text, "tensord_device_tensors{id=\"1\",device=\"0\"} 11\n"));
	assert_non_null(strstr(text, "tensord_device_load{id=\"1\",device=\"0\"} 0.5\n"));
	assert_non_null(strstr(text, "# TYPE tensord_device_busy_seconds_total counter\n"));
	assert_non_null(strstr(text, "tensord_device_busy_seconds_total{id=\"0\",device=\"0\"} 1.5\n"));
	assert_int_equal(count(text, "tensord_device_submissions_total{"), 2);
	assert_null(strstr(text, "} 99\n"));
	assert_null(strstr(text, "} 98\n"));
	assert_null(strstr(text, "} 97\n"));
	free(text);
	build_free(&b);
}

static void duplicates_and_special_values(void **state)
{
	struct built b;
	char *text = NULL;

	build_begin(&b);
	msgpack_pack_map(&b.pk, 2);
	str(&b.pk, "uptime"); msgpack_pack_double(&b.pk, NAN);
	str(&b.pk, "counters");
	msgpack_pack_map(&b.pk, 2);
	str(&b.pk, "requests");
	msgpack_pack_map(&b.pk, 4);
	str(&b.pk, "ping"); msgpack_pack_uint64(&b.pk, UINT64_MAX);
	str(&b.pk, "ping"); msgpack_pack_uint64(&b.pk, 3);   /* repeated key: dropped */
	str(&b.pk, "m\"x"); msgpack_pack_int64(&b.pk, -2);
	str(&b.pk, "t"); msgpack_pack_true(&b.pk);
	str(&b.pk, "request_seconds");
	msgpack_pack_map(&b.pk, 2);
	str(&b.pk, "a"); msgpack_pack_double(&b.pk, INFINITY);
	str(&b.pk, "b"); msgpack_pack_double(&b.pk, 0.125);
	assert_int_equal(run(build_end(&b), &text), 6);
	assert_int_equal(check_valid(text), 6);
	assert_non_null(strstr(text, "tensord_uptime_seconds NaN\n"));
	assert_non_null(strstr(text, "tensord_requests_total{method=\"ping\"} 18446744073709551615\n"));
	assert_non_null(strstr(text, "tensord_requests_total{method=\"m\\\"x\"} -2\n"));
	assert_non_null(strstr(text, "tensord_requests_total{method=\"t\"} 1\n"));
	assert_non_null(strstr(text, "tensord_request_seconds_total{method=\"a\"} +Inf\n"));
	assert_non_null(strstr(text, "tensord_request_seconds_total{method=\"b\"} 0.125\n"));
	/* one HELP and TYPE per family */
	assert_int_equal(count(text, "# TYPE tensord_requests_total counter\n"), 1);
	assert_int_equal(count(text, "# HELP tensord_requests_total "), 1);
	free(text);
	build_free(&b);
}

/* A full, well-formed result as the daemon sends it. */
static void well_formed(void **state)
{
	struct built b;
	char *text = NULL;

	build_begin(&b);
	msgpack_pack_map(&b.pk, 5);
	str(&b.pk, "version"); str(&b.pk, "0.1.0");
	str(&b.pk, "protocol"); msgpack_pack_uint32(&b.pk, 1);
	str(&b.pk, "tensors");
	msgpack_pack_map(&b.pk, 2);
	str(&b.pk, "count"); msgpack_pack_uint32(&b.pk, 2);
	str(&b.pk, "bytes"); msgpack_pack_uint32(&b.pk, 24);
	str(&b.pk, "limits");
	msgpack_pack_map(&b.pk, 1);
	str(&b.pk, "max_tensors"); msgpack_pack_uint32(&b.pk, 10);
	str(&b.pk, "counters");
	msgpack_pack_map(&b.pk, 3);
	str(&b.pk, "bytes_in"); msgpack_pack_uint32(&b.pk, 100);
	str(&b.pk, "gpu");
	msgpack_pack_map(&b.pk, 3);
	str(&b.pk, "device"); msgpack_pack_uint32(&b.pk, 2);
	str(&b.pk, "submissions"); msgpack_pack_uint32(&b.pk, 5);
	str(&b.pk, "busy_seconds"); msgpack_pack_double(&b.pk, 1.5);
	str(&b.pk, "pipelines");
	msgpack_pack_map(&b.pk, 1);
	str(&b.pk, "cache_hits"); msgpack_pack_uint32(&b.pk, 4);
	assert_int_equal(run(build_end(&b), &text), 8);
	assert_int_equal(check_valid(text), 8);
	assert_non_null(strstr(text, "# HELP tensord_gpu_busy_seconds_total "));
	assert_non_null(strstr(text, "# TYPE tensord_gpu_busy_seconds_total counter\n"
				     "tensord_gpu_busy_seconds_total{device=\"2\"} 1.5\n"));
	assert_non_null(strstr(text, "tensord_pipeline_cache_hits_total{device=\"2\"} 4\n"));
	assert_non_null(strstr(text, "tensord_received_bytes_total 100\n"));
	assert_non_null(strstr(text, "tensord_limit{limit=\"max_tensors\"} 10\n"));
	assert_non_null(strstr(text, "tensord_tensor_bytes 24\n"));
	free(text);
	build_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(not_a_map),
		cmocka_unit_test(empty_and_unknown_map),
		cmocka_unit_test(wrong_types),
		cmocka_unit_test(hostile_labels),
		cmocka_unit_test(devices_in_use),
		cmocka_unit_test(persistence),
		cmocka_unit_test(users),
		cmocka_unit_test(duplicates_and_special_values),
		cmocka_unit_test(well_formed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
