/* A child at a pid of the test's choosing, as the pid-reuse tests need: the
 * kernel gives a recycled pid only by chance, clone3's set_tid on demand
 * (CAP_SYS_ADMIN over the pid namespace). Header only. */
#pragma once

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/kernel.h"

/* fork() at exactly pid want in our pid namespace (want <= 0: any pid),
 * SIGCHLD at exit. 0 in the child; the child's pid or -errno (-EEXIST: the
 * pid is taken) in the parent. */
static inline pid_t clone_at_pid(pid_t want)
{
	pid_t tid = want;
	struct tether_clone_args a = { .exit_signal = SIGCHLD };
	if (want > 0) {
		a.set_tid = (uint64_t)(uintptr_t)&tid;
		a.set_tid_size = 1;
	}
	return sys_clone3(&a, sizeof(a));
}
