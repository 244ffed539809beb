/* Integration tests for identity/procref.c on real processes (root).
 *
 * Every case runs twice: with the probed (fast) caps and with pidfs_ino and
 * pidfd_info forced off, and the two must agree on everything but the key
 * kind and info source. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/kernel.h"
#include "common/util.h"
#include "identity/exe.h"
#include "identity/procfs.h"
#include "identity/procref.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct fixture {
	struct kernel_caps fast, slow;
	pid_t child;
	char cgdir[512]; /* removed in teardown if a test left it behind */
};

/* A child that optionally changes credentials and its name, reports ready,
 * then waits to be killed (bounded by alarm so it never outlives a crash). */
static pid_t spawn_child(uid_t uid, gid_t gid, const char *name)
{
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(30);
		if (name)
			prctl(PR_SET_NAME, name);
		if (gid != (gid_t)-1 && setresgid(gid, gid + 1, gid + 2) < 0)
			_exit(101);
		if (uid != (uid_t)-1 && setresuid(uid, uid + 1, uid + 2) < 0)
			_exit(102);
		if (write(p[1], "r", 1) != 1)
			_exit(103);
		for (;;)
			pause();
	}
	close(p[1]);
	struct pollfd pf = { .fd = p[0], .events = POLLIN };
	assert_int_equal(poll(&pf, 1, 5000), 1);
	char c;
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	return pid;
}

static void reap(pid_t pid)
{
	kill(pid, SIGKILL);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	unsetenv("TETHER_FORCE_FALLBACK");
	if (kernel_caps_probe(&f->fast) < 0)
		return -1;
	f->slow = f->fast;
	if (kernel_caps_force_fallback(&f->slow, "pidfs_ino,pidfd_info") < 0)
		return -1;
	f->child = -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	if (f->child > 0)
		reap(f->child);
	if (f->cgdir[0])
		rmdir(f->cgdir);
	free(f);
	return 0;
}

static bool key_is_pidfs(const char *k, const char *boot)
{
	if (strncmp(k, boot, 36) != 0 || k[36] != ':' || !k[37])
		return false;
	for (const char *p = k + 37; *p; p++)
		if (!isdigit((unsigned char)*p))
			return false;
	return true;
}

static bool key_is_pid_start(const char *k, const char *boot, pid_t pid, uint64_t start)
{
	char want[PROCREF_KEY_MAX];
	snprintf(want, sizeof(want), "%s:%d:%" PRIu64, boot, (int)pid, start);
	return strcmp(k, want) == 0;
}

/* What procfs says about pid, independently of the code under test. */
static void read_truth(pid_t pid, struct procfs_stat *st, struct procfs_status *ss)
{
	char path[64], *buf;
	size_t len;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	assert_int_equal(procfs_read_at(AT_FDCWD, path, PROCFS_STAT_MAX, &buf, &len), 0);
	assert_int_equal(procfs_parse_stat(buf, len, st), 0);
	free(buf);
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	assert_int_equal(procfs_read_at(AT_FDCWD, path, PROCFS_STATUS_MAX, &buf, &len), 0);
	assert_int_equal(procfs_parse_status(buf, len, ss), 0);
	free(buf);
}

static void check_ref(const struct kernel_caps *caps, const struct procref *r, pid_t pid)
{
	static struct procfs_stat st;
	static struct procfs_status ss;
	read_truth(pid, &st, &ss);
	assert_true(r->pidfd >= 0);
	assert_int_equal(r->pid, pid);
	assert_int_equal(r->procfs_pid, pid);
	assert_string_equal(r->boot_id, caps->boot_id);
	assert_int_equal(r->start_time, st.start_time);
	assert_int_equal(r->ppid, ss.ppid);
	assert_int_equal(r->ruid, ss.uid[0]);
	assert_int_equal(r->euid, ss.uid[1]);
	assert_int_equal(r->suid, ss.uid[2]);
	assert_int_equal(r->fsuid, ss.uid[3]);
	assert_int_equal(r->rgid, ss.gid[0]);
	assert_int_equal(r->egid, ss.gid[1]);
	assert_int_equal(r->sgid, ss.gid[2]);
	assert_int_equal(r->fsgid, ss.gid[3]);
	assert_string_equal(r->comm, st.comm);
	if (caps->pidfs_ino) {
		struct stat pst;
		assert_int_equal(fstat(r->pidfd, &pst), 0);
		assert_int_equal(r->key_kind, PROCREF_KEY_PIDFS);
		assert_true(r->pidfs_ino == pst.st_ino && r->pidfs_ino != 0);
		assert_true(key_is_pidfs(r->key, caps->boot_id));
		char want[PROCREF_KEY_MAX];
		snprintf(want, sizeof(want), "%s:%" PRIu64, caps->boot_id, r->pidfs_ino);
		assert_string_equal(r->key, want);
	} else {
		assert_int_equal(r->key_kind, PROCREF_KEY_PID_START);
		assert_int_equal(r->pidfs_ino, 0);
		assert_true(key_is_pid_start(r->key, caps->boot_id, pid, st.start_time));
	}
	assert_int_equal(r->info_source, caps->pidfd_info ? PROCREF_SRC_PIDFD_INFO : PROCREF_SRC_PROCFS);
	if (caps->cgroup_v2)
		assert_true(r->cgroup_id != 0);
	/* exe: the tuple of /proc/<pid>/exe, not hashed yet */
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	struct stat est;
	assert_int_equal(stat(path, &est), 0);
	assert_int_equal(r->exe_err, 0);
	assert_true(r->exe.dev == est.st_dev && r->exe.ino == est.st_ino);
	assert_int_equal(r->exe.size, est.st_size);
	assert_false(r->exe.hashed);
	assert_false(r->exe.maps_mismatch);
	assert_false(r->exe.deleted);
	assert_false(r->exe.memfd);
	char link[PATH_MAX];
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	assert_true(n > 0);
	link[n] = '\0';
	assert_string_equal(r->exe.path, link);
}

/* The fast and the fallback ref of one process agree on every value. */
static void check_agree(const struct procref *a, const struct procref *b)
{
	assert_int_equal(a->pid, b->pid);
	assert_int_equal(a->ppid, b->ppid);
	assert_int_equal(a->start_time, b->start_time);
	assert_int_equal(a->ruid, b->ruid);
	assert_int_equal(a->euid, b->euid);
	assert_int_equal(a->suid, b->suid);
	assert_int_equal(a->fsuid, b->fsuid);
	assert_int_equal(a->rgid, b->rgid);
	assert_int_equal(a->egid, b->egid);
	assert_int_equal(a->sgid, b->sgid);
	assert_int_equal(a->fsgid, b->fsgid);
	assert_true(a->cgroup_id == b->cgroup_id);
	assert_string_equal(a->comm, b->comm);
	assert_true(exe_tuple_same_file(&a->exe, &b->exe));
	assert_string_equal(a->boot_id, b->boot_id);
}

static void probe_sanity(void **state)
{
	struct fixture *f = *state;
	/* This suite is meant for a 6.18 kernel: the fast paths must exist,
	 * otherwise the "fast" half of every test silently tests nothing. */
	assert_true(f->fast.pidfs_ino);
	assert_true(f->fast.pidfd_info);
	assert_false(f->slow.pidfs_ino);
	assert_false(f->slow.pidfd_info);
	assert_int_equal(strlen(f->fast.boot_id), 36);
}

static void self_ref(void **state)
{
	struct fixture *f = *state;
	struct procref a, b;
	assert_int_equal(procref_open(&f->fast, getpid(), &a), 0);
	check_ref(&f->fast, &a, getpid());
	assert_int_equal(procref_open(&f->slow, getpid(), &b), 0);
	check_ref(&f->slow, &b, getpid());
	check_agree(&a, &b);
	assert_int_equal(a.ruid, getuid());
	assert_int_equal(a.ppid, getppid());
	assert_string_not_equal(a.key, b.key); /* different key kinds */
	assert_int_equal(procref_revalidate(&f->fast, &a), 0);
	assert_int_equal(procref_revalidate(&f->slow, &b), 0);
	procref_close(&a);
	procref_close(&b);
	assert_int_equal(a.pidfd, -1);
	procref_close(&a); /* idempotent */
}

static void child_ref(void **state)
{
	struct fixture *f = *state;
	f->child = spawn_child(4321, 1234, "core t)(st x");
	struct kernel_caps *cs[2] = { &f->fast, &f->slow };
	struct procref r[2];
	for (int i = 0; i < 2; i++) {
		assert_int_equal(procref_open(cs[i], f->child, &r[i]), 0);
		check_ref(cs[i], &r[i], f->child);
		assert_int_equal(r[i].ppid, getpid());
		assert_int_equal(r[i].ruid, 4321);
		assert_int_equal(r[i].euid, 4322);
		assert_int_equal(r[i].suid, 4323);
		assert_int_equal(r[i].fsuid, 4322); /* fsuid follows euid */
		assert_int_equal(r[i].rgid, 1234);
		assert_int_equal(r[i].egid, 1235);
		assert_int_equal(r[i].sgid, 1236);
		assert_string_equal(r[i].comm, "core t)(st x");
		assert_int_equal(procref_revalidate(cs[i], &r[i]), 0);
	}
	check_agree(&r[0], &r[1]);

	/* self and child never share a key */
	struct procref me;
	assert_int_equal(procref_open(&f->fast, getpid(), &me), 0);
	assert_false(procref_same(&me, &r[0]));
	procref_close(&me);

	/* from_pidfd takes a dup and finds the same process */
	int pfd = sys_pidfd_open(f->child, 0);
	assert_true(pfd >= 0);
	for (int i = 0; i < 2; i++) {
		struct procref p;
		assert_int_equal(procref_from_pidfd(cs[i], pfd, &p), 0);
		assert_true(p.pidfd >= 0 && p.pidfd != pfd);
		assert_true(procref_same(&p, &r[i]));
		assert_int_equal(p.pid, f->child);
		procref_close(&p);
	}
	assert_int_equal(fcntl(pfd, F_GETFD), FD_CLOEXEC); /* still ours, still open */
	close(pfd);

	/* a recorded copy describes it and can be re-matched by pid */
	struct procref rec[2];
	for (int i = 0; i < 2; i++) {
		procref_copy_recorded(&rec[i], &r[i]);
		assert_int_equal(rec[i].pidfd, -1);
		assert_true(procref_same(&rec[i], &r[i]));
		assert_int_equal(procref_match_pid(cs[i], &rec[i], f->child), 0);
		assert_int_equal(procref_revalidate(cs[i], &rec[i]), 0);
		/* the wrong pid is a different process */
		assert_int_equal(procref_match_pid(cs[i], &rec[i], getpid()), -ESTALE);
	}
	/* a pid_start record still matches on a host with pidfs (spelled the
	 * old way), a pidfs record cannot be checked without pidfs */
	assert_int_equal(procref_match_pid(&f->fast, &rec[1], f->child), 0);
	assert_int_equal(procref_match_pid(&f->slow, &rec[0], f->child), -EOPNOTSUPP);

	/* zombie: exited, not reaped -> gone for every purpose */
	kill(f->child, SIGKILL);
	siginfo_t si;
	assert_int_equal(waitid(P_PID, (id_t)f->child, &si, WEXITED | WNOWAIT), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(procref_revalidate(cs[i], &r[i]), -ESRCH);
		struct procref z;
		assert_int_equal(procref_open(cs[i], f->child, &z), -ESRCH);
		assert_int_equal(z.pidfd, -1);
	}
	/* reaped */
	reap(f->child);
	pid_t dead = f->child;
	f->child = -1;
	for (int i = 0; i < 2; i++) {
		assert_int_equal(procref_revalidate(cs[i], &r[i]), -ESRCH);
		int m = procref_match_pid(cs[i], &rec[i], dead);
		assert_true(m == -ESRCH || m == -ESTALE); /* never a match */
		assert_int_not_equal(procref_revalidate(cs[i], &rec[i]), 0);
		procref_close(&r[i]);
	}
}

static void bad_args(void **state)
{
	struct fixture *f = *state;
	struct procref r;
	assert_int_equal(procref_open(&f->fast, 0, &r), -EINVAL);
	assert_int_equal(r.pidfd, -1);
	assert_int_equal(procref_open(&f->fast, -5, &r), -EINVAL);
	assert_int_equal(procref_from_pidfd(&f->fast, -1, &r), -EBADF);
	/* a non-pidfd fd is refused, not misread */
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_true(procref_from_pidfd(&f->fast, fd, &r) < 0);
	assert_true(procref_from_pidfd(&f->slow, fd, &r) < 0);
	close(fd);
	struct kernel_caps nob = f->fast;
	nob.boot_id[0] = '\0';
	assert_int_equal(procref_open(&nob, getpid(), &r), -EINVAL);
	struct procref empty;
	memset(&empty, 0, sizeof(empty));
	assert_false(procref_same(&empty, &empty));
	char key[PROCREF_KEY_MAX];
	assert_int_equal(procref_format_key(&empty, PROCREF_KEY_PIDFS, key, sizeof(key)), -EINVAL);
	assert_string_equal(procref_key_kind_name(PROCREF_KEY_PIDFS), "pidfs");
	assert_string_equal(procref_key_kind_name(PROCREF_KEY_PID_START), "pid_start");
	assert_string_equal(procref_source_name(PROCREF_SRC_PROCFS), "procfs");
	assert_string_equal(procref_source_name(PROCREF_SRC_PIDFD_INFO), "pidfd_info");
}

/* Kernel threads have no exe: the ref opens, exe_err says why. */
static void kernel_thread(void **state)
{
	struct fixture *f = *state;
	char buf[32] = "";
	FILE *fp = fopen("/proc/2/comm", "r");
	if (!fp || !fgets(buf, sizeof(buf), fp) || strcmp(buf, "kthreadd\n") != 0) {
		if (fp)
			fclose(fp);
		skip(); /* not in the initial pid namespace */
	}
	fclose(fp);
	struct kernel_caps *cs[2] = { &f->fast, &f->slow };
	for (int i = 0; i < 2; i++) {
		struct procref r;
		assert_int_equal(procref_open(cs[i], 2, &r), 0);
		assert_string_equal(r.comm, "kthreadd");
		assert_int_equal(r.exe_err, -ENOENT);
		assert_int_equal(r.exe.ino, 0);
		assert_int_equal(procref_hash_exe(&r, NULL), -ENOENT);
		procref_close(&r);
	}
}

/* A child in its own cgroup v2 directory: the fallback (cgroup file +
 * name_to_handle_at) and PIDFD_GET_INFO agree on a non-root cgroup id. */
static void cgroup_child(void **state)
{
	struct fixture *f = *state;
	if (!f->fast.cgroup_v2)
		skip();
	char dir[512], procs[600];
	snprintf(dir, sizeof(dir), "%s/tether-core-test-%d", f->fast.cgroup_root, (int)getpid());
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
	/* cgroup of this process, to know which id is "ours" */
	struct procref me;
	assert_int_equal(procref_open(&f->fast, getpid(), &me), 0);
	procref_close(&me);
	if (mkdir(dir, 0755) < 0)
		fail_msg("mkdir %s: %s", dir, strerror(errno));
	strscpy(f->cgdir, dir, sizeof(f->cgdir));
	f->child = spawn_child((uid_t)-1, (gid_t)-1, NULL);
	FILE *fp = fopen(procs, "w");
	bool moved = fp && fprintf(fp, "%d\n", (int)f->child) > 0;
	if (fp && fclose(fp) != 0)
		moved = false;
	struct procref a, b;
	int ra = -1, rb = -1;
	if (moved) {
		ra = procref_open(&f->fast, f->child, &a);
		rb = procref_open(&f->slow, f->child, &b);
	}
	/* clean up before asserting: the cgroup must go even on failure */
	reap(f->child);
	f->child = -1;
	int rm = rmdir(dir);
	if (rm == 0)
		f->cgdir[0] = '\0';
	assert_true(moved);
	assert_int_equal(rm, 0);
	assert_int_equal(ra, 0);
	assert_int_equal(rb, 0);
	assert_true(a.cgroup_id != 0);
	assert_true(a.cgroup_id == b.cgroup_id);
	assert_true(a.cgroup_id != me.cgroup_id);
	procref_close(&a);
	procref_close(&b);
}

/* PROCREF_NO_EXE: same identity, no exe tuple, and it says so. */
static void no_exe(void **state)
{
	struct fixture *f = *state;
	struct kernel_caps *cs[2] = { &f->fast, &f->slow };
	for (int i = 0; i < 2; i++) {
		struct procref full, lean, lean2;
		assert_int_equal(procref_open(cs[i], getpid(), &full), 0);
		assert_int_equal(procref_open_ex(cs[i], getpid(), PROCREF_NO_EXE, &lean), 0);
		assert_true(procref_same(&full, &lean));
		assert_int_equal(lean.exe_err, -ENODATA);
		assert_int_equal(lean.exe.ino, 0);
		assert_int_equal(procref_hash_exe(&lean, NULL), -ENODATA);
		assert_int_equal(procref_from_pidfd_ex(cs[i], lean.pidfd, PROCREF_NO_EXE, &lean2), 0);
		assert_true(procref_same(&lean2, &full));
		assert_int_equal(lean2.exe_err, -ENODATA);
		assert_int_equal(full.exe_err, 0);
		procref_close(&full);
		procref_close(&lean);
		procref_close(&lean2);
	}
}

/* TETHER_FORCE_FALLBACK reaches procref through kernel_caps_probe. */
static void env_forced(void **state)
{
	struct kernel_caps c;
	setenv("TETHER_FORCE_FALLBACK", "pidfs_ino,pidfd_info", 1);
	assert_int_equal(kernel_caps_probe(&c), 0);
	unsetenv("TETHER_FORCE_FALLBACK");
	struct procref r;
	assert_int_equal(procref_open(&c, getpid(), &r), 0);
	assert_int_equal(r.key_kind, PROCREF_KEY_PID_START);
	assert_int_equal(r.info_source, PROCREF_SRC_PROCFS);
	procref_close(&r);
	/* cgroup forced off: id unknown (0), everything else still works */
	setenv("TETHER_FORCE_FALLBACK", "all", 1);
	assert_int_equal(kernel_caps_probe(&c), 0);
	unsetenv("TETHER_FORCE_FALLBACK");
	assert_int_equal(procref_open(&c, getpid(), &r), 0);
	assert_int_equal(r.cgroup_id, 0);
	assert_int_equal(r.key_kind, PROCREF_KEY_PID_START);
	procref_close(&r);
}

/* The exe hash of a live ref equals a plain hash of the same file. */
static void hash_self(void **state)
{
	struct fixture *f = *state;
	struct procref r;
	assert_int_equal(procref_open(&f->fast, getpid(), &r), 0);
	assert_int_equal(procref_hash_exe(&r, NULL), 0);
	assert_true(r.exe.hashed);
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	uint8_t h[32];
	assert_int_equal(exe_hash_fd(fd, h), 0);
	close(fd);
	assert_memory_equal(h, r.exe.sha256, 32);
	/* recorded refs cannot be hashed: they prove nothing live */
	struct procref rec;
	procref_copy_recorded(&rec, &r);
	assert_int_equal(procref_hash_exe(&rec, NULL), -EBADF);
	procref_close(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(probe_sanity, setup, teardown),
		cmocka_unit_test_setup_teardown(self_ref, setup, teardown),
		cmocka_unit_test_setup_teardown(child_ref, setup, teardown),
		cmocka_unit_test_setup_teardown(bad_args, setup, teardown),
		cmocka_unit_test_setup_teardown(kernel_thread, setup, teardown),
		cmocka_unit_test_setup_teardown(cgroup_child, setup, teardown),
		cmocka_unit_test_setup_teardown(no_exe, setup, teardown),
		cmocka_unit_test_setup_teardown(env_forced, setup, teardown),
		cmocka_unit_test_setup_teardown(hash_self, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
