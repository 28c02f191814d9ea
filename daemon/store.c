#include "store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct store {
	struct tensor **buckets;
	size_t nbuckets;            /* a power of two */
	uint64_t count;
	uint64_t bytes;
	uint32_t max_tensors;
	store_release_fn release;
	void *userdata;
};

static uint64_t hash_name(const char *name, size_t len)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)name[i];
		h *= 1099511628211ull;
	}
	return h;
}

struct store *store_new(uint32_t max_tensors, store_release_fn release, void *userdata)
{
	struct store *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->nbuckets = 256;
	s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
	if (!s->buckets) {
		free(s);
		return NULL;
	}
	s->max_tensors = max_tensors;
	s->release = release;
	s->userdata = userdata;
	return s;
}

static void drop(struct store *s, struct tensor *t)
{
	s->count--;
	s->bytes -= t->bytes;
	if (s->release)
		s->release(s->userdata, t);
	free(t);
}

void store_free(struct store *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nbuckets; i++) {
		while (s->buckets[i]) {
			struct tensor *t = s->buckets[i];

			s->buckets[i] = t->hash_next;
			drop(s, t);
		}
	}
	free(s->buckets);
	free(s);
}

static struct tensor **slot_of(struct store *s, const char *name, size_t len)
{
	struct tensor **pp = &s->buckets[hash_name(name, len) & (s->nbuckets - 1)];

	while (*pp && !((*pp)->name_len == len && memcmp((*pp)->name, name, len) == 0))
		pp = &(*pp)->hash_next;
	return pp;
}

struct tensor *store_find(struct store *s, const char *name, size_t len)
{
	return *slot_of(s, name, len);
}

/* Keep chains short: double the table when it averages two per bucket. A
 * failed grow only costs speed. */
static void maybe_grow(struct store *s)
{
	size_t n = s->nbuckets * 2;
	struct tensor **nb;

	if (s->count < 2 * s->nbuckets)
		return;
	nb = calloc(n, sizeof(*nb));
	if (!nb)
		return;
	for (size_t i = 0; i < s->nbuckets; i++) {
		while (s->buckets[i]) {
			struct tensor *t = s->buckets[i];
			size_t j = hash_name(t->name, t->name_len) & (n - 1);

			s->buckets[i] = t->hash_next;
			t->hash_next = nb[j];
			nb[j] = t;
		}
	}
	free(s->buckets);
	s->buckets = nb;
	s->nbuckets = n;
}

void store_set_max_tensors(struct store *s, uint32_t max_tensors)
{
	s->max_tensors = max_tensors;
}

bool store_has_room(const struct store *s)
{
	return s->count < s->max_tensors;
}

int store_put(struct store *s, struct tensor *t)
{
	struct tensor **pp = slot_of(s, t->name, t->name_len), *old = *pp;

	if (old) {
		t->created_ns = old->created_ns;
		t->version = old->version + 1;
		t->hash_next = old->hash_next;
		*pp = t;
		s->count++;
		s->bytes += t->bytes;
		drop(s, old);
		return 0;
	}
	if (!store_has_room(s))
		return -ENOSPC;
	t->version = 1;
	t->hash_next = NULL;
	*pp = t;
	s->count++;
	s->bytes += t->bytes;
	maybe_grow(s);
	return 0;
}

int store_delete(struct store *s, const char *name, size_t len)
{
	struct tensor **pp = slot_of(s, name, len), *t = *pp;

	if (!t)
		return -ENOENT;
	*pp = t->hash_next;
	drop(s, t);
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	const struct tensor *x = *(const struct tensor *const *)a;
	const struct tensor *y = *(const struct tensor *const *)b;

	return strcmp(x->name, y->name);
}

int store_list(struct store *s, const char *prefix, size_t prefix_len,
	       struct tensor ***ret_list, size_t *ret_count)
{
	struct tensor **list;
	size_t n = 0;

	list = malloc((s->count ? s->count : 1) * sizeof(*list));
	if (!list)
		return -ENOMEM;
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct tensor *t = s->buckets[i]; t; t = t->hash_next)
			if (!prefix || (t->name_len >= prefix_len &&
					memcmp(t->name, prefix, prefix_len) == 0))
				list[n++] = t;
	qsort(list, n, sizeof(*list), cmp_name);
	*ret_list = list;
	*ret_count = n;
	return 0;
}

void store_totals(const struct store *s, uint64_t *ret_count, uint64_t *ret_bytes)
{
	*ret_count = s->count;
	*ret_bytes = s->bytes;
}
