#include "kernels/glsl_compile.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
static char *splice_preamble(const char *src, const char *text)
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

/* Whether `src` names an extension that enables #include (glslang would
 * open the named file as the daemon's user). Line continuations are
 * removed first, so the name cannot be split across lines. */
static const char *include_extension(const char *src)
{
	static const char *const names[] = { "GL_GOOGLE_include_directive",
					     "GL_ARB_shading_language_include" };
	size_t n = strlen(src), k = 0;
	char *joined = malloc(n + 1);
	const char *hit = NULL;

	if (!joined)
		return "an include extension";
	for (size_t i = 0; i < n; i++) {
		if (src[i] == '\\' && src[i + 1] == '\n') {
			i++;
			continue;
		}
		if (src[i] == '\\' && src[i + 1] == '\r' && src[i + 2] == '\n') {
			i += 2;
			continue;
		}
		joined[k++] = src[i];
	}
	joined[k] = '\0';
	for (unsigned i = 0; i < 2 && !hit; i++)
		if (strstr(joined, names[i]))
			hit = names[i];
	free(joined);
	return hit;
}

int glsl_compile(const char *src, const char *preamble, uint32_t **ret_words, size_t *ret_nwords, char *log, size_t cap)
{
	const char *inc;
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
	inc = include_extension(src);
	if (inc) {
		if (cap)
			snprintf(log, cap, "#include is not available to kernels (%s)", inc);
		return -EINVAL;
	}
	if (preamble) {
		spliced = splice_preamble(src, preamble);
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

/* ---- Out of process (glsl_compile.h): the parent side ---- */

const char *glsl_child_exe;

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int spawn_child(int *ret_in, int *ret_out, pid_t *ret_pid)
{
	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, r;
	char *argv[] = { (char *)"tensord", (char *)GLSL_CHILD_ARG, NULL };
	char *envp[] = { NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, dfl;
	pid_t pid;

	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
		r = -errno;
		goto fail;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	sigemptyset(&none);
	sigfillset(&dfl);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &dfl);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	/* stdin and stdout are the pipes, stderr /dev/null, nothing else. */
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	r = -posix_spawn(&pid, glsl_child_exe, &fa, &at, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (r < 0)
		goto fail;
	close(in[0]);
	close(out[1]);
	fcntl(in[1], F_SETFL, O_NONBLOCK);
	fcntl(out[0], F_SETFL, O_NONBLOCK);
	*ret_in = in[1];
	*ret_out = out[0];
	*ret_pid = pid;
	return 0;
fail:
	for (unsigned i = 0; i < 2; i++) {
		if (in[i] >= 0)
			close(in[i]);
		if (out[i] >= 0)
			close(out[i]);
	}
	return r;
}

/* Feed `msg` to the child and collect its answer until EOF or `deadline`.
 * Returns 0 (EOF seen), -ETIMEDOUT or -ENOMEM. */
static int exchange(int in, int out, const char *msg, size_t len, char **buf, size_t *n,
		    int64_t deadline)
{
	size_t sent = 0, have = 0, cap = 0;
	char *b = NULL;

	for (;;) {
		struct pollfd pf[2] = { { .fd = out, .events = POLLIN }, { .fd = in, .events = POLLOUT } };
		int64_t left = deadline - now_ms();
		ssize_t k;

		if (left <= 0) {
			if (in >= 0)
				close(in);
			*buf = b;
			*n = have;
			return -ETIMEDOUT;
		}
		if (poll(pf, in >= 0 ? 2 : 1, (int)left) < 0 && errno != EINTR)
			continue;
		if (in >= 0 && (pf[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
			k = write(in, msg + sent, len - sent);
			if (k > 0)
				sent += (size_t)k;
			if ((k < 0 && errno != EAGAIN && errno != EINTR) || sent == len) {
				close(in);
				in = -1;
			}
		}
		if (!(pf[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		if (have == cap) {
			char *nb;

			if (cap >= GLSL_CHILD_MAX_OUTPUT) {
				k = 0;          /* more than any answer: treat as the end */
				goto eof;
			}
			cap = cap ? cap * 2 : 65536;
			nb = realloc(b, cap);
			if (!nb) {
				free(b);
				if (in >= 0)
					close(in);
				return -ENOMEM;
			}
			b = nb;
		}
		k = read(out, b + have, cap - have);
		if (k > 0) {
			have += (size_t)k;
			continue;
		}
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
eof:
		if (in >= 0)
			close(in);
		*buf = b;
		*n = have;
		return 0;
	}
}

/* Reap `pid`, killing it at `deadline`. Returns its wait status. */
static int reap(pid_t pid, int64_t deadline)
{
	int st = 0;

	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		struct timespec ms = { 0, 1000000 };

		if (w == pid || (w < 0 && errno != EINTR))
			return w == pid ? st : 0;
		if (now_ms() >= deadline) {
			kill(pid, SIGKILL);
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
			return st;
		}
		nanosleep(&ms, NULL);
	}
}

/* The child's answer: u32 status (0 or a positive errno), u32 length, then
 * the SPIR-V words or glslang's log. */
static int answer(const char *b, size_t n, uint32_t **ret_words, size_t *ret_nwords, char *log,
		  size_t cap)
{
	uint32_t head[2];
	uint32_t *words;

	if (n < 8)
		return -EPIPE;
	memcpy(head, b, 8);
	if (head[1] != n - 8 || head[0] > 4095)
		return -EPIPE;
	if (head[0]) {
		if (cap)
			snprintf(log, cap, "%.*s", (int)head[1], b + 8);
		return -(int)head[0];
	}
	if (!head[1] || head[1] % 4)
		return -EPIPE;
	words = malloc(head[1]);
	if (!words)
		return -ENOMEM;
	memcpy(words, b + 8, head[1]);
	*ret_words = words;
	*ret_nwords = head[1] / 4;
	return 0;
}

int glsl_compile_isolated(const char *src, const char *preamble, unsigned seconds,
			  uint32_t **ret_words, size_t *ret_nwords, char *log, size_t cap)
{
	size_t plen = preamble ? strlen(preamble) : 0, slen = strlen(src), n = 0;
	int64_t deadline = now_ms() + (int64_t)seconds * 1000;
	uint32_t pl = (uint32_t)plen;
	int in, out, r, st;
	char *msg, *buf = NULL;
	pid_t pid;

	if (!glsl_child_exe)
		return glsl_compile(src, preamble, ret_words, ret_nwords, log, cap);
	if (cap)
		log[0] = '\0';
	msg = malloc(4 + plen + slen);
	if (!msg)
		return -ENOMEM;
	memcpy(msg, &pl, 4);
	memcpy(msg + 4, preamble ? preamble : "", plen);
	memcpy(msg + 4 + plen, src, slen);
	r = spawn_child(&in, &out, &pid);
	if (r < 0) {
		free(msg);
		if (cap)
			snprintf(log, cap, "cannot start the compiler process: %s", strerror(-r));
		return r == -ENOMEM ? r : -EIO;
	}
	r = exchange(in, out, msg, 4 + plen + slen, &buf, &n, deadline);
	close(out);
	free(msg);
	st = reap(pid, r == -ETIMEDOUT ? 0 : deadline);
	if (r == -ETIMEDOUT || (WIFSIGNALED(st) && (WTERMSIG(st) == SIGKILL ||
						     WTERMSIG(st) == SIGXCPU))) {
		r = -ETIMEDOUT;
		if (cap)
			snprintf(log, cap, "compiling took longer than the %u s limit", seconds);
	} else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) {
		r = -E2BIG;
		if (cap)
			snprintf(log, cap, "the compiler ran out of its %u MiB memory limit",
				 (unsigned)(GLSL_CHILD_MEMORY >> 20));
	} else if (WIFSIGNALED(st)) {
		r = -EINVAL;
		if (cap)
			snprintf(log, cap, "the compiler crashed on this source (%s; it runs with a "
				 "%u MiB stack)", strsignal(WTERMSIG(st)),
				 (unsigned)(GLSL_CHILD_STACK >> 20));
	} else if (r == 0) {
		r = answer(buf, n, ret_words, ret_nwords, log, cap);
		/* Died without answering (a sanitizer's report of a crash). */
		if (r == -EPIPE && WIFEXITED(st) && WEXITSTATUS(st)) {
			r = -EINVAL;
			if (cap)
				snprintf(log, cap, "the compiler crashed on this source (exit status %d)",
					 WEXITSTATUS(st));
		} else if (r == -EPIPE && cap) {
			snprintf(log, cap, "the compiler process gave no usable answer");
		}
	}
	free(buf);
	return r == -EPIPE ? -EIO : r;
}

/* ---- The child (tensord --glsl-compile-child) ---- */

static void limit(int what, rlim_t v)
{
	struct rlimit rl = { v, v };

	setrlimit(what, &rl);
}

static void put_all(const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t k = write(1, c, n);

		if (k <= 0 && errno != EINTR)
			_exit(3);
		if (k > 0) {
			c += k;
			n -= (size_t)k;
		}
	}
}

int glsl_child_main(void)
{
	size_t max = 4 + 4096 + GLSL_MAX_SOURCE, have = 0;
	char *in = malloc(max + 1), log[16384];
	uint32_t head[2], pl, *words = NULL;
	size_t nwords = 0;
	int r;

	/* Limits first, before any client byte is read: CPU time, no core
	 * file, no file can be opened (an #include finds nothing), memory and
	 * stack. ASan's shadow memory does not fit an address-space limit. */
	limit(RLIMIT_CPU, GLSL_CHILD_SECONDS_MAX);
	limit(RLIMIT_CORE, 0);
	limit(RLIMIT_NOFILE, 3);
	limit(RLIMIT_STACK, GLSL_CHILD_STACK);
#if !defined(__SANITIZE_ADDRESS__)
	limit(RLIMIT_AS, GLSL_CHILD_MEMORY);
#endif
	if (!in)
		return 2;
	/* Every path below ends the process: what it holds goes with it. */
	for (;;) {
		ssize_t k = read(0, in + have, max - have);

		if (k == 0 || have == max)
			break;
		if (k < 0 && errno != EINTR)
			return 2;
		if (k > 0)
			have += (size_t)k;
	}
	in[have] = '\0';
	if (have < 4)
		return 2;
	memcpy(&pl, in, 4);
	if (pl > 4096 || pl > have - 4 || memchr(in + 4, '\0', have - 4))
		return 2;
	{
		char pre[4097];

		memcpy(pre, in + 4, pl);
		pre[pl] = '\0';
		r = glsl_compile(in + 4 + pl, pl ? pre : NULL, &words, &nwords, log, sizeof(log));
	}
	if (r == 0) {
		head[0] = 0;
		head[1] = (uint32_t)(nwords * 4);
		put_all(head, 8);
		put_all(words, nwords * 4);
	} else {
		head[0] = (uint32_t)-r;
		head[1] = (uint32_t)strlen(log);
		put_all(head, 8);
		put_all(log, head[1]);
	}
	free(words);
	free(in);
	return 0;
}
