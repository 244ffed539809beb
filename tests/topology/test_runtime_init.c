/* tether-runtime-init as PID 1 of a fresh PID namespace: its image cannot
 * be reached from outside, it runs and reaps, forwards signals, and passes
 * its child's exit status through. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/kernel.h"
#include "common/util.h"
#include "nschild.h"

static char init_bin[PATH_MAX];

struct init_run {
	pid_t direct; /* our child, which unshared the PID ns */
	pid_t init;   /* runtime-init, PID 1 inside, in our PID ns */
	int pidfd;    /* of init */
};

/* Our child unshares a PID namespace and forks runtime-init as its PID 1,
 * then exits with init's status (128+N for signal N). */
static void init_start_caps(struct init_run *r, const char *const *args, bool drop_ptrace)
{
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t parent = getpid();
	pid_t d = fork();
	assert_true(d >= 0);
	if (d == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent || unshare(CLONE_NEWPID) < 0)
			_exit(120);
		if (drop_ptrace && prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) < 0)
			_exit(125);
		pid_t g = fork();
		if (g < 0)
			_exit(121);
		if (g == 0) {
			char *argv[16] = { init_bin };
			for (int i = 0; args[i] && i < 14; i++)
				argv[i + 1] = (char *)args[i];
			execv(init_bin, argv);
			_exit(122);
		}
		if (write(p[1], &g, sizeof(g)) != sizeof(g))
			_exit(123);
		int st;
		while (waitpid(g, &st, 0) < 0)
			if (errno != EINTR)
				_exit(124);
		_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	}
	close(p[1]);
	struct pollfd pp = { .fd = p[0], .events = POLLIN };
	assert_int_equal(poll(&pp, 1, 5000), 1);
	assert_int_equal(read(p[0], &r->init, sizeof(r->init)), (ssize_t)sizeof(r->init));
	close(p[0]);
	r->direct = d;
	r->pidfd = sys_pidfd_open(r->init, 0);
	assert_true(r->pidfd >= 0);
}

static void init_start(struct init_run *r, const char *const *args)
{
	init_start_caps(r, args, false);
}

/* Exit status of the run, bounded: kill after timeout_ms. */
static int init_wait(struct init_run *r, int timeout_ms)
{
	struct pollfd p = { .fd = r->pidfd, .events = POLLIN };
	if (poll(&p, 1, timeout_ms) != 1)
		sys_pidfd_send_signal(r->pidfd, SIGKILL, NULL, 0);
	int st;
	assert_int_equal(waitpid(r->direct, &st, 0), r->direct);
	close(r->pidfd);
	r->pidfd = -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void init_kill(struct init_run *r)
{
	if (r->pidfd >= 0) {
		sys_pidfd_send_signal(r->pidfd, SIGKILL, NULL, 0);
		init_wait(r, 2000);
	}
}

static int run_plain(const char *const *args, char *out, size_t outsz)
{
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		char *argv[8] = { init_bin };
		for (int i = 0; args[i] && i < 6; i++)
			argv[i + 1] = (char *)args[i];
		execv(init_bin, argv);
		_exit(122);
	}
	close(p[1]);
	size_t off = 0;
	ssize_t n;
	while (off + 1 < outsz && (n = read(p[0], out + off, outsz - 1 - off)) > 0)
		off += (size_t)n;
	out[off] = '\0';
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_usage(void **state)
{
	(void)state;
	char out[4096];
	assert_int_equal(run_plain((const char *[]){ "--help", NULL }, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "Usage: tether-runtime-init"));
	assert_int_equal(run_plain((const char *[]){ NULL }, out, sizeof(out)), 2);
	assert_non_null(strstr(out, "missing CMD"));
	assert_int_equal(run_plain((const char *[]){ "--bogus", "--", "true", NULL }, out, sizeof(out)), 2);
	assert_int_equal(run_plain((const char *[]){ "--mount-proc", "--no-mount-ns", "--", "true", NULL }, out,
				   sizeof(out)), 2);
}

/* The direct children of pid (in our PID ns). */
static int children_of(pid_t pid, pid_t *out, int max)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	if (read_file_at(AT_FDCWD, path, buf, sizeof(buf)) < 0)
		return -1;
	int n = 0;
	char *s = buf, *end;
	for (long v; n < max && (v = strtol(s, &end, 10), end != s); s = end)
		out[n++] = (pid_t)v;
	return n;
}

static char proc_state(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_file_at(AT_FDCWD, path, buf, sizeof(buf)) < 0)
		return '?';
	char *rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' ? rp[2] : '?';
}

static bool wait_deleted_exe(pid_t pid, char *link, size_t size)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	for (int i = 0; i < 300; i++) {
		ssize_t n = readlink(path, link, size - 1);
		if (n > 0) {
			link[n] = '\0';
			if (strstr(link, " (deleted)"))
				return true;
		}
		usleep(10000);
	}
	return false;
}

/* In a child: drop CAP_SYS_PTRACE (stay root), then stat each path.
 * Returns a bit per path that could be stat'ed (4: a failed other than
 * EACCES). The targets lack CAP_SYS_PTRACE too, so the only difference
 * between a and b is whether they are dumpable. */
static int stat_without_ptrace_cap(const char *a, const char *b)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) < 0)
			_exit(102);
		struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
		struct __user_cap_data_struct d[2];
		if (syscall(SYS_capget, &h, d) < 0)
			_exit(100);
		d[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
		d[CAP_SYS_PTRACE / 32].permitted &= ~(1u << (CAP_SYS_PTRACE % 32));
		if (syscall(SYS_capset, &h, d) < 0)
			_exit(101);
		struct stat st;
		int bits = 0;
		if (stat(a, &st) == 0)
			bits |= 1;
		else if (errno != EACCES)
			bits |= 4;
		if (stat(b, &st) == 0)
			bits |= 2;
		_exit(bits);
	}
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void check_hidden(bool mount_ns)
{
	struct init_run r;
	const char *with_ns[] = { "--", "sleep", "20", NULL };
	const char *no_ns[] = { "--no-mount-ns", "--", "sleep", "20", NULL };
	init_start_caps(&r, mount_ns ? with_ns : no_ns, true);

	char link[PATH_MAX];
	assert_true(wait_deleted_exe(r.init, link, sizeof(link)));
	/* the path the kernel names for the image reaches nothing */
	char *del = strstr(link, " (deleted)");
	*del = '\0';
	struct stat st;
	assert_int_equal(stat(link, &st), -1);
	assert_int_equal(errno, ENOENT);
	assert_int_equal(open(link, O_RDONLY | O_CLOEXEC), -1);
	assert_string_not_equal(link, init_bin);
	if (mount_ns) /* the tmpfs copy never shows up out here */
		assert_null(strstr(link, "tether-init."));

	/* the child runs: exactly one child, `sleep`, whose exe is fine */
	pid_t kids[8];
	int n = 0;
	for (int i = 0; i < 300 && n < 1; i++) {
		n = children_of(r.init, kids, 8);
		if (n < 1)
			usleep(10000);
	}
	assert_int_equal(n, 1);
	char comm[64], path[64];
	for (int i = 0; i < 300; i++) { /* fork, then exec: wait for the exec */
		snprintf(path, sizeof(path), "/proc/%d/comm", (int)kids[0]);
		if (read_file_at(AT_FDCWD, path, comm, sizeof(comm)) > 0 && strcmp(comm, "sleep\n") == 0)
			break;
		usleep(10000);
	}
	assert_string_equal(comm, "sleep\n");

	/* without CAP_SYS_PTRACE /proc/<init>/exe cannot even be followed,
	 * while the child's can (it is dumpable again after exec) */
	char init_exe[64], kid_exe[64];
	snprintf(init_exe, sizeof(init_exe), "/proc/%d/exe", (int)r.init);
	snprintf(kid_exe, sizeof(kid_exe), "/proc/%d/exe", (int)kids[0]);
	assert_int_equal(stat_without_ptrace_cap(init_exe, kid_exe), 2);

	init_kill(&r); /* PID 1 dies → the namespace dies → sleep dies */
	assert_int_equal(kill(kids[0], 0), -1);
}

static void test_hidden_image_mount_ns(void **state)
{
	(void)state;
	if (!tt_is_root())
		skip();
	check_hidden(true);
}

static void test_hidden_image_copy(void **state)
{
	(void)state;
	if (!tt_is_root())
		skip();
	check_hidden(false);
}

static void test_exit_status(void **state)
{
	(void)state;
	if (!tt_is_root())
		skip();
	struct init_run r;
	init_start(&r, (const char *[]){ "--", "sh", "-c", "exit 7", NULL });
	assert_int_equal(init_wait(&r, 5000), 7);
	init_start(&r, (const char *[]){ "--", "sh", "-c", "kill -TERM $$", NULL });
	assert_int_equal(init_wait(&r, 5000), 128 + SIGTERM);
	init_start(&r, (const char *[]){ "--", "/nonexistent/tt-test-cmd", NULL });
	assert_int_equal(init_wait(&r, 5000), 127);
	init_start(&r, (const char *[]){ "--", "/etc/passwd", NULL }); /* not executable */
	assert_int_equal(init_wait(&r, 5000), 126);
	/* --mount-proc: inside, /proc is the new namespace's: our sh is pid 2 */
	init_start(&r, (const char *[]){ "--mount-proc", "--", "sh", "-c",
					 "test \"$(cat /proc/1/comm)\" = tether-init && test \"$(cat /proc/2/comm)\" = sh", NULL });
	assert_int_equal(init_wait(&r, 5000), 0);
}

static void test_reaps_orphans(void **state)
{
	(void)state;
	if (!tt_is_root())
		skip();
	struct init_run r;
	/* the subshell exits at once; its `sleep 0.2` is orphaned to PID 1 */
	init_start(&r, (const char *[]){ "--", "sh", "-c", "(sleep 0.2 &); exec sleep 20", NULL });
	pid_t kids[8];
	int n = 0;
	bool saw_orphan = false;
	/* first the orphan shows up as a second child, then it must be reaped */
	for (int i = 0; i < 300; i++) {
		n = children_of(r.init, kids, 8);
		if (n >= 2)
			saw_orphan = true;
		if (saw_orphan && n == 1)
			break;
		usleep(10000);
	}
	assert_true(saw_orphan);
	assert_int_equal(n, 1);
	assert_int_not_equal(proc_state(kids[0]), 'Z');
	init_kill(&r);
}

static void test_forwards_signals(void **state)
{
	(void)state;
	if (!tt_is_root())
		skip();
	struct init_run r;
	init_start(&r, (const char *[]){ "--", "sleep", "20", NULL });
	char link[PATH_MAX];
	assert_true(wait_deleted_exe(r.init, link, sizeof(link))); /* stage 2 is running */
	pid_t kids[2];
	int n = 0;
	for (int i = 0; i < 300 && n < 1; i++) {
		n = children_of(r.init, kids, 2);
		if (n < 1)
			usleep(10000);
	}
	assert_int_equal(n, 1);
	usleep(50000);
	/* SIGTERM to PID 1 from outside reaches the child, whose death ends init */
	assert_int_equal(sys_pidfd_send_signal(r.pidfd, SIGTERM, NULL, 0), 0);
	assert_int_equal(init_wait(&r, 5000), 128 + SIGTERM);
}

int main(void)
{
	const char *bin = getenv("TETHER_BIN");
	snprintf(init_bin, sizeof(init_bin), "%s/tether-runtime-init", bin ? bin : "bin");
	if (access(init_bin, X_OK) < 0) {
		fprintf(stderr, "cannot find %s (set TETHER_BIN)\n", init_bin);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_usage),
		cmocka_unit_test(test_hidden_image_mount_ns),
		cmocka_unit_test(test_hidden_image_copy),
		cmocka_unit_test(test_exit_status),
		cmocka_unit_test(test_reaps_orphans),
		cmocka_unit_test(test_forwards_signals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
