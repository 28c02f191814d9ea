/* tensorctl: JSON output, including a generic msgpack → JSON printer.
 *
 * Mapping: nil → null, bool → true/false, integers as they are, floats with
 * the shortest text that reads back (NaN and infinities → null), str → a JSON
 * string (bytes that are not UTF-8 become U+FFFD), bin → a base64 string, ext
 * → null, map keys that are not strings → their JSON text as a string. */
#pragma once

#include <msgpack.h>
#include <stddef.h>
#include <stdio.h>

/* Print `n` bytes of `s` as a quoted, escaped JSON string. */
void ctl_json_string(FILE *f, const char *s, size_t n);

/* Print a double with the shortest text that reads back; null for NaN/inf. */
void ctl_json_double(FILE *f, double v);

/* Print `n` bytes as a quoted base64 string (RFC 4648, padded). */
void ctl_json_base64(FILE *f, const void *p, size_t n);

/* Print any msgpack object as JSON (see the mapping above). */
void ctl_json_msgpack(FILE *f, const msgpack_object *o);
