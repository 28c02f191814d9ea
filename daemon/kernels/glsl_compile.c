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
#include <sys/mman.h>
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

/* Start the child with the request `msg` (`len` bytes) on its stdin (a
 * memfd, so nothing is written while it runs) and a non-blocking pipe on its
 * stdout. */
static int spawn_child(const char *msg, size_t len, int *ret_out, pid_t *ret_pid)
{
	int in = -1, out[2] = { -1, -1 }, r;
	char *argv[] = { (char *)"tensord", (char *)GLSL_CHILD_ARG, NULL };
	/* Nothing of the daemon's environment but where its own libraries
	 * are (a GPU host or a prefix may give them through LD_LIBRARY_PATH:
	 * without it the child could not start). */
	const char *libpath = getenv("LD_LIBRARY_PATH");
	char *envp[2] = { NULL, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, dfl;
	size_t off = 0;
	pid_t pid;

	in = memfd_create("tensord-glsl", MFD_CLOEXEC);
	if (in < 0 || pipe2(out, O_CLOEXEC) < 0) {
		r = -errno;
		goto fail;
	}
	while (off < len) {
		ssize_t k = write(in, msg + off, len - off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			r = k < 0 ? -errno : -EIO;
			goto fail;
		}
		off += (size_t)k;
	}
	if (lseek(in, 0, SEEK_SET) < 0) {
		r = -errno;
		goto fail;
	}
	if (libpath && asprintf(&envp[0], "LD_LIBRARY_PATH=%s", libpath) < 0) {
		envp[0] = NULL;
		r = -ENOMEM;
		goto fail;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	sigemptyset(&none);
	sigfillset(&dfl);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &dfl);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	/* stdin the request, stdout the pipe, stderr /dev/null, nothing else. */
	posix_spawn_file_actions_adddup2(&fa, in, 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	r = -posix_spawn(&pid, glsl_child_exe, &fa, &at, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	free(envp[0]);
	envp[0] = NULL;
	if (r < 0)
		goto fail;
	close(in);
	close(out[1]);
	fcntl(out[0], F_SETFL, O_NONBLOCK);
	*ret_out = out[0];
	*ret_pid = pid;
	return 0;
fail:
	free(envp[0]);
	if (in >= 0)
		close(in);
	for (unsigned i = 0; i < 2; i++)
		if (out[i] >= 0)
			close(out[i]);
	return r;
}

struct glsl_job {
	pid_t pid;
	int out;                /* the child's stdout, non-blocking */
	unsigned seconds;       /* the limit, for messages */
	char *buf;              /* what it answered so far */
	size_t have, cap;
};

int glsl_job_start(const char *src, const char *preamble, unsigned seconds, struct glsl_job **ret,
		   char *log, size_t cap)
{
	size_t plen = preamble ? strlen(preamble) : 0, slen = strlen(src);
	uint32_t pl = (uint32_t)plen;
	struct glsl_job *j;
	char *msg;
	int r;

	if (cap)
		log[0] = '\0';
	j = calloc(1, sizeof(*j));
	msg = malloc(4 + plen + slen);
	if (!j || !msg) {
		free(j);
		free(msg);
		return -ENOMEM;
	}
	memcpy(msg, &pl, 4);
	memcpy(msg + 4, preamble ? preamble : "", plen);
	memcpy(msg + 4 + plen, src, slen);
	r = spawn_child(msg, 4 + plen + slen, &j->out, &j->pid);
	free(msg);
	if (r < 0) {
		free(j);
		if (cap)
			snprintf(log, cap, "cannot start the compiler process: %s", strerror(-r));
		return r == -ENOMEM ? r : -EIO;
	}
	j->seconds = seconds;
	*ret = j;
	return 0;
}

int glsl_job_fd(const struct glsl_job *j)
{
	return j->out;
}

int glsl_job_read(struct glsl_job *j)
{
	for (;;) {
		ssize_t k;

		if (j->have == j->cap) {
			char *nb;

			if (j->cap >= GLSL_CHILD_MAX_OUTPUT)
				return 1;       /* more than any answer: treat as the end */
			nb = realloc(j->buf, j->cap ? j->cap * 2 : 65536);
			if (!nb)
				return -ENOMEM;
			j->buf = nb;
			j->cap = j->cap ? j->cap * 2 : 65536;
		}
		k = read(j->out, j->buf + j->have, j->cap - j->have);
		if (k > 0) {
			j->have += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN)
			return 0;
		return 1;               /* EOF, or the pipe broke */
	}
}

/* Reap `pid`, waiting at most `ms` before killing it. Returns its wait
 * status. */
static int reap(pid_t pid, int64_t ms)
{
	int64_t deadline = now_ms() + ms;
	int st = 0;

	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		struct timespec one = { 0, 1000000 };

		if (w == pid || (w < 0 && errno != EINTR))
			return w == pid ? st : 0;
		if (now_ms() >= deadline) {
			kill(pid, SIGKILL);
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
			return st;
		}
		nanosleep(&one, NULL);
	}
}

static void job_free(struct glsl_job *j)
{
	close(j->out);
	free(j->buf);
	free(j);
}

void glsl_job_cancel(struct glsl_job *j)
{
	if (!j)
		return;
	reap(j->pid, 0);
	job_free(j);
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

int glsl_job_finish(struct glsl_job *j, bool timed_out, uint32_t **ret_words, size_t *ret_nwords,
		    char *log, size_t cap)
{
	/* After the end of its answer the child exits at once; give it a
	 * second before it is killed. */
	int st = reap(j->pid, timed_out ? 0 : 1000), r = 0;

	if (cap)
		log[0] = '\0';
	if (timed_out || (WIFSIGNALED(st) && (WTERMSIG(st) == SIGKILL || WTERMSIG(st) == SIGXCPU))) {
		r = -ETIMEDOUT;
		if (cap)
			snprintf(log, cap, "compiling took longer than the %u s limit", j->seconds);
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
	} else {
		r = answer(j->buf, j->have, ret_words, ret_nwords, log, cap);
		/* 127: the child never ran (the dynamic loader or exec failed). */
		if (r == -EPIPE && WIFEXITED(st) && WEXITSTATUS(st) == 127) {
			r = -EIO;
			if (cap)
				snprintf(log, cap, "the compiler process could not start (exit status 127)");
		/* Died without answering (a sanitizer's report of a crash). */
		} else if (r == -EPIPE && WIFEXITED(st) && WEXITSTATUS(st)) {
			r = -EINVAL;
			if (cap)
				snprintf(log, cap, "the compiler crashed on this source (exit status %d)",
					 WEXITSTATUS(st));
		} else if (r == -EPIPE && cap) {
			snprintf(log, cap, "the compiler process gave no usable answer");
		}
	}
	job_free(j);
	return r == -EPIPE ? -EIO : r;
}

int glsl_compile_isolated(const char *src, const char *preamble, unsigned seconds,
			  uint32_t **ret_words, size_t *ret_nwords, char *log, size_t cap)
{
	int64_t deadline = now_ms() + (int64_t)seconds * 1000;
	struct glsl_job *j;
	int r;

	if (!glsl_child_exe)
		return glsl_compile(src, preamble, ret_words, ret_nwords, log, cap);
	r = glsl_job_start(src, preamble, seconds, &j, log, cap);
	if (r < 0)
		return r;
	for (;;) {
		struct pollfd pf = { .fd = j->out, .events = POLLIN };
		int64_t left = deadline - now_ms();

		if (left <= 0)
			return glsl_job_finish(j, true, ret_words, ret_nwords, log, cap);
		if (poll(&pf, 1, (int)left) < 0 && errno != EINTR)
			continue;
		r = glsl_job_read(j);
		if (r < 0) {
			glsl_job_cancel(j);
			return r;
		}
		if (r > 0)
			return glsl_job_finish(j, false, ret_words, ret_nwords, log, cap);
	}
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
