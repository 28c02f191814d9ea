/* tensord: flags and configuration, signals, systemd notification, and the
 * life cycle of the device, the store and the server. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <sys/epoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/loop.h"
#include "base/sanitize.h"
#include "daemon.h"
#include "devices.h"
#include "gpu/completion.h"
#include "kernels/glsl_compile.h"
#include "kernels/kernel.h"
#include "methods/kernel_build_job.h"
#include "methods/kernel_compile_job.h"
#include "methods/methods_job.h"
#include "methods/op_batch.h"
#include "methods/methods_train_run.h"
#include "persist/checkpoint.h"
#include "persist/persist.h"
#include "persist/persist_model.h"
#include "persist/recover.h"
#include "persist/state_lock.h"
#include "serve/notify.h"
#include "serve/server.h"
#include "store/model.h"
#include "store/names.h"
#include "store/names_migrate.h"
#include "store/store.h"
#include "train/cluster.h"
#include "train/job.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: tensord [OPTION]...\n"
		"  or:  tensord --check-config FILE\n"
		"Keep named tensors on a GPU and serve them over msgpack-RPC.\n\n"
		"  --socket PATH      listen on PATH (default $TENSORD_SOCKET, else\n"
		"                     /run/tensord/tensord.sock; for a user other than root\n"
		"                     $XDG_RUNTIME_DIR/tensord/tensord.sock); ignored under\n"
		"                     socket activation\n"
		"  --device DEV       which Vulkan devices to open: auto (the default: every\n"
		"                     device of the best kind, discrete > integrated > cpu),\n"
		"                     all (every usable one), cpu, local (in a group started\n"
		"                     by mpirun: one of auto's, the member's rank on its\n"
		"                     host), or indexes I,J,... (in that\n"
		"                     order; repeats open one device twice)\n"
		"  --state-dir DIR    where state is kept (default /var/lib/tensord; for a user\n"
		"                     other than root $XDG_STATE_HOME/tensord); giving it\n"
		"                     keeps tensors and models across restarts (unless\n"
		"                     persist = no)\n"
		"  --config FILE      read 'key = value' settings (see tensord(8))\n"
		"  -v, --verbose      log requests and device details\n"
		"      --check-config FILE\n"
		"                     check FILE as the daemon would read it, print 'FILE: ok'\n"
		"                     or every error with its line, and exit (0 ok, 1 errors);\n"
		"                     opens no device, socket or state directory\n"
		"      --print-config\n"
		"                     print the settings in force ('key = value' lines, every\n"
		"                     key: defaults, then --config FILE, then flags) and exit\n"
		"      --list-options\n"
		"                     print the long options, one per line, and exit\n"
		"  -h, --help         show this help\n"
		"      --version      show the version\n");
}

enum { OPT_SOCKET = 256, OPT_DEVICE, OPT_STATE_DIR, OPT_CONFIG, OPT_VERSION, OPT_PRINT_CONFIG,
       OPT_LIST_OPTIONS, OPT_CHECK_CONFIG };

static const struct option options[] = {
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "device", required_argument, NULL, OPT_DEVICE },
	{ "state-dir", required_argument, NULL, OPT_STATE_DIR },
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ "print-config", no_argument, NULL, OPT_PRINT_CONFIG },
	{ "list-options", no_argument, NULL, OPT_LIST_OPTIONS },
	{ "check-config", required_argument, NULL, OPT_CHECK_CONFIG },
	{ NULL, 0, NULL, 0 },
};

/* --list-options: "--name[ ARG][ -c]" per line, from the table getopt reads
 * (the docs_drift test checks --help and tensord(8) against it). */
static void list_options(void)
{
	for (const struct option *o = options; o->name; o++)
	{
		printf("--%s%s", o->name, o->has_arg ? " ARG" : "");
		if (o->val < 256)
			printf(" -%c", o->val);
		putchar('\n');
	}
}

/* The command line, kept so that a reload applies the flags over the
 * reloaded file exactly as at start-up. */
struct cmdline {
	const char *config_file;
	struct {
		const char *key, *value;
	} set[4];               /* one per settable flag: the last one given wins */
	unsigned nset;
};

static void cmdline_set(struct cmdline *cl, const char *key, const char *value)
{
	for (unsigned i = 0; i < cl->nset; i++) {
		if (!strcmp(cl->set[i].key, key)) {
			cl->set[i].value = value;
			return;
		}
	}
	if (cl->nset < sizeof(cl->set) / sizeof(cl->set[0])) {
		cl->set[cl->nset].key = key;
		cl->set[cl->nset++].value = value;
	}
}

/* Defaults, then the config file, then the flags. Returns 0 or -errno with
 * the reason in `err`. */
static int build_config(const struct cmdline *cl, struct config *ret, char *err, size_t err_len)
{
	struct config c;
	int r;

	config_defaults(&c);
	if (cl->config_file && (r = config_load(&c, cl->config_file, err, err_len)) < 0)
		return r;
	for (unsigned i = 0; i < cl->nset; i++)
		if ((r = config_set(&c, cl->set[i].key, cl->set[i].value, err, err_len)) < 0)
			return r;
	*ret = c;
	return 0;
}

/* --check-config FILE: the file through the daemon's own parser, every
 * error on stderr. Returns the exit status: 0 when the daemon would take it. */
static int check_config(const char *path)
{
	unsigned n = config_check(path, stderr);

	if (n) {
		fprintf(stderr, "%s: %u error%s\n", path, n, n == 1 ? "" : "s");
		return EXIT_FAILURE;
	}
	printf("%s: ok\n", path);
	return EXIT_SUCCESS;
}

/* Returns true to run the daemon; false to exit with *exit_status: 0 after
 * help, version, --print-config, --list-options or a good --check-config, 1
 * after a bad --check-config or no usable path, 2 on a usage error. */
static bool parse_args(int argc, char **argv, struct cmdline *cl, struct config *cfg, int *exit_status)
{
	struct config scratch;
	const char *check = NULL;
	char err[512];
	bool print = false;
	int opt;

	*exit_status = 2;
	config_defaults(&scratch);
	while ((opt = getopt_long(argc, argv, "vh", options, NULL)) != -1) {
		const char *key = NULL, *value = optarg;

		switch (opt) {
		case OPT_SOCKET: key = "socket"; break;
		case OPT_DEVICE: key = "device"; break;
		case OPT_STATE_DIR: key = "state_dir"; break;
		case OPT_CONFIG: cl->config_file = optarg; break;
		case 'v': key = "verbose"; value = "yes"; break;
		case 'h': usage(stdout); *exit_status = 0; return false;
		case OPT_VERSION: printf("tensord %s\n", TENSORD_VERSION); *exit_status = 0; return false;
		case OPT_PRINT_CONFIG: print = true; break;
		case OPT_LIST_OPTIONS: list_options(); *exit_status = 0; return false;
		case OPT_CHECK_CONFIG: check = optarg; break;
		default: /* getopt named the option; one line more, as GNU tools do */
			fputs("Try 'tensord --help' for more information.\n", stderr);
			return false;
		}
		if (!key)
			continue;
		/* Checked here so that the message names the flag. */
		if (config_set(&scratch, key, value, err, sizeof(err)) < 0) {
			fprintf(stderr, "tensord: %s%s: %s\n", opt == 'v' ? "-" : "--",
				opt == 'v' ? "v" : options[opt - OPT_SOCKET].name, err);
			return false;
		}
		cmdline_set(cl, key, value);
	}
	if (optind < argc) {
		fprintf(stderr, "tensord: unexpected argument '%s'\nTry 'tensord --help' for more information.\n",
			argv[optind]);
		return false;
	}
	if (check && print) {
		fprintf(stderr, "tensord: --check-config and --print-config do not go together\n");
		return false;
	}
	if (check) {
		*exit_status = check_config(check);
		return false;
	}
	if (build_config(cl, cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "tensord: %s\n", err);
		return false;
	}
	if (config_private_paths(cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "tensord: %s%s\n", print ? "note: " : "", err);
		*exit_status = 1;
		if (!print)
			return false;
	}
	if (print) {
		config_print(stdout, cfg);
		*exit_status = 0;
		return false;
	}
	return true;
}

/* The directories of a daemon run by a user (config_private_paths): the
 * state directory with its missing parents, and the socket's directory, all
 * created 0700 (existing ones are left as they are). */
static void make_private_dirs(const struct config *c)
{
	char path[sizeof(c->state_dir) + sizeof(c->socket_path)], *slash;

	if (c->state_dir_private) {
		snprintf(path, sizeof(path), "%s", c->state_dir);
		for (slash = strchr(path + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
			*slash = '\0';
			if (mkdir(path, 0700) < 0 && errno != EEXIST)
				break;
			*slash = '/';
		}
		log_info("state directory %s (a user's daemon: persistence only with persist = yes)",
			 c->state_dir);
	}
	if (c->socket_private) {
		snprintf(path, sizeof(path), "%s", c->socket_path);
		slash = strrchr(path, '/');
		if (slash && slash != path) {
			*slash = '\0';
			if (mkdir(path, 0700) < 0 && errno != EEXIST)
				log_warning("cannot create %s: %s", path, strerror(errno));
		}
	}
}

/* Descriptors kept for the daemon's own use (devices, checkpoint files,
 * timers, the journal) on top of one per connection. */
#define OWN_FDS 256

/* RLIMIT_NOFILE's soft limit, raised to the hard one at start-up. */
static uint64_t fd_limit;

/* Raise the soft RLIMIT_NOFILE to the hard limit (start-up only). */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		struct rlimit up = { rl.rlim_max, rl.rlim_max };

		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl.rlim_cur = rl.rlim_max;
	}
	fd_limit = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}

/* max_connections must leave OWN_FDS descriptors free under the file limit,
 * or a checkpoint fails with EMFILE once clients took them: lower it. Also
 * warn about a user_max_buffer_bytes too small for one message. */
static void fit_fd_limit(struct config *c)
{
	uint64_t fit;

	if (c->user_max_buffer_bytes && c->user_max_buffer_bytes < c->max_message_bytes)
		log_warning("user_max_buffer_bytes (%llu) is below max_message_bytes (%llu): a message "
			    "that large costs its sender the connection",
			    (unsigned long long)c->user_max_buffer_bytes,
			    (unsigned long long)c->max_message_bytes);
	if (!fd_limit || fd_limit == UINT64_MAX)
		return;
	fit = fd_limit > OWN_FDS + 1 ? fd_limit - OWN_FDS : 1;
	if (c->max_connections <= fit)
		return;
	log_warning("max_connections %llu does not fit the open-file limit of %llu (the daemon "
		    "keeps %d for itself): serving at most %llu connections; raise LimitNOFILE=",
		    (unsigned long long)c->max_connections, (unsigned long long)fd_limit, OWN_FDS,
		    (unsigned long long)fit);
	c->max_connections = fit;
}

/* The GPU wait policy from the configuration: request_timeout bounds every
 * submission, and the watchdog is fed while the loop waits. */
static void apply_wait_policy(const struct config *c, struct notify *n)
{
	gpu_set_wait_policy(c->request_timeout_ms * 1000000ull, notify_keepalive, n);
}

/* stop_timeout passed after SIGTERM: the shutdown is stuck (a checkpoint on
 * a device that does not answer); exit now rather than be killed. */
static void on_stop_deadline(int signo)
{
	static const char msg[] = "tensord: stop_timeout passed during shutdown; exiting now\n";

	(void)signo;
	(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
	_exit(EXIT_FAILURE);
}

static void arm_stop_deadline(const struct config *c)
{
	if (!c->stop_timeout)
		return;
	signal(SIGALRM, on_stop_deadline);
	alarm((unsigned)c->stop_timeout);
}

struct signals {
	struct loop_source src;
	struct daemon *d;
	struct notify *notify;
	const struct cmdline *cl;
	int signo;              /* the signal that stopped the loop */
};

/* A key a reload found changed (config_apply_reload). */
static void log_change(void *userdata, const char *key, const char *old_value,
		       const char *new_value, bool applied)
{
	(void)userdata;
	if (applied)
		log_notice("reload: %s %s -> %s", key, old_value, new_value);
	else
		log_warning("reload: %s changed (%s -> %s) but applies only at start-up; kept %s", key,
			    old_value, new_value, old_value);
}

/* SIGHUP: re-read the configuration and apply what can change while running
 * (config_apply_reload), logging each changed key; a file that does not
 * parse changes nothing. */
static void reload(struct signals *s)
{
	struct daemon *d = s->d;
	struct config next;
	char err[512], failure[192];

	notify_reloading(s->notify);
	if (build_config(s->cl, &next, err, sizeof(err)) < 0 ||
	    config_private_paths(&next, err, sizeof(err)) < 0) {
		log_error("reload failed, the running configuration stays: %s", err);
		d->metrics.reload_failures++;
		snprintf(failure, sizeof(failure), "last reload failed, running settings kept: %.140s", err);
		notify_reloaded(s->notify, failure);
		return;
	}
	fit_fd_limit(&next);
	if (config_apply_reload(&d->cfg, &next, log_change, NULL) == 0)
		log_notice("reload: no setting changed");
	apply_wait_policy(&d->cfg, s->notify);
	log_set_level(d->cfg.log_level);
	store_set_max_tensors(d->store, (uint32_t)d->cfg.max_tensors);
	store_set_quota(d->store, d->cfg.user_max_tensors, d->cfg.user_max_bytes);
	checkpoint_rearm(d->checkpoint);
	d->metrics.reloads++;
	log_notice("configuration reloaded%s%s", s->cl->config_file ? " from " : "",
		   s->cl->config_file ? s->cl->config_file : " (no --config file: flags only)");
	notify_reloaded(s->notify, NULL);
}

static void on_signal(void *data, uint32_t events)
{
	struct signals *s = data;
	struct signalfd_siginfo si;

	while (read(s->src.fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			reload(s);
			continue;
		}
		if (si.ssi_signo == SIGUSR1) { /* drain (job.drain), for an upgrade */
			jobs_drain(s->d);
			loop_wake_idle(s->d->loop);
			continue;
		}
		if (!s->signo)
			arm_stop_deadline(&s->d->cfg);
		s->signo = (int)si.ssi_signo;
		loop_quit(s->d->loop);
	}
}

static void release_tensor(void *userdata, struct tensor *t)
{
	struct daemon *d = userdata;

	gpu_memory_free(devices_of(d, t), &t->alloc);
}

struct skip_lost {
	struct daemon *d;
	uint64_t n;
};

static void skip_lost(void *data, struct tensor *t)
{
	struct skip_lost *sk = data;

	if (t->dirty && devices_of(sk->d, t)->lost) {
		store_mark_clean(sk->d->store, t);
		sk->n++;
	}
}

/* Write every dirty tensor before exiting, but those on a lost device: what
 * it holds cannot be read, so their files keep the last checkpoint. */
static void final_flush(struct daemon *d)
{
	struct checkpoint_result res;
	char err[512];

	if (devices_any_lost(d)) {
		struct skip_lost sk = { d, 0 };

		store_foreach(d->store, skip_lost, &sk);
		log_warning("final checkpoint: %llu changed tensors on a lost device are skipped; "
			    "their files keep the last checkpoint", (unsigned long long)sk.n);
	}

	if (checkpoint_flush(d, 0, 0, &res, err, sizeof(err)) < 0) {
		log_error("final checkpoint failed; changes since the last one are lost: %s", err);
		return;
	}
	d->final_checkpoint_ok = !res.failed && !res.more && !devices_any_lost(d);
	log_notice("final checkpoint: %llu tensors (%llu bytes) written, %llu removed, %llu model "
		   "files changed in %.3f s", (unsigned long long)res.written, (unsigned long long)res.bytes,
		   (unsigned long long)res.removed, (unsigned long long)res.models, res.seconds);
}

/* The listening socket: systemd's, or our own at cfg->socket_path. */
static int open_listener(struct daemon *d, int *ret_fd, const char **ret_unlink)
{
	int n = sd_listen_fds(1), r;

	if (n > 1) {
		log_error("socket activation passed %d sockets; expected one", n);
		return -EINVAL;
	}
	if (n == 1) {
		if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) <= 0) {
			log_error("socket activation passed something other than a listening Unix stream socket");
			return -EINVAL;
		}
		log_info("serving the socket passed by systemd");
		*ret_fd = SD_LISTEN_FDS_START;
		*ret_unlink = NULL;
		return 0;
	}
	r = server_listen_path(d->cfg.socket_path, ret_fd);
	if (r < 0) {
		log_error("cannot listen on %s: %s%s", d->cfg.socket_path, strerror(-r),
			  r == -EADDRINUSE ? " (another tensord is serving it)" : "");
		return r;
	}
	*ret_unlink = d->cfg.socket_path;
	return 0;
}

/* A listener that no server took over (start-up failed): close it and
 * remove the socket file we made. */
static void close_listener(int fd, const char *unlink_path)
{
	if (fd < 0)
		return;
	close(fd);
	if (unlink_path)
		unlink(unlink_path);
}

/* One daemon per state directory (persist/state_lock.h): the lock is kept
 * in *ret_fd until exit. */
static int lock_state_dir(const struct config *c, int *ret_fd)
{
	char err[PATH_MAX * 2 + 200];
	int r = state_lock_take(c->state_dir, ret_fd, err, sizeof(err));

	if (r < 0)
		log_error("%s", err);
	return r;
}

static int block_signals(struct signals *s)
{
	sigset_t mask;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGUSR1);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	s->src.fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s->src.fd < 0)
		return -errno;
	s->src.fn = on_signal;
	s->src.data = s;
	return loop_add(s->d->loop, &s->src, EPOLLIN);
}

/* Whether a device still runs work that outran its time limit. */
static bool runaway_running(struct daemon *d)
{
	for (uint32_t id = 0; id < d->ngpus; id++)
		if (d->gpus[id] && d->gpus[id]->runaway && !gpu_device_runaway_ended(d->gpus[id]))
			return true;
	return false;
}

/* A member of a group (docs/cluster.md): "%r" in the socket and state
 * directory paths becomes the rank mpirun gave; the default paths (none
 * given) get the rank too, so that members on one host do not collide;
 * `device = local` takes the member's local rank. */
static int cluster_paths(struct config *c)
{
	int rank = cluster_env_rank(), local = cluster_env_local_rank();
	size_t n = strlen(c->socket_path);

	if (rank < 0) {
		log_error("cluster = yes, but this tensord was not started by mpirun ($OMPI_COMM_WORLD_RANK is unset)");
		return -1;
	}
	c->device.local_rank = local < 0 ? (uint32_t)rank : (uint32_t)local;
	if (!c->socket_set && n > 5 && !strcmp(c->socket_path + n - 5, ".sock") && n + 3 < sizeof(c->socket_path))
		memcpy(c->socket_path + n - 5, "-%r.sock", 9);
	if (!c->state_dir_set && strlen(c->state_dir) + 3 < sizeof(c->state_dir))
		strcat(c->state_dir, "-%r");
	if (cluster_expand_rank(c->socket_path, sizeof(c->socket_path), rank) < 0 ||
	    cluster_expand_rank(c->state_dir, sizeof(c->state_dir), rank) < 0) {
		log_error("the socket or state directory path is too long with the rank in it");
		return -1;
	}
	return 0;
}

/* After the training jobs (their operations are abandoned), stop the MPI
 * thread (train/cluster.h). Returns true when MPI is stuck in MPI_Finalize:
 * exit with _exit. */
static bool leave_cluster(struct daemon *d)
{
	bool stuck = !cluster_stop(d->cluster);

	d->cluster = NULL;
	return stuck;
}

/* After the loop stopped: what runs now is finished and answered, then
 * (SIGTERM, or a failing loop) the final flush keeps whatever was
 * acknowledged. */
/* Say at start-up whether what clients store outlives the daemon (issue 34:
 * a daemon started by hand without a state directory kept nothing, silently). */
static void log_persistence(const struct config *cfg)
{
	if (config_persist_on(cfg))
		log_notice("tensors, models and jobs persist in %s (checkpoint every %llu s, and at a clean stop)",
			   cfg->state_dir, (unsigned long long)cfg->checkpoint_interval);
	else if (cfg->persist == CONFIG_PERSIST_NO)
		log_notice("nothing persists (persist = no): tensors, models and jobs end with the daemon");
	else
		log_notice("nothing persists: no state directory (--state-dir, state_dir or $STATE_DIRECTORY; "
			   "docs/durability.md), so tensors, models and jobs end with the daemon");
}

static void finish_work(struct daemon *d)
{
	/* Only the answers of what runs now go out; the loop closes its op.run
	 * batch after each turn, a failing one may not have. */
	server_stop_serving(d->server);
	op_batch_flush(d, false);
	/* Graphs still running finish first: their answers and stored outputs
	 * happen before the final flush (gpu/completion.h). */
	for (uint32_t id = 0; id < d->ngpus; id++)
		gpu_completion_stop(d->gpus[id]);
	op_batch_free(d);
	if (d->persist)
		final_flush(d);
}

int main(int argc, char **argv)
{
	struct daemon d = { 0 };
	struct cmdline cl = { 0 };
	struct notify notify = { 0 };
	struct signals sig = { .src.fd = -1, .d = &d, .notify = &notify, .cl = &cl };
	const char *unlink_path = NULL;
	int listen_fd = -1, lock_fd = -1, r, status = EXIT_FAILURE;
	bool mpi_stuck;

	/* The GLSL compiler child (glsl_compile.h): nothing of the daemon. */
	if (argc == 2 && !strcmp(argv[1], GLSL_CHILD_ARG))
		return glsl_child_main();
	glsl_child_exe = "/proc/self/exe";
	sanitize_init();
	if (!parse_args(argc, argv, &cl, &d.cfg, &r))
		return r;
	log_set_level(d.cfg.log_level);
	if (d.cfg.cluster && cluster_paths(&d.cfg) < 0)
		return EXIT_FAILURE;
	d.start_ns = daemon_now_ns(CLOCK_MONOTONIC);

	d.loop = loop_new();
	if (!d.loop || block_signals(&sig) < 0) {
		log_error("cannot set up the event loop: %s", strerror(errno));
		goto out;
	}
	r = notify_init(&notify, &d);
	if (r < 0) {
		log_error("cannot set up systemd notification: %s", strerror(-r));
		goto out;
	}
	raise_fd_limit();
	fit_fd_limit(&d.cfg);
	apply_wait_policy(&d.cfg, &notify);
	make_private_dirs(&d.cfg);
	/* The socket, then the state directory's lock, before anything reads
	 * the directory: a daemon whose socket or state is taken restores
	 * nothing (docs/durability.md). */
	if (open_listener(&d, &listen_fd, &unlink_path) < 0)
		goto out;
	if (mkdir(d.cfg.state_dir, 0700) < 0 && errno != EEXIST)
		log_info("cannot create state directory %s: %s", d.cfg.state_dir, strerror(errno));
	if (config_persist_on(&d.cfg) && lock_state_dir(&d.cfg, &lock_fd) < 0)
		goto out;

	/* After block_signals: the MPI thread (and MPI's own) inherit the mask. */
	if (d.cfg.cluster &&
	    cluster_start(d.loop, d.cfg.cluster_timeout_ms, train_run_member, &d, &d.cluster) < 0)
		goto out;
	if (devices_open(&d) < 0)
		goto out;

	d.store = store_new((uint32_t)d.cfg.max_tensors, release_tensor, &d);
	d.models = models_new(MODEL_MAX_MODELS);
	if (!d.store || !d.models || kernels_init(&d) < 0)
		goto out;
	store_set_quota(d.store, d.cfg.user_max_tensors, d.cfg.user_max_bytes);
	/* Restored before serving and before READY=1: a client never sees a
	 * half-restored store (docs/durability.md). */
	log_persistence(&d.cfg);
	if (config_persist_on(&d.cfg) && daemon_restore(&d) < 0)
		goto out;
	d.server = server_new(&d, listen_fd, unlink_path);
	if (!d.server)
		goto out;
	listen_fd = -1;
	/* The batcher's after hook runs after the server's (which frees the
	 * connections closed) and before recovery's (recover_init). */
	r = op_batch_init(&d);
	if (r >= 0)
		r = loop_add_idle(d.loop, train_jobs_run, &d);
	if (r < 0) {
		log_error("cannot hook into the event loop: %s", strerror(-r));
		goto out;
	}
	if (recover_init(&d) < 0)
		goto out;
	log_notice("serving on %s", unlink_path ? unlink_path : "the systemd socket");
	/* Only now: the device is open, the store is ready and connections are
	 * served, so units ordered after tensord.service find it working. */
	notify_ready(&notify);

	r = loop_run(d.loop);
	/* Said before the work that shutting down does (the final checkpoint
	 * among it), so the log reads in the order things happen (issue 35). */
	if (r == 0) {
		log_notice("%s received, shutting down", strsignal(sig.signo));
		notify_stopping(&notify);
	}
	finish_work(&d);
	if (r < 0) {
		log_error("event loop failed: %s", strerror(-r));
		goto out;
	}
	status = EXIT_SUCCESS;
out:
	if (status != EXIT_SUCCESS)
		sd_notify(0, "STATUS=failed; see the log");
	if (runaway_running(&d)) {
		/* Tearing down would wait for the runaway work or free memory it
		 * still uses (docs/kernels.md): exit, the kernel ends with us. */
		log_error("a device still runs a submission that outran its time limit: exiting "
			  "without tearing the devices down");
		server_free(d.server);
		_exit(status);
	}
	gpu_set_wait_policy(0, NULL, NULL);
	notify_fini(&notify);
	checkpoint_free(d.checkpoint);
	persist_free(d.persist);
	model_persist_free(d.model_persist);
	server_free(d.server);
	close_listener(listen_fd, unlink_path);
	recover_fini(&d);
	jobs_shutdown(&d); /* reads the jobs' last figures: before they are freed */
	train_jobs_free(&d);
	mpi_stuck = leave_cluster(&d);
	kernel_compile_jobs_free(&d);
	kernel_build_jobs_free(&d);
	kernels_fini(&d);
	models_free(d.models);
	usage_free(&d.usage);
	store_free(d.store);
	devices_close(&d);
	if (sig.src.fd >= 0) {
		if (d.loop)
			loop_remove(d.loop, &sig.src);
		close(sig.src.fd);
	}
	loop_free(d.loop);
	if (lock_fd >= 0)
		close(lock_fd); /* after the final checkpoint: the directory is free */
	if (mpi_stuck)
		_exit(status); /* the MPI thread is still inside MPI_Finalize */
	return status;
}
