#include "launcher/cleanup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nftables/libnftables.h>

#include "common/kernel.h"
#include "common/fdpass.h"
#include "common/log.h"
#include "common/util.h"
#include "launcher/netns.h"

#define PID_KILL_TIMEOUT_MS 3000
#define CGROUP_RMDIR_TIMEOUT_MS 2000

const char *cleanup_kind_name(enum cleanup_kind kind)
{
	switch (kind) {
	case CLEANUP_PID: return "process";
	case CLEANUP_NETNS: return "netns";
	case CLEANUP_LINK: return "link";
	case CLEANUP_MOUNT: return "mount";
	case CLEANUP_CGROUP: return "cgroup";
	case CLEANUP_NFT_TABLE: return "nftables table";
	case CLEANUP_TEMP_DIR: return "temp dir";
	case CLEANUP_FILE: return "file";
	}
	return "unknown";
}

static bool kind_valid(enum cleanup_kind kind)
{
	return kind >= CLEANUP_PID && kind <= CLEANUP_FILE;
}

static bool kind_needs_name(enum cleanup_kind kind)
{
	return kind != CLEANUP_PID;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int elapsed_ms(unsigned long long start_ns)
{
	return (int)((now_mono_ns() - start_ns) / 1000000ULL);
}

/* ---- one resource ------------------------------------------------------ */

static int wait_pidfd(int pidfd, int timeout_ms)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	unsigned long long start = now_mono_ns();
	for (;;) {
		int left = timeout_ms - elapsed_ms(start);
		if (left < 0)
			left = 0;
		int n = poll(&p, 1, left);
		if (n > 0)
			return 0;
		if (n == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

static int kill_pidfd(int pidfd)
{
	if (pidfd < 0)
		return -EBADF;
	if (sys_pidfd_send_signal(pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
		return -errno;
	return 0;
}

/* Only plain absolute paths: a registry must never be talked into "/". */
static bool path_safe(const char *p)
{
	if (!p || p[0] != '/' || strcmp(p, "/") == 0 || strlen(p) >= PATH_MAX)
		return false;
	if (strstr(p, "/../") || strstr(p, "/./") || strstr(p, "//"))
		return false;
	size_t n = strlen(p);
	if ((n >= 3 && strcmp(p + n - 3, "/..") == 0) || (n >= 2 && strcmp(p + n - 2, "/.") == 0))
		return false;
	return true;
}

static int rm_children(int dfd, dev_t dev)
{
	int fd2 = dup(dfd);
	if (fd2 < 0)
		return -errno;
	DIR *d = fdopendir(fd2);
	if (!d) {
		int r = -errno;
		close(fd2);
		return r;
	}
	int first = 0;
	struct dirent *de;
	while ((errno = 0, de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		struct stat st;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno != ENOENT && !first)
				first = -errno;
			continue;
		}
		int flags = 0;
		if (S_ISDIR(st.st_mode)) {
			flags = AT_REMOVEDIR;
			if (st.st_dev == dev) {
				int cfd = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				if (cfd >= 0) {
					int r = rm_children(cfd, dev);
					close(cfd);
					if (r < 0 && !first)
						first = r;
				}
			} /* else: a mount point; rmdir fails with EBUSY and says so */
		}
		if (unlinkat(dfd, de->d_name, flags) < 0 && errno != ENOENT && !first)
			first = -errno;
	}
	closedir(d);
	return first;
}

static int remove_tree(const char *path, struct topology_error *err)
{
	if (!path_safe(path))
		return topology_error_set(err, -EINVAL, "refusing to remove \"%s\": not a plain absolute path",
					  path ? path : "");
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		return topology_error_errno(err, -errno, "cannot open temp dir %s", path);
	}
	struct stat st;
	if (fstat(fd, &st) < 0)
		return topology_error_errno(err, -errno, "cannot stat temp dir %s", path);
	int r = rm_children(fd, st.st_dev);
	if (r < 0)
		return topology_error_errno(err, r, "cannot empty temp dir %s", path);
	if (rmdir(path) < 0 && errno != ENOENT)
		return topology_error_errno(err, -errno, "cannot remove temp dir %s", path);
	return 0;
}

static void cgroup_kill_procs(const char *path)
{
	char file[PATH_MAX + 32];
	snprintf(file, sizeof(file), "%s/cgroup.kill", path);
	int fd = open(file, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = write(fd, "1", 1);
		close(fd);
		if (n == 1)
			return;
	}
	/* Before 5.14 there is no cgroup.kill: kill what is listed. */
	snprintf(file, sizeof(file), "%s/cgroup.procs", path);
	_cleanup_fclose_ FILE *f = fopen(file, "re");
	if (!f)
		return;
	long pid;
	while (fscanf(f, "%ld", &pid) == 1)
		if (pid > 0)
			kill((pid_t)pid, SIGKILL);
}

static int cgroup_rmdir_tree(const char *path, unsigned long long start)
{
	DIR *d = opendir(path);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	int first = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		char sub[PATH_MAX];
		if (snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) >= (int)sizeof(sub))
			continue;
		int r = cgroup_rmdir_tree(sub, start);
		if (r < 0 && !first)
			first = r;
	}
	closedir(d);
	/* Killed processes leave the cgroup asynchronously: EBUSY for a while. */
	for (;;) {
		if (rmdir(path) == 0 || errno == ENOENT)
			return first;
		if (errno != EBUSY || elapsed_ms(start) > CGROUP_RMDIR_TIMEOUT_MS)
			return first ? first : -errno;
		sleep_ms(10);
	}
}

static int remove_cgroup(const char *path, struct topology_error *err)
{
	if (!path_safe(path) || strncmp(path, "/sys/fs/cgroup/", 15) != 0)
		return topology_error_set(err, -EINVAL, "refusing to remove cgroup \"%s\": not under /sys/fs/cgroup",
					  path ? path : "");
	cgroup_kill_procs(path);
	int r = cgroup_rmdir_tree(path, now_mono_ns());
	if (r < 0)
		return topology_error_errno(err, r, "cannot remove cgroup %s", path);
	return 0;
}

struct nft_job {
	char cmd[256];
	char msg[256];
};

static int nft_job_run(void *p)
{
	struct nft_job *j = p;
	struct nft_ctx *ctx = nft_ctx_new(NFT_CTX_DEFAULT);
	if (!ctx)
		return -ENOMEM;
	nft_ctx_buffer_output(ctx);
	nft_ctx_buffer_error(ctx);
	int r = nft_run_cmd_from_buffer(ctx, j->cmd);
	if (r != 0) {
		const char *e = nft_ctx_get_error_buffer(ctx);
		snprintf(j->msg, sizeof(j->msg), "%s", e ? e : "");
		char *nl = strchr(j->msg, '\n');
		if (nl)
			*nl = '\0';
	}
	nft_ctx_free(ctx);
	return r == 0 ? 0 : -EIO;
}

static bool nft_word_ok(const char *w, size_t n)
{
	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((w[i] >= 'a' && w[i] <= 'z') || (w[i] >= 'A' && w[i] <= 'Z') ||
		      (w[i] >= '0' && w[i] <= '9') || w[i] == '_' || w[i] == '-'))
			return false;
	return true;
}

static int remove_nft_table(const char *spec, int ns_fd, struct topology_error *err)
{
	static const char *const families[] = { "ip", "ip6", "inet", "arp", "bridge", "netdev" };
	const char *sp = spec ? strchr(spec, ' ') : NULL;
	bool ok = false;
	if (sp && nft_word_ok(sp + 1, strlen(sp + 1)))
		for (size_t i = 0; i < ARRAY_SIZE(families); i++)
			if (strlen(families[i]) == (size_t)(sp - spec) && strncmp(spec, families[i], (size_t)(sp - spec)) == 0)
				ok = true;
	if (!ok)
		return topology_error_set(err, -EINVAL, "invalid nftables table \"%s\" (want \"FAMILY NAME\")",
					  spec ? spec : "");
	struct nft_job j = { .msg = "" };
	/* add-then-delete in one transaction: idempotent, no "not found" parsing */
	snprintf(j.cmd, sizeof(j.cmd), "add table %s\ndelete table %s\n", spec, spec);
	int r = netns_run(ns_fd, nft_job_run, &j);
	if (r < 0)
		return topology_error_set(err, r, "cannot delete nftables table %s: %s", spec,
					  j.msg[0] ? j.msg : strerror(-r));
	return 0;
}

int cleanup_remove(enum cleanup_kind kind, const char *name, int fd, struct topology_error *err)
{
	int r;
	switch (kind) {
	case CLEANUP_PID:
		r = kill_pidfd(fd);
		if (r == 0)
			r = wait_pidfd(fd, PID_KILL_TIMEOUT_MS);
		if (r < 0)
			return topology_error_errno(err, r, "cannot kill process");
		return 0;
	case CLEANUP_NETNS:
		r = netns_delete_name(name, err);
		return r == -ENOENT ? 0 : r;
	case CLEANUP_LINK:
		r = netns_link_delete(fd, name, err);
		return r == -ENODEV ? 0 : r;
	case CLEANUP_MOUNT:
		if (!path_safe(name))
			return topology_error_set(err, -EINVAL, "refusing to unmount \"%s\"", name ? name : "");
		if (umount2(name, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
			return topology_error_errno(err, -errno, "cannot unmount %s", name);
		return 0;
	case CLEANUP_CGROUP:
		return remove_cgroup(name, err);
	case CLEANUP_NFT_TABLE:
		return remove_nft_table(name, fd, err);
	case CLEANUP_TEMP_DIR:
		return remove_tree(name, err);
	case CLEANUP_FILE:
		if (!path_safe(name))
			return topology_error_set(err, -EINVAL, "refusing to remove \"%s\"", name ? name : "");
		if (unlink(name) < 0 && errno != ENOENT)
			return topology_error_errno(err, -errno, "cannot remove %s", name);
		return 0;
	}
	return topology_error_set(err, -EINVAL, "unknown cleanup kind %d", (int)kind);
}

/* ---- registry ---------------------------------------------------------- */

int cleanup_registry_add(struct cleanup_registry *r, enum cleanup_kind kind, uint64_t id,
			 const char *name, int fd)
{
	_cleanup_close_ int owned = fd;
	if (!r || !kind_valid(kind))
		return -EINVAL;
	if (kind_needs_name(kind) && (!name || !name[0] || strlen(name) >= PATH_MAX))
		return -EINVAL;
	if (kind == CLEANUP_PID && fd < 0)
		return -EBADF;
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 16;
		struct cleanup_entry *v = realloc(r->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		r->v = v;
		r->cap = cap;
	}
	char *copy = NULL;
	if (name && !(copy = strdup(name)))
		return -ENOMEM;
	r->v[r->n++] = (struct cleanup_entry){ .kind = kind, .id = id, .name = copy, .fd = fd_steal(&owned) };
	return 0;
}

static void entry_free(struct cleanup_entry *e)
{
	free(e->name);
	e->name = NULL;
	if (e->fd >= 0)
		close(e->fd);
	e->fd = -1;
}

int cleanup_registry_forget(struct cleanup_registry *r, uint64_t id)
{
	if (!r)
		return -EINVAL;
	for (size_t i = 0; i < r->n; i++)
		if (r->v[i].id == id) {
			entry_free(&r->v[i]);
			memmove(&r->v[i], &r->v[i + 1], (r->n - i - 1) * sizeof(r->v[0]));
			r->n--;
			return 0;
		}
	return -ENOENT;
}

void cleanup_registry_clear(struct cleanup_registry *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n; i++)
		entry_free(&r->v[i]);
	free(r->v);
	*r = (struct cleanup_registry)CLEANUP_REGISTRY_INIT;
}

int cleanup_registry_run(struct cleanup_registry *r, struct topology_error *err)
{
	if (!r)
		return -EINVAL;
	int first = 0;
	struct topology_error e = { 0 };
	/* Processes first: they may hold mounts, cgroups and namespaces. All
	 * are signalled before any is waited for, so the wait is paid once. */
	for (size_t i = r->n; i-- > 0;)
		if (r->v[i].kind == CLEANUP_PID)
			(void)kill_pidfd(r->v[i].fd);
	unsigned long long start = now_mono_ns();
	for (size_t i = r->n; i-- > 0;) {
		if (r->v[i].kind != CLEANUP_PID)
			continue;
		int left = PID_KILL_TIMEOUT_MS - elapsed_ms(start);
		int rr = wait_pidfd(r->v[i].fd, left > 0 ? left : 0);
		if (rr < 0 && !first) {
			first = topology_error_errno(&e, rr, "process did not exit after SIGKILL");
		}
	}
	for (size_t i = r->n; i-- > 0;) {
		if (r->v[i].kind == CLEANUP_PID)
			continue;
		struct topology_error one = { 0 };
		int rr = cleanup_remove(r->v[i].kind, r->v[i].name, r->v[i].fd, &one);
		if (rr < 0 && !first) {
			first = rr;
			e = one;
		}
	}
	cleanup_registry_clear(r);
	if (first < 0 && err)
		*err = e;
	return first;
}

/* ---- guardian ---------------------------------------------------------- */

enum { GUARD_ADD = 1, GUARD_FORGET, GUARD_FINISH, GUARD_RELEASE };
#define GUARD_MAGIC 0x74677264u /* "tgrd" */

struct guard_msg {
	uint32_t magic;
	uint32_t op;
	uint32_t kind;
	uint32_t has_fd;
	uint64_t id;
	char name[PATH_MAX];
};

struct guard_reply {
	uint32_t magic;
	int32_t result;
	char msg[sizeof(((struct topology_error *)0)->msg)];
};

static _Noreturn void guardian_main(int sock, int launcher_pidfd)
{
	static const int ignored[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU };
	for (size_t i = 0; i < ARRAY_SIZE(ignored); i++)
		signal(ignored[i], SIG_IGN);
	prctl(PR_SET_NAME, "tether-guardian", 0, 0, 0);
	/* Hold nothing of the launcher's but our socket, its pidfd and stderr. */
	if (chdir("/") < 0) {
		/* keep going: cwd only matters for pinning a directory */
	}
	if (dup2(sock, 3) < 0)
		_exit(1);
	if (launcher_pidfd >= 0 && dup2(launcher_pidfd, 4) < 0)
		_exit(1);
	close_range(launcher_pidfd >= 0 ? 5U : 4U, ~0U, 0);
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull >= 0) {
		dup2(devnull, 0);
		dup2(devnull, 1);
		if (devnull > 4)
			close(devnull);
	}
	sock = 3;
	launcher_pidfd = launcher_pidfd >= 0 ? 4 : -1;

	struct cleanup_registry reg = CLEANUP_REGISTRY_INIT;
	struct guard_msg *m = malloc(sizeof(*m));
	if (!m)
		_exit(1);
	bool launcher_gone = false;
	for (;;) {
		/* EOF on the socket is the signal; the launcher's pidfd covers a
		 * forked child of the launcher that still holds its end. Once the
		 * launcher is gone, drain what it sent, then clean up. */
		if (!launcher_gone) {
			struct pollfd pf[2] = { { .fd = sock, .events = POLLIN },
						{ .fd = launcher_pidfd, .events = POLLIN } };
			int k = poll(pf, launcher_pidfd >= 0 ? 2 : 1, -1);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0)
				break;
			if (launcher_pidfd >= 0 && (pf[1].revents & (POLLIN | POLLHUP | POLLERR)))
				launcher_gone = true;
		}
		int fd;
		ssize_t n = fdpass_recv(sock, m, sizeof(*m), &fd, launcher_gone ? MSG_DONTWAIT : 0);
		if (n == -EINTR)
			continue;
		if (n <= 0)
			break; /* EOF, or drained after the launcher died */
		if ((size_t)n != sizeof(*m) || m->magic != GUARD_MAGIC ||
		    memchr(m->name, '\0', sizeof(m->name)) == NULL) {
			log_warn("cleanup guardian: malformed message ignored");
			if (fd >= 0)
				close(fd);
			continue;
		}
		if (m->op == GUARD_ADD) {
			int r = cleanup_registry_add(&reg, (enum cleanup_kind)m->kind, m->id,
						     m->name[0] ? m->name : NULL, fd);
			if (r < 0)
				log_warn("cleanup guardian: cannot register %s %s: %s",
					 cleanup_kind_name((enum cleanup_kind)m->kind), m->name, strerror(-r));
			continue;
		}
		if (fd >= 0)
			close(fd);
		if (m->op == GUARD_FORGET) {
			(void)cleanup_registry_forget(&reg, m->id);
		} else if (m->op == GUARD_FINISH) {
			struct topology_error e = { 0 };
			struct guard_reply rep = { .magic = GUARD_MAGIC };
			rep.result = cleanup_registry_run(&reg, &e);
			if (rep.result < 0)
				memcpy(rep.msg, e.msg, sizeof(rep.msg));
			(void)send(sock, &rep, sizeof(rep), MSG_NOSIGNAL);
			_exit(rep.result < 0 ? 1 : 0);
		} else if (m->op == GUARD_RELEASE) {
			cleanup_registry_clear(&reg);
			_exit(0);
		}
	}
	free(m);
	struct topology_error e = { 0 };
	int r = cleanup_registry_run(&reg, &e);
	if (r < 0)
		log_error("cleanup guardian: %s", e.msg);
	_exit(r < 0 ? 1 : 0);
}

int cleanup_guardian_start(struct cleanup_guardian *g, struct topology_error *err)
{
	if (!g)
		return -EINVAL;
	*g = (struct cleanup_guardian)CLEANUP_GUARDIAN_INIT;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return topology_error_errno(err, -errno, "cannot create the cleanup guardian's socket");
	/* Opened before fork so it names us even if we die at once. */
	int self = sys_pidfd_open(getpid(), 0);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		int r = -errno;
		close(sv[0]);
		close(sv[1]);
		if (self >= 0)
			close(self);
		return topology_error_errno(err, r, "cannot fork the cleanup guardian");
	}
	if (pid == 0) {
		close(sv[0]);
		guardian_main(sv[1], self);
	}
	close(sv[1]);
	if (self >= 0)
		close(self);
	g->pid = pid;
	g->sock = sv[0];
	return 0;
}

static int guard_send(struct cleanup_guardian *g, uint32_t op, enum cleanup_kind kind, uint64_t id,
		      const char *name, int fd)
{
	if (!g || g->sock < 0)
		return -EPIPE;
	_cleanup_free_ struct guard_msg *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->magic = GUARD_MAGIC;
	m->op = op;
	m->kind = (uint32_t)kind;
	m->id = id;
	if (name && strscpy(m->name, name, sizeof(m->name)) < 0)
		return -ENAMETOOLONG;
	if (fd >= 0)
		m->has_fd = 1;
	for (;;) {
		ssize_t n = fdpass_send(g->sock, m, sizeof(*m), fd, 0);
		if (n == (ssize_t)sizeof(*m))
			return 0;
		if (n == -EINTR)
			continue;
		return n < 0 ? (int)n : -EIO;
	}
}

int cleanup_guardian_add(struct cleanup_guardian *g, enum cleanup_kind kind, const char *name,
			 int fd, uint64_t *id)
{
	if (!g || !kind_valid(kind))
		return -EINVAL;
	if (kind_needs_name(kind) && (!name || !name[0]))
		return -EINVAL;
	if (kind == CLEANUP_PID && fd < 0)
		return -EBADF;
	uint64_t my = g->next_id++;
	int r = guard_send(g, GUARD_ADD, kind, my, name, fd);
	if (r < 0)
		return r;
	if (id)
		*id = my;
	return 0;
}

int cleanup_guardian_forget(struct cleanup_guardian *g, uint64_t id)
{
	return guard_send(g, GUARD_FORGET, 0, id, NULL, -1);
}

static int reap(pid_t pid)
{
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

int cleanup_guardian_finish(struct cleanup_guardian *g, int timeout_ms, struct topology_error *err)
{
	if (!g || g->sock < 0)
		return topology_error_set(err, -EINVAL, "no cleanup guardian");
	int r = guard_send(g, GUARD_FINISH, 0, 0, NULL, -1);
	if (r < 0) {
		close(g->sock);
		g->sock = -1;
		if (g->pid > 0)
			reap(g->pid);
		g->pid = -1;
		return topology_error_errno(err, r, "cleanup guardian is gone");
	}
	struct pollfd p = { .fd = g->sock, .events = POLLIN };
	unsigned long long start = now_mono_ns();
	int n;
	do {
		int left = timeout_ms - elapsed_ms(start);
		n = poll(&p, 1, left > 0 ? left : 0);
	} while (n < 0 && errno == EINTR);
	struct guard_reply rep = { 0 };
	if (n <= 0) {
		close(g->sock);
		g->sock = -1;
		return topology_error_set(err, -ETIMEDOUT, "cleanup guardian did not finish within %d ms", timeout_ms);
	}
	ssize_t got = recv(g->sock, &rep, sizeof(rep), 0);
	close(g->sock);
	g->sock = -1;
	reap(g->pid);
	g->pid = -1;
	if (got != (ssize_t)sizeof(rep) || rep.magic != GUARD_MAGIC)
		return topology_error_set(err, -EPROTO, "cleanup guardian died before reporting");
	if (rep.result < 0) {
		rep.msg[sizeof(rep.msg) - 1] = '\0';
		return topology_error_set(err, rep.result, "%s", rep.msg);
	}
	return 0;
}

int cleanup_guardian_release(struct cleanup_guardian *g)
{
	if (!g || g->sock < 0)
		return -EINVAL;
	int r = guard_send(g, GUARD_RELEASE, 0, 0, NULL, -1);
	close(g->sock);
	g->sock = -1;
	if (g->pid > 0)
		reap(g->pid);
	g->pid = -1;
	return r;
}
