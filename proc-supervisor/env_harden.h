/* Spawn-time hardening hooks for the proc-supervisor's spawner.
 *
 * envb_harden_child() runs in the child between fork/clone and execve and is
 * async-signal-safe (raw syscalls, no malloc, no stdio): RLIMIT_CORE=0 so a
 * crash never writes the environment (API keys) to a core file, optional
 * PR_SET_NO_NEW_PRIVS, and every fd closed except 0-2 and `keep` (whose
 * CLOEXEC flag is cleared so they survive execve). close_range(2) is used
 * when the kernel has it (>= 5.9), else a getdents64 walk of /proc/self/fd,
 * else a bounded close() loop up to RLIMIT_NOFILE.
 *
 * envb_protect_supervisor() is for the supervisor itself, once at start:
 * PR_SET_DUMPABLE 0 makes /proc/<pid>/environ, mem, fd/ of the supervisor
 * unreadable by other processes of the same uid (a sandboxed workload that
 * somehow shares the supervisor's uid and pid namespace), and stops core
 * dumps of the supervisor. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define ENVB_HARDEN_NO_NEW_PRIVS  (1u << 0)
#define ENVB_HARDEN_FORCE_FDWALK  (1u << 1) /* tests: skip close_range */
#define ENVB_HARDEN_FORCE_BRUTE   (1u << 2) /* tests: skip close_range and /proc */
#define ENVB_HARDEN_MAX_KEEP 64

/* 0 or -errno (-E2BIG for more than ENVB_HARDEN_MAX_KEEP fds). */
int envb_harden_child(const int *keep, size_t n_keep, unsigned flags);
int envb_core_limit_zero(void);
int envb_close_fds(const int *keep, size_t n_keep, unsigned flags);
int envb_protect_supervisor(void);
