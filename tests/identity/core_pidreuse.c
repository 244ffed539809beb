/* pid-reuse: a recorded ProcessRef must never match a newcomer that was
 * given the same pid.
 *
 * The test process clone3()s an init of a fresh PID namespace. That init
 * (root, so CAP_SYS_ADMIN over its pidns) makes a process with pid N via
 * clone3 set_tid, records its ref, kills and reaps it, waits 20 ms (start
 * times tick at 10 ms, so the newcomer's start_time must differ), makes a new
 * process with the same pid N, and checks that the old ref does not match.
 * Run four ways: fast caps and pidfs_ino+pidfd_info forced off, each with
 * the outer /proc (procfs of the parent pidns: the fdinfo/NSpid translation
 * path) and with a fresh /proc mounted in a private mount namespace. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/kernel.h"
#include "common/util.h"
#include "identity/procref.h"
#include "tests/common/clone_at.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REUSED_PID 1000

static int report_fd = -1;

/* Inside the namespace init there is no cmocka: report the first failed
 * check through a pipe and exit non-zero. */
#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			dprintf(report_fd, "%s:%d: check failed: %s (errno %d)\n", __FILE__, \
				__LINE__, #cond, errno);                             \
			_exit(1);                                                    \
		}                                                                    \
	} while (0)

static pid_t spawn_at(pid_t want)
{
	pid_t pid = clone_at_pid(want);
	if (pid == 0) {
		alarm(20);
		for (;;)
			pause();
	}
	return pid;
}

static void kill_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void ns_init(bool fresh_proc, const char *fallback)
{
	alarm(20);
	if (fresh_proc) {
		CHECK(unshare(CLONE_NEWNS) == 0);
		CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0);
		CHECK(mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0);
	}
	CHECK(getpid() == 1);
	struct kernel_caps caps;
	CHECK(kernel_caps_probe(&caps) == 0);
	if (fallback)
		CHECK(kernel_caps_force_fallback(&caps, fallback) == 0);

	pid_t first = spawn_at(REUSED_PID);
	CHECK(first == REUSED_PID);
	struct procref live, rec;
	CHECK(procref_open(&caps, REUSED_PID, &live) == 0);
	CHECK(live.pid == REUSED_PID);
	CHECK(live.ppid == 1);
	CHECK(live.key_kind == (caps.pidfs_ino ? PROCREF_KEY_PIDFS : PROCREF_KEY_PID_START));
	procref_copy_recorded(&rec, &live);
	CHECK(procref_match_pid(&caps, &rec, REUSED_PID) == 0);

	kill_reap(first);
	CHECK(procref_revalidate(&caps, &live) == -ESRCH);
	CHECK(procref_match_pid(&caps, &rec, REUSED_PID) == -ESRCH);
	sleep_ms(25);

	pid_t second = spawn_at(REUSED_PID);
	CHECK(second == REUSED_PID);
	/* The newcomer has the same pid, and is not the recorded process. */
	CHECK(procref_match_pid(&caps, &rec, REUSED_PID) == -ESTALE);
	CHECK(procref_revalidate(&caps, &rec) == -ESTALE);
	CHECK(procref_revalidate(&caps, &live) == -ESRCH); /* the old pidfd stays dead */
	struct procref now;
	CHECK(procref_open(&caps, REUSED_PID, &now) == 0);
	CHECK(now.pid == REUSED_PID);
	CHECK(strcmp(now.key, rec.key) != 0);
	CHECK(!procref_same(&now, &rec));
	CHECK(now.start_time > rec.start_time);
	if (caps.pidfs_ino)
		CHECK(now.pidfs_ino != rec.pidfs_ino);
	procref_close(&now);
	procref_close(&live);
	kill_reap(second);
	dprintf(report_fd, "ok %s\n", rec.key);
	_exit(0);
}

static void run(bool fresh_proc, const char *fallback)
{
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	struct tether_clone_args a = { .flags = CLONE_NEWPID, .exit_signal = SIGCHLD };
	pid_t init = sys_clone3(&a, sizeof(a));
	assert_true(init >= 0);
	if (init == 0) {
		close(p[0]);
		report_fd = p[1];
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		ns_init(fresh_proc, fallback);
		_exit(2);
	}
	close(p[1]);
	char msg[512] = "";
	size_t have = 0;
	struct pollfd pf = { .fd = p[0], .events = POLLIN };
	while (have < sizeof(msg) - 1 && poll(&pf, 1, 15000) == 1) {
		ssize_t n = read(p[0], msg + have, sizeof(msg) - 1 - have);
		if (n <= 0)
			break;
		have += (size_t)n;
	}
	close(p[0]);
	kill(init, SIGKILL); /* no-op when it finished; bounds it otherwise */
	int st = 0;
	assert_int_equal(waitpid(init, &st, 0), init);
	printf("# fresh_proc=%d fallback=%s: %s", fresh_proc, fallback ? fallback : "none", msg);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("namespace init failed: %s", msg[0] ? msg : "(no report)");
	assert_true(strncmp(msg, "ok ", 3) == 0);
}

static void reuse_outer_proc_fast(void **state) { run(false, NULL); }
static void reuse_outer_proc_fallback(void **state) { run(false, "pidfs_ino,pidfd_info"); }
static void reuse_fresh_proc_fast(void **state) { run(true, NULL); }
static void reuse_fresh_proc_fallback(void **state) { run(true, "pidfs_ino,pidfd_info"); }

int main(void)
{
	unsetenv("TETHER_FORCE_FALLBACK");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reuse_outer_proc_fast),
		cmocka_unit_test(reuse_outer_proc_fallback),
		cmocka_unit_test(reuse_fresh_proc_fast),
		cmocka_unit_test(reuse_fresh_proc_fallback),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
