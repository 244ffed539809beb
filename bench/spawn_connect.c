/* spawn_connect: the proc-supervisor's two hot paths, measured in one run.
 *
 *  spawn:   N spawns of /bin/true through spawn_process() (clone3 + pidfd,
 *           signal reset, fd closing, no_new_privs, RLIMIT_CORE, Landlock
 *           scope, the workload seccomp filter with its listener handed over
 *           SCM_RIGHTS, execve; plus CLONE_INTO_CGROUP when cgroup v2 is
 *           writable) vs N posix_spawn() of the same program, each followed
 *           by waitpid. Prints both rates and the ratio (target <= 1.5).
 *  connect: M loopback TCP connects by a child process, back to back: without
 *           a filter; with the workload filter answered by a bare RECV +
 *           SEND(CONTINUE) loop (the kernel's floor); with the real notifier
 *           on a libuv loop and the cookie registry, its caller cache off
 *           (each connect costs what a process's first connect costs) and
 *           on (as the daemon runs). Rows alternate over R rounds; prints
 *           the pooled median and p99, the range of the round medians, the
 *           added median (target <= 25 us), the time the caller is blocked
 *           in the handler, and the CPU time of both sides.
 *
 * Usage: spawn_connect [--quick] [--connect-only] [--rounds N] [--registry CAP]
 *                      [--only floor|uvfloor|cold|cached|spaced]   (root:
 * Landlock/cgroup need no root, CLONE_INTO_CGROUP does) */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/kernel.h"
#include "common/util.h"
#include "identity/cookies.h"
#include "identity/procref.h"
#include "proc-supervisor/cgroup.h"
#include "proc-supervisor/landlock.h"
#include "proc-supervisor/notify.h"
#include "proc-supervisor/idpublish.h"
#include "identity/members.h"
#include "proc-supervisor/seccomp.h"
#include "proc-supervisor/spawn.h"

extern char **environ;

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* CPU time (user+system) of this process and its reaped children, in us:
 * the cost of a spawn independent of how busy the machine is. */
static double cpu_us(void)
{
	struct rusage a, b;
	getrusage(RUSAGE_SELF, &a);
	getrusage(RUSAGE_CHILDREN, &b);
	double t = 0;
	const struct rusage *r[2] = { &a, &b };
	for (int i = 0; i < 2; i++)
		t += (double)(r[i]->ru_utime.tv_sec + r[i]->ru_stime.tv_sec) * 1e6 +
		     (double)(r[i]->ru_utime.tv_usec + r[i]->ru_stime.tv_usec);
	return t;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), cmp_double);
	size_t i = (size_t)ceil(p * (double)n) - 1;
	return v[i < n ? i : n - 1];
}

/* ---- spawn ---- */

static double spawn_cpu; /* CPU us per spawn of the last run */

static double bench_spawner(int n, const struct workload_filter *f, int ll_fd, int cg_fd)
{
	double c0 = cpu_us();
	char *argv[] = { "/bin/true", NULL };
	struct spawn_opts o;
	spawn_opts_init(&o);
	o.argv = argv;
	o.filter = f;
	o.landlock_fd = ll_fd;
	o.cgroup_fd = cg_fd;
	double t0 = now_us();
	for (int i = 0; i < n; i++) {
		struct spawn_result res;
		struct spawn_error err;
		if (spawn_process(&o, &res, &err) < 0) {
			fprintf(stderr, "spawn: %s\n", err.message);
			exit(1);
		}
		if (res.listener_fd >= 0)
			close(res.listener_fd);
		waitpid(res.pid, NULL, 0);
		close(res.pidfd);
	}
	spawn_cpu = (cpu_us() - c0) / n;
	return (now_us() - t0) / n;
}

static double bench_posix_spawn(int n)
{
	char *argv[] = { "/bin/true", NULL };
	char *envp[] = { "PATH=/usr/bin:/bin", NULL };
	double c0 = cpu_us();
	double t0 = now_us();
	for (int i = 0; i < n; i++) {
		pid_t pid;
		if (posix_spawn(&pid, "/bin/true", NULL, NULL, argv, envp) != 0)
			exit(1);
		waitpid(pid, NULL, 0);
	}
	spawn_cpu = (cpu_us() - c0) / n;
	return (now_us() - t0) / n;
}

/* ---- connect ---- */

static int server_port;
static volatile int server_stop;

static void *server_thread(void *a)
{
	int s = *(int *)a;
	while (!server_stop) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		if (poll(&p, 1, 100) == 1) {
			int c = accept(s, NULL, NULL);
			if (c >= 0)
				close(c);
		}
	}
	return NULL;
}

/* In the child: M connects, latencies (us) written to `out`. */
static int connect_gap_us; /* pause between connects (0: back to back) */

static void child_connects(int m, int out)
{
	double *lat = malloc(sizeof(double) * (size_t)(m + 1));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)server_port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (int i = 0; i < m; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		double t0 = now_us();
		int r = connect(fd, (struct sockaddr *)&a, sizeof(a));
		lat[i] = now_us() - t0;
		if (r < 0)
			_exit(3);
		close(fd);
		if (connect_gap_us) {
			struct timespec gap = { 0, connect_gap_us * 1000L };
			nanosleep(&gap, NULL);
		}
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	lat[m] = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
	size_t len = sizeof(double) * (size_t)(m + 1);
	for (size_t off = 0; off < len;) {
		ssize_t w = write(out, (char *)lat + off, len - off);
		if (w <= 0)
			_exit(4);
		off += (size_t)w;
	}
	_exit(0);
}

static void read_all(int fd, void *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t r = read(fd, (char *)buf + off, len - off);
		if (r <= 0) {
			fprintf(stderr, "child report short\n");
			exit(1);
		}
		off += (size_t)r;
	}
}

struct nctx {
	struct kernel_caps caps;
	struct cookie_registry *reg;
	/* The identity feed row: the daemon's record step (registry, learn
	 * the connector, queue its cookie for the feed's worker). */
	struct members *members;
	struct idpublish *pub;
	bool feed;
};
static int b_record(void *u, uint64_t cookie, const struct procref *ref)
{
	struct nctx *nc = u;
	int r = cookie_registry_put(nc->reg, cookie, ref);
	if (r == 0 && nc->feed) {
		struct member_entry e;
		if (members_lookup_key(nc->members, ref->key, &e) == -ENOENT) {
			enum reason why;
			(void)members_learn_filtered(nc->members, ref->pid, ref->key, &why, NULL);
		}
		if (!getenv("BENCH_NO_NOTE"))
			idpublish_note(nc->pub, cookie);
	}
	return r;
}

/* The feed's subscriber: reads and counts lines (a net-supervisor stand-in). */
static uint64_t feed_lines;
static void *feed_reader(void *arg)
{
	int fd = *(int *)arg;
	char buf[65536];
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < n; i++)
			feed_lines += buf[i] == '\n';
	return NULL;
}
static void b_release(void *u, struct procref *ref)
{
	(void)u;
	procref_close(ref);
}

/* The kernel mechanism's floor: RECV + SEND(CONTINUE) and nothing else. */
static void floor_loop(int lfd, int m)
{
	struct seccomp_notif_sizes sz;
	syscall(__NR_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz);
	struct seccomp_notif *req = calloc(1, sz.seccomp_notif > sizeof(*req) ? sz.seccomp_notif : sizeof(*req));
	struct seccomp_notif_resp *resp =
		calloc(1, sz.seccomp_notif_resp > sizeof(*resp) ? sz.seccomp_notif_resp : sizeof(*resp));
	__u64 fl = 1; /* SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP */
	ioctl(lfd, SECCOMP_IOW(4, __u64), &fl);
	for (int i = 0; i < m; i++) {
		memset(req, 0, sz.seccomp_notif);
		if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_RECV, req) < 0)
			break;
		memset(resp, 0, sz.seccomp_notif_resp);
		resp->id = req->id;
		resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
		ioctl(lfd, SECCOMP_IOCTL_NOTIF_SEND, resp);
	}
	free(req);
	free(resp);
}

static double thread_cpu_us(void)
{
	struct rusage r;
	getrusage(RUSAGE_THREAD, &r);
	return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 + (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

enum cmode { C_PLAIN, C_FLOOR, C_UVFLOOR, C_COLD, C_CACHED, C_FEED };
static const char *const mode_word[] = { "plain", "floor", "uvfloor", "cold", "cached", "feed" };

/* The floor on the libuv loop: RECV + SEND(CONTINUE) from a uv_poll callback. */
struct uvfloor {
	uv_poll_t poll;
	int fd;
	struct seccomp_notif *req;
	struct seccomp_notif_resp *resp;
	size_t req_size, resp_size;
	uint64_t n;
};
static void uvfloor_cb(uv_poll_t *h, int status, int events)
{
	struct uvfloor *u = h->data;
	if (status < 0 || (events & UV_DISCONNECT)) {
		uv_poll_stop(h);
		uv_close((uv_handle_t *)h, NULL);
		return;
	}
	memset(u->req, 0, u->req_size);
	if (ioctl(u->fd, SECCOMP_IOCTL_NOTIF_RECV, u->req) < 0)
		return;
	memset(u->resp, 0, u->resp_size);
	u->resp->id = u->req->id;
	u->resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
	ioctl(u->fd, SECCOMP_IOCTL_NOTIF_SEND, u->resp);
	u->n++;
}

/* What one connect run measured besides the caller's latencies. */
struct crun {
	double blocked_us;  /* notifier: mean RECV -> SEND call */
	double after_us;    /* notifier: mean after SEND */
	double sup_cpu_us;  /* CPU of the loop thread per notification */
	double child_cpu_us;
	uint64_t hits, misses, recorded;
	bool sync_wakeup;
};

static pid_t reap_pid;
static void on_child_exit(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	waitpid(reap_pid, NULL, 0); /* filters are released at reap: the listener then HUPs */
	uv_poll_stop(h);
	uv_close((uv_handle_t *)h, NULL);
}

static void bench_connect(int m, const struct workload_filter *f, struct nctx *nc, double *lat, enum cmode mode,
			  struct crun *cr)
{
	memset(cr, 0, sizeof(*cr));
	int sv[2], rep[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 || pipe2(rep, O_CLOEXEC) < 0)
		exit(1);
	/* The whole report fits in the pipe: the child never blocks on it
	 * while the loop (not reading it) serves its notifications. */
	if (fcntl(rep[1], F_SETPIPE_SZ, 1 << 20) < (int)(sizeof(double) * (size_t)(m + 1)))
		exit(1);
	bool filtered = mode != C_PLAIN;
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		close(rep[0]);
		if (filtered) {
			prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
			int lfd = workload_filter_install_listener(f);
			if (lfd < 0)
				_exit(5);
			union {
				struct cmsghdr h;
				char buf[CMSG_SPACE(sizeof(int))];
			} cm;
			memset(&cm, 0, sizeof(cm));
			char b = 'L';
			struct iovec iov = { &b, 1 };
			struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
					     .msg_controllen = sizeof(cm.buf) };
			struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &lfd, sizeof(int));
			if (sendmsg(sv[1], &mh, 0) != 1)
				_exit(6);
			close(lfd);
			if (read(sv[1], &b, 1) != 1)
				_exit(7);
		}
		child_connects(m, rep[1]);
	}
	close(sv[1]);
	close(rep[1]);
	if (!filtered) {
		read_all(rep[0], lat, sizeof(double) * (size_t)(m + 1));
		waitpid(pid, NULL, 0);
		close(sv[0]);
		close(rep[0]);
		cr->child_cpu_us = lat[m] / m;
		return;
	}
	char b;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = { &b, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
	if (recvmsg(sv[0], &mh, MSG_CMSG_CLOEXEC) != 1)
		exit(1);
	int lfd;
	memcpy(&lfd, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof(int));

	if (mode == C_FLOOR) {
		(void)!write(sv[0], "g", 1);
		double c0 = thread_cpu_us();
		floor_loop(lfd, m);
		cr->sup_cpu_us = (thread_cpu_us() - c0) / m;
		read_all(rep[0], lat, sizeof(double) * (size_t)(m + 1));
		waitpid(pid, NULL, 0);
		close(lfd);
		close(sv[0]);
		close(rep[0]);
		cr->child_cpu_us = lat[m] / m;
		return;
	}
	uv_loop_t loop;
	uv_loop_init(&loop);
	if (mode == C_UVFLOOR) {
		struct seccomp_notif_sizes sz;
		syscall(__NR_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz);
		struct uvfloor u = { .fd = lfd };
		u.req_size = sz.seccomp_notif > sizeof(*u.req) ? sz.seccomp_notif : sizeof(*u.req);
		u.resp_size = sz.seccomp_notif_resp > sizeof(*u.resp) ? sz.seccomp_notif_resp : sizeof(*u.resp);
		u.req = calloc(1, u.req_size);
		u.resp = calloc(1, u.resp_size);
		__u64 fl = 1; /* SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP */
		ioctl(lfd, SECCOMP_IOW(4, __u64), &fl);
		uv_poll_init(&loop, &u.poll, lfd);
		u.poll.data = &u;
		uv_poll_start(&u.poll, UV_READABLE | UV_DISCONNECT, uvfloor_cb);
		int pfd = sys_pidfd_open(pid, 0);
		uv_poll_t pp;
		reap_pid = pid;
		uv_poll_init(&loop, &pp, pfd);
		uv_poll_start(&pp, UV_READABLE, on_child_exit);
		(void)!write(sv[0], "g", 1);
		double c0 = thread_cpu_us();
		uv_run(&loop, UV_RUN_DEFAULT);
		cr->sup_cpu_us = (thread_cpu_us() - c0) / (double)(u.n ? u.n : 1);
		uv_loop_close(&loop);
		free(u.req);
		free(u.resp);
		read_all(rep[0], lat, sizeof(double) * (size_t)(m + 1));
		cr->child_cpu_us = lat[m] / m;
		close(lfd);
		close(pfd);
		close(sv[0]);
		close(rep[0]);
		return;
	}
	struct notifier *n;
	nc->feed = mode == C_FEED;
	struct notifier_ops ops = { .identify = notifier_identify_default, .record = b_record, .release = b_release,
				    .user = nc };
	if (notifier_new(&loop, &nc->caps, &ops, &n) < 0 || notifier_set_cache(n, mode == C_COLD ? 0 : NOTIFIER_CACHE_DEFAULT) < 0 ||
	    notifier_add_listener(n, lfd) < 0)
		exit(1);
	int pidfd = sys_pidfd_open(pid, 0);
	uv_poll_t pp;
	reap_pid = pid;
	uv_poll_init(&loop, &pp, pidfd);
	uv_poll_start(&pp, UV_READABLE, on_child_exit);
	(void)!write(sv[0], "g", 1);
	double c0 = thread_cpu_us();
	uv_run(&loop, UV_RUN_DEFAULT);
	double c1 = thread_cpu_us();
	const struct notifier_stats *st = notifier_stats(n);
	double k = st->notifications ? (double)st->notifications : 1;
	cr->sync_wakeup = st->sync_wakeup;
	cr->blocked_us = (double)st->handle_ns / 1e3 / k;
	cr->after_us = (double)st->after_ns / 1e3 / k;
	cr->sup_cpu_us = (c1 - c0) / k;
	cr->hits = st->cache_hits;
	cr->misses = st->cache_misses;
	cr->recorded = st->recorded;
	if (st->recorded != (uint64_t)m)
		fprintf(stderr, "warning: %llu of %d connects attributed\n", (unsigned long long)st->recorded, m);
	notifier_close(n);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	read_all(rep[0], lat, sizeof(double) * (size_t)(m + 1));
	cr->child_cpu_us = lat[m] / m;
	close(pidfd);
	close(sv[0]);
	close(rep[0]);
}

/* One row of the connect table, pooled over the rounds. */
struct crow {
	const char *name;
	enum cmode mode;
	int gap_us;         /* connects spaced this far apart (0: back to back) */
	double *all;        /* every latency of every round */
	size_t n;
	double rmed[64];    /* each round's median */
	struct crun sum;    /* summed over rounds */
};

static void crow_add(struct crow *r, const double *lat, int m, const struct crun *cr, int round)
{
	memcpy(r->all + r->n, lat, sizeof(double) * (size_t)m);
	r->n += (size_t)m;
	double *tmp = malloc(sizeof(double) * (size_t)m);
	memcpy(tmp, lat, sizeof(double) * (size_t)m);
	r->rmed[round] = pct(tmp, (size_t)m, 0.5);
	free(tmp);
	r->sum.blocked_us += cr->blocked_us;
	r->sum.after_us += cr->after_us;
	r->sum.sup_cpu_us += cr->sup_cpu_us;
	r->sum.child_cpu_us += cr->child_cpu_us;
	r->sum.hits += cr->hits;
	r->sum.misses += cr->misses;
	r->sum.recorded += cr->recorded;
	r->sum.sync_wakeup |= cr->sync_wakeup;
}

static void range_of(const double *v, int n, double *lo, double *hi)
{
	*lo = *hi = v[0];
	for (int i = 1; i < n; i++) {
		*lo = v[i] < *lo ? v[i] : *lo;
		*hi = v[i] > *hi ? v[i] : *hi;
	}
}

int main(int argc, char **argv)
{
	bool quick = false, connect_only = false;
	const char *only = NULL; /* floor|uvfloor|cold|cached|spaced: those rows (and plain) only, for profiling */
	/* The daemon's default. A fresh registry grows for its first `capacity`
	 * connects (each new entry touches fresh memory); a small one is soon
	 * at capacity, where entries are recycled (the steady state). */
	size_t registry_cap = 65536;
	int rounds = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--connect-only"))
			connect_only = true;
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else if (!strcmp(argv[i], "--registry") && i + 1 < argc)
			registry_cap = (size_t)strtoul(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: spawn_connect [--quick] [--connect-only] [--rounds N (1-64)] [--registry CAPACITY] "
				"[--only floor|uvfloor|cold|cached|feed|spaced]\n");
			return 2;
		}
	}
	if (rounds == 0)
		rounds = quick ? 1 : 3;
	if (rounds < 1 || rounds > 64 || registry_cap == 0) {
		fprintf(stderr, "spawn_connect: --rounds must be 1-64, --registry at least 1\n");
		return 2;
	}
	int n_spawn = quick ? 100 : 500, m = quick ? 1000 : 5000;
	struct nctx nc;
	if (kernel_caps_probe(&nc.caps) < 0)
		return 1;
	nc.reg = cookie_registry_new(registry_cap);

	struct workload_filter f;
	struct workload_filter_opts fo = { .notify_connect = true };
	if (workload_filter_build(&fo, &f) < 0)
		return 1;
	int ll = landlock_scope_ruleset();
	struct sandbox_cgroup cg;
	bool have_cg = sandbox_cgroup_setup(&nc.caps, CGROUP_MODE_AUTO, NULL, &cg) == 0;

	if (connect_only)
		goto connect;
	/* warm-up, then alternate to share any drift */
	bench_posix_spawn(20);
	bench_spawner(20, &f, ll, have_cg ? cg.workload_fd : -1);
	double sp = 0, ps = 0, spc = 0, psc = 0;
	for (int round = 0; round < 2; round++) {
		ps += bench_posix_spawn(n_spawn / 2);
		psc += spawn_cpu;
		sp += bench_spawner(n_spawn / 2, &f, ll, have_cg ? cg.workload_fd : -1);
		spc += spawn_cpu;
	}
	sp /= 2, ps /= 2, spc /= 2, psc /= 2;
	printf("spawn: spawner %.0f us/spawn (%.0f/s; seccomp+listener, landlock %s, cgroup %s), posix_spawn %.0f us/spawn "
	       "(%.0f/s); ratio %.2f (target <= 1.5)\n",
	       sp, 1e6 / sp, ll >= 0 ? "on" : "off", have_cg ? "on" : "off", ps, 1e6 / ps, sp / ps);
	printf("spawn CPU time (self + children): spawner %.0f us, posix_spawn %.0f us; ratio %.2f\n", spc, psc,
	       spc / psc);
connect:
	if (have_cg)
		sandbox_cgroup_remove(&cg);

	int srv = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(a);
	if (bind(srv, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(srv, 1024) < 0 ||
	    getsockname(srv, (struct sockaddr *)&a, &al) < 0)
		return 1;
	server_port = ntohs(a.sin_port);
	pthread_t st;
	pthread_create(&st, NULL, server_thread, &srv);
	/* The identity feed: we are the anchor of a table that learns the
	 * benchmark's children as the daemon learns its workload's. */
	struct procref self;
	uv_loop_t publoop;
	uv_loop_init(&publoop);
	char feedpath[64];
	snprintf(feedpath, sizeof(feedpath), "/tmp/spawn-connect-feed-%d.sock", (int)getpid());
	struct members_config mc = { .mode = MEMBERSHIP_LINEAGE };
	int feedfd = -1;
	pthread_t fr;
	if (procref_open(&nc.caps, getpid(), &self) < 0 || members_create(&nc.caps, &self, &mc, &nc.members) < 0)
		return 1;
	struct idpublish_opts po = { .path = feedpath, .caps = &nc.caps, .members = nc.members, .cookies = nc.reg,
				     .anchor = &self };
	if (idpublish_start(&publoop, &po, &nc.pub) < 0)
		return 1;
	{
		struct sockaddr_un su = { .sun_family = AF_UNIX };
		strscpy(su.sun_path, feedpath, sizeof(su.sun_path));
		feedfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (feedfd < 0 || connect(feedfd, (struct sockaddr *)&su, sizeof(su)) < 0)
			return 1;
		struct idpublish_stats pst;
		for (int i = 0; i < 1000; i++) {
			uv_run(&publoop, UV_RUN_NOWAIT);
			idpublish_get_stats(nc.pub, &pst);
			if (pst.subscribers)
				break;
			usleep(1000);
		}
		pthread_create(&fr, NULL, feed_reader, &feedfd);
	}
	struct crow rows[] = {
		{ .name = "plain connect (no filter)", .mode = C_PLAIN },
		{ .name = "kernel floor: RECV + SEND(CONTINUE) in a blocking loop, no attribution", .mode = C_FLOOR },
		{ .name = "libuv floor: RECV + SEND(CONTINUE) from a uv_poll callback, no attribution", .mode = C_UVFLOOR },
		{ .name = "notifier, caller cache off (every connect as a first connect: pidfd_open, fstat, getfd, "
		  "exe stat+readlink, ID_VALID, SO_COOKIE; SO_DOMAIN, close, full ProcessRef, registry after CONTINUE)",
		  .mode = C_COLD },
		{ .name = "notifier as the daemon runs it (caller cache: getfd, exe stat, ID_VALID, SO_COOKIE; "
		  "SO_DOMAIN, close, PIDFD_GET_INFO, registry after CONTINUE)",
		  .mode = C_CACHED },
		/* Spaced: each connect alone, as a workload's connects usually
		 * are; the work after CONTINUE cannot delay the next connect. */
		{ .name = "spaced 200 us apart: plain connect", .mode = C_PLAIN, .gap_us = 200 },
		{ .name = "spaced 200 us apart: kernel floor (blocking loop)", .mode = C_FLOOR, .gap_us = 200 },
		{ .name = "spaced 200 us apart: libuv floor", .mode = C_UVFLOOR, .gap_us = 200 },
		{ .name = "spaced 200 us apart: notifier, caller cache off (a first connect)", .mode = C_COLD, .gap_us = 200 },
		{ .name = "spaced 200 us apart: notifier as the daemon runs it", .mode = C_CACHED, .gap_us = 200 },
		/* The same with --identity-feed: the record step also queues the
		 * cookie; the feed's worker verifies and publishes concurrently. */
		{ .name = "notifier as the daemon runs it, with the identity feed (queue after CONTINUE; worker "
		  "verifies and publishes to one subscriber)", .mode = C_FEED },
		{ .name = "spaced 200 us apart: notifier with the identity feed", .mode = C_FEED, .gap_us = 200 },
	};
	const int nrows = (int)(sizeof(rows) / sizeof(rows[0]));
	double *lat = malloc(sizeof(double) * (size_t)(m + 1));
	for (int i = 0; i < nrows; i++)
		rows[i].all = malloc(sizeof(double) * (size_t)m * (size_t)rounds);
	struct crun cr;
	bench_connect(m / 10, NULL, &nc, lat, C_PLAIN, &cr); /* warm-up */
	bench_connect(m / 10, &f, &nc, lat, C_CACHED, &cr);
	/* Rounds alternate the rows so drift (other load) is shared. */
	for (int round = 0; round < rounds; round++)
		for (int i = 0; i < nrows; i++) {
			bool want = !only || i == 0 ||
				    (!strcmp(only, "spaced") ? rows[i].gap_us != 0
							     : rows[i].gap_us == 0 && !strcmp(only, mode_word[rows[i].mode]));
			if (!want)
				continue;
			connect_gap_us = rows[i].gap_us;
			bench_connect(m, rows[i].mode == C_PLAIN ? NULL : &f, &nc, lat, rows[i].mode, &cr);
			crow_add(&rows[i], lat, m, &cr, round);
		}
	printf("connect: %d loopback TCP connects per row and round, %d round(s), cookie registry capacity %zu; median and "
	       "p99 pooled over the rounds, [range of the round medians]\n",
	       m, rounds, registry_cap);
	for (int i = 0; i < nrows; i++) {
		struct crow *r = &rows[i];
		if (r->n == 0)
			continue;
		double pm = 0; /* the plain row with the same spacing */
		for (int j = 0; j < nrows; j++)
			if (rows[j].mode == C_PLAIN && rows[j].gap_us == r->gap_us && rows[j].n)
				pm = pct(rows[j].all, rows[j].n, 0.5);
		double med = pct(r->all, r->n, 0.5), p99 = pct(r->all, r->n, 0.99), lo, hi;
		range_of(r->rmed, rounds, &lo, &hi);
		printf("  %s:\n    median %.1f us [%.1f-%.1f] p99 %.1f us", r->name, med, lo, hi, p99);
		if (r->mode != C_PLAIN)
			printf("; added median %.1f us [%.1f-%.1f]%s", med - pm, lo - pm, hi - pm,
			       r->mode == C_CACHED || r->mode == C_FEED ? " (target <= 25)" : "");
		printf("\n    CPU per connect: caller %.1f us", r->sum.child_cpu_us / rounds);
		if (r->mode != C_PLAIN)
			printf(", supervisor loop thread %.1f us", r->sum.sup_cpu_us / rounds);
		if (r->mode == C_COLD || r->mode == C_CACHED || r->mode == C_FEED)
			printf("; caller blocked in the handler %.1f us mean, after CONTINUE %.1f us mean; cache hits %llu "
			       "misses %llu; recorded %llu of %d",
			       r->sum.blocked_us / rounds, r->sum.after_us / rounds, (unsigned long long)r->sum.hits,
			       (unsigned long long)r->sum.misses, (unsigned long long)r->sum.recorded, m * rounds);
		printf("\n");
	}
	printf("  sync_wakeup %s\n", rows[nrows - 1].sum.sync_wakeup ? "on" : "off");
	{
		struct idpublish_stats pst;
		idpublish_get_stats(nc.pub, &pst);
		printf("  identity feed: %llu cookies queued, %llu published, %llu refused, %llu dropped (queue full); "
		       "worker %.1f us per identity (wall); %llu lines read by the subscriber\n",
		       (unsigned long long)pst.noted, (unsigned long long)pst.published, (unsigned long long)pst.refused,
		       (unsigned long long)pst.dropped, pst.noted ? (double)pst.verify_ns / 1e3 / (double)pst.noted : 0.0,
		       (unsigned long long)feed_lines);
	}
	free(lat);
	for (int i = 0; i < nrows; i++)
		free(rows[i].all);
	double la[3];
	if (getloadavg(la, 3) == 3)
		printf("load average during the run: %.2f (nproc %ld)\n", la[0], sysconf(_SC_NPROCESSORS_ONLN));
	server_stop = 1;
	pthread_join(st, NULL);
	idpublish_stop(nc.pub);
	uv_run(&publoop, UV_RUN_DEFAULT);
	uv_loop_close(&publoop);
	pthread_join(fr, NULL);
	close(feedfd);
	members_free(nc.members);
	procref_close(&self);
	close(srv);
	workload_filter_free(&f);
	if (ll >= 0)
		close(ll);
	cookie_registry_free(nc.reg);
	return 0;
}
