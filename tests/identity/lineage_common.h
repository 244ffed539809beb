/* Shared helpers of the lineage integration tests: checks that fail the
 * test with a message, bounded waits, pipes with timeouts, and a list of
 * pids this test started that are SIGKILLed on any exit (including the
 * watchdog alarm). Header-only: each test is one program. */
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/kernel.h"
#include "common/reason.h"
#include "common/util.h"
#include "identity/ancestry.h"
#include "identity/members.h"
#include "identity/procfs.h"
#include "identity/procref.h"

#define LT_MAX_PIDS 64
static pid_t lt_pids[LT_MAX_PIDS];
static int lt_npids;
static int lt_failures;
static const char *lt_name = "lineage";

static void lt_kill_all(void)
{
	for (int i = 0; i < lt_npids; i++)
		if (lt_pids[i] > 0)
			kill(lt_pids[i], SIGKILL);
}

/* Remember a pid this process started, to be killed on exit. */
static inline void lt_track(pid_t pid)
{
	if (pid > 0 && lt_npids < LT_MAX_PIDS)
		lt_pids[lt_npids++] = pid;
}

/* fork() that tracks the child; the child starts with an empty list so it
 * never kills its siblings on exit. */
static inline pid_t lt_fork(void)
{
	pid_t p = fork();
	if (p == 0)
		lt_npids = 0;
	else if (p > 0)
		lt_track(p);
	return p;
}

static void lt_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "lineage test: watchdog timeout\n";
	ssize_t w = write(2, msg, sizeof(msg) - 1);
	(void)w;
	lt_kill_all();
	_exit(3);
}

/* Watchdog: the whole test (or child role) ends within `seconds`. */
static inline void lt_init(const char *name, unsigned seconds)
{
	lt_name = name;
	signal(SIGALRM, lt_alarm);
	alarm(seconds);
	atexit(lt_kill_all);
}

#define LT_CHECK(cond, ...)                                                          \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "%s: FAIL %s:%d: %s: ", lt_name, __FILE__,   \
				__LINE__, #cond);                                    \
			fprintf(stderr, __VA_ARGS__);                                \
			fprintf(stderr, "\n");                                       \
			lt_failures++;                                               \
		}                                                                    \
	} while (0)

/* Fatal variant: the rest of the test cannot run. */
#define LT_REQUIRE(cond, ...)                                                        \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "%s: FATAL %s:%d: %s: ", lt_name, __FILE__,  \
				__LINE__, #cond);                                    \
			fprintf(stderr, __VA_ARGS__);                                \
			fprintf(stderr, "\n");                                       \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

/* A role that only has to exist: sleeps until killed (or the 30 s alarm). */
static inline void lt_idle(void)
{
	alarm(30);
	for (;;)
		pause();
}

static inline void lt_sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Write/read one pid over a pipe; reads give up after timeout_ms. */
static inline int lt_send_pid(int fd, pid_t pid)
{
	return write(fd, &pid, sizeof(pid)) == (ssize_t)sizeof(pid) ? 0 : -EIO;
}

static inline int lt_recv_pid(int fd, pid_t *pid, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r = poll(&p, 1, timeout_ms);
	if (r <= 0)
		return r == 0 ? -ETIMEDOUT : -errno;
	return read(fd, pid, sizeof(*pid)) == (ssize_t)sizeof(*pid) ? 0 : -EIO;
}

/* A byte as a go/stop signal between roles. */
static inline int lt_send_byte(int fd)
{
	char c = 'x';
	return write(fd, &c, 1) == 1 ? 0 : -EIO;
}

static inline int lt_recv_byte(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r = poll(&p, 1, timeout_ms);
	if (r <= 0)
		return r == 0 ? -ETIMEDOUT : -errno;
	char c;
	return read(fd, &c, 1) == 1 ? 0 : -EIO;
}

/* Read file (at most max bytes) of the /proc directory dir ("/proc/self",
 * "/proc/42") with h1core's reader; *buf is the caller's to free. */
static inline int lt_proc_read(const char *dir, const char *file, size_t max, char **buf, size_t *len)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	*buf = NULL;
	*len = 0;
	int r = procfs_read_at(dfd, file, max, buf, len);
	close(dfd);
	return r;
}

/* Live ppid of pid through h1core's stat parser; -errno when gone. */
static inline int lt_ppid(pid_t pid, pid_t *out)
{
	char dir[32];
	snprintf(dir, sizeof(dir), "/proc/%d", (int)pid);
	char *buf;
	size_t len;
	int r = lt_proc_read(dir, "stat", PROCFS_STAT_MAX, &buf, &len);
	if (r < 0)
		return r;
	struct procfs_stat st;
	r = procfs_parse_stat(buf, len, &st);
	free(buf);
	if (r < 0)
		return r;
	if (st.state == 'Z')
		return -ESRCH;
	*out = st.ppid;
	return 0;
}

/* Wait (bounded) until pid's live parent is want. */
static inline int lt_wait_ppid(pid_t pid, pid_t want, int timeout_ms)
{
	for (int t = 0; t < timeout_ms; t += 5) {
		pid_t p = 0;
		if (lt_ppid(pid, &p) == 0 && p == want)
			return 0;
		lt_sleep_ms(5);
	}
	return -ETIMEDOUT;
}

/* Wait (bounded) until the process behind pidfd has exited (zombie or
 * reaped). */
static inline int lt_wait_dead(int pidfd, int timeout_ms)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	int r = poll(&p, 1, timeout_ms);
	return r == 1 ? 0 : -ETIMEDOUT;
}

/* Reap a child with a bound; returns its wait status or -ETIMEDOUT. */
static inline int lt_reap(pid_t pid, int timeout_ms)
{
	for (int t = 0; t <= timeout_ms; t += 5) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return st;
		if (r < 0)
			return -errno;
		lt_sleep_ms(5);
	}
	return -ETIMEDOUT;
}

static inline void lt_probe(struct kernel_caps *caps)
{
	int r = kernel_caps_probe(caps);
	LT_REQUIRE(r == 0, "kernel_caps_probe: %s", strerror(-r));
	const char *ff = getenv("TETHER_FORCE_FALLBACK");
	if (ff && strcmp(ff, "all") == 0) {
		/* The fallback variant must really run without the new APIs. */
		LT_REQUIRE(!caps->pidfs_ino && !caps->pidfd_info && !caps->cgroup_v2,
			   "TETHER_FORCE_FALLBACK=all did not disable the probes");
	}
}

static inline bool lt_chain_has_key(const struct ancestry_result *res, const char *key)
{
	for (size_t i = 0; i < res->n; i++)
		if (strcmp(res->hops[i].ref.key, key) == 0)
			return true;
	return false;
}

/* A chain anchor → C (spawned, recorded as the entrypoint) → P → S, P and
 * S not recorded. S idles; after reporting, P runs p_role and C runs
 * c_role (neither returns). stop is a pipe the caller may have made for
 * the roles (or -1s). */
struct lt_tree {
	pid_t c, p, s;
	int stop[2];
	struct procref cref;
};

static inline void lt_make_tree(const struct kernel_caps *caps, struct members *t, struct lt_tree *tr,
				void (*p_role)(const struct lt_tree *), void (*c_role)(const struct lt_tree *))
{
	int pp[2], sp[2];
	LT_REQUIRE(pipe(pp) == 0 && pipe(sp) == 0, "pipe");
	tr->c = lt_fork();
	LT_REQUIRE(tr->c >= 0, "fork");
	if (tr->c == 0) {
		pid_t p = fork();
		if (p == 0) {
			pid_t s = fork();
			if (s == 0)
				lt_idle();
			lt_send_pid(sp[1], s);
			p_role(tr);
		}
		lt_send_pid(pp[1], p);
		c_role(tr);
	}
	LT_REQUIRE(lt_recv_pid(pp[0], &tr->p, 5000) == 0 && lt_recv_pid(sp[0], &tr->s, 5000) == 0,
		   "tree did not report");
	lt_track(tr->p);
	lt_track(tr->s);
	LT_REQUIRE(procref_open(caps, tr->c, &tr->cref) == 0, "open C");
	LT_REQUIRE(members_add_spawned(t, &tr->cref, MEMBER_ENTRYPOINT) == 0, "add C");
	close(pp[0]), close(pp[1]), close(sp[0]), close(sp[1]);
}

/* The pids a walk opened, in order (ancestry_opts.on_open = lt_record_open,
 * userdata = the log): to show which processes a walk never touches. */
struct lt_opened {
	pid_t pids[512];
	int n;
};

static inline void lt_record_open(pid_t pid, void *ud)
{
	struct lt_opened *o = ud;
	if (o->n < 512)
		o->pids[o->n++] = pid;
}

static inline bool lt_opened_has(const struct lt_opened *o, pid_t pid)
{
	for (int i = 0; i < o->n; i++)
		if (o->pids[i] == pid)
			return true;
	return false;
}

static inline int lt_finish(void)
{
	if (lt_failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", lt_name, lt_failures);
		return 1;
	}
	fprintf(stderr, "%s: ok\n", lt_name);
	return 0;
}
