/* tensorctl output helpers: sizes, shapes, times, numbers, and tensors printed
 * the way NumPy prints arrays or as JSON arrays. */
#pragma once

#include <stdint.h>
#include <stdio.h>

/* Elements shown before a printed tensor is summarised with "...". */
#define CTL_PRINT_THRESHOLD 1000
/* Elements kept at each end of a summarised axis. */
#define CTL_PRINT_EDGE 3
/* Rows of values are wrapped before this column. */
#define CTL_PRINT_WIDTH 75

/* "24 B", "1.5 KiB", "256.0 MiB", "2.0 GiB". */
void ctl_format_size(char *buf, size_t cap, uint64_t bytes);

/* "[2, 3]"; "[]" for a scalar. */
void ctl_format_shape(char *buf, size_t cap, uint32_t rank, const uint64_t *shape);

/* Local time "YYYY-MM-DD HH:MM:SS" of a Unix time; "-" when not representable. */
void ctl_format_time(char *buf, size_t cap, double unix_time);

/* The shortest decimal text that reads back (strtof, then rounded to `dtype`)
 * as the same value of float dtype `dtype`: "0.1", "10", "1e+20", "-0";
 * positional for decimal exponents -4..15, as Python's repr. NaN and
 * infinities give "nan", "inf", "-inf". */
void ctl_format_float(char *buf, size_t cap, int dtype, double v);

/* The same for a double (strtod reads it back exactly): "0.1", "10",
 * "0.30000000000000004", "1e+300". */
void ctl_format_double(char *buf, size_t cap, double v);

/* Element `i` of `data` as text: shortest floats, decimal integers. With
 * `numpy_style`, integral floats get a trailing "." as NumPy prints them. */
void ctl_format_elem(char *buf, size_t cap, int dtype, const void *data, uint64_t i,
		     int numpy_style);

/* Print a tensor like NumPy's str(): nested brackets, aligned columns,
 * summarised with "..." past CTL_PRINT_THRESHOLD elements; then a newline. */
void ctl_print_array(FILE *f, int dtype, uint32_t rank, const uint64_t *shape, const void *data);

/* Print `count` elements as a flat JSON array; NaN and infinities as null. */
void ctl_print_json_values(FILE *f, int dtype, const void *data, uint64_t count);
