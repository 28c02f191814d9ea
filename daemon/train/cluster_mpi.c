/* The group on Open MPI (cluster.h): one thread makes every MPI call
 * (MPI_THREAD_FUNNELED), runs the queued operations one after the other with
 * non-blocking MPI calls polled against the group's time limit, and between
 * them listens for control messages from the other members. The loop thread
 * only queues, polls and is woken through an eventfd. */
#include "train/cluster.h"

#include <errno.h>
#ifdef TENSORD_SANITIZE
#include <dirent.h>
#include <dlfcn.h>
#include <sanitizer/lsan_interface.h>
#endif
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/loop.h"

enum op_kind { OP_ALLREDUCE, OP_ALLGATHER, OP_BCAST, OP_CTRL };

#define TAG_CTRL 7     /* a control message: CTRL_MSG, then the bytes for on_ctrl */
#define TAG_LEAVE 8    /* no bytes: the sender shuts down */
#define CTRL_MSG 'M'

struct cluster_op {
	enum op_kind kind;
	size_t bytes, count, cap;
	int root;
	atomic_int state;          /* 1 queued or running, 0 done, -1 failed */
	bool orphan;               /* freed by the loop while running (under mu) */
	bool abandoned;            /* left pending in MPI on a time-out (under mu) */
	struct cluster_op *next;
	_Alignas(16) unsigned char data[];
};

struct inmsg {
	struct inmsg *next;
	int from;
	size_t len;
	unsigned char data[];
};

struct cluster {
	pthread_t thread;
	struct loop *loop;
	struct loop_source src;    /* the eventfd */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct cluster_op *head, **tail; /* queued (mu) */
	struct cluster_op *abandoned;    /* MPI may still write them (MPI thread, then stop) */
	struct inmsg *inbox, **intail;   /* received control messages (mu) */
	atomic_bool quit;          /* shut down: operations end at once */
	bool ended;                /* mu */
	bool leaving;              /* the MPI thread says goodbye: quit does not end it */
	int started;               /* 0 starting, 1 up, -1 failed (mu) */
	int rank, size;
	atomic_bool broken;
	char why[256];             /* written once before broken is set */
	uint64_t timeout_ns;
	uint64_t spin_ns;          /* how long a young operation is tested back to back */
	MPI_Comm ctrl, coll;
	int (*on_ctrl)(void *data, int from, const void *msg, size_t len);
	void *data;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool cluster_built(void)
{
	return true;
}

static void wake(struct cluster *c)
{
	uint64_t one = 1;

	(void)!write(c->src.fd, &one, sizeof(one));
}

static void set_broken(struct cluster *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_broken(struct cluster *c, const char *fmt, ...)
{
	va_list ap;

	bool now = false;

	pthread_mutex_lock(&c->mu);
	if (!atomic_load(&c->broken)) {
		va_start(ap, fmt);
		vsnprintf(c->why, sizeof(c->why), fmt, ap);
		va_end(ap);
		atomic_store(&c->broken, true);
		log_error("cluster: the group is broken: %s", c->why);
		now = true;
	}
	pthread_mutex_unlock(&c->mu);
	/* A group step's device may wait for a member that is gone: the loop
	 * lets it through (job_cluster.c). */
	if (now)
		wake(c);
}

void cluster_break(struct cluster *c, const char *why)
{
	set_broken(c, "%s", why);
}

/* Whether another member said it leaves (the group is then broken). */
static bool left(struct cluster *c)
{
	MPI_Status st;
	int flag = 0;

	if (c->size < 2 || MPI_Iprobe(MPI_ANY_SOURCE, TAG_LEAVE, c->ctrl, &flag, &st) != MPI_SUCCESS || !flag)
		return false;
	/* Empty, and arrived: this receive ends at once. */
	MPI_Recv(NULL, 0, MPI_BYTE, st.MPI_SOURCE, TAG_LEAVE, c->ctrl, MPI_STATUS_IGNORE);
	set_broken(c, "member %d left the group", st.MPI_SOURCE);
	return true;
}

/* How long wait_reqs tests a young operation back to back, when the host
 * has cores to spare for it (spin_window). */
#define SPIN_NS 2000000ull

/* SPIN_NS when this host has at least 4 cores per member running on it
 * (each member has its loop, its MPI thread and the driver's threads), else
 * 0: spinning members on a small machine starve each other (the 2-core CI
 * machine ran the cluster test 4x slower). */
static uint64_t spin_window(void)
{
	const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	long cores = sysconf(_SC_NPROCESSORS_ONLN), members = local ? strtol(local, NULL, 10) : 1;

	return members > 0 && cores >= 4 * members ? SPIN_NS : 0;
}

/* Wait for `n` requests until done, an MPI error or the time limit.
 * Returns 0, or -1 (the group is broken; the requests are left pending on
 * a time-out: *timed_out). */
static int wait_reqs(struct cluster *c, MPI_Request *q, int n, const char *what, bool *timed_out)
{
	uint64_t limit = c->leaving && c->timeout_ns > 1000000000ull ? 1000000000ull : c->timeout_ns;
	uint64_t start = now_ns(), deadline = start + limit;
	unsigned spins = 0;

	*timed_out = false;
	for (;;) {
		int done = 0, rc = MPI_Testall(n, q, &done, MPI_STATUSES_IGNORE);

		if (rc != MPI_SUCCESS) {
			char s[MPI_MAX_ERROR_STRING];
			int len = 0;

			MPI_Error_string(rc, s, &len);
			set_broken(c, "%s failed: %s", what, s);
			return -1;
		}
		if (done)
			return 0;
		if (atomic_load(&c->quit) && !c->leaving) {
			*timed_out = true;
			set_broken(c, "member %d is shutting down", c->rank);
			return -1;
		}
		/* A member that stops says so: no waiting for the time limit. */
		if (!c->leaving && (spins & 15) == 15 && left(c)) {
			*timed_out = true;
			return -1;
		}
		if (now_ns() > deadline) {
			*timed_out = true;
			set_broken(c, "%s did not complete within %.1f s (a member died or hangs)", what,
				   (double)limit / 1e9);
			return -1;
		}
		/* MPI moves a non-blocking operation on only inside MPI calls: a
		 * sleep between tests stalls it (an exchange of 2.7 MB took 8 ms
		 * with 20-200 us sleeps on an H100 host). So spin (yielding)
		 * while the exchange is young, then sleep ever longer. */
		if (++spins < 64 || now_ns() - start < c->spin_ns) {
			sched_yield();
		} else {
			struct timespec ts = { 0, now_ns() - start < 1000000000ull ? 20000 : 200000 };

			nanosleep(&ts, NULL);
		}
	}
}

/* Keep `op`, whose memory MPI may still touch after a time-out, until
 * cluster_stop (the MPI thread no longer runs MPI then). */
static void abandon(struct cluster *c, struct cluster_op *op)
{
	pthread_mutex_lock(&c->mu);
	op->abandoned = true;
	op->next = c->abandoned;
	c->abandoned = op;
	pthread_mutex_unlock(&c->mu);
}

static void inbox_add(struct cluster *c, int from, const unsigned char *msg, size_t len)
{
	struct inmsg *m = malloc(sizeof(*m) + len);

	if (!m) {
		/* The sender waits for this member's answer to it. */
		set_broken(c, "out of memory for a control message from member %d", from);
		return;
	}
	m->next = NULL;
	m->from = from;
	m->len = len;
	memcpy(m->data, msg, len);
	pthread_mutex_lock(&c->mu);
	*c->intail = m;
	c->intail = &m->next;
	pthread_mutex_unlock(&c->mu);
	wake(c);
}

/* Take in one control message if one arrived. */
static void poll_ctrl(struct cluster *c)
{
	MPI_Status st;
	MPI_Request q;
	struct cluster_op *rx;
	int flag = 0, n = 0;
	bool timed_out = false;

	if (atomic_load(&c->broken) || c->size < 2 || left(c) ||
	    MPI_Iprobe(MPI_ANY_SOURCE, TAG_CTRL, c->ctrl, &flag, &st) != MPI_SUCCESS || !flag)
		return;
	if (MPI_Get_count(&st, MPI_BYTE, &n) != MPI_SUCCESS || n < 1 || !(rx = cluster_op_new((size_t)n))) {
		set_broken(c, "a control message from member %d could not be received", st.MPI_SOURCE);
		return;
	}
	if (MPI_Irecv(rx->data, n, MPI_BYTE, st.MPI_SOURCE, TAG_CTRL, c->ctrl, &q) != MPI_SUCCESS)
		set_broken(c, "a control message from member %d could not be received", st.MPI_SOURCE);
	else if (wait_reqs(c, &q, 1, "receiving a control message", &timed_out) == 0)
		inbox_add(c, st.MPI_SOURCE, rx->data + 1, (size_t)n - 1);
	if (timed_out)
		abandon(c, rx);
	else
		free(rx);
}

/* Tell every other member that this one leaves (waiting at most the
 * leaving time limit). */
static void send_leave(struct cluster *c)
{
	MPI_Request *q = calloc((size_t)c->size, sizeof(*q));
	int n = 0;
	bool timed_out = false;

	for (int i = 0; q && i < c->size; i++)
		if (i != c->rank && MPI_Isend(NULL, 0, MPI_BYTE, i, TAG_LEAVE, c->ctrl, &q[n]) == MPI_SUCCESS)
			n++;
	if (n)
		(void)wait_reqs(c, q, n, "saying goodbye", &timed_out);
	free(q);
}

/* Send `kind` + data to every other member. */
static int send_ctrl(struct cluster *c, char kind, const void *data, size_t len)
{
	MPI_Request *q = calloc((size_t)c->size, sizeof(*q));
	struct cluster_op *tx = len < INT_MAX ? cluster_op_new(len + 1) : NULL;
	unsigned char *buf = tx ? tx->data : NULL;
	int n = 0, r = 0;
	bool timed_out = false;

	if (!tx || !q) {
		free(tx);
		free(q);
		set_broken(c, "no memory for a control message");
		return -1;
	}
	buf[0] = (unsigned char)kind;
	memcpy(buf + 1, data, len);
	for (int i = 0; r == 0 && i < c->size; i++)
		if (i != c->rank && MPI_Isend(buf, (int)len + 1, MPI_BYTE, i, TAG_CTRL, c->ctrl, &q[n++]) != MPI_SUCCESS)
			r = -1;
	if (r == 0)
		r = wait_reqs(c, q, n, "sending a control message", &timed_out);
	else
		set_broken(c, "sending a control message failed");
	free(q);                   /* MPI keeps the requests, not the array */
	if (timed_out)
		abandon(c, tx);
	else
		free(tx);
	return r;
}

/* Run one queued operation to its end. Returns 0 or -1; *timed_out: MPI may
 * still touch its data. */
static int run_op(struct cluster *c, struct cluster_op *op, bool *timed_out)
{
	MPI_Request q;
	const char *what = "?";
	int rc = MPI_ERR_OTHER;

	*timed_out = false;
	if (atomic_load(&c->broken))
		return -1;
	switch (op->kind) {
	case OP_ALLREDUCE:
		what = "the gradient exchange (MPI_Iallreduce)";
		if (op->count <= INT_MAX)
			rc = MPI_Iallreduce(MPI_IN_PLACE, op->data, (int)op->count, MPI_FLOAT, MPI_SUM, c->coll, &q);
		break;
	case OP_ALLGATHER:
		what = "the members' reports (MPI_Iallgather)";
		if (op->bytes <= INT_MAX) {
			memmove(op->data + (size_t)c->rank * op->bytes, op->data, op->bytes);
			rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op->data, (int)op->bytes, MPI_BYTE,
					    c->coll, &q);
		}
		break;
	case OP_BCAST:
		what = "the broadcast of the parameters (MPI_Ibcast)";
		if (op->bytes <= INT_MAX)
			rc = MPI_Ibcast(op->data, (int)op->bytes, MPI_BYTE, op->root, c->coll, &q);
		break;
	case OP_CTRL:
		return send_ctrl(c, CTRL_MSG, op->data, op->bytes);
	}
	if (rc != MPI_SUCCESS) {
		set_broken(c, "%s could not start", what);
		return -1;
	}
	return wait_reqs(c, &q, 1, what, timed_out);
}

static void finish_op(struct cluster *c, struct cluster_op *op, int r, bool timed_out)
{
	bool free_it;

	pthread_mutex_lock(&c->mu);
	op->abandoned = timed_out;
	free_it = op->orphan && !timed_out;
	atomic_store(&op->state, r < 0 ? -1 : 0);
	if (timed_out) {
		op->next = c->abandoned;
		c->abandoned = op;
	}
	pthread_mutex_unlock(&c->mu);
	if (free_it)
		free(op);
	wake(c);
}

#ifdef TENSORD_SANITIZE
/* Open every *mca_*.so in `dir`, never to be unmapped. */
static void keep_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[8192];

	while (d && (e = readdir(d))) {
		size_t len = strlen(e->d_name);
		int n;

		if (!strstr(e->d_name, "mca_") || len < 4 || strcmp(e->d_name + len - 3, ".so"))
			continue;
		n = snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (n > 0 && (size_t)n < sizeof(path))
			(void)dlopen(path, RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
	}
	if (d)
		closedir(d);
}

/* The sanitizer build: MPI's and PMIx's components (*mca_*.so) are opened
 * before MPI_Init and stay mapped, also those MPI opens, does not select and
 * closes, so that LeakSanitizer names them at exit (tests/lib/lsan.supp)
 * instead of "<unknown module>" (a member of a broken group exits without
 * MPI_Finalize). Debian's layout: next to libmpi's directory,
 * openmpi/lib/openmpi3 and pmix2/lib/pmix. */
static void keep_components_loaded(void)
{
	static const char *const sub[] = { "openmpi/lib/openmpi3", "pmix2/lib/pmix" };
	char dir[4096], *slash;
	Dl_info info;

	if (!dladdr((const void *)MPI_COMM_WORLD, &info) || !info.dli_fname || !(slash = strrchr(info.dli_fname, '/')))
		return;
	for (size_t i = 0; i < sizeof(sub) / sizeof(sub[0]); i++) {
		snprintf(dir, sizeof(dir), "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname, sub[i]);
		keep_dir(dir);
	}
}
#else
static void keep_components_loaded(void)
{
}
#endif

static void *mpi_thread(void *arg)
{
	struct cluster *c = arg;
	int provided = 0, ok;
	bool healthy;

	/* Where the host has cores to spare, its 20 us sleeps between tests
	 * are that long, not the default 50 us more. */
	if (c->spin_ns)
		(void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
	keep_components_loaded();
#ifdef TENSORD_SANITIZE
	/* Open MPI 4.1's initialisation leaks a few strings (asprintf in
	 * mca_base_component_to_string, strdup in components), called through
	 * frames without frame pointers that no suppression can name. */
	__lsan_disable();
#endif
	ok = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS;
#ifdef TENSORD_SANITIZE
	__lsan_enable();
#endif
	if (ok) {
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
		ok = MPI_Comm_rank(MPI_COMM_WORLD, &c->rank) == MPI_SUCCESS &&
		     MPI_Comm_size(MPI_COMM_WORLD, &c->size) == MPI_SUCCESS &&
		     MPI_Comm_dup(MPI_COMM_WORLD, &c->ctrl) == MPI_SUCCESS &&
		     MPI_Comm_dup(MPI_COMM_WORLD, &c->coll) == MPI_SUCCESS;
		if (ok) {
			MPI_Comm_set_errhandler(c->ctrl, MPI_ERRORS_RETURN);
			MPI_Comm_set_errhandler(c->coll, MPI_ERRORS_RETURN);
		}
	}
	pthread_mutex_lock(&c->mu);
	c->started = ok ? 1 : -1;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	if (!ok)
		return NULL;
	for (;;) {
		struct cluster_op *op;
		bool quit, timed_out;
		int r;

		pthread_mutex_lock(&c->mu);
		op = c->head;
		if (op && !(c->head = op->next))
			c->tail = &c->head;
		quit = atomic_load(&c->quit);
		if (!op && !quit) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 5000000; /* control messages: 5 ms is soon enough */
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&c->cv, &c->mu, &ts);
		}
		pthread_mutex_unlock(&c->mu);
		if (op) {
			r = run_op(c, op, &timed_out);
			finish_op(c, op, r, timed_out);
			continue;
		}
		if (quit)
			break;
		poll_ctrl(c);
	}
	/* Shut-down: the others learn that this member is gone; MPI_Finalize
	 * only in a healthy group (it waits for every member). */
	c->leaving = true;
	healthy = !atomic_load(&c->broken);
	/* Also from a broken group: the others may wait for this member. */
	if (c->size > 1)
		send_leave(c);
	if (healthy && !atomic_load(&c->broken)) {
		MPI_Comm_free(&c->ctrl);
		MPI_Comm_free(&c->coll);
		MPI_Finalize();
	}
	pthread_mutex_lock(&c->mu);
	c->ended = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static void on_event(void *data, uint32_t events)
{
	struct cluster *c = data;
	struct inmsg *m;
	uint64_t v;

	(void)events;
	(void)!read(c->src.fd, &v, sizeof(v));
	loop_wake_idle(c->loop);
	for (;;) {
		pthread_mutex_lock(&c->mu);
		m = c->inbox;
		if (m && !(c->inbox = m->next))
			c->intail = &c->inbox;
		pthread_mutex_unlock(&c->mu);
		if (!m)
			break;
		if (c->on_ctrl(c->data, m->from, m->data, m->len) == -EAGAIN) {
			pthread_mutex_lock(&c->mu);
			if (!(m->next = c->inbox))
				c->intail = &m->next;
			c->inbox = m;
			pthread_mutex_unlock(&c->mu);
			break;
		}
		free(m);
	}
}

void cluster_kick(struct cluster *c)
{
	wake(c);
}

static bool wait_flag(struct cluster *c, const int *flag, const bool *bflag, uint64_t ns)
{
	struct timespec ts;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(ns / 1000000000ull);
	ts.tv_nsec += (long)(ns % 1000000000ull);
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&c->mu);
	while ((flag ? *flag == 0 : !*bflag) && pthread_cond_timedwait(&c->cv, &c->mu, &ts) == 0)
		;
	ok = flag ? *flag != 0 : *bflag;
	pthread_mutex_unlock(&c->mu);
	return ok;
}

int cluster_start(struct loop *loop, uint64_t timeout_ms,
		  int (*on_ctrl)(void *data, int from, const void *msg, size_t len), void *data,
		  struct cluster **ret)
{
	struct cluster *c = calloc(1, sizeof(*c));
	int r = 0;

	if (!c)
		return -ENOMEM;
	c->loop = loop;
	c->tail = &c->head;
	c->intail = &c->inbox;
	c->timeout_ns = timeout_ms * 1000000ull;
	c->spin_ns = spin_window();
	c->on_ctrl = on_ctrl;
	c->data = data;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->src = (struct loop_source){ .fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), .fn = on_event, .data = c };
	if (c->src.fd < 0 || (r = loop_add(loop, &c->src, EPOLLIN)) < 0) {
		r = c->src.fd < 0 ? -errno : r;
		goto fail;
	}
	if ((r = -pthread_create(&c->thread, NULL, mpi_thread, c)) < 0) {
		loop_remove(loop, &c->src);
		goto fail;
	}
	/* MPI_Init waits for every member: bounded by the wire-up itself. */
	wait_flag(c, &c->started, NULL, UINT64_MAX / 4);
	if (c->started < 0) {
		pthread_join(c->thread, NULL);
		loop_remove(loop, &c->src);
		log_error("cluster: MPI_Init_thread failed");
		r = -EIO;
		goto fail;
	}
	log_notice("cluster: member %d of %d", c->rank, c->size);
	*ret = c;
	return 0;
fail:
	if (c->src.fd >= 0)
		close(c->src.fd);
	free(c);
	return r;
}

bool cluster_stop(struct cluster *c)
{
	if (!c)
		return true;
	pthread_mutex_lock(&c->mu);
	atomic_store(&c->quit, true);
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	/* MPI_Finalize waits for every member: the whole group stopping (mpirun
	 * passing on SIGTERM) takes well under this; a member stopped alone
	 * does not wait for the others. */
	if (!wait_flag(c, NULL, &c->ended, 3000000000ull)) {
		log_error("cluster: MPI did not shut down within the time limit; exiting without it");
		return false;
	}
	pthread_join(c->thread, NULL);
	loop_remove(c->loop, &c->src);
	close(c->src.fd);
	while (c->head) {
		struct cluster_op *op = c->head;

		c->head = op->next;
		free(op);
	}
	while (c->abandoned) {
		struct cluster_op *op = c->abandoned;

		c->abandoned = op->next;
		free(op);
	}
	while (c->inbox) {
		struct inmsg *m = c->inbox;

		c->inbox = m->next;
		free(m);
	}
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c);
	return true;
}

struct cluster_state cluster_state(const struct cluster *c)
{
	bool broken = atomic_load(&((struct cluster *)c)->broken);

	return (struct cluster_state){ .rank = c->rank, .size = c->size, .broken = broken,
				       .why = broken ? c->why : "" };
}

struct cluster_op *cluster_op_new(size_t bytes)
{
	struct cluster_op *op = calloc(1, sizeof(*op) + bytes + 1);

	if (op)
		op->cap = bytes;
	return op;
}

void *cluster_op_data(struct cluster_op *op)
{
	return op->data;
}

static void queue(struct cluster *c, struct cluster_op *op, enum op_kind kind)
{
	op->kind = kind;
	op->next = NULL;
	atomic_store(&op->state, 1);
	pthread_mutex_lock(&c->mu);
	*c->tail = op;
	c->tail = &op->next;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

void cluster_allreduce_f32(struct cluster *c, struct cluster_op *op, size_t count)
{
	op->count = count;
	queue(c, op, OP_ALLREDUCE);
}

void cluster_allgather(struct cluster *c, struct cluster_op *op, size_t bytes)
{
	op->bytes = bytes;
	queue(c, op, OP_ALLGATHER);
}

void cluster_bcast(struct cluster *c, struct cluster_op *op, int root)
{
	op->bytes = op->cap;
	op->root = root;
	queue(c, op, OP_BCAST);
}

void cluster_send_ctrl(struct cluster *c, struct cluster_op *op)
{
	op->bytes = op->cap;
	queue(c, op, OP_CTRL);
}

int cluster_op_poll(struct cluster_op *op)
{
	return atomic_load(&op->state);
}

void cluster_op_free(struct cluster *c, struct cluster_op *op)
{
	bool free_it;

	if (!op)
		return;
	pthread_mutex_lock(&c->mu);
	free_it = atomic_load(&op->state) != 1 && !op->abandoned;
	op->orphan = true;
	pthread_mutex_unlock(&c->mu);
	if (free_it)
		free(op);
}
