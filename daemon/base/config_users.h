/* Settings that hold a value per user or group (tensord(8)): `user_weights`
 * (shares of the GPU; docs/architecture.md, "Sharing the GPU") and the
 * per-user quotas `user_quota_tensors`, `user_quota_bytes`, `user_quota_jobs`
 * that override the global user_max_* for the users they name. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define CONFIG_MAX_USER_ENTRIES 64

struct config_users {
	unsigned n;
	struct {
		bool group;             /* the entry names a (primary) group, not a user */
		uint32_t id;            /* uid or gid */
		uint64_t value;
	} e[CONFIG_MAX_USER_ENTRIES];
};

/* Read "none" or entries "USER:V" / "@GROUP:V" (names or numbers) separated
 * by spaces or commas, each V read by `parse_value` within min..max.
 * Returns 0 or -EINVAL (ret unchanged). */
int config_users_parse(const char *v, int (*parse_value)(const char *, uint64_t, uint64_t, uint64_t *),
		       uint64_t min, uint64_t max, struct config_users *ret);

/* Write `w` as config_users_parse reads it back (numeric ids, each value by
 * `print_value`). */
void config_users_print(FILE *f, const struct config_users *w, void (*print_value)(FILE *, uint64_t));

/* The value for a user with primary group `gid`: its own entry's, else its
 * group's, else `dflt`. */
uint64_t config_user_value(const struct config_users *w, uint32_t uid, uint32_t gid, uint64_t dflt);
