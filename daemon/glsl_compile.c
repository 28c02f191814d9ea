#include "glsl_compile.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glslang/Include/glslang_c_interface.h>
#include <glslang/Public/resource_limits_c.h>

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_ok;

static void init(void)
{
	init_ok = glslang_initialize_process();
}

/* Keep glslang's log, trimmed of trailing blank lines. */
static void copy_log(char *log, size_t cap, const char *a, const char *b)
{
	size_t n;

	if (!cap)
		return;
	snprintf(log, cap, "%s%s", a ? a : "", b ? b : "");
	n = strlen(log);
	while (n && (log[n - 1] == '\n' || log[n - 1] == ' '))
		log[--n] = '\0';
	if (!n)
		snprintf(log, cap, "glslang rejected the source without a message");
}

/* `src` with `text` after its #version line (at the top when it has none),
 * and a #line directive so that messages keep the client's line numbers. */
static char *splice(const char *src, const char *text)
{
	const char *v = strstr(src, "#version"), *at = src;
	unsigned line = 1;
	size_t len;
	char *out;

	if (v) {
		at = strchr(v, '\n');
		at = at ? at + 1 : v + strlen(v);
	}
	for (const char *p = src; p < at; p++)
		line += *p == '\n';
	len = strlen(src) + strlen(text) + 32;
	out = malloc(len);
	if (!out)
		return NULL;
	snprintf(out, len, "%.*s%s%s#line %u\n%s", (int)(at - src), src,
		 at > src && at[-1] != '\n' ? "\n" : "", text, line, at);
	return out;
}

int glsl_compile(const char *src, const char *preamble, uint32_t **ret_words, size_t *ret_nwords, char *log, size_t cap)
{
	char *spliced = NULL;
	glslang_input_t input = {
		.language = GLSLANG_SOURCE_GLSL,
		.stage = GLSLANG_STAGE_COMPUTE,
		.client = GLSLANG_CLIENT_VULKAN,
		.client_version = GLSLANG_TARGET_VULKAN_1_1,
		.target_language = GLSLANG_TARGET_SPV,
		.target_language_version = GLSLANG_TARGET_SPV_1_3,
		.code = src,
		.default_version = 450,
		.default_profile = GLSLANG_NO_PROFILE,
		.messages = GLSLANG_MSG_SPV_RULES_BIT | GLSLANG_MSG_VULKAN_RULES_BIT,
		.resource = glslang_default_resource(),
	};
	glslang_shader_t *shader = NULL;
	glslang_program_t *program = NULL;
	uint32_t *words = NULL;
	size_t n;
	int r = -EINVAL;

	if (cap)
		log[0] = '\0';
	if (preamble) {
		spliced = splice(src, preamble);
		if (!spliced)
			return -ENOMEM;
		input.code = spliced;
	}
	pthread_once(&init_once, init);
	if (!init_ok) {
		copy_log(log, cap, "glslang failed to initialise", NULL);
		free(spliced);
		return -EIO;
	}
	shader = glslang_shader_create(&input);
	if (!shader) {
		free(spliced);
		return -ENOMEM;
	}
	if (!glslang_shader_preprocess(shader, &input) || !glslang_shader_parse(shader, &input)) {
		copy_log(log, cap, glslang_shader_get_info_log(shader), NULL);
		goto out;
	}
	program = glslang_program_create();
	if (!program) {
		r = -ENOMEM;
		goto out;
	}
	glslang_program_add_shader(program, shader);
	if (!glslang_program_link(program, GLSLANG_MSG_SPV_RULES_BIT | GLSLANG_MSG_VULKAN_RULES_BIT)) {
		copy_log(log, cap, glslang_program_get_info_log(program), NULL);
		goto out;
	}
	glslang_program_SPIRV_generate(program, GLSLANG_STAGE_COMPUTE);
	n = glslang_program_SPIRV_get_size(program);
	if (!n) {
		copy_log(log, cap, glslang_program_SPIRV_get_messages(program), NULL);
		goto out;
	}
	words = malloc(n * sizeof(*words));
	if (!words) {
		r = -ENOMEM;
		goto out;
	}
	glslang_program_SPIRV_get(program, words);
	*ret_words = words;
	*ret_nwords = n;
	r = 0;
out:
	if (program)
		glslang_program_delete(program);
	glslang_shader_delete(shader);
	free(spliced);
	return r;
}
