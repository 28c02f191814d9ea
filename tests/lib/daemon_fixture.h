/* Starting and stopping a real tensord for integration tests.
 *
 * The daemon runs from $TENSORD_BIN on a socket in a fresh temporary directory,
 * its stdout and stderr going to a log file there that is printed when
 * something goes wrong. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

struct daemon_fixture {
	pid_t pid;
	char dir[64];   /* the temporary directory */
	char sock[96];  /* dir/s.sock */
	char log[96];   /* dir/tensord.log */
	int status;     /* wait status once reaped */
	bool reaped;
};

/* How much slower than usual the daemon is expected to answer: the number in
 * $TENSORD_TEST_TIME_SCALE (1 to 1000; default 1). Running tensord under
 * valgrind (tests/valgrind/run.sh) sets it, and every timeout of the
 * fixture and of the tests is multiplied by it. */
int daemon_time_scale(void);

/* Start $TENSORD_BIN --socket dir/s.sock --device auto [extra...] (NULL-ended
 * `extra`, may be NULL) and wait until its socket accepts connections, for at
 * most `timeout_s` seconds. Fails at once when the daemon exits first. Returns
 * 0, or -1 with the reason and the daemon's log printed to stderr. */
int daemon_start(struct daemon_fixture *d, const char *const *extra, int timeout_s);

/* Whether the daemon is still running (reaps it if it is not). */
bool daemon_alive(struct daemon_fixture *d);

/* Send SIGTERM and wait up to `timeout_s` seconds for the daemon to exit
 * (SIGKILL after that). Returns 0 when it exited with status 0, else -1 with
 * the log printed. Removes the temporary directory. */
int daemon_stop(struct daemon_fixture *d, int timeout_s);

/* Print the daemon's log to stderr. */
void daemon_dump_log(const struct daemon_fixture *d);

/* A connected, blocking, close-on-exec Unix stream socket to the daemon, or -1. */
int daemon_connect_raw(const struct daemon_fixture *d);

/* The daemon's VmPeak from /proc, in KiB, or -1. */
long daemon_vm_peak_kib(const struct daemon_fixture *d);
