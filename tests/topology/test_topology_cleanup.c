/* The cleanup registry and the guardian: after the launcher is SIGKILLed,
 * every registered resource is gone within a bounded time. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <nftables/libnftables.h>

#include "common/kernel.h"
#include "common/util.h"
#include "nschild.h"
#include "launcher/cleanup.h"
#include "launcher/netns.h"

#define GONE_TIMEOUT_MS 5000

struct fixture {
	struct netns anon;            /* links and nft tables live here */
	char netns_name[NETNS_NAME_MAX];
	char tmpdir[PATH_MAX];
	char cgroup[PATH_MAX];
	bool have_cgroup;
	char nft_table[64];
};

static bool path_exists(const char *p)
{
	struct stat st;
	return lstat(p, &st) == 0;
}

static int nft_cmd_job(void *p)
{
	struct nft_ctx *ctx = nft_ctx_new(NFT_CTX_DEFAULT);
	if (!ctx)
		return -ENOMEM;
	nft_ctx_buffer_output(ctx);
	nft_ctx_buffer_error(ctx);
	int r = nft_run_cmd_from_buffer(ctx, (const char *)p);
	nft_ctx_free(ctx);
	return r == 0 ? 0 : -EIO;
}

static int nft_in(int ns_fd, const char *cmd)
{
	return netns_run(ns_fd, nft_cmd_job, (void *)cmd);
}

static int setup(void **state)
{
	if (!tt_is_root())
		return 0;
	struct fixture *f = calloc(1, sizeof(*f));
	f->anon = (struct netns)NETNS_INIT;
	if (netns_create(NULL, &f->anon, NULL) < 0)
		return -1;
	tt_name(f->netns_name, sizeof(f->netns_name), "g");
	snprintf(f->tmpdir, sizeof(f->tmpdir), "/tmp/tt-test-%d-XXXXXX", (int)getpid());
	if (!mkdtemp(f->tmpdir))
		return -1;
	struct kernel_caps caps;
	if (kernel_caps_probe(&caps) == 0 && caps.cgroup_v2) {
		snprintf(f->cgroup, sizeof(f->cgroup), "%s/tt-test-%d", caps.cgroup_root, (int)getpid());
		f->have_cgroup = strncmp(f->cgroup, "/sys/fs/cgroup/", 15) == 0;
	}
	snprintf(f->nft_table, sizeof(f->nft_table), "inet tt_test_%d", (int)getpid());
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	if (!f)
		return 0;
	cleanup_remove(CLEANUP_NETNS, f->netns_name, -1, NULL);
	cleanup_remove(CLEANUP_TEMP_DIR, f->tmpdir, -1, NULL);
	if (f->have_cgroup)
		cleanup_remove(CLEANUP_CGROUP, f->cgroup, -1, NULL);
	netns_delete(&f->anon, NULL); /* takes its links and tables with it */
	free(f);
	return 0;
}

static void fill_tree(const char *dir)
{
	char p[PATH_MAX + 16];
	snprintf(p, sizeof(p), "%s/a", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/a/b", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/a/b/file", dir);
	int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
	snprintf(p, sizeof(p), "%s/link", dir);
	assert_int_equal(symlink("/etc/hostname", p), 0); /* removed, never followed */
}

static pid_t spawn_sleeper(int *pidfd)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (int i = 0; i < 600; i++)
			usleep(100000);
		_exit(0);
	}
	*pidfd = sys_pidfd_open(pid, 0);
	assert_true(*pidfd >= 0);
	return pid;
}

static bool pidfd_exited(int pidfd, int timeout_ms)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	return poll(&p, 1, timeout_ms) == 1;
}

static void make_cgroup_with(const char *cg, pid_t pid)
{
	char p[PATH_MAX + 32];
	assert_int_equal(mkdir(cg, 0755), 0);
	snprintf(p, sizeof(p), "%s/sub", cg);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/sub/cgroup.procs", cg);
	int fd = open(p, O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%d", (int)pid);
	assert_int_equal(write(fd, buf, (size_t)n), n);
	close(fd);
}

static void test_registry_in_process(void **state)
{
	struct fixture *f = *state;
	if (!f)
		skip();
	struct cleanup_registry reg = CLEANUP_REGISTRY_INIT;
	struct topology_error err = { 0 };

	fill_tree(f->tmpdir);
	char keep[PATH_MAX + 8];
	snprintf(keep, sizeof(keep), "%s.keep", f->tmpdir);
	int kfd = open(keep, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	assert_true(kfd >= 0);
	close(kfd);
	assert_int_equal(cleanup_registry_add(&reg, CLEANUP_TEMP_DIR, 1, f->tmpdir, -1), 0);
	assert_int_equal(cleanup_registry_add(&reg, CLEANUP_FILE, 2, keep, -1), 0);
	assert_int_equal(cleanup_registry_forget(&reg, 2), 0); /* forgotten: must survive */
	assert_int_equal(cleanup_registry_forget(&reg, 2), -ENOENT);

	int pidfd;
	pid_t sleeper = spawn_sleeper(&pidfd);
	assert_int_equal(cleanup_registry_add(&reg, CLEANUP_PID, 3, NULL, dup(pidfd)), 0);

	struct netns named;
	assert_int_equal(netns_create(f->netns_name, &named, &err), 0);
	netns_close(&named);
	assert_int_equal(cleanup_registry_add(&reg, CLEANUP_NETNS, 4, f->netns_name, -1), 0);

	assert_int_equal(netns_veth_create(f->anon.fd, "tt4", -1, "tt5", &err), 0);
	assert_int_equal(cleanup_registry_add(&reg, CLEANUP_LINK, 5, "tt4", dup(f->anon.fd)), 0);

	char cmd[128];
	snprintf(cmd, sizeof(cmd), "add table %s", f->nft_table);
	assert_int_equal(nft_in(f->anon.fd, cmd), 0);
	assert_int_equal(cleanup_registry_add(&reg, CLEANUP_NFT_TABLE, 6, f->nft_table, dup(f->anon.fd)), 0);

	int cg_pidfd = -1;
	pid_t cg_sleeper = -1;
	if (f->have_cgroup) {
		cg_sleeper = spawn_sleeper(&cg_pidfd);
		make_cgroup_with(f->cgroup, cg_sleeper);
		assert_int_equal(cleanup_registry_add(&reg, CLEANUP_CGROUP, 7, f->cgroup, -1), 0);
	}

	/* malformed entries are refused up front */
	assert_int_equal(cleanup_registry_add(&reg, CLEANUP_PID, 8, NULL, -1), -EBADF);
	assert_int_equal(cleanup_registry_add(&reg, CLEANUP_TEMP_DIR, 8, NULL, -1), -EINVAL);
	assert_int_equal(cleanup_registry_add(&reg, (enum cleanup_kind)99, 8, "x", -1), -EINVAL);

	unsigned long long t0 = now_mono_ns();
	assert_int_equal(cleanup_registry_run(&reg, &err), 0);
	fprintf(stderr, "# registry run took %.1f ms\n", (double)(now_mono_ns() - t0) / 1e6);
	assert_int_equal(reg.n, 0);

	assert_false(path_exists(f->tmpdir));
	assert_true(path_exists(keep));
	unlink(keep);
	assert_true(pidfd_exited(pidfd, 0));
	int st;
	assert_int_equal(waitpid(sleeper, &st, 0), sleeper);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	close(pidfd);
	char nspath[PATH_MAX];
	snprintf(nspath, sizeof(nspath), "/run/netns/%s", f->netns_name);
	assert_false(path_exists(nspath));
	assert_int_equal(netns_link_exists(f->anon.fd, "tt4"), 0);
	snprintf(cmd, sizeof(cmd), "list table %s", f->nft_table);
	assert_int_not_equal(nft_in(f->anon.fd, cmd), 0);
	if (f->have_cgroup) {
		assert_false(path_exists(f->cgroup));
		assert_true(pidfd_exited(cg_pidfd, 1000));
		assert_int_equal(waitpid(cg_sleeper, &st, 0), cg_sleeper);
		assert_true(WIFSIGNALED(st));
		close(cg_pidfd);
	}

	/* running again on already-gone resources is not an error */
	assert_int_equal(cleanup_registry_add(&reg, CLEANUP_TEMP_DIR, 1, f->tmpdir, -1), 0);
	assert_int_equal(cleanup_registry_add(&reg, CLEANUP_NETNS, 2, f->netns_name, -1), 0);
	assert_int_equal(cleanup_registry_add(&reg, CLEANUP_LINK, 3, "tt4", dup(f->anon.fd)), 0);
	assert_int_equal(cleanup_registry_add(&reg, CLEANUP_NFT_TABLE, 4, f->nft_table, dup(f->anon.fd)), 0);
	assert_int_equal(cleanup_registry_run(&reg, &err), 0);
}

static void test_refuses_dangerous(void **state)
{
	(void)state;
	struct topology_error err = { 0 };
	assert_int_equal(cleanup_remove(CLEANUP_TEMP_DIR, "/", -1, &err), -EINVAL);
	assert_int_equal(cleanup_remove(CLEANUP_TEMP_DIR, "relative/dir", -1, &err), -EINVAL);
	assert_int_equal(cleanup_remove(CLEANUP_TEMP_DIR, "/tmp/../etc", -1, &err), -EINVAL);
	assert_int_equal(cleanup_remove(CLEANUP_FILE, "/tmp/x/..", -1, &err), -EINVAL);
	assert_int_equal(cleanup_remove(CLEANUP_CGROUP, "/etc", -1, &err), -EINVAL);
	assert_int_equal(cleanup_remove(CLEANUP_NFT_TABLE, "inet x; flush ruleset", -1, &err), -EINVAL);
	assert_int_equal(cleanup_remove(CLEANUP_NFT_TABLE, "nope x", -1, &err), -EINVAL);
	assert_int_equal(cleanup_remove(CLEANUP_NETNS, "../../etc", -1, &err), -EINVAL);
	assert_int_equal(cleanup_remove(CLEANUP_MOUNT, "/", -1, &err), -EINVAL);
	assert_true(path_exists("/etc/hostname") || path_exists("/etc/passwd"));
}

/* In a private mount namespace (nothing reaches the host's): a tmpfs on a
 * dir inside a temp dir, plus a file; LIFO order unmounts before removing. */
static void test_registry_mount_and_file(void **state)
{
	struct fixture *f = *state;
	if (!f)
		skip();
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
			_exit(10);
		char mnt[PATH_MAX + 16], file[PATH_MAX + 16], other[PATH_MAX + 16];
		snprintf(mnt, sizeof(mnt), "%s/m", f->tmpdir);
		snprintf(file, sizeof(file), "%s/m/inside", f->tmpdir);
		snprintf(other, sizeof(other), "%s.file", f->tmpdir);
		if (mkdir(mnt, 0700) < 0 || mount("tmpfs", mnt, "tmpfs", 0, "size=1m") < 0)
			_exit(11);
		close(open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
		close(open(other, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
		struct cleanup_registry reg = CLEANUP_REGISTRY_INIT;
		/* without the unmount, the dir cannot go: a mount point is EBUSY */
		struct topology_error e = { 0 };
		if (cleanup_remove(CLEANUP_TEMP_DIR, f->tmpdir, -1, &e) != -EBUSY || !path_exists(file))
			_exit(12);
		if (cleanup_registry_add(&reg, CLEANUP_TEMP_DIR, 1, f->tmpdir, -1) < 0 ||
		    cleanup_registry_add(&reg, CLEANUP_MOUNT, 2, mnt, -1) < 0 ||
		    cleanup_registry_add(&reg, CLEANUP_FILE, 3, other, -1) < 0)
			_exit(13);
		if (cleanup_registry_run(&reg, &e) < 0)
			_exit(14);
		if (path_exists(file) || path_exists(mnt) || path_exists(f->tmpdir) || path_exists(other))
			_exit(15);
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_false(path_exists(f->tmpdir));
}

/* ---- guardian --------------------------------------------------------- */

struct launcher_report {
	pid_t guardian;
	pid_t sleeper;
	char tmpdir[PATH_MAX];
};

enum launcher_end { END_SIGKILL, END_FINISH, END_RELEASE };

/* A launcher-like process: guardian, then netns + veth + temp dir + a
 * process + an nft table (+ a forgotten file), each registered right after
 * it is created. Reports to wfd, then ends as told. Never returns. */
static _Noreturn void launcher(struct fixture *f, int wfd, int go, enum launcher_end end, const char *keep)
{
	struct cleanup_guardian g;
	struct topology_error err = { 0 };
	if (cleanup_guardian_start(&g, &err) < 0)
		_exit(10);
	struct netns named;
	if (netns_create(f->netns_name, &named, &err) < 0)
		_exit(11);
	if (cleanup_guardian_add(&g, CLEANUP_NETNS, f->netns_name, -1, NULL) < 0)
		_exit(12);
	/* the veth's second end sits in the named netns */
	if (netns_veth_create(f->anon.fd, "tt6", named.fd, "tt7", &err) < 0)
		_exit(13);
	if (cleanup_guardian_add(&g, CLEANUP_LINK, "tt6", f->anon.fd, NULL) < 0)
		_exit(14);
	netns_close(&named);
	struct launcher_report rep = { .guardian = g.pid };
	snprintf(rep.tmpdir, sizeof(rep.tmpdir), "/tmp/tt-test-%d-l-XXXXXX", (int)getppid());
	if (!mkdtemp(rep.tmpdir))
		_exit(15);
	char file[PATH_MAX + 8];
	snprintf(file, sizeof(file), "%s/f", rep.tmpdir);
	close(open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
	if (cleanup_guardian_add(&g, CLEANUP_TEMP_DIR, rep.tmpdir, -1, NULL) < 0)
		_exit(16);
	pid_t s = fork();
	if (s == 0) {
		for (int i = 0; i < 600; i++)
			usleep(100000);
		_exit(0);
	}
	int spfd = sys_pidfd_open(s, 0);
	if (spfd < 0 || cleanup_guardian_add(&g, CLEANUP_PID, NULL, spfd, NULL) < 0)
		_exit(17);
	close(spfd);
	rep.sleeper = s;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "add table %s", f->nft_table);
	if (nft_in(f->anon.fd, cmd) < 0 || cleanup_guardian_add(&g, CLEANUP_NFT_TABLE, f->nft_table, f->anon.fd, NULL) < 0)
		_exit(18);
	uint64_t id;
	if (cleanup_guardian_add(&g, CLEANUP_FILE, keep, -1, &id) < 0 || cleanup_guardian_forget(&g, id) < 0)
		_exit(19);
	if (write(wfd, &rep, sizeof(rep)) != sizeof(rep))
		_exit(20);
	char c;
	if (read(go, &c, 1) != 1 && end != END_SIGKILL)
		_exit(23);
	if (end == END_FINISH)
		_exit(cleanup_guardian_finish(&g, 5000, &err) == 0 ? 0 : 21);
	if (end == END_RELEASE)
		_exit(cleanup_guardian_release(&g) == 0 ? 0 : 22);
	for (;;)
		pause(); /* wait for SIGKILL */
}

static void assert_all_gone(struct fixture *f, const struct launcher_report *rep, int sleeper_pidfd)
{
	char nspath[PATH_MAX];
	snprintf(nspath, sizeof(nspath), "/run/netns/%s", f->netns_name);
	assert_false(path_exists(nspath));
	assert_int_equal(netns_link_exists(f->anon.fd, "tt6"), 0);
	assert_false(path_exists(rep->tmpdir));
	assert_true(pidfd_exited(sleeper_pidfd, 0));
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "list table %s", f->nft_table);
	assert_int_not_equal(nft_in(f->anon.fd, cmd), 0);
}

static void reap_quietly(pid_t pid)
{
	int st;
	waitpid(pid, &st, 0);
}

static void run_launcher(struct fixture *f, enum launcher_end end)
{
	char keep[PATH_MAX];
	snprintf(keep, sizeof(keep), "/tmp/tt-test-%d-keep", (int)getpid());
	int kfd = open(keep, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	assert_true(kfd >= 0);
	close(kfd);

	/* Orphans (the guardian, the sleeper) come back to us to be reaped. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	int p[2], go[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	pid_t l = fork();
	assert_true(l >= 0);
	if (l == 0) {
		close(p[0]);
		close(go[1]);
		launcher(f, p[1], go[0], end, keep);
	}
	close(p[1]);
	close(go[0]);
	struct launcher_report rep;
	struct pollfd pp = { .fd = p[0], .events = POLLIN };
	assert_int_equal(poll(&pp, 1, 5000), 1);
	assert_int_equal(read(p[0], &rep, sizeof(rep)), (ssize_t)sizeof(rep));
	close(p[0]);
	int gfd = sys_pidfd_open(rep.guardian, 0);
	int sfd = sys_pidfd_open(rep.sleeper, 0);
	assert_true(gfd >= 0 && sfd >= 0);

	/* everything exists while the launcher lives */
	char nspath[PATH_MAX];
	snprintf(nspath, sizeof(nspath), "/run/netns/%s", f->netns_name);
	assert_true(path_exists(nspath));
	assert_int_equal(netns_link_exists(f->anon.fd, "tt6"), 1);
	assert_true(path_exists(rep.tmpdir));
	assert_false(pidfd_exited(sfd, 0));

	unsigned long long t0 = now_mono_ns();
	int st;
	assert_int_equal(write(go[1], "g", 1), 1);
	close(go[1]);
	if (end == END_SIGKILL)
		assert_int_equal(kill(l, SIGKILL), 0);
	assert_int_equal(waitpid(l, &st, 0), l);
	if (end == END_SIGKILL)
		assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	else
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	assert_true(pidfd_exited(gfd, GONE_TIMEOUT_MS)); /* bounded */
	double ms = (double)(now_mono_ns() - t0) / 1e6;
	reap_quietly(rep.guardian);
	if (end == END_RELEASE) {
		/* released: everything is still there; clean it ourselves */
		assert_true(path_exists(nspath));
		assert_true(path_exists(rep.tmpdir));
		assert_false(pidfd_exited(sfd, 0));
		sys_pidfd_send_signal(sfd, SIGKILL, NULL, 0);
		assert_true(pidfd_exited(sfd, 2000));
		reap_quietly(rep.sleeper);
		assert_int_equal(cleanup_remove(CLEANUP_TEMP_DIR, rep.tmpdir, -1, NULL), 0);
		assert_int_equal(cleanup_remove(CLEANUP_NETNS, f->netns_name, -1, NULL), 0);
		assert_int_equal(cleanup_remove(CLEANUP_NFT_TABLE, f->nft_table, f->anon.fd, NULL), 0);
	} else {
		fprintf(stderr, "# %s: launcher end -> guardian done in %.1f ms\n",
			end == END_SIGKILL ? "SIGKILL" : "finish", ms);
		assert_all_gone(f, &rep, sfd);
		reap_quietly(rep.sleeper);
	}
	/* the forgotten file survived */
	assert_true(path_exists(keep));
	unlink(keep);
	close(gfd);
	close(sfd);
	prctl(PR_SET_CHILD_SUBREAPER, 0);
}

static void test_guardian_after_sigkill(void **state)
{
	struct fixture *f = *state;
	if (!f)
		skip();
	run_launcher(f, END_SIGKILL);
}

static void test_guardian_finish(void **state)
{
	struct fixture *f = *state;
	if (!f)
		skip();
	run_launcher(f, END_FINISH);
}

static void test_guardian_release(void **state)
{
	struct fixture *f = *state;
	if (!f)
		skip();
	run_launcher(f, END_RELEASE);
}

static void test_guardian_api_errors(void **state)
{
	(void)state;
	struct cleanup_guardian g = CLEANUP_GUARDIAN_INIT;
	assert_int_equal(cleanup_guardian_add(&g, CLEANUP_FILE, "/tmp/x", -1, NULL), -EPIPE);
	assert_int_equal(cleanup_guardian_add(&g, CLEANUP_PID, NULL, -1, NULL), -EBADF);
	assert_int_equal(cleanup_guardian_finish(&g, 100, NULL), -EINVAL);
	assert_int_equal(cleanup_guardian_start(&g, NULL), 0);
	/* an empty guardian finishes cleanly */
	assert_int_equal(cleanup_guardian_finish(&g, 5000, NULL), 0);
	assert_int_equal(g.pid, -1);
	/* a guardian that is gone reports EPIPE instead of crashing the caller */
	assert_int_equal(cleanup_guardian_start(&g, NULL), 0);
	kill(g.pid, SIGKILL);
	reap_quietly(g.pid);
	g.pid = -1;
	assert_int_equal(cleanup_guardian_add(&g, CLEANUP_FILE, "/tmp/tt-test-none", -1, NULL), -EPIPE);
	close(g.sock);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_registry_in_process, setup, teardown),
		cmocka_unit_test(test_refuses_dangerous),
		cmocka_unit_test_setup_teardown(test_registry_mount_and_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_guardian_after_sigkill, setup, teardown),
		cmocka_unit_test_setup_teardown(test_guardian_finish, setup, teardown),
		cmocka_unit_test_setup_teardown(test_guardian_release, setup, teardown),
		cmocka_unit_test(test_guardian_api_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
