#include "base/clock.h"

#include <time.h>

int64_t daemon_now_ns(int clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
