/* The daemon's `info` result in the Prometheus text exposition format
 * (version 0.0.4), for `tensorctl metrics`. */
#pragma once

#include <msgpack.h>
#include <stdio.h>

/* Write every metric found in `info` (the result map of the `info` method) to
 * `f`: one HELP and TYPE line per family, then its samples. Fields that are
 * missing or of the wrong type are left out, never guessed; label values are
 * escaped and anything but printable ASCII in them becomes '?'. Returns the
 * number of samples written (>= 0), or -EPROTO when `info` is not a map or
 * holds no metric at all. */
int ctl_prom_write(FILE *f, const msgpack_object *info);
