/* spawn_connect: the proc-supervisor's two hot paths, measured in one run.
 *
 *  spawn:   N spawns of /bin/true through spawn_process() (clone3 + pidfd,
 *           signal reset, fd closing, no_new_privs, RLIMIT_CORE, Landlock
 *           scope, the workload seccomp filter with its listener handed over
 *           SCM_RIGHTS, execve; plus CLONE_INTO_CGROUP when cgroup v2 is
 *           writable) vs N posix_spawn() of the same program, each followed
 *           by waitpid. Prints both rates and the ratio (target <= 1.5).
 *  connect: M loopback TCP connects by a child process without a filter vs
 *           with the workload filter, its listener served by the real
 *           notifier on a libuv loop (pidfd_open, key, exe tuple, ID_VALID,
 *           pidfd_getfd, SO_COOKIE, CONTINUE, then the ProcessRef and the
 *           cookie registry). Prints median and p99 of each and the added
 *           median (target <= 25 us), and the CPU time of both sides.
 *
 * Usage: spawn_connect [--quick]   (root: Landlock/cgroup need no root,
 * CLONE_INTO_CGROUP does) */
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
};
static int b_record(void *u, uint64_t cookie, const struct procref *ref)
{
	return cookie_registry_put(((struct nctx *)u)->reg, cookie, ref);
}
/* The mechanism alone: key from fstat(pidfd) (pidfs inode), no procfs. */
static int b_identify_min(void *u, const struct kernel_caps *caps, int pidfd, struct procref *out)
{
	struct stat st;
	if (fstat(pidfd, &st) < 0)
		return -errno;
	memset(out, 0, sizeof(*out));
	out->pidfd = -1;
	out->pidfs_ino = st.st_ino;
	snprintf(out->key, sizeof(out->key), "%s:%llu", caps->boot_id, (unsigned long long)st.st_ino);
	return 0;
}
static void b_release(void *u, struct procref *ref)
{
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

static pid_t reap_pid;
static bool sync_wakeup;
static double handler_us; /* mean time the supervisor holds a notification */
static double handler_cpu_us; /* the same in CPU time */
static void on_child_exit(uv_poll_t *h, int status, int events)
{
	waitpid(reap_pid, NULL, 0); /* filters are released at reap: the listener then HUPs */
	uv_poll_stop(h);
	uv_close((uv_handle_t *)h, NULL);
}

static void bench_connect(int m, const struct workload_filter *f, struct nctx *nc, double *lat, bool minimal,
			  bool floor_only)
{
	int sv[2], rep[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 || pipe2(rep, O_CLOEXEC) < 0)
		exit(1);
	/* The whole report fits in the pipe: the child never blocks on it
	 * while the loop (not reading it) serves its notifications. */
	if (fcntl(rep[1], F_SETPIPE_SZ, 1 << 20) < (int)(sizeof(double) * (size_t)(m + 1)))
		exit(1);
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		close(rep[0]);
		if (f) {
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
	if (!f) {
		read_all(rep[0], lat, sizeof(double) * (size_t)(m + 1));
		waitpid(pid, NULL, 0);
		close(sv[0]);
		close(rep[0]);
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

	if (floor_only) {
		(void)!write(sv[0], "g", 1);
		floor_loop(lfd, m);
		read_all(rep[0], lat, sizeof(double) * (size_t)(m + 1));
		waitpid(pid, NULL, 0);
		close(lfd);
		close(sv[0]);
		close(rep[0]);
		return;
	}
	uv_loop_t loop;
	uv_loop_init(&loop);
	struct notifier *n;
	struct notifier_ops ops = { .identify = minimal ? b_identify_min : notifier_identify_default,
				    .record = b_record, .release = b_release, .user = nc };
	if (notifier_new(&loop, &nc->caps, &ops, &n) < 0 || notifier_add_listener(n, lfd) < 0)
		exit(1);
	int pidfd = sys_pidfd_open(pid, 0);
	uv_poll_t pp;
	reap_pid = pid;
	uv_poll_init(&loop, &pp, pidfd);
	uv_poll_start(&pp, UV_READABLE, on_child_exit);
	(void)!write(sv[0], "g", 1);
	uv_run(&loop, UV_RUN_DEFAULT);
	const struct notifier_stats *st = notifier_stats(n);
	sync_wakeup = st->sync_wakeup;
	handler_us = st->notifications ? (double)st->handle_ns / 1e3 / (double)st->notifications : 0;
	handler_cpu_us = st->notifications ? (double)st->handle_cpu_ns / 1e3 / (double)st->notifications : 0;
	if (st->recorded != (uint64_t)m)
		fprintf(stderr, "warning: %llu of %d connects attributed\n", (unsigned long long)st->recorded, m);
	notifier_close(n);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	read_all(rep[0], lat, sizeof(double) * (size_t)(m + 1));
	close(pidfd);
	close(sv[0]);
	close(rep[0]);
}

int main(int argc, char **argv)
{
	bool quick = argc > 1 && !strcmp(argv[1], "--quick");
	int n_spawn = quick ? 100 : 500, m = quick ? 1000 : 5000;
	struct nctx nc;
	if (kernel_caps_probe(&nc.caps) < 0)
		return 1;
	nc.reg = cookie_registry_new(65536);

	struct workload_filter f;
	struct workload_filter_opts fo = { .notify_connect = true };
	if (workload_filter_build(&fo, &f) < 0)
		return 1;
	int ll = landlock_scope_ruleset();
	struct sandbox_cgroup cg;
	bool have_cg = sandbox_cgroup_setup(&nc.caps, CGROUP_MODE_AUTO, NULL, &cg) == 0;

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
	double *plain = malloc(sizeof(double) * (size_t)(m + 1)), *noti = malloc(sizeof(double) * (size_t)(m + 1));
	double *mini = malloc(sizeof(double) * (size_t)(m + 1));
	double *flo = malloc(sizeof(double) * (size_t)(m + 1));
	bench_connect(m / 10, NULL, &nc, plain, false, false); /* warm-up */
	bench_connect(m, NULL, &nc, plain, false, false);
	bench_connect(m, &f, &nc, flo, false, true);
	bench_connect(m, &f, &nc, mini, true, false);
	double mech_handler = handler_us, mech_cpu = handler_cpu_us;
	bench_connect(m, &f, &nc, noti, false, false);
	/* the child's own CPU per connect (sent after its latencies), before sorting */
	double plain_cpu = plain[m] / m, noti_cpu = noti[m] / m;
	double pm = pct(plain, (size_t)m, 0.5), p99 = pct(plain, (size_t)m, 0.99);
	double nm = pct(noti, (size_t)m, 0.5), n99 = pct(noti, (size_t)m, 0.99);
	double mm = pct(mini, (size_t)m, 0.5), m99 = pct(mini, (size_t)m, 0.99);
	double fm = pct(flo, (size_t)m, 0.5), f99 = pct(flo, (size_t)m, 0.99);
	printf("connect (kernel floor: RECV + SEND CONTINUE only, blocking loop, no attribution): median %.1f us "
	       "p99 %.1f us; added median %.1f us\n", fm, f99, fm - pm);
	free(flo);
	printf("connect (mechanism only: the daemon's blocked phase - pidfd, key, exe stat+readlink, ID_VALID, "
	       "pidfd_getfd, SO_COOKIE, CONTINUE - but no ref completion after it): "
	       "median %.1f us p99 %.1f us; added median %.1f us; caller blocked %.1f us mean\n",
	       mm, m99, mm - pm, mech_handler);
	printf("connect CPU time per connect: caller plain %.1f us, caller notified %.1f us, supervisor handler %.1f us "
	       "(mechanism only %.1f us); added CPU %.1f us\n",
	       plain_cpu, noti_cpu, handler_cpu_us, mech_cpu, noti_cpu - plain_cpu + handler_cpu_us);
	free(mini);
	printf("connect: plain median %.1f us p99 %.1f us; notified median %.1f us p99 %.1f us; added median %.1f us "
	       "(target <= 25) p99 %.1f us; caller blocked in the handler %.1f us mean (M=%d, sync_wakeup %s)\n",
	       pm, p99, nm, n99, nm - pm, n99 - p99, handler_us, m, sync_wakeup ? "on" : "off");
	double la[3];
	if (getloadavg(la, 3) == 3)
		printf("load average during the run: %.2f (nproc %ld)\n", la[0], sysconf(_SC_NPROCESSORS_ONLN));
	server_stop = 1;
	pthread_join(st, NULL);
	close(srv);
	free(plain);
	free(noti);
	workload_filter_free(&f);
	if (ll >= 0)
		close(ll);
	cookie_registry_free(nc.reg);
	return 0;
}
