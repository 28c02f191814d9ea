/* tensorctl: a small, bounded JSON reader that writes msgpack, for graph
 * files and --attr values.
 *
 * Mapping: null → nil, true/false → bool, a number without fraction or
 * exponent that fits int64 → an integer, any other number → float64, a
 * string → str (UTF-8, escapes decoded), an array → array, an object → map
 * with str keys. Limits: nesting depth CTL_JSON_MAX_DEPTH, CTL_JSON_MAX_ITEMS
 * values in all; the input must be one value (blanks around it allowed). */
#pragma once

#include <msgpack.h>
#include <stddef.h>

#define CTL_JSON_MAX_DEPTH 32
#define CTL_JSON_MAX_ITEMS 1000000

/* Convert the `len` bytes of JSON at `text` into one msgpack object appended
 * through `pk`. Returns 0, or -EINVAL with "line L, column C: why" in `err`
 * (and possibly a partial object written: discard the buffer), or -ENOMEM. */
int tdp_json_to_msgpack(const char *text, size_t len, msgpack_packer *pk, char *err,
			size_t err_len);

/* Pack a --attr value: JSON (1, 2.5, true, null, "s", [1, 2], {...}) when it
 * parses as such; otherwise, unless it starts with '[', '{' or '"', the text
 * itself as a string (so `reduction=sum` needs no quotes). Returns 0, or
 * -EINVAL / -ENOMEM with a message in `err`. */
int tdp_attr_value_to_msgpack(const char *text, msgpack_packer *pk, char *err, size_t err_len);
