/* The connect notifier through its API, with real processes:
 *  - attribution: a child under the workload filter connects (main thread
 *    and a second thread); the recorded cookie is the child's socket's and
 *    the ref is the child's process; non-inet and bad fds just continue;
 *  - fail closed: with the listener closed, the child's connect is ENOSYS;
 *  - the libuv path: a watched listener records and then closes by itself
 *    when its process tree is gone. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/kernel.h"
#include "common/util.h"
#include "notify_harness.h"
#include "tests/common/check.h"
#include "tests/common/loopback.h"

static int server_port;

struct child_report {
	int main_r, thread_r, unix_r, badfd_r;
	uint64_t main_cookie, thread_cookie;
};

static void *thread_connect(void *a)
{
	struct child_report *rep = a;
	rep->thread_r = loopback_connect(server_port, &rep->thread_cookie);
	return NULL;
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
		notify_child_setup(f, sv[1]);
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
	rep->main_r = loopback_connect(server_port, &rep->main_cookie);
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
	rep->main_r = loopback_connect(server_port, &rep->main_cookie);
}

static int read_report(int sock, struct child_report *rep)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	if (poll(&p, 1, 10000) != 1)
		return -ETIMEDOUT;
	return read(sock, rep, sizeof(*rep)) == (ssize_t)sizeof(*rep) ? 0 : -EIO;
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
	struct notify_world w;
	if (notify_world_open(&w, notify_rec_identify) < 0)
		return 1;
	server_port = w.port;
	struct notifier *n = w.n;

	/* 1. attribution, synchronously */
	int sock;
	pid_t pid = start_child(&w.f, &sock, body_attrib);
	int lfd = notify_recv_listener(sock);
	CHECK(lfd >= 0, "no listener received");
	(void)!write(sock, "g", 1);
	CHECK(notify_handle_n(n, lfd, 4) == 0, "handling 4 notifications");
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
	CHECK(w.rec.n == 2, "records %d", w.rec.n);
	CHECK(w.rec.cookie[0] == rep.main_cookie && rep.main_cookie != 0, "main cookie %llu vs %llu",
	      (unsigned long long)w.rec.cookie[0], (unsigned long long)rep.main_cookie);
	CHECK(w.rec.cookie[1] == rep.thread_cookie, "thread cookie");
	CHECK(w.rec.pid[0] == pid && w.rec.pid[1] == pid, "pids %d %d, child %d", w.rec.pid[0], w.rec.pid[1], pid);
	CHECK(strcmp(w.rec.key[0], w.rec.key[1]) == 0, "thread and main keys differ");
	waitpid(pid, NULL, 0);
	close(sock);
	close(lfd);

	/* 2. fail closed: no listener => ENOSYS */
	pid = start_child(&w.f, &sock, body_one);
	lfd = notify_recv_listener(sock);
	CHECK(lfd >= 0, "no listener (2)");
	close(lfd); /* the supervisor is "gone" */
	(void)!write(sock, "g", 1);
	CHECK(read_report(sock, &rep) == 0, "no report (2)");
	CHECK(rep.main_r == -ENOSYS, "connect without listener: %d (want ENOSYS)", rep.main_r);
	waitpid(pid, NULL, 0);
	close(sock);

	/* 3. the libuv path; the listener closes itself when the tree is gone */
	w.rec.n = 0;
	pid = start_child(&w.f, &sock, body_one);
	lfd = notify_recv_listener(sock);
	CHECK(notifier_add_listener(n, lfd) == 0, "add listener");
	CHECK(notifier_stats(n)->listeners == 1, "listeners");
	(void)!write(sock, "g", 1);
	reap_pid = pid;
	int pidfd = sys_pidfd_open(pid, 0);
	uv_poll_t pp;
	uv_poll_init(&w.loop, &pp, pidfd);
	uv_poll_start(&pp, UV_READABLE, on_pidfd);
	uv_timer_t t;
	uv_timer_init(&w.loop, &t);
	uv_timer_start(&t, on_timeout, 10000, 0);
	uv_unref((uv_handle_t *)&t);
	uv_run(&w.loop, UV_RUN_DEFAULT); /* ends when the listener closes (or the timer) */
	CHECK(read_report(sock, &rep) == 0, "no report (3)");
	CHECK(rep.main_r == 0, "connect (3) %d", rep.main_r);
	CHECK(w.rec.n == 1 && w.rec.cookie[0] == rep.main_cookie && w.rec.pid[0] == pid, "uv record");
	CHECK(notifier_stats(n)->listeners == 0, "listener not closed on POLLHUP");
	close(pidfd);
	close(sock);

	/* 4. the caller gone before its ref is completed (fast path only):
	 * recorded with the key, pid and image proven while it was blocked. */
	if (w.caps.pidfs_ino) {
		w.rec.n = 0;
		w.rec.fail_identify = true;
		uint64_t partial0 = notifier_stats(n)->late_partial;
		pid = start_child(&w.f, &sock, body_one);
		lfd = notify_recv_listener(sock);
		(void)!write(sock, "g", 1);
		CHECK(notify_handle_n(n, lfd, 1) == 0, "handling (4)");
		CHECK(read_report(sock, &rep) == 0, "no report (4)");
		CHECK(w.rec.n == 1 && w.rec.cookie[0] == rep.main_cookie && w.rec.pid[0] == pid, "partial record");
		const char *slash = strrchr(w.rec.exe[0], '/');
		const char *exe = slash ? slash + 1 : w.rec.exe[0];
		CHECK(strcmp(exe, "test_procsup_notify") == 0, "partial exe '%s'", exe);
		CHECK(strchr(w.rec.key[0], ':') != NULL && strchr(w.rec.key[0], ':') == strrchr(w.rec.key[0], ':'),
		      "partial key '%s' is not <boot_id>:<ino>", w.rec.key[0]);
		CHECK(notifier_stats(n)->late_partial == partial0 + 1, "late_partial %llu",
		      (unsigned long long)notifier_stats(n)->late_partial);
		waitpid(pid, NULL, 0);
		close(sock);
		close(lfd);
		w.rec.fail_identify = false;
	}

	uv_close((uv_handle_t *)&t, NULL);
	notify_world_close(&w);
	if (failures)
		fprintf(stderr, "%d failure(s)\n", failures);
	else
		printf("test_notify: all checks passed\n");
	return failures ? 1 : 0;
}
