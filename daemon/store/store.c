#include "store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One uid's usage. Entries are never removed: uids come from the kernel, so
 * there are only as many as users who ever stored a tensor. */
struct user_entry {
	uint32_t uid;
	struct store_usage use;
};

struct store {
	struct tensor **buckets;
	size_t nbuckets;            /* a power of two */
	uint64_t count;
	uint64_t bytes;
	uint32_t max_tensors;
	uint64_t user_max_tensors;  /* 0: no quota */
	uint64_t user_max_bytes;
	struct user_entry *users;
	size_t nusers, capusers;
	store_release_fn release;
	void *userdata;
	/* dirty tracking (docs/durability.md) */
	bool track;
	struct tensor *dirty_head, *dirty_tail;
	uint64_t dirty_count, dirty_bytes;
	struct deleted *deleted_head, *deleted_tail;
	uint64_t deleted_count;
	bool deletions_lost;
};

/* A deleted name whose checkpoint file is still to be removed. */
struct deleted {
	struct deleted *next;
	size_t len;
	char name[];
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

static struct user_entry *user_find(const struct store *s, uint32_t uid)
{
	for (size_t i = 0; i < s->nusers; i++)
		if (s->users[i].uid == uid)
			return &s->users[i];
	return NULL;
}

/* The entry of `uid`, created when missing; NULL on ENOMEM. */
static struct user_entry *user_get(struct store *s, uint32_t uid)
{
	struct user_entry *u = user_find(s, uid);

	if (u)
		return u;
	if (s->nusers == s->capusers) {
		size_t cap = s->capusers ? 2 * s->capusers : 8;
		struct user_entry *n = realloc(s->users, cap * sizeof(*n));

		if (!n)
			return NULL;
		s->users = n;
		s->capusers = cap;
	}
	u = &s->users[s->nusers++];
	*u = (struct user_entry){ .uid = uid };
	return u;
}

static void charge(struct store *s, struct user_entry *u, const struct tensor *t)
{
	s->count++;
	s->bytes += t->bytes;
	u->use.tensors++;
	u->use.bytes += t->bytes;
	if (t->device < STORE_DEVICES) {
		u->use.device_tensors[t->device]++;
		u->use.device_bytes[t->device] += t->bytes;
	}
}

static void dirty_unlink(struct store *s, struct tensor *t)
{
	if (!t->dirty)
		return;
	if (t->dirty_prev)
		t->dirty_prev->dirty_next = t->dirty_next;
	else
		s->dirty_head = t->dirty_next;
	if (t->dirty_next)
		t->dirty_next->dirty_prev = t->dirty_prev;
	else
		s->dirty_tail = t->dirty_prev;
	t->dirty = false;
	t->dirty_prev = t->dirty_next = NULL;
	s->dirty_count--;
	s->dirty_bytes -= t->bytes;
}

void store_mark_dirty(struct store *s, struct tensor *t)
{
	if (!s->track || t->dirty)
		return;
	t->dirty = true;
	t->dirty_next = NULL;
	t->dirty_prev = s->dirty_tail;
	if (s->dirty_tail)
		s->dirty_tail->dirty_next = t;
	else
		s->dirty_head = t;
	s->dirty_tail = t;
	s->dirty_count++;
	s->dirty_bytes += t->bytes;
}

void store_mark_clean(struct store *s, struct tensor *t)
{
	dirty_unlink(s, t);
}

static void drop(struct store *s, struct tensor *t)
{
	struct user_entry *u = user_find(s, t->owner);

	dirty_unlink(s, t);

	s->count--;
	s->bytes -= t->bytes;
	if (u) {
		u->use.tensors--;
		u->use.bytes -= t->bytes;
		if (t->device < STORE_DEVICES) {
			u->use.device_tensors[t->device]--;
			u->use.device_bytes[t->device] -= t->bytes;
		}
	}
	if (s->release)
		s->release(s->userdata, t);
	free(t);
}

void store_free(struct store *s)
{
	if (!s)
		return;
	store_clear(s);
	free(s->buckets);
	free(s->users);
	free(s);
}

static struct tensor **slot_of(struct store *s, const char *name, size_t len)
{
	struct tensor **pp = &s->buckets[hash_name(name, len) & (s->nbuckets - 1)];

	while (*pp && !((*pp)->name_len == len && memcmp((*pp)->name, name, len) == 0))
		pp = &(*pp)->hash_next;
	return pp;
}

int store_lookup(struct store *s, const char *name, size_t len, const struct access_cred *who,
		 unsigned want, struct tensor **ret, struct store_denial *denial)
{
	struct tensor *t = *slot_of(s, name, len);

	if (!t)
		return -ENOENT;
	if (!access_allowed(who, t->owner, t->group, t->mode, want)) {
		if (denial)
			*denial = (struct store_denial){ .owner = t->owner, .group = t->group, .mode = t->mode };
		return -EACCES;
	}
	*ret = t;
	return 0;
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
	struct user_entry *u;

	if (old) {
		t->owner = old->owner;
		t->group = old->group;
		t->mode = old->mode;
	} else if (!store_has_room(s)) {
		return -ENOSPC;
	}
	u = user_get(s, t->owner);
	if (!u)
		return -ENOMEM;
	if (old) {
		t->created_ns = old->created_ns;
		t->version = old->version + 1;
		t->hash_next = old->hash_next;
		*pp = t;
		charge(s, u, t);
		drop(s, old);
		t->dirty = false;
		store_mark_dirty(s, t);
		return 0;
	}
	t->version = 1;
	t->hash_next = NULL;
	*pp = t;
	charge(s, u, t);
	t->dirty = false;
	store_mark_dirty(s, t);
	maybe_grow(s);
	return 0;
}

/* Remember that `name` (`len` bytes) is gone, for the checkpoint writer. */
static void remember_deleted(struct store *s, const char *name, size_t len)
{
	if (s->track) {
		struct deleted *n = malloc(sizeof(*n) + len + 1);

		if (n) {
			n->next = NULL;
			n->len = len;
			memcpy(n->name, name, len);
			n->name[len] = '\0';
			if (s->deleted_tail)
				s->deleted_tail->next = n;
			else
				s->deleted_head = n;
			s->deleted_tail = n;
			s->deleted_count++;
		} else {
			s->deletions_lost = true;
		}
	}
}

int store_delete(struct store *s, const char *name, size_t len)
{
	struct tensor **pp = slot_of(s, name, len), *t = *pp;

	if (!t)
		return -ENOENT;
	*pp = t->hash_next;
	remember_deleted(s, name, len);
	drop(s, t);
	return 0;
}

int store_rename(struct store *s, struct tensor *t, const char *name, size_t len)
{
	struct tensor **pp;

	if (len > TDP_MAX_NAME_LEN)
		return -ENAMETOOLONG;
	if (*slot_of(s, name, len))
		return -EEXIST;
	pp = slot_of(s, t->name, t->name_len);
	if (*pp != t)
		return -ENOENT;
	*pp = t->hash_next;
	remember_deleted(s, t->name, t->name_len);
	memcpy(t->name, name, len);
	t->name[len] = '\0';
	t->name_len = len;
	pp = slot_of(s, name, len);
	t->hash_next = NULL;
	*pp = t;
	store_mark_dirty(s, t);
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	const struct tensor *x = *(const struct tensor *const *)a;
	const struct tensor *y = *(const struct tensor *const *)b;

	return strcmp(x->name, y->name);
}

int store_list(struct store *s, const char *prefix, size_t prefix_len, const struct access_cred *who,
	       struct tensor ***ret_list, size_t *ret_count)
{
	struct tensor **list;
	size_t n = 0;

	list = malloc((s->count ? s->count : 1) * sizeof(*list));
	if (!list)
		return -ENOMEM;
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct tensor *t = s->buckets[i]; t; t = t->hash_next)
			if ((!prefix || (t->name_len >= prefix_len &&
					 memcmp(t->name, prefix, prefix_len) == 0)) &&
			    access_allowed(who, t->owner, t->group, t->mode, ACCESS_READ))
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

void store_set_quota(struct store *s, uint64_t user_max_tensors, uint64_t user_max_bytes)
{
	s->user_max_tensors = user_max_tensors;
	s->user_max_bytes = user_max_bytes;
}

void store_usage_of(const struct store *s, uint32_t uid, struct store_usage *ret)
{
	const struct user_entry *u = user_find(s, uid);

	*ret = u ? u->use : (struct store_usage){ 0 };
}

/* `have` + `delta` > `max`, for a quota `max` (0: none). Shrinking never fails,
 * so that a user over a lowered quota can still replace with something smaller. */
static bool over(uint64_t have, int64_t delta, uint64_t max)
{
	if (max == 0 || delta <= 0)
		return false;
	return have > max || (uint64_t)delta > max - have;
}

int store_quota_check(struct store *s, uint32_t uid, int64_t dtensors, int64_t dbytes,
		      const char **limit)
{
	return store_quota_check_limits(s, uid, dtensors, dbytes, s->user_max_tensors, s->user_max_bytes, limit);
}

int store_quota_check_limits(struct store *s, uint32_t uid, int64_t dtensors, int64_t dbytes,
			     uint64_t max_tensors, uint64_t max_bytes, const char **limit)
{
	struct user_entry *u = user_get(s, uid);

	if (!u)
		return -ENOMEM;
	if (over(u->use.tensors, dtensors, max_tensors)) {
		if (limit)
			*limit = "user_max_tensors";
		return -EDQUOT;
	}
	if (over(u->use.bytes, dbytes, max_bytes)) {
		if (limit)
			*limit = "user_max_bytes";
		return -EDQUOT;
	}
	return 0;
}

void store_track_dirty(struct store *s, bool on)
{
	s->track = on;
}

struct tensor *store_first_dirty(const struct store *s)
{
	return s->dirty_head;
}

void store_dirty_totals(const struct store *s, uint64_t *ret_count, uint64_t *ret_bytes,
			uint64_t *ret_deleted)
{
	*ret_count = s->dirty_count;
	*ret_bytes = s->dirty_bytes;
	*ret_deleted = s->deleted_count;
}

size_t store_take_deleted(struct store *s, char *name)
{
	struct deleted *n = s->deleted_head;
	size_t len;

	if (!n)
		return 0;
	s->deleted_head = n->next;
	if (!s->deleted_head)
		s->deleted_tail = NULL;
	s->deleted_count--;
	len = n->len;
	memcpy(name, n->name, len + 1);
	free(n);
	return len;
}

bool store_take_lost_deletions(struct store *s)
{
	bool lost = s->deletions_lost;

	s->deletions_lost = false;
	return lost;
}

void store_foreach(struct store *s, void (*fn)(void *data, struct tensor *t), void *data)
{
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct tensor *t = s->buckets[i]; t; t = t->hash_next)
			fn(data, t);
}

void store_clear(struct store *s)
{
	for (size_t i = 0; i < s->nbuckets; i++) {
		while (s->buckets[i]) {
			struct tensor *t = s->buckets[i];

			s->buckets[i] = t->hash_next;
			drop(s, t);
		}
	}
	while (s->deleted_head) {
		struct deleted *n = s->deleted_head;

		s->deleted_head = n->next;
		free(n);
	}
	s->deleted_tail = NULL;
	s->deleted_count = 0;
	s->deletions_lost = false;
}
