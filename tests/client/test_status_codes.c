/* Every status code the daemon sends (proto/status.c, the table the daemon
 * and the fuzzers use) has its constant in client/lib/tensord.h with the same
 * value, and every constant there is a code the daemon knows by that name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "status.h"
#include "tensord.h"

#define CODE(x) { TENSORD_##x, #x }

/* One line per constant of enum tensord_code: a code missing from
 * tensord.h cannot be listed here (it would not compile). */
static const struct {
	int code;
	const char *name;
} client_codes[] = {
	CODE(OK), CODE(CANCELLED), CODE(INVALID_ARGUMENT), CODE(DEADLINE_EXCEEDED),
	CODE(NOT_FOUND), CODE(ALREADY_EXISTS), CODE(PERMISSION_DENIED),
	CODE(RESOURCE_EXHAUSTED), CODE(FAILED_PRECONDITION), CODE(UNIMPLEMENTED),
	CODE(INTERNAL), CODE(UNAVAILABLE), CODE(SHAPE_MISMATCH), CODE(DTYPE_MISMATCH),
	CODE(DEVICE_LOST), CODE(PROTOCOL),
};

#define N_CLIENT (sizeof(client_codes) / sizeof(client_codes[0]))

static void every_daemon_code_is_in_tensord_h(void **state)
{
	unsigned daemon_codes = 0;

	(void)state;
	/* Codes are small: gRPC's below 100, tensord's own from 100. */
	for (int code = 0; code < 4096; code++) {
		const char *name = tdp_status_name(code);
		size_t i;

		if (!name)
			continue;
		daemon_codes++;
		for (i = 0; i < N_CLIENT; i++)
			if (client_codes[i].code == code)
				break;
		if (i == N_CLIENT)
			fail_msg("the daemon's code %d (%s) has no TENSORD_%s in tensord.h", code, name, name);
		assert_string_equal(client_codes[i].name, name);
	}
	assert_int_equal(daemon_codes, N_CLIENT);
}

static void every_tensord_h_code_is_the_daemons(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_CLIENT; i++) {
		const char *name = tdp_status_name(client_codes[i].code);

		if (!name)
			fail_msg("TENSORD_%s = %d is no code of the daemon", client_codes[i].name,
				 client_codes[i].code);
		assert_string_equal(name, client_codes[i].name);
		assert_int_equal(tdp_status_from_name(name, (unsigned)strlen(name)), client_codes[i].code);
	}
}

/* tensord_error_name (issue 35: hiredis and libpq have one): every
 * constant's name, NULL for an unknown code. */
static void names_from_the_library(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_CLIENT; i++)
		assert_string_equal(tensord_error_name(client_codes[i].code), client_codes[i].name);
	assert_null(tensord_error_name(2));
	assert_null(tensord_error_name(-1));
	assert_null(tensord_error_name(99999));
}

static void deadline_exceeded_is_4(void **state)
{
	(void)state;
	/* The value the wire contract fixes (docs/protocol.md, "Errors"). */
	assert_int_equal(TENSORD_DEADLINE_EXCEEDED, 4);
	assert_string_equal(tdp_status_name(4), "DEADLINE_EXCEEDED");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_daemon_code_is_in_tensord_h),
		cmocka_unit_test(every_tensord_h_code_is_the_daemons),
		cmocka_unit_test(deadline_exceeded_is_4),
		cmocka_unit_test(names_from_the_library),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
