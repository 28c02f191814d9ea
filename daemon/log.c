#include "log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static int max_level = LOG_NOTICE;

void log_set_level(int level)
{
	max_level = level;
}

void log_msg(int priority, const char *fmt, ...)
{
	static int journal = -1;
	char line[1024];
	va_list ap;

	if (priority > max_level)
		return;
	if (journal < 0)
		journal = getenv("JOURNAL_STREAM") != NULL;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (journal)
		fprintf(stderr, "<%d>%s\n", priority, line);
	else
		fprintf(stderr, "tensord: %s\n", line);
}
