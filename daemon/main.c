/* tensord: flags and configuration, signals, systemd notification, and the
 * life cycle of the device, the store and the server. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <sys/epoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "daemon.h"
#include "log.h"
#include "loop.h"
#include "server.h"
#include "store.h"
#include "model.h"
#include "train.h"

int64_t daemon_now_ns(int clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: tensord [OPTION]...\n"
		"Keep named tensors on a GPU and serve them over msgpack-RPC.\n\n"
		"  --socket PATH      listen on PATH (default $TENSORD_SOCKET, else\n"
		"                     /run/tensord/tensord.sock); ignored under socket activation\n"
		"  --device DEV       auto (discrete > integrated > cpu), cpu, or an index\n"
		"  --state-dir DIR    where state is kept (default /var/lib/tensord)\n"
		"  --config FILE      read 'key = value' settings (see tensord(8))\n"
		"  -v, --verbose      log requests and device details\n"
		"  -h, --help         show this help\n"
		"      --version      show the version\n");
}

enum { OPT_SOCKET = 256, OPT_DEVICE, OPT_STATE_DIR, OPT_CONFIG, OPT_VERSION };

static const struct option options[] = {
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "device", required_argument, NULL, OPT_DEVICE },
	{ "state-dir", required_argument, NULL, OPT_STATE_DIR },
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

/* Returns 0 to run, 1 to exit successfully (help, version), -1 on a usage error. */
static int parse_args(int argc, char **argv, struct config *cfg)
{
	const char *config_file = NULL;
	char err[512];
	int opt;

	/* The config file first, so that flags override it wherever they stand. */
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "vh", options, NULL)) != -1)
		if (opt == OPT_CONFIG)
			config_file = optarg;
	if (config_file && config_load(cfg, config_file, err, sizeof(err)) < 0) {
		fprintf(stderr, "tensord: %s\n", err);
		return -1;
	}
	optind = 1;
	opterr = 1;
	while ((opt = getopt_long(argc, argv, "vh", options, NULL)) != -1) {
		const char *key = NULL;

		switch (opt) {
		case OPT_SOCKET: key = "socket"; break;
		case OPT_DEVICE: key = "device"; break;
		case OPT_STATE_DIR: key = "state_dir"; break;
		case OPT_CONFIG: break;
		case 'v': cfg->log_level = LOG_DEBUG; break;
		case 'h': usage(stdout); return 1;
		case OPT_VERSION: printf("tensord %s\n", TENSORD_VERSION); return 1;
		default: usage(stderr); return -1;
		}
		if (key && config_set(cfg, key, optarg, err, sizeof(err)) < 0) {
			fprintf(stderr, "tensord: --%s: %s\n", options[opt - OPT_SOCKET].name, err);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "tensord: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return -1;
	}
	return 0;
}

struct signals {
	struct loop_source src;
	struct loop *loop;
	int signo;
};

static void on_signal(void *data, uint32_t events)
{
	struct signals *s = data;
	struct signalfd_siginfo si;

	if (read(s->src.fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		s->signo = (int)si.ssi_signo;
		loop_quit(s->loop);
	}
}

struct watchdog {
	struct loop_source src;
};

static void on_watchdog(void *data, uint32_t events)
{
	struct watchdog *w = data;
	uint64_t ticks;

	if (read(w->src.fd, &ticks, sizeof(ticks)) > 0)
		sd_notify(0, "WATCHDOG=1");
}

/* Ping the systemd watchdog at half its interval, when one is set. */
static int watchdog_start(struct loop *loop, struct watchdog *w)
{
	uint64_t usec;
	struct itimerspec its = { 0 };

	w->src.fd = -1;
	if (sd_watchdog_enabled(0, &usec) <= 0)
		return 0;
	w->src.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (w->src.fd < 0)
		return -errno;
	usec /= 2;
	its.it_interval.tv_sec = (time_t)(usec / 1000000);
	its.it_interval.tv_nsec = (long)(usec % 1000000) * 1000;
	its.it_value = its.it_interval;
	timerfd_settime(w->src.fd, 0, &its, NULL);
	w->src.fn = on_watchdog;
	w->src.data = w;
	return loop_add(loop, &w->src, EPOLLIN);
}

static void release_tensor(void *userdata, struct tensor *t)
{
	struct daemon *d = userdata;

	gpu_memory_free(d->gpu, &t->alloc);
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

static int block_signals(struct signals *s, struct loop *loop)
{
	sigset_t mask;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	s->loop = loop;
	s->src.fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s->src.fd < 0)
		return -errno;
	s->src.fn = on_signal;
	s->src.data = s;
	return loop_add(loop, &s->src, EPOLLIN);
}

int main(int argc, char **argv)
{
	struct daemon d = { 0 };
	struct signals sig = { .src.fd = -1 };
	struct watchdog wd = { .src.fd = -1 };
	struct gpu_open_options gopts = { 0 };
	char cache_path[sizeof(d.cfg.state_dir) + 32];
	const char *unlink_path = NULL;
	int listen_fd = -1, r, status = EXIT_FAILURE;

	config_defaults(&d.cfg);
	r = parse_args(argc, argv, &d.cfg);
	if (r != 0)
		return r > 0 ? EXIT_SUCCESS : 2;
	log_set_level(d.cfg.log_level);
	d.start_ns = daemon_now_ns(CLOCK_MONOTONIC);

	d.loop = loop_new();
	if (!d.loop || block_signals(&sig, d.loop) < 0) {
		log_error("cannot set up the event loop: %s", strerror(errno));
		goto out;
	}
	if (mkdir(d.cfg.state_dir, 0750) < 0 && errno != EEXIST)
		log_info("cannot create state directory %s: %s", d.cfg.state_dir, strerror(errno));

	r = gpu_enumerate(&d.devices, &d.ndevices);
	if (r < 0) {
		log_error("no Vulkan device found (install a Vulkan driver; without a GPU, "
			  "Mesa's lavapipe from mesa-vulkan-drivers)");
		goto out;
	}
	gopts.pick = d.cfg.device_pick;
	gopts.index = d.cfg.device_index;
	gopts.host_mapped = d.cfg.host_mapped;
	gopts.block_size = d.cfg.block_size;
	snprintf(cache_path, sizeof(cache_path), "%s/pipeline-cache.bin", d.cfg.state_dir);
	gopts.pipeline_cache = cache_path;
	if (gpu_device_open(&gopts, &d.gpu) < 0)
		goto out;
	log_notice("device %u: %s (%s, %s), %llu MiB", d.gpu->desc.index, d.gpu->desc.name,
		   d.gpu->desc.type, d.gpu->desc.driver,
		   (unsigned long long)(d.gpu->mem.heap_size >> 20));

	d.store = store_new((uint32_t)d.cfg.max_tensors, release_tensor, &d);
	d.models = models_new(MODEL_MAX_MODELS);
	if (!d.store || !d.models)
		goto out;
	if (open_listener(&d, &listen_fd, &unlink_path) < 0)
		goto out;
	d.server = server_new(&d, listen_fd, unlink_path);
	if (!d.server) {
		close(listen_fd);
		goto out;
	}
	loop_set_idle(d.loop, train_jobs_run, &d);
	if (watchdog_start(d.loop, &wd) < 0)
		log_warning("cannot start the watchdog timer");
	log_notice("serving on %s", unlink_path ? unlink_path : "the systemd socket");
	sd_notify(0, "READY=1\nSTATUS=serving");

	r = loop_run(d.loop);
	if (r < 0) {
		log_error("event loop failed: %s", strerror(-r));
		goto out;
	}
	log_notice("%s received, shutting down", strsignal(sig.signo));
	sd_notify(0, "STOPPING=1");
	status = EXIT_SUCCESS;
out:
	server_free(d.server);
	train_jobs_free();
	models_free(d.models);
	store_free(d.store);
	gpu_device_free(d.gpu);
	free(d.devices);
	if (wd.src.fd >= 0)
		close(wd.src.fd);
	if (sig.src.fd >= 0)
		close(sig.src.fd);
	loop_free(d.loop);
	return status;
}
