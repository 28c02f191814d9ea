#include "base/sanitize.h"

#ifdef TENSORD_SANITIZE

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* Manifests are small JSON files; anything larger is not one. */
#define MANIFEST_MAX 65536

/* The value of "library_path" in `json`, copied into `out`; 0 or -1. */
static int manifest_library(const char *json, char *out, size_t out_len)
{
	const char *p = strstr(json, "\"library_path\"");
	const char *end;

	if (!p || !(p = strchr(p + 14, ':')) || !(p = strchr(p, '"')))
		return -1;
	p++;
	end = strchr(p, '"');
	if (!end || (size_t)(end - p) >= out_len || end == p)
		return -1;
	memcpy(out, p, (size_t)(end - p));
	out[end - p] = '\0';
	return 0;
}

static void keep_manifest_library(const char *manifest)
{
	char json[MANIFEST_MAX + 1], lib[4096], path[8192];
	FILE *f = fopen(manifest, "re");
	size_t n;

	if (!f)
		return;
	n = fread(json, 1, MANIFEST_MAX, f);
	fclose(f);
	json[n] = '\0';
	if (manifest_library(json, lib, sizeof(lib)) < 0)
		return;
	/* A relative path with a slash is relative to the manifest; a bare
	 * name is looked up as dlopen does. */
	if (lib[0] != '/' && strchr(lib, '/')) {
		const char *slash = strrchr(manifest, '/');
		int dir_len = slash ? (int)(slash - manifest) : 1;

		snprintf(path, sizeof(path), "%.*s/%s", dir_len, slash ? manifest : ".", lib);
	} else {
		snprintf(path, sizeof(path), "%s", lib);
	}
	/* Never closed: RTLD_NODELETE keeps it mapped after the loader's
	 * dlclose as well. */
	if (!dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE))
		log_debug("sanitizer build: cannot keep %s loaded: %s", path, dlerror());
}

/* A manifest file, or every *.json in a directory. */
static void keep_manifests_in(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *e;
	char file[4096];

	if (!dir) {
		keep_manifest_library(path);
		return;
	}
	while ((e = readdir(dir))) {
		size_t len = strlen(e->d_name);

		if (len < 5 || strcmp(e->d_name + len - 5, ".json"))
			continue;
		snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
		keep_manifest_library(file);
	}
	closedir(dir);
}

static void keep_drivers_loaded(void)
{
	static const char *const dirs[] = {
		"/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d", "/usr/share/vulkan/icd.d",
	};
	const char *list = getenv("VK_DRIVER_FILES");

	if (!list || !*list)
		list = getenv("VK_ICD_FILENAMES");
	if (list && *list) {
		char *copy = strdup(list), *save = NULL;

		for (char *p = copy ? strtok_r(copy, ":", &save) : NULL; p; p = strtok_r(NULL, ":", &save))
			keep_manifests_in(p);
		free(copy);
		return;
	}
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		keep_manifests_in(dirs[i]);
}

static const char *test_leak(void)
{
	const char *v = getenv("TENSORD_TEST_LEAK");

	return v ? v : "";
}

/* Not inlined, so the report names it: tests/integration/test_sanitizer.py looks for it. */
__attribute__((noinline)) static void tensord_test_leak(void)
{
	static void *volatile sink;

	sink = malloc(4093);
	if (sink)
		memset(sink, 0x5a, 4093);
	sink = NULL;
}

void sanitize_init(void)
{
	keep_drivers_loaded();
	if (!strcmp(test_leak(), "1")) {
		log_notice("TENSORD_TEST_LEAK=1: leaking 4093 bytes for the leak-check test");
		tensord_test_leak();
	}
}

void sanitize_device_created(VkDevice dev)
{
	static int done;
	VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
	VkFence fence;

	if (done || strcmp(test_leak(), "driver"))
		return;
	done = 1;
	/* The handle is dropped: the driver's memory for it is never freed. */
	if (vkCreateFence(dev, &fci, NULL, &fence) == VK_SUCCESS)
		log_notice("TENSORD_TEST_LEAK=driver: leaking a fence inside the driver");
}

#else

void sanitize_init(void)
{
}

void sanitize_device_created(VkDevice dev)
{
	(void)dev;
}

#endif
