#include "base/usage.h"

#include <stdlib.h>
#include <time.h>

#include "base/clock.h"

/* Make room for one more: grow, else forget the longest-idle uid with no
 * connection open. Returns the free slot or -1. */
static int room(struct usage *u)
{
	int oldest = -1;

	if (u->n < u->cap)
		return (int)u->n;
	if (u->cap < USAGE_MAX_USERS) {
		unsigned cap = u->cap ? 2 * u->cap : 16;
		struct usage_user *p = realloc(u->users, cap * sizeof(*p));

		if (!p)
			return -1;
		u->users = p;
		u->cap = cap;
		return (int)u->n;
	}
	for (unsigned i = 0; i < u->n; i++)
		if (!u->users[i].connections && (oldest < 0 || u->users[i].seen_ns < u->users[oldest].seen_ns))
			oldest = (int)i;
	if (oldest < 0)
		return -1;
	u->users[oldest] = u->users[--u->n];
	return (int)u->n;
}

const struct usage_user *usage_find(const struct usage *u, uint32_t uid)
{
	for (unsigned i = 0; i < u->n; i++)
		if (u->users[i].uid == uid)
			return &u->users[i];
	return NULL;
}

struct usage_user *usage_of(struct usage *u, uint32_t uid)
{
	struct usage_user *e = (struct usage_user *)usage_find(u, uid);
	int at;

	if (e) {
		e->seen_ns = daemon_now_ns(CLOCK_MONOTONIC);
		return e;
	}
	at = room(u);
	if (at < 0)
		return NULL;
	u->n++;
	u->users[at] = (struct usage_user){ .uid = uid, .seen_ns = daemon_now_ns(CLOCK_MONOTONIC) };
	return &u->users[at];
}

void usage_charge_gpu(struct usage *u, uint32_t uid, uint64_t ns)
{
	struct usage_user *e = usage_of(u, uid);

	if (e) {
		int64_t minute = daemon_now_ns(CLOCK_MONOTONIC) / (60 * 1000000000ll);
		unsigned slot = (unsigned)(minute % USAGE_MINUTES);

		e->gpu_ns += ns;
		e->vtime_ns += ns;
		if (e->minute_at[slot] != minute) {
			e->minute_at[slot] = minute;
			e->minute_ns[slot] = 0;
		}
		e->minute_ns[slot] += ns;
	}
}

uint64_t usage_last_hour(const struct usage_user *e)
{
	int64_t minute = daemon_now_ns(CLOCK_MONOTONIC) / (60 * 1000000000ll);
	uint64_t sum = 0;

	for (unsigned i = 0; i < USAGE_MINUTES; i++)
		if (e->minute_at[i] > minute - USAGE_MINUTES && e->minute_at[i] <= minute)
			sum += e->minute_ns[i];
	return sum;
}

void usage_free(struct usage *u)
{
	free(u->users);
	*u = (struct usage){ 0 };
}
