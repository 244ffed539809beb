/* vm-init: a PID namespace whose PID 1 is a separate "init" program, like a
 * VM's /init.krun, that the anchor cannot even stat: the init is a copy of
 * this binary exec'd from a tmpfs, then unlinked and lazily unmounted, and it
 * makes itself non-dumpable; the anchor (its child) runs without
 * CAP_SYS_PTRACE, so /proc/1/exe is unreadable to it (checked). Members live
 * below the anchor. Every pid the walk opens is recorded through the
 * on_open hook: walks from members succeed and PID 1 is never among them; a
 * sibling of the anchor (another child of PID 1) fails with
 * reached_namespace_init, also without opening PID 1.
 *
 * Roles (argv[1]): none = the test driver; --vm-init = PID 1;
 * --vm-anchor FPID = the anchor; --vm-idle = an idle sibling. */
#include <linux/capability.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "tests/identity/lineage_common.h"

static int copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	if (out < 0) {
		close(in);
		return -errno;
	}
	char buf[65536];
	ssize_t n;
	int r = 0;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n) {
			r = -EIO;
			break;
		}
	if (n < 0)
		r = -errno;
	close(in);
	if (close(out) < 0 && r == 0)
		r = -errno;
	return r;
}

static int drop_cap_sys_ptrace(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return -errno;
	d[CAP_SYS_PTRACE / 32].effective &= ~(1U << (CAP_SYS_PTRACE % 32));
	d[CAP_SYS_PTRACE / 32].permitted &= ~(1U << (CAP_SYS_PTRACE % 32));
	if (syscall(SYS_capset, &h, d) < 0)
		return -errno;
	return 0;
}

/* The anchor: child of PID 1 inside the namespace. */
static int anchor_main(pid_t sibling)
{
	lt_init("lineage_vminit(anchor)", 20);
	LT_REQUIRE(getppid() == 1, "the anchor's parent is %d, not PID 1", (int)getppid());
	LT_REQUIRE(drop_cap_sys_ptrace() == 0, "capset");
	/* The setup must really hide PID 1's image from us. */
	struct stat st;
	char lnk[PATH_MAX];
	LT_REQUIRE(stat("/proc/1/exe", &st) < 0, "stat(/proc/1/exe) succeeded: bad setup");
	LT_REQUIRE(readlink("/proc/1/exe", lnk, sizeof(lnk)) < 0, "readlink(/proc/1/exe) succeeded");

	struct kernel_caps caps;
	lt_probe(&caps);
	struct procref anchor;
	LT_REQUIRE(procref_open(&caps, getpid(), &anchor) == 0, "open self");
	struct members *t;
	struct members_config cfg = { .mode = MEMBERSHIP_LINEAGE };
	LT_REQUIRE(members_create(&caps, &anchor, &cfg, &t) == 0, "members_create");

	/* C1 (spawned) -> C2 -> C3 -> C4; C2 and C3 learnt, C4 not. */
	int p2[2], p3[2], p4[2];
	LT_REQUIRE(pipe(p2) == 0 && pipe(p3) == 0 && pipe(p4) == 0, "pipe");
	pid_t c1 = lt_fork();
	LT_REQUIRE(c1 >= 0, "fork");
	if (c1 == 0) {
		pid_t c2 = fork();
		if (c2 == 0) {
			pid_t c3 = fork();
			if (c3 == 0) {
				pid_t c4 = fork();
				if (c4 == 0)
					lt_idle();
				lt_send_pid(p4[1], c4);
				lt_idle();
			}
			lt_send_pid(p3[1], c3);
			lt_idle();
		}
		lt_send_pid(p2[1], c2);
		lt_idle();
	}
	pid_t c2, c3, c4;
	LT_REQUIRE(lt_recv_pid(p2[0], &c2, 5000) == 0 && lt_recv_pid(p3[0], &c3, 5000) == 0 &&
			   lt_recv_pid(p4[0], &c4, 5000) == 0,
		   "chain did not report");
	struct procref c1r, c3r, c4r, sr;
	LT_REQUIRE(procref_open(&caps, c1, &c1r) == 0, "open C1");
	LT_REQUIRE(members_add_spawned(t, &c1r, MEMBER_ENTRYPOINT) == 0, "add C1");
	enum reason why;
	int r = members_learn(t, c3, &why, NULL);
	LT_CHECK(r == 0, "learn C3: %d %s", r, reason_word(why));

	struct lt_opened o = { .n = 0 };
	struct ancestry_opts opts = { .on_open = lt_record_open, .userdata = &o };
	struct ancestry_result res;

	LT_REQUIRE(procref_open(&caps, c4, &c4r) == 0, "open C4");
	r = ancestry_walk(&caps, t, &c4r, &opts, &res);
	LT_CHECK(r == 0 && res.anchored, "walk C4: %s (%s)", reason_word(res.reason), res.detail);
	LT_CHECK(res.n == 4, "chain length %zu", res.n);
	if (res.n == 4) {
		LT_CHECK(res.hops[0].ref.pid == c3 && res.hops[1].ref.pid == c2 &&
				 res.hops[2].ref.pid == c1,
			 "chain is not C3 C2 C1");
		LT_CHECK(strcmp(res.hops[3].ref.key, anchor.key) == 0, "chain does not end at anchor");
	}
	ancestry_result_free(&res);
	LT_CHECK(o.n > 0, "the hook saw nothing");
	LT_CHECK(!lt_opened_has(&o, 1), "the walk from C4 opened PID 1");

	LT_REQUIRE(procref_open(&caps, c3, &c3r) == 0, "open C3");
	r = ancestry_walk(&caps, t, &c3r, &opts, &res);
	LT_CHECK(r == 0 && res.n == 3, "walk C3: %s (%s)", reason_word(res.reason), res.detail);
	ancestry_result_free(&res);
	LT_CHECK(!lt_opened_has(&o, 1), "the walk from C3 opened PID 1");

	/* Another child of PID 1 is not below the anchor. */
	LT_REQUIRE(procref_open(&caps, sibling, &sr) == 0, "open sibling");
	r = ancestry_walk(&caps, t, &sr, &opts, &res);
	LT_CHECK(r == -EPERM && res.reason == REASON_REACHED_NAMESPACE_INIT, "walk sibling: %s",
		 reason_word(res.reason));
	ancestry_result_free(&res);
	LT_CHECK(!lt_opened_has(&o, 1), "the walk from the sibling opened PID 1");
	r = members_learn(t, sibling, &why, NULL);
	LT_CHECK(r == -EPERM && why == REASON_REACHED_NAMESPACE_INIT, "learn sibling: %d %s", r,
		 reason_word(why));
	LT_CHECK(members_lookup_key(t, sr.key, NULL) == -ENOENT, "sibling was recorded");

	/* The unanchored display walk stops before PID 1 without opening it. */
	o.n = 0;
	r = ancestry_walk_unanchored(&caps, &c4r, &opts, &res);
	LT_CHECK(r == 0 && res.n == 4 && res.hops[3].ref.pid == getpid(),
		 "unanchored walk: %s n=%zu", reason_word(res.reason), res.n);
	ancestry_result_free(&res);
	LT_CHECK(!lt_opened_has(&o, 1), "the unanchored walk opened PID 1");

	procref_close(&c1r);
	procref_close(&c3r);
	procref_close(&c4r);
	procref_close(&sr);
	procref_close(&anchor);
	members_free(t);
	/* C2..C4 are not our children: kill them by pid before C1. */
	kill(c4, SIGKILL);
	kill(c3, SIGKILL);
	kill(c2, SIGKILL);
	kill(c1, SIGKILL);
	lt_reap(c1, 5000);
	lt_npids = 0;
	return lt_finish();
}

/* PID 1: hide our own image, start the sibling and the anchor, reap, and
 * exit with the anchor's status. */
static int init_main(const char *dir, const char *self_exe)
{
	if (getpid() != 1)
		return 21;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/init", dir);
	if (unlink(path) < 0 || umount2(dir, MNT_DETACH) < 0 || rmdir(dir) < 0)
		return 22;
	if (prctl(PR_SET_DUMPABLE, 0) < 0)
		return 23;
	alarm(25);
	pid_t sib = fork();
	if (sib == 0) {
		execl(self_exe, "idle", "--vm-idle", (char *)NULL);
		_exit(24);
	}
	char sibs[16];
	snprintf(sibs, sizeof(sibs), "%d", (int)sib);
	pid_t a = fork();
	if (a == 0) {
		execl(self_exe, "anchor", "--vm-anchor", sibs, (char *)NULL);
		_exit(25);
	}
	for (;;) {
		int st;
		pid_t w = wait(&st);
		if (w < 0)
			return 26;
		if (w == a)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 27;
	}
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "--vm-idle") == 0)
		lt_idle();
	if (argc >= 3 && strcmp(argv[1], "--vm-anchor") == 0)
		return anchor_main((pid_t)atoi(argv[2]));
	if (argc >= 4 && strcmp(argv[1], "--vm-init") == 0)
		return init_main(argv[2], argv[3]);

	lt_init("lineage_vminit", 25);
	char self_exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	LT_REQUIRE(n > 0, "readlink self");
	self_exe[n] = '\0';
	char dir[] = "/tmp/tether-vminit-XXXXXX";
	LT_REQUIRE(mkdtemp(dir), "mkdtemp");

	pid_t c = lt_fork();
	LT_REQUIRE(c >= 0, "fork");
	if (c == 0) {
		if (unshare(CLONE_NEWNS | CLONE_NEWPID) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
			_exit(30);
		pid_t g = fork();
		if (g == 0) {
			char path[PATH_MAX];
			snprintf(path, sizeof(path), "%s/init", dir);
			if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
			    mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=64m") < 0 ||
			    copy_file(self_exe, path) < 0)
				_exit(31);
			execl(path, "init", "--vm-init", dir, self_exe, (char *)NULL);
			_exit(32);
		}
		int st;
		if (waitpid(g, &st, 0) < 0)
			_exit(33);
		_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 34);
	}
	int st = lt_reap(c, 22000);
	lt_npids = 0;
	rmdir(dir); /* normally already gone: the init removed it */
	LT_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		 "namespace side failed: status %d (exit %d)", st, st >= 0 ? WEXITSTATUS(st) : -1);
	LT_CHECK(access(dir, F_OK) < 0, "%s left behind", dir);
	return lt_finish();
}
