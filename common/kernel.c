#include "common/kernel.h"
#include "common/util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>

#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_pidfd_send_signal
#define __NR_pidfd_send_signal 424
#endif
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif
#ifndef __NR_clone3
#define __NR_clone3 435
#endif

int sys_pidfd_open(pid_t pid, unsigned int flags)
{
	int r = (int)syscall(__NR_pidfd_open, pid, flags);
	return r < 0 ? -errno : r;
}

int sys_pidfd_send_signal(int pidfd, int sig, siginfo_t *info, unsigned int flags)
{
	int r = (int)syscall(__NR_pidfd_send_signal, pidfd, sig, info, flags);
	return r < 0 ? -errno : r;
}

int sys_pidfd_getfd(int pidfd, int targetfd, unsigned int flags)
{
	int r = (int)syscall(__NR_pidfd_getfd, pidfd, targetfd, flags);
	return r < 0 ? -errno : r;
}

pid_t sys_clone3(struct tether_clone_args *args, size_t size)
{
	long r = syscall(__NR_clone3, args, size);
	return r < 0 ? -errno : (pid_t)r;
}

int pidfd_is_alive(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	int r = poll(&p, 1, 0);
	if (r < 0)
		return -errno;
	return r == 0 ? 0 : -ESRCH;
}

static bool probe_pidfs(void)
{
	_cleanup_close_ int fd = sys_pidfd_open(getpid(), 0);
	struct statfs sf;
	if (fd < 0 || fstatfs(fd, &sf) < 0)
		return false;
	return (unsigned long)sf.f_type == PID_FS_MAGIC;
}

static bool probe_pidfd_info(void)
{
	_cleanup_close_ int fd = sys_pidfd_open(getpid(), 0);
	if (fd < 0)
		return false;
	struct tether_pidfd_info info = { .mask = TETHER_PIDFD_INFO_PID };
	return ioctl(fd, TETHER_PIDFD_GET_INFO, &info) == 0 &&
	       (pid_t)info.pid == getpid();
}

static bool probe_peer_pidfd(void)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return false;
	int pidfd = -1;
	socklen_t len = sizeof(pidfd);
	bool ok = getsockopt(sv[0], SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0;
	if (pidfd >= 0)
		close(pidfd);
	close(sv[0]);
	close(sv[1]);
	return ok;
}

static void probe_cgroup(struct kernel_caps *caps)
{
	static const char *const roots[] = { "/sys/fs/cgroup/unified", "/sys/fs/cgroup" };
	for (size_t i = 0; i < ARRAY_SIZE(roots); i++) {
		struct statfs sf;
		/* CGROUP2_SUPER_MAGIC */
		if (statfs(roots[i], &sf) == 0 && (unsigned long)sf.f_type == 0x63677270UL) {
			caps->cgroup_v2 = true;
			strscpy(caps->cgroup_root, roots[i], sizeof(caps->cgroup_root));
			return;
		}
	}
}

/* Our pid if /proc/self resolves to it (a procfs of our own pidns). */
static pid_t probe_procfs_self(void)
{
	char link[32];
	ssize_t n = readlink("/proc/self", link, sizeof(link) - 1);
	if (n <= 0)
		return 0;
	link[n] = '\0';
	char *end;
	long v = strtol(link, &end, 10);
	pid_t me = getpid();
	return *end == '\0' && v == (long)me ? me : 0;
}

int kernel_caps_force_fallback(struct kernel_caps *caps, const char *list)
{
	if (!list || !*list)
		return 0;
	_cleanup_free_ char *copy = strdup(list);
	if (!copy)
		return -ENOMEM;
	char *save = NULL;
	for (char *w = strtok_r(copy, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		bool all = strcmp(w, "all") == 0;
		bool known = all;
		if (all || strcmp(w, "pidfs_ino") == 0)
			caps->pidfs_ino = false, known = true;
		if (all || strcmp(w, "pidfd_info") == 0)
			caps->pidfd_info = false, known = true;
		if (all || strcmp(w, "peer_pidfd") == 0)
			caps->peer_pidfd = false, known = true;
		if (all || strcmp(w, "cgroup") == 0)
			caps->cgroup_v2 = false, caps->cgroup_root[0] = '\0', known = true;
		if (all || strcmp(w, "procfs_pidns") == 0)
			caps->procfs_self_pid = 0, known = true;
		if (all || strcmp(w, "idfeed") == 0)
			caps->no_idfeed = true, known = true;
		if (all || strcmp(w, "push") == 0)
			caps->no_push = true, known = true;
		if (!known)
			return -EINVAL;
	}
	return 0;
}

int kernel_caps_probe(struct kernel_caps *caps)
{
	memset(caps, 0, sizeof(*caps));
	char buf[64];
	ssize_t n = read_file_at(AT_FDCWD, "/proc/sys/kernel/random/boot_id", buf, sizeof(buf));
	if (n < 36)
		return n < 0 ? (int)n : -EIO;
	memcpy(caps->boot_id, buf, 36);
	caps->boot_id[36] = '\0';

	int fd = sys_pidfd_open(getpid(), 0);
	if (fd < 0)
		return fd;
	close(fd);

	caps->pidfs_ino = probe_pidfs();
	caps->pidfd_info = probe_pidfd_info();
	caps->peer_pidfd = probe_peer_pidfd();
	probe_cgroup(caps);
	caps->procfs_self_pid = probe_procfs_self();
	return kernel_caps_force_fallback(caps, getenv("TETHER_FORCE_FALLBACK"));
}
