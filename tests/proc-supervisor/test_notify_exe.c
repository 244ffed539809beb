/* The connect notifier and the strict readers capture an executable with
 * the same rules (identity/exe.h, "The capture"): for each case a workload
 * process under the filter connects, the notifier records its image, and
 * the record must equal what exe_tuple_read (the strict capture procref and
 * the identity service use) says about the same live process: path,
 * deleted, memfd, dev/ino/size/mtime/ctime. maps_mismatch is the one field
 * the notifier's cheap mode does not compute: it must be false in both.
 *   deleted         the image unlinked before its connect
 *   deleted later   connect, unlink, connect (the cached caller relabels)
 *   memfd           fexecve of a memfd ("/memfd:name (deleted)")
 *   literal name    a file really named "x (deleted)", still linked
 *   bind mount      a copy bind-mounted over another path in a private
 *                   mount namespace: the path lies, the same way in both
 * The same binary runs with TETHER_FORCE_FALLBACK=all (the slow path:
 * notifier_identify_default instead of the caller cache).
 *
 * `test_procsup_notify_exe --child PORT FD MODE` is the exec target: MODE
 * plain (one connect), unlink (unlink argv[0], connect), unlink-between
 * (connect, unlink argv[0], connect); each cookie written to FD; then it
 * waits to be killed. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "identity/exe.h"
#include "notify_harness.h"
#include "tests/common/check.h"
#include "tests/common/loopback.h"

static int server_port;
static char self_exe[PATH_MAX], tmpdir[64];

static void connect_report(int fd)
{
	uint64_t c = 0;
	if (loopback_connect(server_port, &c) < 0)
		c = 0;
	if (write(fd, &c, sizeof(c)) != (ssize_t)sizeof(c))
		_exit(80);
}

static int child_main(char **argv)
{
	server_port = atoi(argv[2]);
	int fd = atoi(argv[3]);
	const char *mode = argv[4];
	if (strcmp(mode, "unlink") == 0 && unlink(argv[0]) < 0)
		_exit(82);
	connect_report(fd);
	if (strcmp(mode, "unlink-between") == 0) {
		if (unlink(argv[0]) < 0)
			_exit(83);
		connect_report(fd);
	}
	for (;;)
		pause();
}

enum how { RUN_PATH, RUN_MEMFD, RUN_BIND };

struct exe_case {
	const char *what;
	enum how how;
	const char *name; /* file under tmpdir (RUN_BIND: the path mounted over) */
	const char *mode; /* the exec target's MODE */
	int connects;
};

/* In the child, before the filter (mount and the like are denied under it). */
static int prepare(const struct exe_case *c, const char *path, int *memfd)
{
	if (c->how == RUN_MEMFD) {
		int m = memfd_create("tether-notify-exe", MFD_CLOEXEC);
		_cleanup_close_ int in = open(self_exe, O_RDONLY | O_CLOEXEC);
		if (m < 0 || in < 0 || notify_copy_fd(in, m) < 0)
			return -1;
		/* exec refuses an image open for writing (ETXTBSY): reopen r/o */
		char self[64];
		snprintf(self, sizeof(self), "/proc/self/fd/%d", m);
		*memfd = open(self, O_RDONLY | O_CLOEXEC);
		close(m);
		return *memfd < 0 ? -1 : 0;
	}
	if (c->how == RUN_BIND) {
		/* The mount namespace (and the bind mount) die with this process. */
		char src[PATH_MAX];
		snprintf(src, sizeof(src), "%s/bind-source", tmpdir);
		if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount(src, path, NULL, MS_BIND, NULL) < 0)
			return -1;
	}
	return 0;
}

static void check_same(const char *what, const struct exe_tuple *rec, const struct exe_tuple *strict)
{
	CHECK(strcmp(rec->path, strict->path) == 0, "%s: notifier path '%s', strict '%s'", what, rec->path,
	      strict->path);
	CHECK(rec->deleted == strict->deleted, "%s: notifier deleted=%d, strict %d", what, rec->deleted,
	      strict->deleted);
	CHECK(rec->memfd == strict->memfd, "%s: notifier memfd=%d, strict %d", what, rec->memfd, strict->memfd);
	CHECK(exe_tuple_same_file(rec, strict), "%s: notifier file %llu:%llu, strict %llu:%llu", what,
	      (unsigned long long)rec->dev, (unsigned long long)rec->ino, (unsigned long long)strict->dev,
	      (unsigned long long)strict->ino);
	CHECK(!rec->maps_mismatch && !strict->maps_mismatch, "%s: maps_mismatch notifier %d strict %d", what,
	      rec->maps_mismatch, strict->maps_mismatch);
}

static void run_case(struct notify_world *w, const struct exe_case *c, struct exe_tuple *want_out)
{
	struct notify_rec *rec = &w->rec;
	memset(rec, 0, sizeof(*rec));
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, c->name);
	if (c->how == RUN_PATH)
		CHECK(notify_copy_file(self_exe, path) == 0, "%s: copy to %s", c->what, path);
	else if (c->how == RUN_BIND)
		CHECK(notify_copy_file("/bin/true", path) == 0, "%s: mount point %s", c->what, path);
	int sv[2], rp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 || pipe(rp) < 0) {
		CHECK(0, "socketpair/pipe");
		return;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		close(rp[0]);
		int memfd = -1;
		if (prepare(c, path, &memfd) < 0)
			_exit(84);
		notify_child_setup(&w->f, sv[1]);
		char port[16], fds[16];
		snprintf(port, sizeof(port), "%d", server_port);
		snprintf(fds, sizeof(fds), "%d", rp[1]);
		char *argv[] = { path, "--child", port, fds, (char *)c->mode, NULL };
		/* LeakSanitizer cannot run under the workload profile (no ptrace). */
		char *envp[] = { "ASAN_OPTIONS=detect_leaks=0", NULL };
		if (memfd >= 0)
			fexecve(memfd, argv, envp);
		else
			execve(path, argv, envp);
		_exit(81);
	}
	close(sv[1]);
	close(rp[1]);
	int lfd = notify_recv_listener(sv[0]);
	CHECK(lfd >= 0, "%s: no listener", c->what);
	(void)!write(sv[0], "g", 1);
	CHECK(lfd >= 0 && notify_handle_n(w->n, lfd, c->connects) == 0, "%s: handling %d notifications", c->what,
	      c->connects);
	uint64_t ck[2] = { 0 };
	for (int i = 0; i < c->connects; i++) {
		struct pollfd p = { .fd = rp[0], .events = POLLIN };
		CHECK(poll(&p, 1, 10000) == 1 && read(rp[0], &ck[i], sizeof(ck[i])) == (ssize_t)sizeof(ck[i]),
		      "%s: child report %d", c->what, i);
	}
	int last = c->connects - 1;
	CHECK(rec->n == c->connects, "%s: %d records, want %d", c->what, rec->n, c->connects);
	if (rec->n == c->connects) {
		CHECK(rec->pid[last] == pid && rec->cookie[last] == ck[last] && ck[last] != 0,
		      "%s: record pid %d cookie %llu, child %d cookie %llu", c->what, (int)rec->pid[last],
		      (unsigned long long)rec->cookie[last], (int)pid, (unsigned long long)ck[last]);
		/* The strict capture of the same process, still running that image. */
		struct exe_tuple strict;
		int r = exe_tuple_read(pid, &strict);
		CHECK(r == 0, "%s: exe_tuple_read: %s", c->what, strerror(-r));
		if (r == 0) {
			check_same(c->what, &rec->exe_tuple[last], &strict);
			*want_out = strict;
		}
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	if (lfd >= 0)
		close(lfd);
	close(sv[0]);
	close(rp[0]);
	if (c->how != RUN_MEMFD)
		unlink(path);
}

static void cleanup_tmp(void)
{
	static const char *const names[] = { "deleted-bin", "deleted-later", "fake (deleted)", "looks-like-true",
					     "bind-source" };
	char p[PATH_MAX];
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", tmpdir, names[i]);
		unlink(p);
	}
	if (tmpdir[0])
		rmdir(tmpdir);
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "--child") == 0)
		return child_main(argv);
	if (geteuid() != 0) {
		printf("test_notify_exe: SKIP (needs root: mount namespaces)\n");
		return 77;
	}
	ssize_t sl = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (sl <= 0)
		return perror("readlink /proc/self/exe"), 1;
	self_exe[sl] = '\0';
	strscpy(tmpdir, "/tmp/tether-notify-exe-XXXXXX", sizeof(tmpdir));
	if (!mkdtemp(tmpdir))
		return perror("mkdtemp"), 1;
	atexit(cleanup_tmp);
	char src[PATH_MAX];
	snprintf(src, sizeof(src), "%s/bind-source", tmpdir);
	if (notify_copy_file(self_exe, src) < 0)
		return perror("copy"), 1;

	struct notify_world w;
	if (notify_world_open(&w, notifier_identify_default) < 0)
		return 1;
	server_port = w.port;

	static const struct exe_case cases[] = {
		{ "deleted", RUN_PATH, "deleted-bin", "unlink", 1 },
		{ "deleted later", RUN_PATH, "deleted-later", "unlink-between", 2 },
		{ "memfd", RUN_MEMFD, "memfd", "plain", 1 },
		{ "literal name", RUN_PATH, "fake (deleted)", "plain", 1 },
		{ "bind mount", RUN_BIND, "looks-like-true", "plain", 1 },
	};
	struct exe_tuple want[5];
	memset(want, 0, sizeof(want));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(&w, &cases[i], &want[i]);
	/* What the strict capture says, so that agreeing on a wrong answer fails too. */
	CHECK(want[0].deleted && !want[0].memfd, "deleted: strict deleted=%d memfd=%d", want[0].deleted,
	      want[0].memfd);
	CHECK(want[1].deleted && !want[1].memfd, "deleted later: strict deleted=%d memfd=%d", want[1].deleted,
	      want[1].memfd);
	CHECK(want[2].memfd && !want[2].deleted && strcmp(want[2].path, "/memfd:tether-notify-exe") == 0,
	      "memfd: strict memfd=%d deleted=%d path '%s'", want[2].memfd, want[2].deleted, want[2].path);
	CHECK(!want[3].deleted && strstr(want[3].path, "/fake (deleted)"), "literal name: strict deleted=%d path '%s'",
	      want[3].deleted, want[3].path);
	struct stat bst;
	CHECK(stat(src, &bst) == 0 && want[4].ino == (uint64_t)bst.st_ino && strstr(want[4].path, "/looks-like-true") &&
		      !want[4].deleted,
	      "bind mount: strict ino %llu path '%s'", (unsigned long long)want[4].ino, want[4].path);

	notify_world_close(&w);
	if (failures)
		fprintf(stderr, "%d failure(s)\n", failures);
	else
		printf("test_notify_exe: all checks passed (%s path)\n", w.caps.pidfs_ino ? "cached" : "fallback");
	return failures ? 1 : 0;
}
