/* The connect notifier through its API, with real processes:
 *  - attribution: a child under the workload filter connects (main thread
 *    and a second thread); the recorded cookie is the child's socket's and
 *    the ref is the child's process; non-inet and bad fds just continue;
 *  - fail closed: with the listener closed, the child's connect is ENOSYS;
 *  - the libuv path: a watched listener records and then closes by itself
 *    when its process tree is gone. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/kernel.h"
#include "common/util.h"
#include "identity/procref.h"
#include "proc-supervisor/notify.h"
#include "proc-supervisor/seccomp.h"

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

static int failures;
#define CHECK(cond, ...)                                                                      \
	do {                                                                                  \
		if (!(cond)) {                                                                \
			failures++;                                                           \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);       \
			fprintf(stderr, __VA_ARGS__);                                         \
			fputc('\n', stderr);                                                  \
		}                                                                             \
	} while (0)

struct rec {
	int n;
	uint64_t cookie[8];
	pid_t pid[8];
	char key[8][PROCREF_KEY_MAX];
	char exe[8][64];
	bool fail_identify; /* simulate a caller gone before its ref is completed */
};

static int t_identify(void *u, const struct kernel_caps *caps, int pidfd, struct procref *out)
{
	if (((struct rec *)u)->fail_identify)
		return -ESRCH;
	return procref_from_pidfd(caps, pidfd, out);
}
static int t_record(void *u, uint64_t cookie, const struct procref *ref)
{
	struct rec *r = u;
	if (r->n >= 8)
		return -ENOSPC;
	r->cookie[r->n] = cookie;
	r->pid[r->n] = ref->pid;
	strscpy(r->key[r->n], ref->key, sizeof(r->key[0]));
	const char *slash = strrchr(ref->exe.path, '/');
	strscpy(r->exe[r->n], slash ? slash + 1 : ref->exe.path, sizeof(r->exe[0]));
	r->n++;
	return 0;
}
static void t_release(void *u, struct procref *ref)
{
	procref_close(ref);
}

static int server_port;

static int loopback_connect(uint64_t *cookie)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)server_port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	socklen_t l = sizeof(*cookie);
	getsockopt(fd, SOL_SOCKET, SO_COOKIE, cookie, &l);
	close(fd);
	return 0;
}

struct child_report {
	int main_r, thread_r, unix_r, badfd_r;
	uint64_t main_cookie, thread_cookie;
};

static void *thread_connect(void *a)
{
	struct child_report *rep = a;
	rep->thread_r = loopback_connect(&rep->thread_cookie);
	return NULL;
}

static void send_fd(int sock, int fd)
{
	char b = 'L';
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} cm;
	memset(&cm, 0, sizeof(cm));
	struct iovec iov = { &b, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	if (sendmsg(sock, &mh, 0) != 1)
		_exit(90);
}

static int recv_fd(int sock)
{
	char b;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = { &b, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
	struct pollfd p = { .fd = sock, .events = POLLIN };
	if (poll(&p, 1, 5000) != 1 || recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	int fd = -1;
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

/* Fork a child that installs the filter, hands over its listener, waits
 * for "go", runs `body` and writes its report to the socket. */
static pid_t start_child(const struct workload_filter *f, int *sock_out, void (*body)(struct child_report *))
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
			_exit(91);
		int lfd = workload_filter_install_listener(f);
		if (lfd < 0)
			_exit(92);
		send_fd(sv[1], lfd);
		close(lfd);
		char go;
		if (read(sv[1], &go, 1) != 1)
			_exit(93);
		struct child_report rep;
		memset(&rep, 0, sizeof(rep));
		body(&rep);
		(void)!write(sv[1], &rep, sizeof(rep));
		_exit(0);
	}
	close(sv[1]);
	*sock_out = sv[0];
	return pid;
}

static void body_attrib(struct child_report *rep)
{
	rep->main_r = loopback_connect(&rep->main_cookie);
	pthread_t t;
	if (pthread_create(&t, NULL, thread_connect, rep) == 0)
		pthread_join(t, NULL);
	int u = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strcpy(sa.sun_path, "/nonexistent/tether-test.sock");
	rep->unix_r = connect(u, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	close(u);
	struct sockaddr_in a = { .sin_family = AF_INET };
	rep->badfd_r = connect(987, (struct sockaddr *)&a, sizeof(a)) < 0 ? -errno : 0;
}

static void body_one(struct child_report *rep)
{
	rep->main_r = loopback_connect(&rep->main_cookie);
}

static int read_report(int sock, struct child_report *rep)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	if (poll(&p, 1, 10000) != 1)
		return -ETIMEDOUT;
	return read(sock, rep, sizeof(*rep)) == (ssize_t)sizeof(*rep) ? 0 : -EIO;
}

static int handle_n(struct notifier *n, int lfd, int count)
{
	for (int i = 0; i < count; i++) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		if (poll(&p, 1, 10000) != 1 || !(p.revents & POLLIN))
			return -ETIMEDOUT;
		int r = notifier_handle(n, lfd);
		if (r < 0)
			return r;
	}
	return 0;
}

static pid_t reap_pid;
static void on_pidfd(uv_poll_t *h, int status, int events)
{
	/* Filters are released when the task is reaped; only then does the
	 * listener report POLLHUP. */
	waitpid(reap_pid, NULL, 0);
	uv_poll_stop(h);
	uv_close((uv_handle_t *)h, NULL);
}

static void on_timeout(uv_timer_t *t)
{
	uv_stop(t->loop);
}

int main(void)
{
	struct kernel_caps caps;
	if (kernel_caps_probe(&caps) < 0)
		return 1;
	int srv = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(a);
	if (bind(srv, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(srv, 64) < 0 ||
	    getsockname(srv, (struct sockaddr *)&a, &al) < 0)
		return perror("listen"), 1;
	server_port = ntohs(a.sin_port);

	struct workload_filter f;
	struct workload_filter_opts fo = { .notify_connect = true };
	if (workload_filter_build(&fo, &f) < 0)
		return fprintf(stderr, "filter build failed\n"), 1;

	uv_loop_t loop;
	uv_loop_init(&loop);
	struct rec rec;
	memset(&rec, 0, sizeof(rec));
	struct notifier_ops ops = { .identify = t_identify, .record = t_record, .release = t_release, .user = &rec };
	struct notifier *n;
	CHECK(notifier_new(&loop, &caps, &ops, &n) == 0, "notifier_new");

	/* 1. attribution, synchronously */
	int sock;
	pid_t pid = start_child(&f, &sock, body_attrib);
	int lfd = recv_fd(sock);
	CHECK(lfd >= 0, "no listener received");
	(void)!write(sock, "g", 1);
	CHECK(handle_n(n, lfd, 4) == 0, "handling 4 notifications");
	struct child_report rep;
	CHECK(read_report(sock, &rep) == 0, "no report");
	CHECK(rep.main_r == 0, "main connect %d", rep.main_r);
	CHECK(rep.thread_r == 0, "thread connect %d", rep.thread_r);
	CHECK(rep.unix_r == -ENOENT, "unix connect %d", rep.unix_r);
	CHECK(rep.badfd_r == -EBADF, "bad fd connect %d", rep.badfd_r);
	const struct notifier_stats *st = notifier_stats(n);
	CHECK(st->notifications == 4, "notifications %llu", (unsigned long long)st->notifications);
	CHECK(st->recorded == 2, "recorded %llu", (unsigned long long)st->recorded);
	CHECK(st->not_inet == 2, "not_inet %llu", (unsigned long long)st->not_inet);
	CHECK(rec.n == 2, "records %d", rec.n);
	CHECK(rec.cookie[0] == rep.main_cookie && rep.main_cookie != 0, "main cookie %llu vs %llu",
	      (unsigned long long)rec.cookie[0], (unsigned long long)rep.main_cookie);
	CHECK(rec.cookie[1] == rep.thread_cookie, "thread cookie");
	CHECK(rec.pid[0] == pid && rec.pid[1] == pid, "pids %d %d, child %d", rec.pid[0], rec.pid[1], pid);
	CHECK(strcmp(rec.key[0], rec.key[1]) == 0, "thread and main keys differ");
	waitpid(pid, NULL, 0);
	close(sock);
	close(lfd);

	/* 2. fail closed: no listener => ENOSYS */
	pid = start_child(&f, &sock, body_one);
	lfd = recv_fd(sock);
	CHECK(lfd >= 0, "no listener (2)");
	close(lfd); /* the supervisor is "gone" */
	(void)!write(sock, "g", 1);
	CHECK(read_report(sock, &rep) == 0, "no report (2)");
	CHECK(rep.main_r == -ENOSYS, "connect without listener: %d (want ENOSYS)", rep.main_r);
	waitpid(pid, NULL, 0);
	close(sock);

	/* 3. the libuv path; the listener closes itself when the tree is gone */
	rec.n = 0;
	pid = start_child(&f, &sock, body_one);
	lfd = recv_fd(sock);
	CHECK(notifier_add_listener(n, lfd) == 0, "add listener");
	CHECK(notifier_stats(n)->listeners == 1, "listeners");
	(void)!write(sock, "g", 1);
	reap_pid = pid;
	int pidfd = sys_pidfd_open(pid, 0);
	uv_poll_t pp;
	uv_poll_init(&loop, &pp, pidfd);
	uv_poll_start(&pp, UV_READABLE, on_pidfd);
	uv_timer_t t;
	uv_timer_init(&loop, &t);
	uv_timer_start(&t, on_timeout, 10000, 0);
	uv_unref((uv_handle_t *)&t);
	uv_run(&loop, UV_RUN_DEFAULT); /* ends when the listener closes (or the timer) */
	CHECK(read_report(sock, &rep) == 0, "no report (3)");
	CHECK(rep.main_r == 0, "connect (3) %d", rep.main_r);
	CHECK(rec.n == 1 && rec.cookie[0] == rep.main_cookie && rec.pid[0] == pid, "uv record");
	CHECK(notifier_stats(n)->listeners == 0, "listener not closed on POLLHUP");
	close(pidfd);
	close(sock);

	/* 4. the caller gone before its ref is completed (fast path only):
	 * recorded with the key, pid and image proven while it was blocked. */
	if (caps.pidfs_ino) {
		rec.n = 0;
		rec.fail_identify = true;
		uint64_t partial0 = notifier_stats(n)->late_partial;
		pid = start_child(&f, &sock, body_one);
		lfd = recv_fd(sock);
		(void)!write(sock, "g", 1);
		CHECK(handle_n(n, lfd, 1) == 0, "handling (4)");
		CHECK(read_report(sock, &rep) == 0, "no report (4)");
		CHECK(rec.n == 1 && rec.cookie[0] == rep.main_cookie && rec.pid[0] == pid, "partial record");
		CHECK(strcmp(rec.exe[0], "test_procsup_notify") == 0, "partial exe '%s'", rec.exe[0]);
		CHECK(strchr(rec.key[0], ':') != NULL && strchr(rec.key[0], ':') == strrchr(rec.key[0], ':'),
		      "partial key '%s' is not <boot_id>:<ino>", rec.key[0]);
		CHECK(notifier_stats(n)->late_partial == partial0 + 1, "late_partial %llu",
		      (unsigned long long)notifier_stats(n)->late_partial);
		waitpid(pid, NULL, 0);
		close(sock);
		close(lfd);
		rec.fail_identify = false;
	}

	notifier_close(n);
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	workload_filter_free(&f);
	close(srv);
	if (failures)
		fprintf(stderr, "%d failure(s)\n", failures);
	else
		printf("test_notify: all checks passed\n");
	return failures ? 1 : 0;
}
