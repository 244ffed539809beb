/* chain: see chain.h. */
#include "identity/chain.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "identity/procfs.h"

int chain_exe_unchanged(int proc_fd, pid_t procfs_pid, const struct exe_tuple *want)
{
	if (want->deleted || want->memfd || want->maps_mismatch)
		return -ESTALE;
	char rel[32];
	snprintf(rel, sizeof(rel), "%d/exe", (int)procfs_pid);
	struct stat st;
	if (fstatat(proc_fd, rel, &st, 0) < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	if ((uint64_t)st.st_dev != want->dev || (uint64_t)st.st_ino != want->ino ||
	    (int64_t)st.st_size != want->size ||
	    (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec != want->mtime_ns ||
	    (int64_t)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec != want->ctime_ns)
		return -ESTALE;
	char link[PATH_MAX];
	ssize_t n = readlinkat(proc_fd, rel, link, sizeof(link));
	if (n < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	if ((size_t)n >= sizeof(link))
		return -ESTALE;
	link[n] = '\0';
	static const char suffix[] = " (deleted)";
	size_t slen = sizeof(suffix) - 1;
	if ((size_t)n >= slen && memcmp(link + n - slen, suffix, slen) == 0)
		return -ESTALE;
	return strcmp(link, want->path) == 0 ? 0 : -ESTALE;
}

int chain_live_ppid(const struct kernel_caps *caps, int proc_fd, const struct procref *ref,
		    pid_t *ppid_out, bool *procfs_ns)
{
	if (caps->pidfd_info) {
		/* One ioctl: a reaped process fails it; a zombie has no exe and
		 * fails chain_exe_unchanged. */
		struct tether_pidfd_info info = { .mask = TETHER_PIDFD_INFO_PID };
		if (ioctl(ref->pidfd, TETHER_PIDFD_GET_INFO, &info) < 0)
			return -errno;
		if (!(info.mask & TETHER_PIDFD_INFO_PID) || (pid_t)info.pid != ref->pid)
			return -ESTALE;
		*ppid_out = (pid_t)info.ppid;
		*procfs_ns = false;
		return pidfd_is_alive(ref->pidfd);
	}
	char rel[32];
	snprintf(rel, sizeof(rel), "%d/stat", (int)ref->procfs_pid);
	struct procfs_stat st;
	int r = procfs_read_stat_at(proc_fd, rel, &st);
	if (r < 0)
		return r;
	if (st.pid != ref->procfs_pid || st.start_time != ref->start_time)
		return -ESTALE;
	*ppid_out = st.ppid;
	*procfs_ns = true;
	return pidfd_is_alive(ref->pidfd);
}

bool chain_ppid_is(pid_t ppid, bool procfs_ns, const struct procref *parent)
{
	return ppid > 0 && ppid == (procfs_ns ? parent->procfs_pid : parent->pid);
}

int chain_pin(const struct kernel_caps *caps, const struct procref *rec)
{
	int fd = sys_pidfd_open(rec->pid, 0);
	if (fd < 0)
		return -1;
	bool same;
	if (rec->key_kind == PROCREF_KEY_PIDFS) {
		struct stat st;
		same = caps->pidfs_ino && fstat(fd, &st) == 0 && (uint64_t)st.st_ino == rec->pidfs_ino;
	} else {
		struct procref now;
		same = procref_from_pidfd_ex(caps, fd, PROCREF_NO_EXE, &now) == 0 && procref_same(&now, rec);
		procref_close(&now);
	}
	if (!same || pidfd_is_alive(fd) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool plain_image(const struct procref *r)
{
	return r->exe_err == 0 && r->exe.path[0] && !r->exe.deleted && !r->exe.memfd &&
	       !r->exe.maps_mismatch;
}

int chain_pin_walk(const struct kernel_caps *caps, const struct ancestry_result *res,
		   struct pinned_chain *c)
{
	memset(c, 0, sizeof(*c));
	if (!res->anchored || res->n < 1 || res->n - 1 > CHAIN_MAX_HOPS)
		return -ESTALE;
	for (size_t i = 0; i + 1 < res->n; i++)
		if (!res->hops[i].live || !plain_image(&res->hops[i].ref))
			return -ESTALE;
	for (size_t i = 0; i + 1 < res->n; i++) {
		struct procref *h = &c->hops[i];
		procref_copy_recorded(h, &res->hops[i].ref);
		h->pidfd = chain_pin(caps, &res->hops[i].ref);
		if (h->pidfd < 0) {
			chain_release(c);
			return -ESTALE;
		}
		c->n++;
	}
	return 0;
}

int chain_dup(const struct pinned_chain *src, struct pinned_chain *dst)
{
	memset(dst, 0, sizeof(*dst));
	for (size_t i = 0; i < src->n; i++) {
		dst->hops[i] = src->hops[i];
		dst->hops[i].pidfd = fcntl(src->hops[i].pidfd, F_DUPFD_CLOEXEC, 3);
		if (dst->hops[i].pidfd < 0) {
			int e = errno;
			chain_release(dst);
			return -e;
		}
		dst->n++;
	}
	return 0;
}

void chain_release(struct pinned_chain *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		procref_close(&c->hops[i]);
	c->n = 0;
}

int chain_verify(const struct kernel_caps *caps, int proc_fd, struct members *table,
		 const struct pinned_chain *c, const struct procref *child, pid_t ppid, bool pns,
		 const struct procref *anchor, int anchor_pidfd)
{
	if (table && members_check_cgroup(table, child) < 0)
		return -ESTALE;
	for (size_t i = 0; i < c->n; i++) {
		const struct procref *h = &c->hops[i];
		if (!chain_ppid_is(ppid, pns, h))
			return -ESTALE;
		if (chain_exe_unchanged(proc_fd, h->procfs_pid, &h->exe) < 0)
			return -ESTALE;
		/* Alive now => it was the process at that pid when the child's
		 * ppid was read. */
		if (chain_live_ppid(caps, proc_fd, h, &ppid, &pns) < 0)
			return -ESTALE;
		if (table && members_check_cgroup(table, h) < 0)
			return -ESTALE;
	}
	if (!chain_ppid_is(ppid, pns, anchor))
		return -ESTALE;
	if (anchor_pidfd >= 0 && pidfd_is_alive(anchor_pidfd) < 0)
		return -ESTALE;
	return 0;
}
