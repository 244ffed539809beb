/* The connect notifier through its API, with real processes:
 *  - attribution: a child under the workload filter connects (main thread
 *    and a second thread); the recorded cookie is the child's socket's and
 *    the ref is the child's process; non-inet and bad fds just continue;
 *  - fail closed: with the listener closed, the child's connect is ENOSYS;
 *  - the libuv path: a watched listener records and then closes by itself
 *    when its process tree is gone;
 *  - bypass reports: a connect to an inet destination neither loopback nor
 *    allowed is handed to ops.bypass with its address and the caller's ref;
 *    the allowed one, its port on the other family, loopback are not (UDP
 *    connects to TEST-NET: no packet is sent). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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

static int udp_connect(int fam, const char *ip, int port)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	if (fam == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		inet_pton(AF_INET, ip, &a->sin_addr);
		len = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		inet_pton(AF_INET6, ip, &a->sin6_addr);
		len = sizeof(*a);
	}
	int fd = socket(fam, SOCK_DGRAM, 0);
	if (fd < 0)
		return -errno;
	int r = connect(fd, (struct sockaddr *)&ss, len) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* 192.0.2.1:9 is a bypass; 192.0.2.2:3128 the proxy; [2001:db8::5]:3128
 * the proxy's port on the other family; 127.0.0.1:9 loopback. */
static void body_bypass(struct child_report *rep)
{
	rep->main_r = udp_connect(AF_INET, "192.0.2.1", 9);
	rep->thread_r = udp_connect(AF_INET, "192.0.2.2", 3128);
	rep->unix_r = udp_connect(AF_INET6, "2001:db8::5", 3128);
	rep->badfd_r = udp_connect(AF_INET, "127.0.0.1", 9);
}

static struct {
	int n;
	char addr[64];
	int port, sotype;
	pid_t pid;
} bypassed;

static void on_bypass(void *user, const struct sockaddr_storage *dst, int sotype, const struct procref *ref)
{
	(void)user;
	bypassed.n++;
	const struct sockaddr_in *a = (const struct sockaddr_in *)dst;
	if (dst->ss_family == AF_INET) {
		inet_ntop(AF_INET, &a->sin_addr, bypassed.addr, sizeof(bypassed.addr));
		bypassed.port = ntohs(a->sin_port);
	} else {
		snprintf(bypassed.addr, sizeof(bypassed.addr), "family %d", dst->ss_family);
	}
	bypassed.sotype = sotype;
	bypassed.pid = ref ? ref->pid : -1;
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

	/* 5. bypass reports, on a notifier with ops.bypass and the proxy allowed */
	{
		struct notifier_ops ops = { .identify = notify_rec_identify, .record = notify_rec_record,
					    .release = notify_rec_release, .user = &w.rec, .bypass = on_bypass };
		struct notifier *nb = NULL;
		CHECK(notifier_new(&w.loop, &w.caps, &ops, &nb) == 0, "bypass notifier");
		struct sockaddr_in proxy = { .sin_family = AF_INET, .sin_port = htons(3128) };
		inet_pton(AF_INET, "192.0.2.2", &proxy.sin_addr);
		struct sockaddr_in6 any6 = { .sin6_family = AF_INET6, .sin6_port = htons(3128) };
		CHECK(notifier_allow_destination(nb, (struct sockaddr *)&proxy, sizeof(proxy)) == 0, "allow proxy");
		CHECK(notifier_allow_destination(nb, (struct sockaddr *)&any6, sizeof(any6)) == 0, "allow v6 port");
		w.rec.n = 0;
		pid = start_child(&w.f, &sock, body_bypass);
		lfd = notify_recv_listener(sock);
		CHECK(lfd >= 0, "no listener (5)");
		(void)!write(sock, "g", 1);
		CHECK(notify_handle_n(nb, lfd, 4) == 0, "handling (5)");
		CHECK(read_report(sock, &rep) == 0, "no report (5)");
		CHECK(rep.main_r == 0 && rep.thread_r == 0 && rep.badfd_r == 0, "udp connects %d %d %d", rep.main_r,
		      rep.thread_r, rep.badfd_r);
		CHECK(bypassed.n == 1, "bypass reports %d (want 1: 192.0.2.1:9 only)", bypassed.n);
		CHECK(strcmp(bypassed.addr, "192.0.2.1") == 0 && bypassed.port == 9, "reported %s:%d", bypassed.addr,
		      bypassed.port);
		CHECK(bypassed.sotype == SOCK_DGRAM, "sotype %d", bypassed.sotype);
		CHECK(bypassed.pid == pid, "reported pid %d, child %d", (int)bypassed.pid, (int)pid);
		CHECK(notifier_stats(nb)->bypass_attempts == 1, "bypass_attempts %llu",
		      (unsigned long long)notifier_stats(nb)->bypass_attempts);
		waitpid(pid, NULL, 0);
		close(sock);
		close(lfd);
		notifier_close(nb);
		uv_run(&w.loop, UV_RUN_NOWAIT);
	}

	uv_close((uv_handle_t *)&t, NULL);
	notify_world_close(&w);
	if (failures)
		fprintf(stderr, "%d failure(s)\n", failures);
	else
		printf("test_notify: all checks passed\n");
	return failures ? 1 : 0;
}
