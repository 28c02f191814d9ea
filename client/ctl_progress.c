/* tensorctl's progress bar for large transfers (put and get of big tensors). */
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "print.h"

#define BAR_CELLS 20
#define REDRAW_S 0.1

double ctl_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t term_columns(void)
{
	struct winsize ws;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
		return ws.ws_col;
	return 80;
}

static void on_progress(void *userdata, enum tensord_transfer dir, uint64_t done, uint64_t total)
{
	struct ctl_bar *b = userdata;
	char line[512], have[32], all[32], rate[32];
	double now = ctl_now(), frac, secs;
	size_t n, cols = term_columns() - 1;
	int k, cells;

	(void)dir;
	if (total < CTL_BAR_MIN)
		return;
	if (b->start == 0)
		b->start = now;
	/* Redraw at most ten times a second, and once more at the end. */
	if (done < total && b->shown && now - b->drawn < REDRAW_S)
		return;
	b->drawn = now;
	frac = done >= total ? 1.0 : (double)done / (double)total;
	cells = (int)(frac * BAR_CELLS);
	secs = now - b->start;
	ctl_format_size(have, sizeof(have), done);
	ctl_format_size(all, sizeof(all), total);
	if (secs > 0.05) {
		ctl_format_size(rate, sizeof(rate), (uint64_t)((double)done / secs));
		strcat(rate, "/s");
	} else {
		snprintf(rate, sizeof(rate), "-");
	}
	k = snprintf(line, sizeof(line), "%.200s [%.*s%.*s] %3d%%  %s / %s  %s", b->label, cells,
		     "####################", BAR_CELLS - cells, "....................",
		     (int)(frac * 100), have, all, rate);
	n = k < 0 ? 0 : (size_t)k >= sizeof(line) ? sizeof(line) - 1 : (size_t)k;
	if (n > cols)
		n = cols;
	fprintf(stderr, "\r%.*s", (int)n, line);
	if (b->shown > n)
		fprintf(stderr, "%*s\r%.*s", (int)(b->shown - n), "", (int)n, line);
	fflush(stderr);
	b->shown = n;
}

void ctl_bar_start(struct ctl_bar *b, struct ctl *c, const char *label)
{
	*b = (struct ctl_bar){ .c = c, .label = label };
	if (c->json || !c->td || !isatty(STDERR_FILENO))
		return;
	tensord_set_progress(c->td, on_progress, b);
}

void ctl_bar_done(struct ctl_bar *b, uint64_t total)
{
	if (b->c && !b->c->json && b->c->td && isatty(STDERR_FILENO))
		on_progress(b, TENSORD_TRANSFER_SEND, total, total);
}

void ctl_bar_finish(struct ctl_bar *b)
{
	if (b->c && b->c->td)
		tensord_set_progress(b->c->td, NULL, NULL);
	if (b->shown) {
		fprintf(stderr, "\r%*s\r", (int)b->shown, "");
		fflush(stderr);
		b->shown = 0;
	}
}
