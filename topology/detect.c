#include "topology/detect.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "common/kernel.h"
#include "common/util.h"

/* linux/pidfd.h of 6.11+; the system headers may be older. */
#define TT_PIDFD_GET_MNT_NAMESPACE _IO(TETHER_PIDFS_IOCTL_MAGIC, 3)
#define TT_PIDFD_GET_NET_NAMESPACE _IO(TETHER_PIDFS_IOCTL_MAGIC, 4)
#define TT_PIDFD_GET_PID_NAMESPACE _IO(TETHER_PIDFS_IOCTL_MAGIC, 5)

static const char *ns_file(enum topology_ns kind)
{
	switch (kind) {
	case TOPOLOGY_NS_PID: return "pid";
	case TOPOLOGY_NS_NET: return "net";
	case TOPOLOGY_NS_MNT: return "mnt";
	}
	return NULL;
}

static unsigned long ns_ioctl(enum topology_ns kind)
{
	switch (kind) {
	case TOPOLOGY_NS_PID: return TT_PIDFD_GET_PID_NAMESPACE;
	case TOPOLOGY_NS_NET: return TT_PIDFD_GET_NET_NAMESPACE;
	case TOPOLOGY_NS_MNT: return TT_PIDFD_GET_MNT_NAMESPACE;
	}
	return 0;
}

static int stat_ns(int dirfd, const char *path, struct topology_ns_id *out)
{
	struct stat st;
	if (fstatat(dirfd, path, &st, path[0] ? 0 : AT_EMPTY_PATH) < 0)
		return -errno;
	out->dev = st.st_dev;
	out->ino = st.st_ino;
	return 0;
}

int topology_ns_self(enum topology_ns kind, struct topology_ns_id *out)
{
	const char *f = ns_file(kind);
	if (!f || !out)
		return -EINVAL;
	char path[64];
	snprintf(path, sizeof(path), "/proc/thread-self/ns/%s", f);
	return stat_ns(AT_FDCWD, path, out);
}

/* The pid of pidfd's process in the PID namespace of our procfs mount:
 * > 0, 0 when invisible from here, -ESRCH when it has exited. */
static int pidfd_to_pid(int pidfd)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	ssize_t n = read_file_at(AT_FDCWD, path, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	const char *p = strstr(buf, "\nPid:");
	if (!p)
		return -ENOTTY; /* not a pidfd */
	long v = strtol(p + 5, NULL, 10);
	if (v < 0)
		return -ESRCH;
	return (int)v;
}

int topology_ns_of_pidfd(int pidfd, enum topology_ns kind, unsigned flags,
			 struct topology_ns_id *out)
{
	const char *f = ns_file(kind);
	if (!f || !out || pidfd < 0)
		return -EINVAL;
	if (!(flags & TOPOLOGY_DETECT_NO_IOCTL)) {
		_cleanup_close_ int nsfd = ioctl(pidfd, ns_ioctl(kind), 0);
		if (nsfd >= 0)
			return stat_ns(nsfd, "", out);
		/* ENOTTY/EINVAL: kernel < 6.11; anything else is an answer. */
		if (errno != ENOTTY && errno != EINVAL && errno != EOPNOTSUPP)
			return -errno;
	}
	int pid = pidfd_to_pid(pidfd);
	if (pid < 0)
		return pid;
	if (pid == 0)
		return -EREMOTE;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/%s", pid, f);
	int r = stat_ns(AT_FDCWD, path, out);
	if (r == -ENOENT)
		r = -ESRCH;
	if (r < 0)
		return r;
	/* The pid may have been reused between fdinfo and stat. */
	if (pidfd_is_alive(pidfd) < 0)
		return -ESRCH;
	return 0;
}

int topology_pid_visible(pid_t pid)
{
	if (pid <= 0)
		return -EINVAL;
	int fd = sys_pidfd_open(pid, 0);
	if (fd < 0)
		return errno == ESRCH ? 0 : -errno;
	close(fd);
	return 1;
}

int topology_same_ns_pidfd(int pidfd, enum topology_ns kind, unsigned flags)
{
	struct topology_ns_id a, b;
	int r = topology_ns_self(kind, &a);
	if (r < 0)
		return r;
	r = topology_ns_of_pidfd(pidfd, kind, flags, &b);
	if (r == -EREMOTE && kind == TOPOLOGY_NS_PID)
		return 0; /* invisible from here: certainly not our PID ns */
	if (r < 0)
		return r;
	return a.dev == b.dev && a.ino == b.ino;
}

int topology_same_ns_pid(pid_t pid, enum topology_ns kind)
{
	if (pid <= 0)
		return -EINVAL;
	_cleanup_close_ int fd = sys_pidfd_open(pid, 0);
	if (fd < 0)
		return -errno;
	return topology_same_ns_pidfd(fd, kind, 0);
}

/* Families first so the suggestion is the word a user most likely wants. */
static const char *const suggest_order[] = {
	"combined", "shared-pid", "vm", "split", "vm-delegated", "split-veth",
};

const char *topology_suggest(enum topology_role a, enum topology_role b,
			     unsigned shared, unsigned known)
{
	for (size_t i = 0; i < ARRAY_SIZE(suggest_order); i++) {
		const struct topology *t = topology_by_name(suggest_order[i]);
		if (!topology_has_role(t, a) || !topology_has_role(t, b))
			continue;
		if ((topology_shared_ns(t, a, b) & known) == (shared & known))
			return suggest_order[i];
	}
	return NULL;
}

static int mismatch(struct topology_error *err, int r, const struct topology *t,
		    enum topology_role self, enum topology_role peer,
		    unsigned shared, unsigned known, const char *what)
{
	const char *s = topology_suggest(self, peer, shared, known);
	if (s && strcmp(s, t->name) != 0 && topology_by_name(s) != t)
		return topology_error_set(err, r, "topology %s %s \xe2\x80\x94 use --topology %s",
					  t->name, what, s);
	return topology_error_set(err, r, "topology %s %s \xe2\x80\x94 no topology describes this arrangement",
				  t->name, what);
}

static int check_peer(const struct topology *t, enum topology_role self,
		      const struct topology_peer *p, unsigned flags, struct topology_error *err)
{
	const char *peer_name = topology_role_name(p->role);
	if (!topology_has_role(t, p->role))
		return topology_error_set(err, -EINVAL, "topology %s has no %s", t->name, peer_name);
	if (p->pid <= 0 && p->pidfd < 0)
		return 0; /* nothing known about this peer yet */

	unsigned expect = topology_shared_ns(t, self, p->role);
	unsigned known = 0, shared = 0;
	char what[300];

	_cleanup_close_ int own_fd = -1;
	int pidfd = p->pidfd;
	if (pidfd < 0) {
		own_fd = sys_pidfd_open(p->pid, 0);
		if (own_fd < 0) {
			if (errno != ESRCH)
				return topology_error_errno(err, -errno, "cannot open pidfd for %s pid %d",
							    peer_name, (int)p->pid);
			known = TOPOLOGY_NS_PID; /* invisible → not our PID namespace */
			if (expect & TOPOLOGY_NS_PID) {
				snprintf(what, sizeof(what),
					 "needs a shared PID namespace with the %s; pid %d is not visible here",
					 peer_name, (int)p->pid);
				return mismatch(err, -ESRCH, t, self, p->role, 0, known, what);
			}
			return 0;
		}
		pidfd = own_fd;
	}
	char label[64];
	if (p->pid > 0)
		snprintf(label, sizeof(label), "pid %d", (int)p->pid);
	else
		snprintf(label, sizeof(label), "the peer");

	static const enum topology_ns kinds[] = { TOPOLOGY_NS_PID, TOPOLOGY_NS_NET, TOPOLOGY_NS_MNT };
	int same[3];
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++) {
		same[i] = topology_same_ns_pidfd(pidfd, kinds[i], flags);
		if (same[i] == -ESRCH)
			return topology_error_set(err, -ESRCH, "the %s (%s) exited while checking topology %s",
						  peer_name, label, t->name);
		if (same[i] < 0 && same[i] != -EREMOTE)
			return topology_error_errno(err, same[i], "cannot read the %s namespace of the %s (%s)",
						    topology_ns_name(kinds[i]), peer_name, label);
		if (same[i] >= 0) {
			known |= kinds[i];
			if (same[i])
				shared |= kinds[i];
		}
	}
	/* PID and network: strict both ways; mount: only required sharing. */
	known &= ~(unsigned)TOPOLOGY_NS_MNT | (expect & TOPOLOGY_NS_MNT);
	if (flags & TOPOLOGY_DETECT_PID_ONLY)
		known &= TOPOLOGY_NS_PID;
	for (size_t i = 0; i < 2; i++) {
		enum topology_ns k = kinds[i];
		if (!(known & k))
			continue;
		bool want = expect & k, have = shared & k;
		if (want == have)
			continue;
		if (want)
			snprintf(what, sizeof(what), "needs a shared %s namespace with the %s; %s is in another one",
				 topology_ns_name(k), peer_name, label);
		else
			snprintf(what, sizeof(what), "expects the %s in a separate %s namespace, but %s shares ours",
				 peer_name, topology_ns_name(k), label);
		return mismatch(err, -EXDEV, t, self, p->role, shared, known & (TOPOLOGY_NS_PID | TOPOLOGY_NS_NET), what);
	}
	if ((expect & TOPOLOGY_NS_MNT) && (known & TOPOLOGY_NS_MNT) && !(shared & TOPOLOGY_NS_MNT)) {
		snprintf(what, sizeof(what), "needs a shared mount namespace with the %s; %s is in another one",
			 peer_name, label);
		return topology_error_set(err, -EXDEV, "topology %s %s", t->name, what);
	}
	return 0;
}

int topology_check_environment(const struct topology *t, enum topology_role self,
			       const struct topology_peer *peers, size_t npeers,
			       unsigned flags, struct topology_error *err)
{
	if (!t)
		return topology_error_set(err, -EINVAL, "no topology given");
	if (!topology_has_role(t, self))
		return topology_error_set(err, -EINVAL, "topology %s has no %s", t->name,
					  topology_role_name(self));
	for (size_t i = 0; i < npeers; i++) {
		int r = check_peer(t, self, &peers[i], flags, err);
		if (r < 0)
			return r;
	}
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
	return 0;
}
