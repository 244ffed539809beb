#include "identity/procref.h"

#include "common/util.h"
#include "identity/exe.h"
#include "identity/procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

const char *procref_key_kind_name(enum procref_key_kind kind)
{
	switch (kind) {
	case PROCREF_KEY_PIDFS:
		return "pidfs";
	case PROCREF_KEY_PID_START:
		return "pid_start";
	}
	return "unknown";
}

const char *procref_source_name(enum procref_source src)
{
	switch (src) {
	case PROCREF_SRC_PIDFD_INFO:
		return "pidfd_info";
	case PROCREF_SRC_PROCFS:
		return "procfs";
	}
	return "unknown";
}

int procref_format_key(const struct procref *ref, enum procref_key_kind kind, char *buf,
		       size_t size)
{
	int n;
	if (strlen(ref->boot_id) != 36)
		return -EINVAL;
	if (kind == PROCREF_KEY_PIDFS) {
		if (ref->pidfs_ino == 0)
			return -EINVAL;
		n = snprintf(buf, size, "%s:%" PRIu64, ref->boot_id, ref->pidfs_ino);
	} else if (kind == PROCREF_KEY_PID_START) {
		if (ref->pid <= 0)
			return -EINVAL;
		n = snprintf(buf, size, "%s:%d:%" PRIu64, ref->boot_id, (int)ref->pid,
			     ref->start_time);
	} else {
		return -EINVAL;
	}
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* The pidfd's pid in our procfs mount's pidns (fdinfo "Pid:"). Reading
 * /proc/<that> rather than /proc/<caller's pid> keeps us right even when the
 * procfs mount belongs to another pidns than the caller (unshare without a
 * remount): /proc/<caller pid> would then be a different process. */
static int pidfd_procfs_pid(int pidfd, pid_t *out)
{
	char name[64];
	snprintf(name, sizeof(name), "/proc/self/fdinfo/%d", pidfd);
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r = procfs_read_at(AT_FDCWD, name, PROCFS_FDINFO_MAX, &buf, &len);
	if (r < 0)
		return r;
	pid_t p;
	r = procfs_parse_fdinfo_pid(buf, len, &p);
	if (r < 0)
		return r;
	if (p == -1)
		return -ESRCH;
	if (p == 0)
		return -EREMOTE; /* not visible in this procfs */
	*out = p;
	return 0;
}

/* The cgroup v2 id is the 8-byte file handle of the cgroup's directory
 * (kernfs node id) — the same number PIDFD_GET_INFO and bpf report. */
static int cgroup_id_of(const struct kernel_caps *caps, int procdirfd, uint64_t *out)
{
	*out = 0;
	if (!caps->cgroup_v2 || !caps->cgroup_root[0])
		return 0;
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r = procfs_read_at(procdirfd, "cgroup", PROCFS_CGROUP_MAX, &buf, &len);
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	_cleanup_free_ struct procfs_cgroup *cg = malloc(sizeof(*cg));
	if (!cg)
		return -ENOMEM;
	r = procfs_parse_cgroup(buf, len, cg);
	if (r == -ENOENT)
		return 0; /* no v2 line: unknown */
	if (r < 0)
		return r;
	if (cg->escapes || cg->deleted)
		return 0; /* outside our cgroup ns view, or gone: unknown */
	_cleanup_free_ char *dir = NULL;
	if (asprintf(&dir, "%s%s", caps->cgroup_root, strcmp(cg->path, "/") == 0 ? "" : cg->path) < 0)
		return -ENOMEM;
	union {
		struct file_handle fh;
		char raw[sizeof(struct file_handle) + 64];
	} h;
	memset(&h, 0, sizeof(h));
	h.fh.handle_bytes = 64;
	int mount_id;
	if (name_to_handle_at(AT_FDCWD, dir, &h.fh, &mount_id, 0) < 0) {
		if (errno == ENOENT)
			return 0; /* the cgroup was removed while we looked */
		return -errno;
	}
	if (h.fh.handle_bytes != 8)
		return 0;
	memcpy(out, h.fh.f_handle, 8);
	return 0;
}

static int fill_from_info(int pidfd, struct procref *out, bool *got_cgroup)
{
	struct tether_pidfd_info info = {
		.mask = TETHER_PIDFD_INFO_PID | TETHER_PIDFD_INFO_CREDS | TETHER_PIDFD_INFO_CGROUPID,
	};
	if (ioctl(pidfd, TETHER_PIDFD_GET_INFO, &info) < 0)
		return -errno;
	if ((info.mask & (TETHER_PIDFD_INFO_PID | TETHER_PIDFD_INFO_CREDS)) !=
	    (TETHER_PIDFD_INFO_PID | TETHER_PIDFD_INFO_CREDS))
		return -EOPNOTSUPP;
	out->pid = (pid_t)info.pid;
	out->ppid = (pid_t)info.ppid;
	out->ruid = info.ruid;
	out->euid = info.euid;
	out->suid = info.suid;
	out->fsuid = info.fsuid;
	out->rgid = info.rgid;
	out->egid = info.egid;
	out->sgid = info.sgid;
	out->fsgid = info.fsgid;
	*got_cgroup = (info.mask & TETHER_PIDFD_INFO_CGROUPID) != 0;
	out->cgroup_id = *got_cgroup ? info.cgroupid : 0;
	out->info_source = PROCREF_SRC_PIDFD_INFO;
	return 0;
}

static int read_status_at(int dirfd, const char *name, struct procfs_status *st)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r = procfs_read_at(dirfd, name, PROCFS_STATUS_MAX, &buf, &len);
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	return procfs_parse_status(buf, len, st);
}

/* procfs fallback. /proc may belong to an ancestor pidns of ours (unshare
 * without a remount): NSpid lists a process's pids from the procfs mount's
 * ns inwards, and our own NSpid says which level is ours, so pid and ppid
 * are translated into the caller's ns. ppid translation reads the parent's
 * status and is best effort (0 when the parent is gone or outside our ns). */
static int fill_from_status(int procdirfd, pid_t caller_pid, struct procref *out)
{
	_cleanup_free_ struct procfs_status *st = malloc(sizeof(*st));
	_cleanup_free_ struct procfs_status *self = malloc(sizeof(*self));
	if (!st || !self)
		return -ENOMEM;
	int r = read_status_at(procdirfd, "status", st);
	if (r < 0)
		return r;
	r = read_status_at(AT_FDCWD, "/proc/self/status", self);
	if (r < 0)
		return r == -ESRCH ? -EREMOTE : r; /* we are not visible in this procfs */
	size_t level = self->n_nspid > 0 ? self->n_nspid - 1 : 0;

	pid_t pid = out->procfs_pid, ppid = st->ppid;
	if (level > 0) {
		if (st->n_nspid <= level)
			return -EREMOTE; /* not in our pidns */
		pid = st->nspid[level];
		if (ppid > 0) {
			char name[32];
			snprintf(name, sizeof(name), "/proc/%d/status", (int)ppid);
			r = read_status_at(AT_FDCWD, name, self);
			ppid = r == 0 && self->n_nspid > level ? self->nspid[level] : 0;
		}
	}
	if (caller_pid > 0 && pid != caller_pid)
		return -ESTALE; /* procfs and the pidfd disagree: trust neither */
	out->pid = pid;
	out->ppid = ppid;
	out->ruid = st->uid[0];
	out->euid = st->uid[1];
	out->suid = st->uid[2];
	out->fsuid = st->uid[3];
	out->rgid = st->gid[0];
	out->egid = st->gid[1];
	out->sgid = st->gid[2];
	out->fsgid = st->gid[3];
	out->info_source = PROCREF_SRC_PROCFS;
	return 0;
}

enum { FILL_EXE = 1 << 0 };

/* Fill everything from a pidfd the ref will own. caller_pid <= 0: unknown
 * (procref_from_pidfd). On error *out is left closed-safe (pidfd -1). */
static int ref_fill(const struct kernel_caps *caps, int pidfd, pid_t caller_pid, unsigned flags,
		    struct procref *out)
{
	memset(out, 0, sizeof(*out));
	out->pidfd = -1;
	if (strlen(caps->boot_id) != 36)
		return -EINVAL;
	memcpy(out->boot_id, caps->boot_id, sizeof(out->boot_id));

	/* When /proc is a procfs of our own pidns, the pid in our namespace
	 * (the one we opened from, or PIDFD_GET_INFO's) is its number there
	 * too, and the fdinfo read is saved. Whatever is read below belongs
	 * to this process only if the pidfd is still alive at the end. */
	int r = -EOPNOTSUPP;
	bool own_procfs = caps->procfs_self_pid > 0 && getpid() == caps->procfs_self_pid;
	bool got_cgroup = false, have_info = false;
	if (own_procfs && caller_pid > 0) {
		out->procfs_pid = caller_pid;
	} else if (own_procfs && caps->pidfd_info) {
		r = fill_from_info(pidfd, out, &got_cgroup);
		if (r == -ESRCH || r == -EREMOTE)
			return r;
		have_info = r == 0;
		out->procfs_pid = have_info ? out->pid : 0;
	}
	if (out->procfs_pid <= 0 && (r = pidfd_procfs_pid(pidfd, &out->procfs_pid)) < 0)
		return r;
	char dir[32];
	snprintf(dir, sizeof(dir), "/proc/%d", (int)out->procfs_pid);
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? -ESRCH : -errno;

	struct procfs_stat st;
	r = procfs_read_stat_at(dfd, "stat", &st);
	if (r < 0)
		return r;
	if (st.pid != out->procfs_pid)
		return -ESTALE;
	out->start_time = st.start_time;
	out->state = st.state;
	strscpy(out->comm, st.comm, sizeof(out->comm)); /* kthread names truncate */

	r = have_info ? 0 : -EOPNOTSUPP;
	if (caps->pidfd_info && !have_info) {
		r = fill_from_info(pidfd, out, &got_cgroup);
		if (r == -ESRCH || r == -EREMOTE)
			return r;
		if (r == 0 && caller_pid > 0 && out->pid != caller_pid)
			return -ESTALE;
	}
	if (r < 0) {
		/* procfs fallback: pid and ppid as the procfs mount sees them. */
		r = fill_from_status(dfd, caller_pid, out);
		if (r < 0)
			return r;
	}
	if (!caps->cgroup_v2)
		out->cgroup_id = 0;
	else if (!got_cgroup) {
		r = cgroup_id_of(caps, dfd, &out->cgroup_id);
		if (r < 0)
			return r;
	}

	if (caps->pidfs_ino) {
		struct stat pst;
		if (fstat(pidfd, &pst) < 0)
			return -errno;
		out->pidfs_ino = pst.st_ino;
		out->key_kind = PROCREF_KEY_PIDFS;
	} else {
		out->key_kind = PROCREF_KEY_PID_START;
	}

	if (flags & FILL_EXE) {
		r = exe_tuple_read_at(dfd, &out->exe);
		if (r == -ESRCH)
			return r;
		if (r < 0) {
			memset(&out->exe, 0, sizeof(out->exe));
			out->exe_err = r;
		}
	} else {
		out->exe_err = -ENODATA;
	}

	/* Everything above came from /proc/<pid>; it was this process's only if
	 * the process still exists now (a live process's pid is not reused). */
	r = pidfd_is_alive(pidfd);
	if (r < 0)
		return r;
	return procref_format_key(out, out->key_kind, out->key, sizeof(out->key));
}

static int open_internal(const struct kernel_caps *caps, pid_t pid, unsigned flags,
			 struct procref *out)
{
	if (pid <= 0) {
		memset(out, 0, sizeof(*out));
		out->pidfd = -1;
		return -EINVAL;
	}
	_cleanup_close_ int pidfd = sys_pidfd_open(pid, 0);
	if (pidfd < 0) {
		memset(out, 0, sizeof(*out));
		out->pidfd = -1;
		return pidfd;
	}
	int r = ref_fill(caps, pidfd, pid, flags, out);
	if (r < 0)
		return r;
	out->pidfd = fd_steal(&pidfd);
	return 0;
}

int procref_open(const struct kernel_caps *caps, pid_t pid, struct procref *out)
{
	return open_internal(caps, pid, FILL_EXE, out);
}

int procref_open_ex(const struct kernel_caps *caps, pid_t pid, unsigned flags, struct procref *out)
{
	return open_internal(caps, pid, (flags & PROCREF_NO_EXE) ? 0 : FILL_EXE, out);
}

int procref_from_pidfd(const struct kernel_caps *caps, int pidfd, struct procref *out)
{
	return procref_from_pidfd_ex(caps, pidfd, 0, out);
}

int procref_from_pidfd_ex(const struct kernel_caps *caps, int pidfd, unsigned flags,
			  struct procref *out)
{
	_cleanup_close_ int fd = fcntl(pidfd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0) {
		memset(out, 0, sizeof(*out));
		out->pidfd = -1;
		return -errno;
	}
	int r = ref_fill(caps, fd, 0, (flags & PROCREF_NO_EXE) ? 0 : FILL_EXE, out);
	if (r < 0)
		return r;
	out->pidfd = fd_steal(&fd);
	return 0;
}

int procref_refresh(const struct kernel_caps *caps, const struct procref *known, struct procref *out)
{
	memset(out, 0, sizeof(*out));
	out->pidfd = -1;
	if (known->pidfd < 0)
		return -EBADF;
	if (!caps->pidfd_info)
		return procref_from_pidfd_ex(caps, known->pidfd, PROCREF_NO_EXE, out);
	_cleanup_close_ int fd = fcntl(known->pidfd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return -errno;
	struct procref fresh = *known;
	bool got_cgroup = false;
	int r = fill_from_info(fd, &fresh, &got_cgroup);
	if (r == -EOPNOTSUPP || (r == 0 && caps->cgroup_v2 && !got_cgroup))
		return procref_from_pidfd_ex(caps, known->pidfd, PROCREF_NO_EXE, out);
	if (r < 0)
		return r;
	if (!caps->cgroup_v2)
		fresh.cgroup_id = 0;
	if (fresh.pid != known->pid)
		return -ESTALE;
	if ((r = pidfd_is_alive(fd)) < 0)
		return r;
	fresh.pidfd = fd_steal(&fd);
	*out = fresh;
	return 0;
}

int procref_revalidate(const struct kernel_caps *caps, const struct procref *ref)
{
	if (ref->pidfd < 0)
		return procref_match_pid(caps, ref, ref->pid);
	int r = pidfd_is_alive(ref->pidfd);
	if (r < 0)
		return r;
	if (ref->key_kind == PROCREF_KEY_PIDFS) {
		struct stat st;
		if (fstat(ref->pidfd, &st) < 0)
			return -errno;
		if (st.st_ino != ref->pidfs_ino)
			return -ESTALE;
	}
	return 0;
}

int procref_match_pid(const struct kernel_caps *caps, const struct procref *rec, pid_t pid)
{
	if (rec->key_kind == PROCREF_KEY_PIDFS && !caps->pidfs_ino)
		return -EOPNOTSUPP; /* cannot spell this key on this host */
	struct procref now;
	int r = open_internal(caps, pid, 0, &now);
	if (r < 0) {
		procref_close(&now);
		return r;
	}
	char key[PROCREF_KEY_MAX];
	r = procref_format_key(&now, rec->key_kind, key, sizeof(key));
	procref_close(&now);
	if (r < 0)
		return r;
	return strcmp(key, rec->key) == 0 ? 0 : -ESTALE;
}

void procref_copy_recorded(struct procref *dst, const struct procref *src)
{
	if (dst != src)
		memcpy(dst, src, sizeof(*dst));
	dst->pidfd = -1;
}

void procref_close(struct procref *ref)
{
	if (ref && ref->pidfd >= 0) {
		close(ref->pidfd);
		ref->pidfd = -1;
	}
}

bool procref_same(const struct procref *a, const struct procref *b)
{
	return a->key[0] != '\0' && strcmp(a->key, b->key) == 0;
}

int procref_hash_exe(struct procref *ref, struct exe_hash_cache *cache)
{
	if (ref->pidfd < 0)
		return -EBADF; /* a recorded ref proves nothing about a live image */
	if (ref->exe_err < 0)
		return ref->exe_err;
	char dir[32];
	snprintf(dir, sizeof(dir), "/proc/%d", (int)ref->procfs_pid);
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	struct exe_tuple t = ref->exe;
	int r = exe_tuple_hash(dfd, &t, cache);
	if (r < 0)
		return r;
	r = pidfd_is_alive(ref->pidfd);
	if (r < 0)
		return r;
	ref->exe.hashed = true;
	memcpy(ref->exe.sha256, t.sha256, sizeof(t.sha256));
	return 0;
}

int procref_hash_exe_read(struct procref *ref, struct exe_hash_cache *cache)
{
	if (ref->exe_err < 0)
		return ref->exe_err;
	if (cache && exe_hash_cache_get(cache, &ref->exe, ref->exe.sha256) == 1) {
		ref->exe.hashed = true;
		return 0;
	}
	return procref_hash_exe(ref, cache);
}
