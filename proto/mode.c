#include "mode.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const struct {
	const char *word;
	uint32_t bits;
} words[] = {
	{ "group-read", TDP_MODE_GROUP_READ },
	{ "group-write", TDP_MODE_GROUP_READ | TDP_MODE_GROUP_WRITE },
	{ "world-read", TDP_MODE_WORLD_READ },
	{ "world-write", TDP_MODE_WORLD_READ | TDP_MODE_WORLD_WRITE },
};

int tdp_mode_parse(const char *text, size_t len, uint32_t *ret_mode)
{
	uint32_t mode = 0;
	size_t pos = 0;

	if (len == 0 || len >= TDP_MODE_TEXT_MAX)
		return -EINVAL;
	if (len == strlen("private") && memcmp(text, "private", len) == 0) {
		*ret_mode = TDP_MODE_PRIVATE;
		return 0;
	}
	while (pos <= len) {
		const char *comma = memchr(text + pos, ',', len - pos);
		size_t end = comma ? (size_t)(comma - text) : len, n = end - pos, i;

		for (i = 0; i < sizeof(words) / sizeof(words[0]); i++)
			if (strlen(words[i].word) == n && memcmp(words[i].word, text + pos, n) == 0)
				break;
		if (i == sizeof(words) / sizeof(words[0]))
			return -EINVAL; /* unknown or empty word, "private" in a list */
		mode |= words[i].bits;
		pos = end + 1;
	}
	*ret_mode = mode;
	return 0;
}

const char *tdp_mode_format(uint32_t mode, char *buf)
{
	const char *group = NULL, *world = NULL;

	if (mode & TDP_MODE_GROUP_WRITE)
		group = "group-write";
	else if (mode & TDP_MODE_GROUP_READ)
		group = "group-read";
	if (mode & TDP_MODE_WORLD_WRITE)
		world = "world-write";
	else if (mode & TDP_MODE_WORLD_READ)
		world = "world-read";
	/* Copied, not printed: every tensor's metadata in every answer has it. */
	_Static_assert(TDP_MODE_TEXT_MAX >= sizeof("group-write,world-write"), "TDP_MODE_TEXT_MAX");
	if (group && world) {
		size_t n = strlen(group);

		memcpy(buf, group, n);
		buf[n] = ',';
		memcpy(buf + n + 1, world, strlen(world) + 1);
	} else {
		const char *one = group ? group : world ? world : "private";

		memcpy(buf, one, strlen(one) + 1);
	}
	return buf;
}
