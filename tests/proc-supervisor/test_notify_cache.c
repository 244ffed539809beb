/* The notifier's caller cache must never record a stale identity or image:
 *  1. exec between connects: a process connects twice (the second from the
 *     cache), then execs a different binary (a copy of this one: another
 *     inode and path) and connects again. Each connect is recorded with the
 *     image it ran at that connect, and all three with the same key.
 *  2. exec by a non-leader thread: the main thread and a second thread
 *     connect, the second thread execs the copy (it becomes the leader,
 *     same process) and the new image connects: recorded with the copy.
 *  3. tid reuse: a process connects (cached) and exits; a new process is
 *     created with the very same pid (clone3 set_tid) and connects: it is
 *     recorded with its own key, never the cached one.
 *  4. the cache off records the same as the cache on.
 * The same binary runs with TETHER_FORCE_FALLBACK=all (no cache: the slow
 * path) where 1, 2 and 4 must hold as well.
 *
 * `test_procsup_notify_cache --child-connect PORT FD` is the exec target:
 * one loopback connect, its cookie written to FD. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/kernel.h"
#include "common/util.h"
#include "notify_harness.h"
#include "tests/common/check.h"
#include "tests/common/clone_at.h"
#include "tests/common/loopback.h"

static int server_port;
static char self_exe[PATH_MAX], copy_exe[128], tmpdir[64];
static uint64_t self_ino, copy_ino;

/* Child side: connect and report the cookie (0 on failure) on fd. */
static void connect_report(int fd)
{
	uint64_t c = 0;
	if (loopback_connect(server_port, &c) < 0)
		c = 0;
	if (write(fd, &c, sizeof(c)) != (ssize_t)sizeof(c))
		_exit(80);
}

static void exec_copy(int fd)
{
	char port[16], fds[16];
	snprintf(port, sizeof(port), "%d", server_port);
	snprintf(fds, sizeof(fds), "%d", fd);
	char *argv[] = { copy_exe, "--child-connect", port, fds, NULL };
	/* LeakSanitizer cannot run under the workload profile (no ptrace). */
	char *envp[] = { "ASAN_OPTIONS=detect_leaks=0", NULL };
	execve(copy_exe, argv, envp);
	_exit(81);
}

/* Read count cookies the child reported (bounded wait). */
static int read_cookies(int fd, uint64_t *out, int count)
{
	for (int i = 0; i < count; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 10000) != 1 || read(fd, &out[i], sizeof(out[i])) != (ssize_t)sizeof(out[i]))
			return -EIO;
	}
	return 0;
}

/* Wait for pid with a timeout; kill it if it overstays. */
static int reap(pid_t pid)
{
	for (int i = 0; i < 1000; i++) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (r < 0)
			return -errno;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -ETIMEDOUT;
}

static uint64_t ino_of(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void cleanup_copy(void)
{
	if (copy_exe[0])
		unlink(copy_exe);
	if (tmpdir[0])
		rmdir(tmpdir);
}

/* ---- 1. exec between connects ---- */

static void check_exec_records(const char *what, const struct notify_rec *rec, const uint64_t *ck, pid_t pid, int first_copy)
{
	CHECK(rec->n == 3, "%s: %d records", what, rec->n);
	if (rec->n != 3)
		return;
	for (int i = 0; i < 3; i++) {
		CHECK(rec->cookie[i] == ck[i] && ck[i] != 0, "%s: record %d cookie %llu, child saw %llu", what, i,
		      (unsigned long long)rec->cookie[i], (unsigned long long)ck[i]);
		CHECK(rec->pid[i] == pid, "%s: record %d pid %d, child %d", what, i, (int)rec->pid[i], (int)pid);
		CHECK(strcmp(rec->key[i], rec->key[0]) == 0, "%s: record %d key %s != %s", what, i, rec->key[i],
		      rec->key[0]);
		bool copy = i >= first_copy;
		CHECK(strcmp(rec->exe[i], copy ? copy_exe : self_exe) == 0, "%s: record %d exe '%s', want '%s'", what,
		      i, rec->exe[i], copy ? copy_exe : self_exe);
		CHECK(rec->exe_ino[i] == (copy ? copy_ino : self_ino), "%s: record %d exe inode %llu, want %llu",
		      what, i, (unsigned long long)rec->exe_ino[i],
		      (unsigned long long)(copy ? copy_ino : self_ino));
	}
}

/* Cases 1 and 2: a child under the filter runs child_body (which execs the
 * copy and never returns) reporting each connect's cookie on rp; three
 * connects are expected, the last one by the copy. */
static void run_exec_case(struct notifier *n, struct notify_rec *rec, const struct workload_filter *f,
			  const char *what, void (*child_body)(int rp))
{
	memset(rec, 0, sizeof(*rec));
	int sv[2], rp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 || pipe(rp) < 0) {
		CHECK(0, "socketpair/pipe");
		return;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		close(rp[0]);
		notify_child_setup(f, sv[1]);
		child_body(rp[1]);
		_exit(96); /* not reached: child_body execs */
	}
	close(sv[1]);
	close(rp[1]);
	int lfd = notify_recv_listener(sv[0]);
	CHECK(lfd >= 0, "%s: no listener", what);
	(void)!write(sv[0], "g", 1);
	uint64_t ck[3] = { 0 };
	CHECK(lfd >= 0 && notify_handle_n(n, lfd, 3) == 0, "%s: handling 3 notifications", what);
	CHECK(read_cookies(rp[0], ck, 3) == 0, "%s: child reports", what);
	CHECK(reap(pid) == 0, "%s: child exit", what);
	/* exec: self, self again (the cached caller), copy;
	 * thread exec: main (self), thread (self, same process), new image (copy) */
	check_exec_records(what, rec, ck, pid, 2);
	if (lfd >= 0)
		close(lfd);
	close(sv[0]);
	close(rp[0]);
}

static void exec_child(int rp)
{
	connect_report(rp);
	connect_report(rp); /* the same process again: the cached caller */
	exec_copy(rp);
}

static void case_exec(struct notifier *n, struct notify_rec *rec, const struct workload_filter *f, const char *what)
{
	run_exec_case(n, rec, f, what, exec_child);
}

/* ---- 2. exec by a non-leader thread ---- */

static int thread_rp;
static void *thread_exec(void *a)
{
	(void)a;
	connect_report(thread_rp);
	exec_copy(thread_rp); /* kills the main thread; we become the leader */
	return NULL;
}

static void thread_exec_child(int rp)
{
	connect_report(rp);
	thread_rp = rp;
	pthread_t t;
	if (pthread_create(&t, NULL, thread_exec, NULL) != 0)
		_exit(94);
	for (;;)
		pause();
}

static void case_thread_exec(struct notifier *n, struct notify_rec *rec, const struct workload_filter *f)
{
	run_exec_case(n, rec, f, "thread exec", thread_exec_child);
}

/* ---- 3. tid reuse ---- */

static pid_t spawn_at(pid_t want, const struct workload_filter *f, int sock, int rp)
{
	pid_t pid = clone_at_pid(want);
	if (pid == 0) {
		notify_child_setup(f, sock);
		connect_report(rp);
		char done;
		if (read(sock, &done, 1) != 1) /* stay alive until the parent saw us */
			_exit(95);
		_exit(0);
	}
	return pid;
}

static void boot_key_of(const struct kernel_caps *caps, pid_t pid, char *key, size_t size)
{
	key[0] = '\0';
	_cleanup_close_ int pfd = sys_pidfd_open(pid, 0);
	struct stat st;
	if (pfd >= 0 && fstat(pfd, &st) == 0)
		snprintf(key, size, "%s:%llu", caps->boot_id, (unsigned long long)st.st_ino);
}

static void case_tid_reuse(struct notifier *n, struct notify_rec *rec, const struct workload_filter *f,
			   const struct kernel_caps *caps)
{
	memset(rec, 0, sizeof(*rec));
	for (int attempt = 0; attempt < 3; attempt++) {
		int sv[2], rp[2];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 || pipe2(rp, O_CLOEXEC) < 0) {
			CHECK(0, "socketpair/pipe");
			return;
		}
		rec->n = 0;
		uint64_t stale0 = notifier_stats(n)->cache_stale;
		/* A: connects, is cached, exits and is reaped. */
		pid_t a = spawn_at(0, f, sv[1], rp[1]);
		int lfd = notify_recv_listener(sv[0]);
		char key_a[PROCREF_KEY_MAX];
		boot_key_of(caps, a, key_a, sizeof(key_a));
		(void)!write(sv[0], "g", 1);
		uint64_t ck[2] = { 0 };
		CHECK(lfd >= 0 && notify_handle_n(n, lfd, 1) == 0, "reuse: A's notification");
		CHECK(read_cookies(rp[0], ck, 1) == 0, "reuse: A's report");
		(void)!write(sv[0], "d", 1);
		CHECK(reap(a) == 0, "reuse: A's exit");
		if (lfd >= 0)
			close(lfd);
		/* B: the same pid, a new process. */
		pid_t b = spawn_at(a, f, sv[1], rp[1]);
		if (b == -EEXIST || b == -EBUSY) { /* someone else took the pid meanwhile: again */
			close(sv[0]), close(sv[1]), close(rp[0]), close(rp[1]);
			continue;
		}
		CHECK(b == a, "clone3 set_tid gave %d, want %d", (int)b, (int)a);
		if (b < 0) {
			close(sv[0]), close(sv[1]), close(rp[0]), close(rp[1]);
			return;
		}
		lfd = notify_recv_listener(sv[0]);
		char key_b[PROCREF_KEY_MAX];
		boot_key_of(caps, b, key_b, sizeof(key_b));
		(void)!write(sv[0], "g", 1);
		CHECK(lfd >= 0 && notify_handle_n(n, lfd, 1) == 0, "reuse: B's notification");
		CHECK(read_cookies(rp[0], ck + 1, 1) == 0, "reuse: B's report");
		(void)!write(sv[0], "d", 1);
		CHECK(reap(b) == 0, "reuse: B's exit");
		if (lfd >= 0)
			close(lfd);
		close(sv[0]), close(sv[1]), close(rp[0]), close(rp[1]);

		CHECK(rec->n == 2, "reuse: %d records", rec->n);
		if (rec->n == 2) {
			CHECK(rec->cookie[0] == ck[0] && rec->cookie[1] == ck[1], "reuse: cookies");
			CHECK(rec->pid[0] == a && rec->pid[1] == a, "reuse: pids %d %d", rec->pid[0], rec->pid[1]);
			CHECK(key_a[0] && strcmp(rec->key[0], key_a) == 0, "reuse: A key %s, want %s", rec->key[0], key_a);
			CHECK(key_b[0] && strcmp(rec->key[1], key_b) == 0, "reuse: B recorded as %s, want %s",
			      rec->key[1], key_b);
			CHECK(strcmp(key_a, key_b) != 0, "reuse: A and B share key %s", key_a);
		}
		CHECK(notifier_stats(n)->cache_stale == stale0 + 1, "reuse: cache_stale %llu (was %llu)",
		      (unsigned long long)notifier_stats(n)->cache_stale, (unsigned long long)stale0);
		return;
	}
	CHECK(0, "reuse: the pid was taken by another process three times");
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--child-connect") == 0) {
		server_port = atoi(argv[2]);
		connect_report(atoi(argv[3]));
		_exit(0);
	}
	ssize_t sl = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (sl <= 0)
		return perror("readlink /proc/self/exe"), 1;
	self_exe[sl] = '\0';
	self_ino = ino_of(self_exe);
	strscpy(tmpdir, "/tmp/tether-notify-cache-XXXXXX", sizeof(tmpdir));
	if (!mkdtemp(tmpdir))
		return perror("mkdtemp"), 1;
	int cl = snprintf(copy_exe, sizeof(copy_exe), "%s/other-binary", tmpdir);
	if (cl < 0 || (size_t)cl >= sizeof(copy_exe))
		return fprintf(stderr, "temp path too long\n"), 1;
	atexit(cleanup_copy);
	if (notify_copy_file(self_exe, copy_exe) < 0)
		return perror("copy"), 1;
	copy_ino = ino_of(copy_exe);

	struct notify_world w;
	if (notify_world_open(&w, notifier_identify_default) < 0)
		return 1;
	server_port = w.port;
	struct notifier *n = w.n;
	bool fast = w.caps.pidfs_ino; /* our /proc is our pid namespace's */

	const struct notifier_stats *st = notifier_stats(n);
	uint64_t hits0 = st->cache_hits, changed0 = st->exe_changed;
	case_exec(n, &w.rec, &w.f, "exec");
	if (fast) {
		/* connect 2 and connect 3 (after exec: same process) reuse the caller */
		CHECK(st->cache_hits == hits0 + 2, "cache hits %llu, want %llu", (unsigned long long)st->cache_hits,
		      (unsigned long long)hits0 + 2);
		CHECK(st->exe_changed == changed0 + 1, "exe_changed %llu, want %llu",
		      (unsigned long long)st->exe_changed, (unsigned long long)changed0 + 1);
	}
	case_thread_exec(n, &w.rec, &w.f);
	if (fast)
		case_tid_reuse(n, &w.rec, &w.f, &w.caps);

	/* 4. without the cache: the same records */
	CHECK(notifier_set_cache(n, 0) == 0, "cache off");
	hits0 = st->cache_hits;
	case_exec(n, &w.rec, &w.f, "exec, cache off");
	CHECK(st->cache_hits == hits0, "hits with the cache off");
	CHECK(notifier_set_cache(n, NOTIFIER_CACHE_MAX + 1) == -EINVAL, "oversized cache accepted");
	CHECK(notifier_set_cache(n, 2) == 0, "small cache");
	case_exec(n, &w.rec, &w.f, "exec, 2-entry cache");

	notify_world_close(&w);
	if (failures)
		fprintf(stderr, "%d failure(s)\n", failures);
	else
		printf("test_notify_cache: all checks passed (%s path)\n", fast ? "cached" : "fallback");
	return failures ? 1 : 0;
}
