#include "proc-supervisor/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define CGROUP_NAME_TRIES 16
/* Set on a base directory by a supervisor that holds its lock for life. */
#define CGROUP_OWNER_XATTR "user.tether.owner"
#define CGROUP_MAX_DEPTH 32
/* How long a dead predecessor's processes may take to leave its cgroup
 * after cgroup.kill (a PID namespace being torn down is one such wait). */
#define CGROUP_STALE_WAIT_MS 5000
/* Exited tasks leave the cgroup asynchronously after reaping. */
#define CGROUP_EXIT_WAIT_MS 1000

int cgroup_mode_parse(const char *arg, enum cgroup_mode *mode, const char **path)
{
	*path = NULL;
	if (strcmp(arg, "auto") == 0)
		*mode = CGROUP_MODE_AUTO;
	else if (strcmp(arg, "none") == 0)
		*mode = CGROUP_MODE_NONE;
	else if (arg[0] == '/') {
		*mode = CGROUP_MODE_PATH;
		*path = arg;
	} else
		return -EINVAL;
	return 0;
}

/* The supervisor's own cgroup v2 path ("0::/x/y") below the mount. */
static int own_cgroup(char *out, size_t size)
{
	char buf[4096];
	ssize_t n = read_file_at(AT_FDCWD, "/proc/self/cgroup", buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	for (char *line = buf, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (strncmp(line, "0::", 3) == 0)
			return strscpy(out, line + 3, size);
	}
	return -ENOENT;
}

static int set_error(struct sandbox_cgroup *cg, int r, const char *step, const char *path)
{
	snprintf(cg->error, sizeof(cg->error), "%s %s: %s", step, path, strerror(-r));
	return r;
}

static long long mono_ms_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "populated 0|1" of an open cgroup.events: 1, 0 or -errno. */
static int events_populated(int fd)
{
	char buf[256];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	const char *p = strstr(buf, "populated ");
	if (!p)
		return -EPROTO;
	return p[10] == '1' ? 1 : 0;
}

/* Wait (bounded) until the cgroup at dirfd and everything below it has no
 * process: 0, -ETIMEDOUT, or -errno. cgroup.events signals each change of
 * it with POLLPRI, so this sleeps on the condition, not on a clock. */
static int wait_unpopulated(int dirfd, int timeout_ms)
{
	_cleanup_close_ int fd = openat(dirfd, "cgroup.events", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	long long deadline = mono_ms_now() + timeout_ms;
	for (;;) {
		int pop = events_populated(fd);
		if (pop <= 0)
			return pop;
		long long left = deadline - mono_ms_now();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = fd, .events = POLLPRI };
		/* Bounded slices: a change between the read and the poll is
		 * caught by the next read at the latest. */
		if (poll(&p, 1, left < 50 ? (int)left : 50) < 0 && errno != EINTR)
			return -errno;
	}
}

/* Remove every cgroup below dirfd, depth first (each must be empty). */
static int remove_below(int dirfd, int depth)
{
	if (depth > CGROUP_MAX_DEPTH)
		return -ELOOP;
	int dfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	DIR *d = fdopendir(dfd);
	if (!d) {
		int r = -errno;
		close(dfd);
		return r;
	}
	int r = 0;
	struct dirent *de;
	while (r == 0 && (de = readdir(d))) {
		if (de->d_type != DT_DIR || !strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			if (errno != ENOENT)
				r = -errno;
			continue;
		}
		r = remove_below(sub, depth + 1);
		close(sub);
		if (r == 0 && unlinkat(dirfd, de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT)
			r = -errno;
	}
	closedir(d);
	return r;
}

static int count_procs(int dirfd, const char *sub)
{
	char p[64];
	snprintf(p, sizeof(p), "%s/cgroup.procs", sub);
	char buf[65536];
	ssize_t n = read_file_at(dirfd, p, buf, sizeof(buf));
	if (n < 0)
		return n == -EFBIG ? (int)(sizeof(buf) / 8) : 0;
	int c = 0;
	for (ssize_t i = 0; i < n; i++)
		c += buf[i] == '\n';
	return c;
}

/* base exists and nobody holds its lock. Its owner is gone when it took
 * that lock (locks work here) and said so (the owner mark; a supervisor
 * before the mark existed did not lock); then what is left in it is that
 * owner's unsupervised workload: kill it, clear the directory. An unproven
 * one is reused only when empty. -EBUSY when neither holds or the clearing
 * fails (the caller tries the next name). */
static int reclaim(int fd, const char *base, bool locked, struct sandbox_cgroup *cg)
{
	char mark[32];
	bool marked = fgetxattr(fd, CGROUP_OWNER_XATTR, mark, sizeof(mark)) > 0;
	_cleanup_close_ int ev = openat(fd, "cgroup.events", O_RDONLY | O_CLOEXEC);
	if (ev < 0)
		return set_error(cg, -errno, "read cgroup.events of", base);
	int pop = events_populated(ev);
	if (pop < 0)
		return set_error(cg, pop, "read cgroup.events of", base);
	if (pop) {
		if (!locked || !marked) {
			log_warn("cgroup: %s has processes and its owner cannot be proven gone (%s): left alone", base,
				 !locked ? "no flock on this cgroup fs" : "made by a proc-supervisor that does not lock it");
			return -EBUSY;
		}
		/* The lock proves the supervisor that made it is dead: what is
		 * still inside is its workload, unsupervised since. */
		cg->stale_killed = count_procs(fd, "workload");
		_cleanup_close_ int kfd = openat(fd, "cgroup.kill", O_WRONLY | O_CLOEXEC);
		if (kfd < 0 || write(kfd, "1", 1) != 1) {
			log_warn("cgroup: %s: the dead predecessor's processes are still in it and cgroup.kill "
				 "failed (%s; needs Linux 5.14): left alone", base, strerror(errno));
			return -EBUSY;
		}
		int r = wait_unpopulated(fd, CGROUP_STALE_WAIT_MS);
		if (r < 0) {
			log_warn("cgroup: %s: the dead predecessor's processes did not leave after cgroup.kill "
				 "(%s): left alone", base, strerror(-r));
			return -EBUSY;
		}
	}
	int r = remove_below(fd, 0);
	if (r < 0)
		return set_error(cg, r, "remove the stale cgroups below", base);
	cg->reclaimed = true;
	return 0;
}

/* Claim <parent>/<name> as our base: 0 (cg->base, cg->base_fd set), -EBUSY
 * (a live owner, or a stale one that could not be cleared), -EAGAIN (it
 * vanished under us: try the same name again), other -errno (cg->error). */
static int claim(const char *parent, const char *name, struct sandbox_cgroup *cg)
{
	if (snprintf(cg->base, sizeof(cg->base), "%s/%s", parent, name) >= (int)sizeof(cg->base))
		return set_error(cg, -ENAMETOOLONG, "cgroup path", parent);
	bool created = mkdir(cg->base, 0755) == 0;
	if (!created && errno != EEXIST)
		return set_error(cg, -errno, "mkdir", cg->base);
	int fd = open(cg->base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return -EAGAIN;
		return set_error(cg, -errno, "open", cg->base);
	}
	bool locked = true;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK) {
			close(fd);
			return -EBUSY;
		}
		locked = false;
	}
	/* Still the directory of that name? Its owner removes it before it
	 * lets the lock go, so one we locked after that is an orphan inode. */
	struct stat a, b;
	if (fstat(fd, &a) < 0 || stat(cg->base, &b) < 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
		close(fd);
		return -EAGAIN;
	}
	/* Ours from creation, or a predecessor's (a lost mkdir race to one
	 * that has not locked yet included: it then finds the lock held and
	 * moves on, so either way one owner). */
	if (!created) {
		int r = reclaim(fd, cg->base, locked, cg);
		if (r < 0) {
			close(fd);
			return r;
		}
	}
	/* The mark tells a successor that this directory's lock means
	 * something (best effort: without user xattrs a successor reuses it
	 * only when empty). */
	(void)fsetxattr(fd, CGROUP_OWNER_XATTR, "proc-supervisor", 15, 0);
	cg->base_fd = fd;
	return 0;
}

int sandbox_cgroup_setup(const struct kernel_caps *caps, enum cgroup_mode mode, const char *path,
			 struct sandbox_cgroup *cg)
{
	memset(cg, 0, sizeof(*cg));
	cg->workload_fd = cg->base_fd = -1;
	if (mode == CGROUP_MODE_NONE)
		return 0;
	char parent[PATH_MAX];
	if (mode == CGROUP_MODE_PATH) {
		if (strscpy(parent, path, sizeof(parent)) < 0)
			return set_error(cg, -ENAMETOOLONG, "cgroup path", path);
	} else {
		if (!caps->cgroup_v2) {
			snprintf(cg->error, sizeof(cg->error),
				 "no cgroup v2 hierarchy (none mounted, or TETHER_FORCE_FALLBACK=cgroup)");
			return -EOPNOTSUPP;
		}
		char self[PATH_MAX];
		int r = own_cgroup(self, sizeof(self));
		if (r < 0)
			return set_error(cg, r, "read our cgroup from", "/proc/self/cgroup");
		/* "/" means the root of the (possibly namespaced) hierarchy. */
		if (snprintf(parent, sizeof(parent), "%s%s", caps->cgroup_root,
			     strcmp(self, "/") == 0 ? "" : self) >= (int)sizeof(parent))
			return set_error(cg, -ENAMETOOLONG, "cgroup path", caps->cgroup_root);
	}
	int r = -EBUSY;
	for (int i = 0, again = 0; i < CGROUP_NAME_TRIES;) {
		char name[64];
		if (i == 0)
			snprintf(name, sizeof(name), "tether-%d", (int)getpid());
		else
			snprintf(name, sizeof(name), "tether-%d-%d", (int)getpid(), i + 1);
		cg->error[0] = '\0';
		r = claim(parent, name, cg);
		if (r == -EAGAIN && ++again < 4)
			continue;
		if (r == 0)
			break;
		if (r != -EBUSY && r != -EAGAIN)
			return r;
		cg->busy_skipped++;
		again = 0;
		i++;
	}
	if (r < 0) {
		char first[PATH_MAX + 32];
		snprintf(first, sizeof(first), "%s/tether-%d..-%d", parent, (int)getpid(), CGROUP_NAME_TRIES);
		return set_error(cg, -EBUSY, "claim", first);
	}
	if (snprintf(cg->workload, sizeof(cg->workload), "%s/workload", cg->base) >= (int)sizeof(cg->workload)) {
		r = set_error(cg, -ENAMETOOLONG, "cgroup path", cg->base);
		goto undo;
	}
	if (mkdirat(cg->base_fd, "workload", 0755) < 0) {
		r = set_error(cg, -errno, "mkdir", cg->workload);
		goto undo;
	}
	cg->workload_fd = openat(cg->base_fd, "workload", O_DIRECTORY | O_PATH | O_CLOEXEC);
	if (cg->workload_fd < 0) {
		r = set_error(cg, -errno, "open", cg->workload);
		unlinkat(cg->base_fd, "workload", AT_REMOVEDIR);
		goto undo;
	}
	cg->active = true;
	return 0;
undo:
	rmdir(cg->base);
	close(cg->base_fd);
	cg->base_fd = -1;
	return r;
}

int sandbox_cgroup_kill(const struct sandbox_cgroup *cg)
{
	if (!cg->active)
		return -EBADF;
	char p[PATH_MAX + 16];
	snprintf(p, sizeof(p), "%s/cgroup.kill", cg->workload);
	_cleanup_close_ int fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, "1", 1) != 1)
		return -errno;
	return 0;
}

int sandbox_cgroup_nprocs(const struct sandbox_cgroup *cg)
{
	if (!cg->active)
		return -EBADF;
	char p[PATH_MAX + 16];
	snprintf(p, sizeof(p), "%s/cgroup.procs", cg->workload);
	_cleanup_fclose_ FILE *f = fopen(p, "re");
	if (!f)
		return -errno;
	int n = 0, c;
	while ((c = fgetc(f)) != EOF)
		if (c == '\n')
			n++;
	return n;
}

int sandbox_cgroup_remove(struct sandbox_cgroup *cg)
{
	if (!cg->active)
		return 0;
	cg->active = false;
	if (cg->workload_fd >= 0)
		close(cg->workload_fd);
	cg->workload_fd = -1;
	(void)wait_unpopulated(cg->base_fd, CGROUP_EXIT_WAIT_MS);
	int r = remove_below(cg->base_fd, 0);
	if (r == 0 && rmdir(cg->base) < 0 && errno != ENOENT)
		r = -errno;
	/* The lock goes last: nobody may reclaim a directory we still use. */
	close(cg->base_fd);
	cg->base_fd = -1;
	if (r < 0)
		log_warn("cgroup: could not remove %s: %s", cg->base, strerror(-r));
	return r;
}
