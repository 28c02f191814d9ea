/* A main() for the fuzz harnesses without libFuzzer: run every file named on
 * the command line, or every file in a directory named there, through
 * LLVMFuzzerTestOneInput once. The test suite uses it to replay the seed
 * corpora (tests/fuzz/corpus/<name>/), including inputs that once crashed. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

#define REPLAY_MAX_INPUT ((size_t)16 << 20)

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rbe");
	uint8_t *buf;
	size_t n;

	if (!f) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	buf = malloc(REPLAY_MAX_INPUT);
	if (!buf) {
		fclose(f);
		return -1;
	}
	n = fread(buf, 1, REPLAY_MAX_INPUT, f);
	fclose(f);
	/* A copy of exactly n bytes, so ASan sees reads past the input. */
	{
		uint8_t *exact = malloc(n ? n : 1);

		if (!exact) {
			free(buf);
			return -1;
		}
		memcpy(exact, buf, n);
		free(buf);
		LLVMFuzzerTestOneInput(exact, n);
		free(exact);
	}
	return 0;
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, unsigned *count)
{
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, cap = 0;
	DIR *d = opendir(dir);
	int r = 0;

	if (!d) {
		fprintf(stderr, "%s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		char **p;

		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			p = realloc(names, cap * sizeof(*names));
			if (!p) {
				r = -1;
				break;
			}
			names = p;
		}
		if (asprintf(&names[n], "%s/%s", dir, e->d_name) < 0) {
			r = -1;
			break;
		}
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp);
	for (size_t i = 0; i < n; i++) {
		if (r == 0 && run_file(names[i]) < 0)
			r = -1;
		(*count)++;
		free(names[i]);
	}
	free(names);
	return r;
}

int main(int argc, char **argv)
{
	unsigned count = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;

		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (S_ISDIR(st.st_mode)) {
			if (run_dir(argv[i], &count) < 0)
				return 1;
		} else {
			if (run_file(argv[i]) < 0)
				return 1;
			count++;
		}
	}
	if (count == 0) {
		fprintf(stderr, "no inputs\n");
		return 1;
	}
	printf("%u inputs replayed without a failure\n", count);
	return 0;
}
