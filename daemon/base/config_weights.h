/* The `user_weights` setting (tensord(8); docs/architecture.md, "Sharing the
 * GPU"): each user's share of the device relative to the others'. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define CONFIG_MAX_WEIGHTS 64
#define CONFIG_MAX_WEIGHT 1000

struct config_weights {
	unsigned n;
	struct {
		bool group;             /* the entry names a (primary) group, not a user */
		uint32_t id;            /* uid or gid */
		uint32_t weight;        /* 1 .. CONFIG_MAX_WEIGHT */
	} e[CONFIG_MAX_WEIGHTS];
};

/* Read "none" or entries "USER:W" / "@GROUP:W" (names or numbers; W 1..1000)
 * separated by spaces or commas. Returns 0 or -EINVAL (ret unchanged). */
int config_weights_parse(const char *v, struct config_weights *ret);

/* Write `w` as config_weights_parse reads it back (numeric ids). */
void config_weights_print(FILE *f, const struct config_weights *w);

/* The weight of a user with primary group `gid`: its own entry's, else its
 * group's, else 1. */
uint32_t config_weight_of(const struct config_weights *w, uint32_t uid, uint32_t gid);
