/* Time: the one clock reading every layer shares. */
#pragma once

#include <stdint.h>

/* Nanoseconds of `clock` (CLOCK_MONOTONIC, CLOCK_REALTIME...). */
int64_t daemon_now_ns(int clock);
