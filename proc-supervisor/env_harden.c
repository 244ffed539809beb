/* Async-signal-safe child hardening (see env_harden.h). Only syscalls and
 * stack memory between fork and execve: the supervisor may have threads. */
#include "proc-supervisor/env_harden.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

int envb_core_limit_zero(void)
{
	struct rlimit rl = { 0, 0 };
	return setrlimit(RLIMIT_CORE, &rl) < 0 ? -errno : 0;
}

int envb_protect_supervisor(void)
{
	return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 ? -errno : 0;
}

static bool kept(const int *keep, size_t n, int fd)
{
	for (size_t i = 0; i < n; i++)
		if (keep[i] == fd)
			return true;
	return false;
}

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static int close_by_walk(const int *keep, size_t n)
{
	int dfd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	char buf[4096] __attribute__((aligned(8)));
	for (;;) {
		long got = syscall(SYS_getdents64, dfd, buf, sizeof(buf));
		if (got < 0) {
			int e = errno;
			close(dfd);
			return -e;
		}
		if (got == 0)
			break;
		for (long off = 0; off < got;) {
			struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
			off += d->d_reclen;
			int fd = 0;
			bool num = d->d_name[0] != '\0';
			for (const char *c = d->d_name; *c && num; c++) {
				if (*c < '0' || *c > '9' || fd > 100000000)
					num = false;
				else
					fd = fd * 10 + (*c - '0');
			}
			if (!num || fd <= 2 || fd == dfd || kept(keep, n, fd))
				continue;
			close(fd);
		}
	}
	close(dfd);
	return 0;
}

static int close_brute(const int *keep, size_t n)
{
	struct rlimit rl;
	int max = 65536;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536)
		max = (int)rl.rlim_cur;
	for (int fd = 3; fd < max; fd++)
		if (!kept(keep, n, fd))
			close(fd);
	return 0;
}

int envb_close_fds(const int *keep, size_t n, unsigned flags)
{
	if (n > ENVB_HARDEN_MAX_KEEP)
		return -E2BIG;
	int sorted[ENVB_HARDEN_MAX_KEEP];
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (keep[i] <= 2)
			continue;
		/* The kept fds must survive execve. */
		int fl = fcntl(keep[i], F_GETFD);
		if (fl < 0)
			return -errno;
		if ((fl & FD_CLOEXEC) && fcntl(keep[i], F_SETFD, fl & ~FD_CLOEXEC) < 0)
			return -errno;
		size_t j = m++;
		while (j > 0 && sorted[j - 1] > keep[i]) {
			sorted[j] = sorted[j - 1];
			j--;
		}
		sorted[j] = keep[i];
	}
	if (!(flags & (ENVB_HARDEN_FORCE_FDWALK | ENVB_HARDEN_FORCE_BRUTE))) {
		unsigned first = 3;
		bool ok = true;
		for (size_t i = 0; i <= m && ok; i++) {
			unsigned last = i < m ? (unsigned)sorted[i] - 1 : ~0u;
			if (i < m && (unsigned)sorted[i] < first) /* duplicate keep entry */
				continue;
			if (first <= last && syscall(SYS_close_range, first, last, 0) < 0)
				ok = false;
			if (i < m)
				first = (unsigned)sorted[i] + 1;
		}
		if (ok)
			return 0;
		if (errno != ENOSYS && errno != EINVAL)
			return -errno;
	}
	if (!(flags & ENVB_HARDEN_FORCE_BRUTE) && close_by_walk(sorted, m) == 0)
		return 0;
	return close_brute(sorted, m);
}

int envb_harden_child(const int *keep, size_t n, unsigned flags)
{
	int r = envb_core_limit_zero();
	if (r < 0)
		return r;
	if ((flags & ENVB_HARDEN_NO_NEW_PRIVS) && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	return envb_close_fds(keep, n, flags);
}
