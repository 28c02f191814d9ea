/* What the group needs before MPI starts, with or without MPI (cluster.h). */
#include "train/cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The non-negative integer in environment variable `var`, or -1. */
static int env_rank(const char *var)
{
	const char *s = getenv(var);
	char *end;
	long v;

	if (!s || !*s)
		return -1;
	v = strtol(s, &end, 10);
	return *end || v < 0 || v > 1000000 ? -1 : (int)v;
}

int cluster_env_rank(void)
{
	return env_rank("OMPI_COMM_WORLD_RANK");
}

int cluster_env_local_rank(void)
{
	return env_rank("OMPI_COMM_WORLD_LOCAL_RANK");
}

int cluster_env_local_size(void)
{
	return env_rank("OMPI_COMM_WORLD_LOCAL_SIZE");
}

int cluster_expand_rank(char *path, size_t size, int rank)
{
	char out[4096];
	size_t n = 0;

	for (const char *p = path; *p; p++) {
		int w;

		if (p[0] == '%' && p[1] == 'r') {
			w = snprintf(out + n, sizeof(out) - n, "%d", rank);
			p++;
		} else {
			w = snprintf(out + n, sizeof(out) - n, "%c", *p);
		}
		if (w < 0 || (size_t)w >= sizeof(out) - n)
			return -ENAMETOOLONG;
		n += (size_t)w;
	}
	if (n >= size)
		return -ENAMETOOLONG;
	memcpy(path, out, n + 1);
	return 0;
}
