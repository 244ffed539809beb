#include "proc-supervisor/landlock.h"

#include <errno.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Headers on build hosts predate the scope API (ABI 6, Linux 6.12). */
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#endif
#ifndef __NR_landlock_restrict_self
#define __NR_landlock_restrict_self 446
#endif
#define TETHER_LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#define TETHER_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define TETHER_LANDLOCK_SCOPE_SIGNAL (1ULL << 1)

struct tether_landlock_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;
	uint64_t scoped;
};

int landlock_abi_version(void)
{
	long r = syscall(__NR_landlock_create_ruleset, NULL, 0, TETHER_LANDLOCK_CREATE_RULESET_VERSION);
	if (r < 0)
		return errno == ENOSYS ? -EOPNOTSUPP : -errno;
	return (int)r;
}

int landlock_scope_ruleset(void)
{
	int abi = landlock_abi_version();
	if (abi < 0)
		return abi;
	if (abi < 6)
		return -EOPNOTSUPP;
	struct tether_landlock_ruleset_attr attr = {
		.scoped = TETHER_LANDLOCK_SCOPE_SIGNAL | TETHER_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET,
	};
	long fd = syscall(__NR_landlock_create_ruleset, &attr, sizeof(attr), 0);
	return fd < 0 ? -errno : (int)fd;
}

int landlock_scope_enter(int ruleset_fd)
{
	long r = syscall(__NR_landlock_restrict_self, ruleset_fd, 0);
	return r < 0 ? -errno : 0;
}
