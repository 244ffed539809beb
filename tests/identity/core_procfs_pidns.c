/* ProcessRef shortcuts, each against the full path it replaces:
 *   - procref_hash_exe_read: a cache hit answers from the tuple the ref
 *     read, without opening the image;
 *   - procref_refresh: a ref filled moments ago gets its live ppid without
 *     a full re-open (checked against a reparenting and an exit, with and
 *     without PIDFD_GET_INFO);
 *   - the procfs-pidns shortcut (kernel_caps.procfs_self_pid): when /proc
 *     is a procfs of our own pid namespace, ref_fill takes the pid we
 *     opened from as the /proc number instead of reading the pidfd's
 *     fdinfo. The shortcut and the fdinfo path must give the same ref,
 *     forcing the fallback turns it off, and — the case it must never get
 *     wrong — a child in a new pid namespace that inherited the caps with
 *     the old /proc (pid 1 there, another pid under /proc) is not read as
 *     /proc/1.
 * As root (a new pid namespace). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/kernel.h"
#include "identity/exe.h"
#include "identity/procref.h"
#include "tests/common/check.h"


/* A child that waits for SIGKILL (and dies with us). */
static pid_t idle_child(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		pause();
		_exit(0);
	}
	return pid;
}

static void kill_wait(pid_t pid)
{
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

static void same_ref(const struct procref *a, const struct procref *b)
{
	CHECK(strcmp(a->key, b->key) == 0, "same ref");
	CHECK(a->procfs_pid == b->procfs_pid, "same ref");
	CHECK(a->pid == b->pid, "same ref");
	CHECK(a->ppid == b->ppid, "same ref");
	CHECK(a->start_time == b->start_time, "same ref");
	CHECK(a->exe.ino == b->exe.ino && strcmp(a->exe.path, b->exe.path) == 0, "same ref");
}

static void shortcut_matches_fdinfo(void)
{
	struct kernel_caps fast, slow;
	CHECK(kernel_caps_probe(&fast) == 0, "shortcut matches fdinfo");
	CHECK(fast.procfs_self_pid == getpid(), "shortcut matches fdinfo"); /* the test runs with the host's /proc */
	slow = fast;
	CHECK(kernel_caps_force_fallback(&slow, "procfs_pidns") == 0, "shortcut matches fdinfo");
	CHECK(slow.procfs_self_pid == 0, "shortcut matches fdinfo");
	CHECK(slow.pidfs_ino == fast.pidfs_ino && slow.pidfd_info == fast.pidfd_info, "shortcut matches fdinfo");

	pid_t c = idle_child();
	CHECK(c > 0, "shortcut matches fdinfo");
	struct procref a, b;
	CHECK(procref_open(&fast, c, &a) == 0, "shortcut matches fdinfo");
	CHECK(procref_open(&slow, c, &b) == 0, "shortcut matches fdinfo");
	CHECK(a.procfs_pid == c, "shortcut matches fdinfo");
	same_ref(&a, &b);
	/* From a pidfd alone (no pid given): PIDFD_GET_INFO's pid, or fdinfo. */
	struct procref pa, pb;
	CHECK(procref_from_pidfd(&fast, a.pidfd, &pa) == 0, "shortcut matches fdinfo");
	CHECK(procref_from_pidfd(&slow, a.pidfd, &pb) == 0, "shortcut matches fdinfo");
	same_ref(&pa, &a);
	same_ref(&pb, &a);
	/* The same with the pidfd-info ioctl forced off too. */
	struct kernel_caps noinfo = fast;
	CHECK(kernel_caps_force_fallback(&noinfo, "pidfd_info") == 0, "shortcut matches fdinfo");
	struct procref pc;
	CHECK(procref_from_pidfd(&noinfo, a.pidfd, &pc) == 0, "shortcut matches fdinfo");
	same_ref(&pc, &a);
	procref_close(&pc);
	procref_close(&pa);
	procref_close(&pb);

	/* The process exits: the shortcut must not yield a ref. */
	kill_wait(c);
	struct procref gone;
	CHECK(procref_from_pidfd(&fast, a.pidfd, &gone) < 0, "shortcut matches fdinfo");
	CHECK(gone.pidfd == -1, "shortcut matches fdinfo");
	procref_close(&a);
	procref_close(&b);
}

/* In a new pid namespace with the prober's /proc and the prober's caps:
 * the grandchild is pid 1 there, /proc/1 is the host's init. The new
 * namespace is made by a child (M), so this process never unshares (the
 * sanitizer's leak checker cannot run in a process that did). */
static void grandchild_check(const struct kernel_caps *caps, int out)
{
	char ok = 'n';
	struct procref me;
	/* getpid() is 1 here and differs from caps->procfs_self_pid. */
	if (getpid() == 1 && procref_open(caps, 1, &me) == 0) {
		/* /proc/<procfs_pid> is us: not the host's init. */
		char dir[64], comm[32] = "";
		snprintf(dir, sizeof(dir), "/proc/%d/comm", (int)me.procfs_pid);
		FILE *f = fopen(dir, "r");
		if (f && fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		if (f)
			fclose(f);
		if (me.procfs_pid != 1 && me.pid == 1 && strcmp(comm, me.comm) == 0 &&
		    strcmp(me.comm, "core_procfs_pid") == 0)
			ok = 'y';
		procref_close(&me);
	}
	(void)!write(out, &ok, 1);
}

static void inherited_caps_in_new_pidns(void)
{
	struct kernel_caps caps;
	CHECK(kernel_caps_probe(&caps) == 0, "inherited caps: probe");
	int p[2];
	CHECK(pipe(p) == 0, "inherited caps: pipe");
	pid_t m = fork();
	if (m == 0) {
		close(p[0]);
		char skip = 's';
		if (unshare(CLONE_NEWPID) < 0) {
			(void)!write(p[1], &skip, 1);
			_exit(0);
		}
		pid_t g = fork();
		if (g == 0) {
			grandchild_check(&caps, p[1]);
			_exit(0);
		}
		while (g > 0 && waitpid(g, NULL, 0) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(p[1]);
	char ok = 0;
	CHECK(read(p[0], &ok, 1) == 1, "inherited caps: an answer");
	if (ok == 's')
		fprintf(stderr, "SKIP new pid namespace: unshare failed\n");
	else
		CHECK(ok == 'y', "inherited caps: /proc/1 read as ours");
	close(p[0]);
	while (waitpid(m, NULL, 0) < 0 && errno == EINTR)
		;
}

/* B forks C and exits: C is reparented to us (a subreaper). A ref of C
 * filled while B lived, refreshed, has the new ppid and the same key. */
static void refresh_reads_live_ppid(void)
{
	struct kernel_caps fast, noinfo;
	CHECK(kernel_caps_probe(&fast) == 0, "refresh: probe");
	noinfo = fast;
	CHECK(kernel_caps_force_fallback(&noinfo, "pidfd_info") == 0, "refresh: force");
	CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0, "refresh: subreaper");
	int p[2], go[2];
	CHECK(pipe(p) == 0 && pipe(go) == 0, "refresh: pipes");
	pid_t b = fork();
	if (b == 0) {
		close(p[0]);
		close(go[1]);
		pid_t c = fork();
		if (c == 0) {
			close(go[0]);
			/* no PDEATHSIG: it must outlive B; bounded if we die */
			alarm(20);
			pause();
			_exit(0);
		}
		(void)!write(p[1], &c, sizeof(c));
		char x;
		(void)!read(go[0], &x, 1); /* exit when told */
		_exit(0);
	}
	close(p[1]);
	close(go[0]);
	pid_t c = -1;
	CHECK(read(p[0], &c, sizeof(c)) == (ssize_t)sizeof(c), "refresh: the grandchild's pid");
	close(p[0]);
	struct procref known, known_slow;
	CHECK(procref_open(&fast, c, &known) == 0, "refresh: open the grandchild");
	CHECK(procref_open(&noinfo, c, &known_slow) == 0, "refresh: open without the ioctl");
	CHECK(known.ppid == b, "refresh: parent before");
	close(go[1]); /* B exits; C is ours now */
	while (waitpid(b, NULL, 0) < 0 && errno == EINTR)
		;
	struct procref r1, r2;
	CHECK(procref_refresh(&fast, &known, &r1) == 0, "refresh: live");
	int r = procref_refresh(&noinfo, &known_slow, &r2);
	CHECK(r == 0, "refresh: live, no ioctl: %s", strerror(-r));
	CHECK(r1.ppid == getpid() && r2.ppid == getpid(), "refresh: the live ppid (%d %d)", (int)r1.ppid, (int)r2.ppid);
	CHECK(strcmp(r1.key, known.key) == 0 && strcmp(r2.key, known_slow.key) == 0, "refresh: same key");
	CHECK(r1.pidfd >= 0 && r1.pidfd != known.pidfd, "refresh: its own pidfd");
	CHECK(r1.exe.ino == known.exe.ino && r1.start_time == known.start_time, "refresh: the rest kept");
	procref_close(&r1);
	procref_close(&r2);
	kill_wait(c);
	CHECK(procref_refresh(&fast, &known, &r1) == -ESRCH, "refresh: exited");
	CHECK(r1.pidfd == -1, "refresh: exited, no pidfd");
	CHECK(procref_refresh(&noinfo, &known_slow, &r2) < 0, "refresh: exited, no ioctl");
	struct procref none = known;
	none.pidfd = -1;
	CHECK(procref_refresh(&fast, &none, &r1) == -EBADF, "refresh: a recorded ref");
	procref_close(&known);
	procref_close(&known_slow);
	prctl(PR_SET_CHILD_SUBREAPER, 0);
}

/* procref_hash_exe_read: a miss hashes the running image (and fills the
 * cache), a hit answers from the tuple alone: after the process is gone,
 * procref_hash_exe fails but the hit still names the image it ran. */
static void hash_read_uses_the_tuple(void)
{
	struct kernel_caps caps;
	CHECK(kernel_caps_probe(&caps) == 0, "hash read: probe");
	struct exe_hash_cache *cache = exe_hash_cache_new(8);
	pid_t c = idle_child();
	struct procref a = { .pidfd = -1 }, b = { .pidfd = -1 };
	CHECK(procref_open(&caps, c, &a) == 0, "hash read: open");
	CHECK(procref_open(&caps, c, &b) == 0, "hash read: open again");
	CHECK(procref_hash_exe_read(&a, cache) == 0 && a.exe.hashed, "hash read: miss hashes");
	kill_wait(c);
	struct procref gone = b;
	CHECK(procref_hash_exe(&gone, cache) < 0, "hash read: the image cannot be re-opened");
	CHECK(procref_hash_exe_read(&b, cache) == 0 && b.exe.hashed &&
		      memcmp(a.exe.sha256, b.exe.sha256, 32) == 0,
	      "hash read: a hit is the hash of the tuple read");
	CHECK(procref_hash_exe_read(&b, NULL) < 0, "hash read: no cache re-opens the image");
	struct procref none = b;
	none.exe_err = -ENOENT;
	CHECK(procref_hash_exe_read(&none, cache) == -ENOENT, "hash read: no image");
	procref_close(&a);
	procref_close(&b);
	exe_hash_cache_free(cache);
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: needs root\n");
		return 77;
	}
	unsetenv("TETHER_FORCE_FALLBACK");
	refresh_reads_live_ppid();
	hash_read_uses_the_tuple();
	shortcut_matches_fdinfo();
	inherited_caps_in_new_pidns();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
