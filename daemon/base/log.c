#include "base/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static int max_level = LOG_NOTICE;
static int journal = -1;        /* -1: not yet checked */

void log_set_level(int level)
{
	max_level = level;
}

bool log_wanted(int priority)
{
	return priority <= max_level;
}

bool log_stderr_is_journal(void)
{
	const char *env = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char end;

	/* systemd sets JOURNAL_STREAM=<dev>:<inode> of the stream it connected;
	 * a child whose stderr went elsewhere inherits the variable, so it only
	 * counts when it names our stderr (systemd.exec(5)). */
	if (!env || sscanf(env, "%llu:%llu%c", &dev, &ino, &end) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_msg(int priority, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (priority > max_level)
		return;
	if (journal < 0)
		journal = log_stderr_is_journal();
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* The journal reads "<N>" as the priority of the line (sd-daemon(3)) and
	 * adds the identifier itself. */
	if (journal)
		fprintf(stderr, "<%d>%s\n", priority, line);
	else
		fprintf(stderr, "tensord: %s\n", line);
}
