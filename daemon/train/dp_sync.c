/* Data parallel's word between the halves of a step (dp_sync.h). */
#include "train/dp_sync.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

#include "base/log.h"
#include "daemon.h"
#include "gpu/device.h"
#include "gpu/host_import.h"

/* How the thread looks at the signals: a step's second half waits for the
 * last signal plus this thread's noticing it. It polls for SYNC_SPIN_NS
 * after it starts waiting for a step and again from SYNC_EARLY_NS before the
 * time the last step's signals took until SYNC_SPIN_NS past it; in between
 * it naps SYNC_NAP_NS at a time (its timer slack set to 1 us, so a nap is
 * that long, not the default 50 us more). On CPU devices (lavapipe) it
 * never spins and keeps the default slack: the cores are theirs. */
#define SYNC_SPIN_NS (200 * 1000)
#define SYNC_EARLY_NS (100 * 1000)
#define SYNC_NAP_NS (20 * 1000)

struct dp_sync {
	unsigned nsig;
	const volatile uint32_t **sig;
	unsigned n;               /* local devices */
	struct gpu_device *g[GPU_MAX_DEVICES];
	void (*average)(void *data);
	void *data;
	VkEvent ev[2][GPU_MAX_DEVICES];
	pthread_t thread;
	bool running;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool armed;               /* steps [next, last] wait for their signals */
	int64_t next, last;
	int64_t release_from;     /* steps from this one on pass without signals */
	bool releasing;
	uint64_t limit_ns;        /* how long a step waits for the signals */
	int64_t late;             /* the first step let through for want of them */
	bool any_late;
	bool stop;
	bool spin;
	int64_t expect_ns;        /* how long the last step's signals took */
};

uint32_t dp_sync_tag(int64_t step)
{
	return (uint32_t)((uint64_t)step % 0x7fffffffu) + 1;
}

VkEvent dp_sync_event(const struct dp_sync *s, int64_t step, unsigned i)
{
	return s->ev[(uint64_t)step & 1][i];
}

static bool released(struct dp_sync *s, int64_t step)
{
	bool r;

	pthread_mutex_lock(&s->mu);
	r = s->stop || (s->releasing && step >= s->release_from);
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* Wait until every device signalled `step`. Returns true, or false when
 * the step is let through without them (dp_sync_release_from, the end). */
static bool wait_signals(struct dp_sync *s, int64_t step)
{
	uint32_t tag = dp_sync_tag(step);
	struct timespec t0, now;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		unsigned got = 0;
		int64_t waited;

		for (unsigned i = 0; i < s->nsig; i++)
			got += __atomic_load_n(s->sig[i], __ATOMIC_ACQUIRE) == tag;
		clock_gettime(CLOCK_MONOTONIC, &now);
		waited = (now.tv_sec - t0.tv_sec) * 1000000000ll + (now.tv_nsec - t0.tv_nsec);
		if (got == s->nsig) {
			s->expect_ns = waited;
			return true;
		}
		if (released(s, step))
			return false;
		if ((uint64_t)waited >= s->limit_ns) {
			/* A device's queue held other work this long: the step goes
			 * through unaveraged and fails (dp_sync_late), before the
			 * waiting devices' submissions run past request_timeout. */
			log_warning("data parallel: step %lld: %u of %u parties' gradients not out after %.1f s",
				    (long long)step, s->nsig - got, s->nsig, (double)waited / 1e9);
			pthread_mutex_lock(&s->mu);
			if (!s->any_late || step < s->late)
				s->late = step;
			s->any_late = true;
			pthread_mutex_unlock(&s->mu);
			return false;
		}
		if (!s->spin || !(waited < SYNC_SPIN_NS || (waited + SYNC_EARLY_NS >= s->expect_ns &&
							   waited < s->expect_ns + SYNC_SPIN_NS)))
			nanosleep(&(struct timespec){ 0, SYNC_NAP_NS }, NULL);
	}
}

static void *sync_main(void *arg)
{
	struct dp_sync *s = arg;

	/* On GPUs, naps of SYNC_NAP_NS, not the default 50 us more (a failure
	 * leaves them longer); CPU devices need the cores more than the latency. */
	if (s->spin)
		(void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
	pthread_mutex_lock(&s->mu);
	for (;;) {
		int64_t step;
		bool all;

		while (!s->stop && !(s->armed && s->next <= s->last))
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->stop)
			break;
		step = s->next;
		pthread_mutex_unlock(&s->mu);
		all = wait_signals(s, step);
		/* Every device's gradients are in its buffer: the mean into each. */
		if (all && s->average)
			s->average(s->data);
		/* The mean's bytes out of the store buffers before the word. */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		pthread_mutex_lock(&s->mu);
		for (unsigned i = 0; i < s->n; i++)
			if (gpu_event_set(s->g[i], dp_sync_event(s, step, i), true) < 0)
				log_warning("data parallel: device %u's event could not be set", s->g[i]->id);
		s->next = step + 1;
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int dp_sync_start(const struct dp_sync_spec *spec, struct dp_sync **ret)
{
	struct dp_sync *s = calloc(1, sizeof(*s));
	int r = 0;

	if (!s)
		return -ENOMEM;
	s->limit_ns = spec->limit_ns;
	s->average = spec->average;
	s->data = spec->data;
	s->spin = true;
	s->nsig = spec->nsignals;
	s->sig = calloc(spec->nsignals + 1, sizeof(*s->sig));
	if (!s->sig)
		r = -ENOMEM;
	for (unsigned k = 0; r == 0 && k < spec->nsignals; k++)
		s->sig[k] = spec->signals[k];
	s->n = spec->ndev < GPU_MAX_DEVICES ? spec->ndev : GPU_MAX_DEVICES;
	for (unsigned i = 0; i < s->n; i++) {
		s->g[i] = spec->g[i];
		if (s->g[i]->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU)
			s->spin = false;
		for (unsigned p = 0; p < 2 && r == 0; p++)
			r = gpu_event_create(s->g[i], &s->ev[p][i]);
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (r == 0 && pthread_create(&s->thread, NULL, sync_main, s) != 0)
		r = -EAGAIN;
	s->running = r == 0;
	if (r < 0) {
		dp_sync_free(s);
		return r;
	}
	*ret = s;
	return 0;
}

int dp_sync_arm(struct dp_sync *s, int64_t step)
{
	int r = 0;

	for (unsigned i = 0; i < s->n && r == 0; i++)
		r = gpu_event_set(s->g[i], dp_sync_event(s, step, i), false);
	if (r < 0)
		return r;
	pthread_mutex_lock(&s->mu);
	if (!s->armed || step != s->last + 1)
		s->next = step;
	s->armed = true;
	s->last = step;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void dp_sync_release_from(struct dp_sync *s, int64_t from)
{
	log_info("data parallel: steps from %lld on go through without the exchange", (long long)from);
	pthread_mutex_lock(&s->mu);
	if (!s->releasing || from < s->release_from)
		s->release_from = from;
	s->releasing = true;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

bool dp_sync_late(struct dp_sync *s, int64_t step)
{
	bool late;

	pthread_mutex_lock(&s->mu);
	late = s->any_late && step >= s->late;
	pthread_mutex_unlock(&s->mu);
	return late;
}

void dp_sync_free(struct dp_sync *s)
{
	if (!s)
		return;
	if (s->running) {
		pthread_mutex_lock(&s->mu);
		s->stop = true;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->thread, NULL);
	}
	for (unsigned i = 0; i < s->n; i++)
		for (unsigned p = 0; p < 2; p++)
			gpu_event_destroy(s->g[i], s->ev[p][i]);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s->sig);
	free(s);
}
