/* tensorctl output helpers. */
#include "print.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"
#include "values.h"

void ctl_format_size(char *buf, size_t cap, uint64_t bytes)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	unsigned u = 0;

	if (bytes < 1024) {
		snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
		return;
	}
	v /= 1024;
	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	snprintf(buf, cap, "%.1f %s", v, units[u]);
}

void ctl_format_shape(char *buf, size_t cap, uint32_t rank, const uint64_t *shape)
{
	size_t n = 0;

	if (cap == 0)
		return;
	n += (size_t)snprintf(buf, cap, "[");
	for (uint32_t i = 0; i < rank && n < cap; i++)
		n += (size_t)snprintf(buf + n, cap - n, "%s%llu", i ? ", " : "",
				      (unsigned long long)shape[i]);
	if (n < cap)
		snprintf(buf + n, cap - n, "]");
}

void ctl_format_time(char *buf, size_t cap, double unix_time)
{
	struct tm tm;
	time_t t;

	if (!isfinite(unix_time) || unix_time < 0 || unix_time > 253402300799.0) {
		snprintf(buf, cap, "-");
		return;
	}
	t = (time_t)unix_time;
	if (!localtime_r(&t, &tm) || strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm) == 0)
		snprintf(buf, cap, "-");
}

/* Whether `text` reads back as the same value of `dtype` as `v`. */
static bool reads_back(const char *text, int dtype, double v)
{
	float f = strtof(text, NULL), want = (float)v;

	switch (dtype) {
	case TDP_DTYPE_F16:
		return ctl_f32_to_f16(f) == ctl_f32_to_f16(want);
	case TDP_DTYPE_BF16:
		return ctl_f32_to_bf16(f) == ctl_f32_to_bf16(want);
	default:
		return memcmp(&f, &want, sizeof(f)) == 0;
	}
}

static void shortest_text(char *buf, size_t cap, double v, int digits);

void ctl_format_float(char *buf, size_t cap, int dtype, double v)
{
	if (isnan(v)) {
		snprintf(buf, cap, "nan");
		return;
	}
	if (isinf(v)) {
		snprintf(buf, cap, v < 0 ? "-inf" : "inf");
		return;
	}
	/* Values of all float dtypes are floats, so 9 digits always read back:
	 * the first digit count that does is the shortest. */
	int digits = 1;

	for (; digits < 9; digits++) {
		snprintf(buf, cap, "%.*g", digits, v);
		if (reads_back(buf, dtype, v))
			break;
	}
	shortest_text(buf, cap, v, digits);
}

/* `v` with `digits` significant digits: positional when its decimal exponent
 * is in [-4, 16) as Python's repr writes floats ("10", "0.0001", "1234.5"),
 * else "%g"'s exponent form ("1e+20", "1e-05"). */
static void shortest_text(char *buf, size_t cap, double v, int digits)
{
	char sig[40], out[64];
	size_t n = 0, o = 0;
	int e;

	snprintf(sig, sizeof(sig), "%.*e", digits - 1, v);
	e = atoi(strchr(sig, 'e') + 1);
	if (e < -4 || e >= 16) {
		snprintf(buf, cap, "%.*g", digits, v);
		return;
	}
	/* The significant digits of "%e", placed around the point by hand
	 * ("%f" would print the binary value's digits beyond them). */
	char d[24];

	for (const char *q = sig; *q && *q != 'e'; q++)
		if (*q >= '0' && *q <= '9' && n + 1 < sizeof(d))
			d[n++] = *q;
	while (n > 1 && d[n - 1] == '0')
		n--;
	if (sig[0] == '-')
		out[o++] = '-';
	if (e < 0) {
		out[o++] = '0';
		out[o++] = '.';
		for (int k = -1; k > e; k--)
			out[o++] = '0';
		for (size_t k = 0; k < n; k++)
			out[o++] = d[k];
	} else {
		for (int k = 0; k <= e; k++)
			out[o++] = (size_t)k < n ? d[k] : '0';
		if (n > (size_t)e + 1) {
			out[o++] = '.';
			for (size_t k = (size_t)e + 1; k < n; k++)
				out[o++] = d[k];
		}
	}
	out[o] = '\0';
	snprintf(buf, cap, "%s", out);
}

void ctl_format_double(char *buf, size_t cap, double v)
{
	int digits = 1;

	if (!isfinite(v)) {
		snprintf(buf, cap, isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
		return;
	}
	for (; digits < 17; digits++) {
		snprintf(buf, cap, "%.*g", digits, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	shortest_text(buf, cap, v, digits);
}

void ctl_format_elem(char *buf, size_t cap, int dtype, const void *data, uint64_t i,
		     int numpy_style)
{
	double v = ctl_elem_double(dtype, data, i);
	size_t n;

	if (dtype == TDP_DTYPE_I32 || dtype == TDP_DTYPE_U8) {
		snprintf(buf, cap, "%.0f", v);
		return;
	}
	ctl_format_float(buf, cap, dtype, v);
	if (numpy_style && isfinite(v) && strpbrk(buf, ".e") == NULL) {
		n = strlen(buf);
		if (n + 1 < cap) {
			buf[n] = '.';
			buf[n + 1] = '\0';
		}
	}
}

/* Like NumPy, floats print in positional notation aligned on the decimal
 * point, unless their magnitudes call for scientific notation. */
enum mode { MODE_INT, MODE_FIXED, MODE_SCI };

struct printer {
	FILE *f;
	int dtype;
	uint32_t rank;
	const uint64_t *shape;
	uint64_t stride[TDP_MAX_RANK];
	const void *data;
	bool summarise;
	enum mode mode;
	double max_abs, min_abs; /* over shown finite nonzero floats */
	int digits;              /* MODE_SCI: digits after the point */
	int int_w, frac_w;       /* MODE_FIXED: widths around the point */
	int width;
};

/* Shortest positional text of float `v` that reads back; "2." for integers. */
static void format_fixed(char *buf, size_t cap, int dtype, double v)
{
	size_t n;

	if (!isfinite(v)) {
		ctl_format_float(buf, cap, dtype, v);
		return;
	}
	for (int prec = 0; prec <= 60; prec++) {
		snprintf(buf, cap, "%.*f", prec, v);
		if (reads_back(buf, dtype, v))
			break;
	}
	if (!strchr(buf, '.')) {
		n = strlen(buf);
		if (n + 1 < cap) {
			buf[n] = '.';
			buf[n + 1] = '\0';
		}
	}
}

/* Digits after the point that scientific notation needs for `v`. */
static int sci_digits(int dtype, double v)
{
	char buf[64];

	for (int prec = 0; prec < 9; prec++) {
		snprintf(buf, sizeof(buf), "%.*e", prec, v);
		if (reads_back(buf, dtype, v))
			return prec;
	}
	return 9;
}

static void format_shown(const struct printer *p, uint64_t i, char *buf, size_t cap)
{
	double v = ctl_elem_double(p->dtype, p->data, i);

	if (p->mode == MODE_INT)
		snprintf(buf, cap, "%.0f", v);
	else if (p->mode == MODE_FIXED)
		format_fixed(buf, cap, p->dtype, v);
	else if (!isfinite(v))
		ctl_format_float(buf, cap, p->dtype, v);
	else
		snprintf(buf, cap, "%.*e", p->digits, v);
}

/* Whether index `i` of an axis of length `n` is shown (else hidden by "..."). */
static bool shown(const struct printer *p, uint64_t n, uint64_t i)
{
	return !p->summarise || n <= 2 * CTL_PRINT_EDGE || i < CTL_PRINT_EDGE ||
	       i >= n - CTL_PRINT_EDGE;
}

/* Visit every shown element: pass 0 gathers magnitudes, pass 1 widths. */
static void measure(struct printer *p, int pass, uint32_t axis, uint64_t base)
{
	uint64_t n = p->shape[axis];
	char text[96];

	for (uint64_t i = 0; i < n; i++) {
		uint64_t at = base + i * p->stride[axis];
		double v;

		if (!shown(p, n, i)) {
			i = n - CTL_PRINT_EDGE - 1;
			continue;
		}
		if (axis + 1 < p->rank) {
			measure(p, pass, axis + 1, at);
			continue;
		}
		v = ctl_elem_double(p->dtype, p->data, at);
		if (pass == 0) {
			if (isfinite(v) && v != 0) {
				p->max_abs = fmax(p->max_abs, fabs(v));
				p->min_abs = p->min_abs == 0 ? fabs(v) : fmin(p->min_abs, fabs(v));
				if (sci_digits(p->dtype, v) > p->digits)
					p->digits = sci_digits(p->dtype, v);
			}
			continue;
		}
		format_shown(p, at, text, sizeof(text));
		if (p->mode == MODE_FIXED) {
			const char *dot = strchr(text, '.');
			int iw = dot ? (int)(dot - text) : (int)strlen(text);
			int fw = (int)strlen(text) - iw;

			p->int_w = iw > p->int_w ? iw : p->int_w;
			p->frac_w = fw > p->frac_w ? fw : p->frac_w;
			p->width = p->int_w + p->frac_w;
		} else if ((int)strlen(text) > p->width) {
			p->width = (int)strlen(text);
		}
	}
}

static void print_elem(struct printer *p, uint64_t at)
{
	char text[96];

	format_shown(p, at, text, sizeof(text));
	if (p->mode == MODE_FIXED) {
		const char *dot = strchr(text, '.');
		int iw = dot ? (int)(dot - text) : (int)strlen(text);
		int fw = (int)strlen(text) - iw;

		fprintf(p->f, "%*s%s%*s", p->int_w - iw, "", text, p->frac_w - fw, "");
	} else {
		fprintf(p->f, "%*s", p->width, text);
	}
}

static void print_row(struct printer *p, uint64_t base, int indent)
{
	uint64_t n = p->shape[p->rank - 1];
	int col = indent + 1;

	fputc('[', p->f);
	for (uint64_t i = 0; i < n; i++) {
		bool dots = !shown(p, n, i);
		int w = dots ? 3 : p->width;

		if (i > 0) {
			if (col + 1 + w + 1 > CTL_PRINT_WIDTH) {
				fprintf(p->f, "\n%*s", indent + 1, "");
				col = indent + 1;
			} else {
				fputc(' ', p->f);
				col++;
			}
		}
		if (dots) {
			fputs("...", p->f);
			i = n - CTL_PRINT_EDGE - 1;
		} else {
			print_elem(p, base + i);
		}
		col += w;
	}
	fputc(']', p->f);
}

static void print_axis(struct printer *p, uint32_t axis, uint64_t base, int indent)
{
	uint64_t n = p->shape[axis];

	if (axis + 1 == p->rank) {
		print_row(p, base, indent);
		return;
	}
	fputc('[', p->f);
	for (uint64_t i = 0; i < n; i++) {
		if (i > 0) {
			for (uint32_t k = axis + 1; k < p->rank; k++)
				fputc('\n', p->f);
			fprintf(p->f, "%*s", indent + 1, "");
		}
		if (!shown(p, n, i)) {
			fputs("...", p->f);
			i = n - CTL_PRINT_EDGE - 1;
			continue;
		}
		print_axis(p, axis + 1, base + i * p->stride[axis], indent + 1);
	}
	fputc(']', p->f);
}

void ctl_print_array(FILE *f, int dtype, uint32_t rank, const uint64_t *shape, const void *data)
{
	static const uint64_t one = 1;
	struct printer p = { .f = f, .dtype = dtype, .rank = rank, .shape = shape, .data = data };
	uint64_t count = 1;

	for (uint32_t i = 0; i < rank; i++)
		count *= shape[i];
	if (count == 0) {
		fputs("[]\n", f);
		return;
	}
	if (rank == 0) { /* a scalar prints as a one-element row, without brackets */
		p.rank = 1;
		p.shape = &one;
	}
	p.summarise = count > CTL_PRINT_THRESHOLD;
	for (uint32_t i = p.rank; i-- > 0;)
		p.stride[i] = i + 1 == p.rank ? 1 : p.stride[i + 1] * p.shape[i + 1];
	if (dtype == TDP_DTYPE_I32 || dtype == TDP_DTYPE_U8) {
		p.mode = MODE_INT;
	} else {
		measure(&p, 0, 0, 0);
		p.mode = p.max_abs >= 1e8 || (p.min_abs > 0 && (p.min_abs < 1e-4 ||
								  p.max_abs / p.min_abs > 1e3))
				 ? MODE_SCI : MODE_FIXED;
	}
	measure(&p, 1, 0, 0);
	if (rank == 0) {
		char text[96];

		format_shown(&p, 0, text, sizeof(text));
		fprintf(f, "%s\n", text);
		return;
	}
	print_axis(&p, 0, 0, 0);
	fputc('\n', f);
}

void ctl_print_json_values(FILE *f, int dtype, const void *data, uint64_t count)
{
	char text[64];

	fputc('[', f);
	for (uint64_t i = 0; i < count; i++) {
		double v = ctl_elem_double(dtype, data, i);

		if (i > 0)
			fputc(',', f);
		if (!isfinite(v)) {
			fputs("null", f);
			continue;
		}
		ctl_format_elem(text, sizeof(text), dtype, data, i, 0);
		fputs(text, f);
	}
	fputc(']', f);
}
