/* Large host copies split over helper threads (copy_pool.h). */
#include "base/copy_pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define COPY_POOL_MAX_THREADS 8u
/* Below this a copy is not split: waking the helpers costs more. */
#define COPY_POOL_MIN ((size_t)4 << 20)

static struct {
	pthread_once_t once;
	pthread_mutex_t use;    /* held by the one caller using the helpers */
	pthread_mutex_t lock;   /* guards what follows */
	pthread_cond_t work, done;
	unsigned helpers;       /* running helper threads */
	uint64_t generation;    /* bumped for each split copy */
	unsigned pending;       /* helper parts not yet copied */
	uint8_t *dst;
	const uint8_t *src;     /* NULL: populate dst for writing instead */
	size_t part, n;
} pool = {
	.once = PTHREAD_ONCE_INIT,
	.use = PTHREAD_MUTEX_INITIALIZER,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.work = PTHREAD_COND_INITIALIZER,
	.done = PTHREAD_COND_INITIALIZER,
};

/* Part k (1..helpers) of the current copy; part 0 is the caller's. */
static void copy_part(unsigned k)
{
	size_t at = (size_t)k * pool.part, len;

	if (at >= pool.n)
		return;
	len = pool.n - at < pool.part ? pool.n - at : pool.part;
	if (pool.src)
		memcpy(pool.dst + at, pool.src + at, len);
	else
		(void)madvise(pool.dst + at, len, MADV_POPULATE_WRITE);
}

static void *helper_main(void *arg)
{
	unsigned k = (unsigned)(uintptr_t)arg;
	uint64_t seen = 0;

	pthread_mutex_lock(&pool.lock);
	for (;;) {
		while (pool.generation == seen)
			pthread_cond_wait(&pool.work, &pool.lock);
		seen = pool.generation;
		pthread_mutex_unlock(&pool.lock);
		copy_part(k);
		pthread_mutex_lock(&pool.lock);
		if (--pool.pending == 0)
			pthread_cond_signal(&pool.done);
	}
	return NULL;
}

static void pool_start(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned want = cpus > 2 ? (unsigned)(cpus - 1) : 0;
	const char *env = getenv("TENSORD_COPY_THREADS");
	sigset_t all, old;
	pthread_attr_t attr;

	/* The variable (tests) sets the count, the caller's thread included. */
	if (env && *env) {
		unsigned long v = strtoul(env, NULL, 10);

		want = v > 1 ? (unsigned)(v < COPY_POOL_MAX_THREADS ? v : COPY_POOL_MAX_THREADS) - 1 : 0;
	}
	if (want > COPY_POOL_MAX_THREADS - 1)
		want = COPY_POOL_MAX_THREADS - 1;
	if (want == 0 || pthread_attr_init(&attr) != 0)
		return;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, (size_t)64 << 10);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (unsigned k = 1; k <= want; k++) {
		pthread_t t;

		if (pthread_create(&t, &attr, helper_main, (void *)(uintptr_t)k) != 0)
			break;
		pool.helpers = k;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
}

unsigned copy_pool_threads(void)
{
	pthread_once(&pool.once, pool_start);
	return pool.helpers + 1;
}

/* Split the copy (src set) or the populating (src NULL) of dst over the
 * helpers and the caller; the caller holds pool.use. */
static void pool_run(void *dst, const void *src, size_t n)
{
	unsigned parts = pool.helpers + 1;

	pthread_mutex_lock(&pool.lock);
	pool.dst = dst;
	pool.src = src;
	pool.n = n;
	/* Parts of whole 4 KiB pages, so no two threads share one. */
	pool.part = ((n + parts - 1) / parts + 4095) & ~(size_t)4095;
	pool.pending = pool.helpers;
	pool.generation++;
	pthread_cond_broadcast(&pool.work);
	pthread_mutex_unlock(&pool.lock);
	copy_part(0);
	pthread_mutex_lock(&pool.lock);
	while (pool.pending)
		pthread_cond_wait(&pool.done, &pool.lock);
	pthread_mutex_unlock(&pool.lock);
	pthread_mutex_unlock(&pool.use);
}

void copy_pool_memcpy(void *dst, const void *src, size_t n)
{
	if (n < COPY_POOL_MIN || copy_pool_threads() == 1 || pthread_mutex_trylock(&pool.use) != 0) {
		memcpy(dst, src, n);
		return;
	}
	pool_run(dst, src, n);
}

void copy_pool_populate(void *dst, size_t n)
{
	if (n < COPY_POOL_MIN || copy_pool_threads() == 1 || pthread_mutex_trylock(&pool.use) != 0) {
		(void)madvise(dst, n, MADV_POPULATE_WRITE);
		return;
	}
	pool_run(dst, NULL, n);
}
