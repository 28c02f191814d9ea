/* Logging to stderr. When stderr is systemd's journal stream (JOURNAL_STREAM
 * names it), each line carries its syslog priority prefix ("<3>") so the
 * journal files it at that priority; otherwise lines read "tensord: ...". */
#pragma once

#include <stdbool.h>
#include <syslog.h>

/* Log lines of priority above `level` (LOG_ERR..LOG_DEBUG) are dropped. */
void log_set_level(int level);

/* Whether lines of `priority` are logged (to skip building them). */
bool log_wanted(int priority);

/* Whether stderr is the journal stream systemd connected (JOURNAL_STREAM
 * holds its device and inode). */
bool log_stderr_is_journal(void);

/* Log one line (no trailing newline needed). */
__attribute__((format(printf, 2, 3)))
void log_msg(int priority, const char *fmt, ...);

#define log_error(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_NOTICE, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
