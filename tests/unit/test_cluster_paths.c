/* train/cluster.c: the rank from mpirun's environment and "%r" in paths
 * (docs/cluster.md), without MPI. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>

#include "train/cluster.h"

static void test_env_rank(void **state)
{
	(void)state;
	unsetenv("OMPI_COMM_WORLD_RANK");
	assert_int_equal(cluster_env_rank(), -1);
	setenv("OMPI_COMM_WORLD_RANK", "3", 1);
	assert_int_equal(cluster_env_rank(), 3);
	setenv("OMPI_COMM_WORLD_RANK", "3x", 1);
	assert_int_equal(cluster_env_rank(), -1);
	setenv("OMPI_COMM_WORLD_RANK", "-1", 1);
	assert_int_equal(cluster_env_rank(), -1);
	setenv("OMPI_COMM_WORLD_RANK", "", 1);
	assert_int_equal(cluster_env_rank(), -1);
	unsetenv("OMPI_COMM_WORLD_RANK");
}

/* The rank and count of the members on this host (device = local, the
 * shared-memory exchange). */
static void test_env_local(void **state)
{
	(void)state;
	unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
	unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	assert_int_equal(cluster_env_local_rank(), -1);
	assert_int_equal(cluster_env_local_size(), -1);
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
	assert_int_equal(cluster_env_local_rank(), 1);
	assert_int_equal(cluster_env_local_size(), 2);
	setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "two", 1);
	assert_int_equal(cluster_env_local_size(), -1);
	unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
	unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}

static void test_expand(void **state)
{
	char p[32];

	(void)state;
	strcpy(p, "/run/t/s%r.sock");
	assert_int_equal(cluster_expand_rank(p, sizeof(p), 12), 0);
	assert_string_equal(p, "/run/t/s12.sock");
	strcpy(p, "/a/%r/b%r%");
	assert_int_equal(cluster_expand_rank(p, sizeof(p), 0), 0);
	assert_string_equal(p, "/a/0/b0%");
	strcpy(p, "/no/rank");
	assert_int_equal(cluster_expand_rank(p, sizeof(p), 7), 0);
	assert_string_equal(p, "/no/rank");
	/* Too long with the rank in it: unchanged. */
	strcpy(p, "/0123456789012345678901234/%r");
	assert_int_equal(cluster_expand_rank(p, sizeof(p), 123456), -ENAMETOOLONG);
	assert_string_equal(p, "/0123456789012345678901234/%r");
	strcpy(p, "/0123456789012345678901234/%r");
	assert_int_equal(cluster_expand_rank(p, sizeof(p), 1), 0);
	assert_string_equal(p, "/0123456789012345678901234/1");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_env_rank),
		cmocka_unit_test(test_env_local),
		cmocka_unit_test(test_expand),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
