/* Landlock scoping for workloads (kernel ABI >= 6).
 *
 * A ruleset that handles no file or network access and only scopes signals
 * and abstract Unix sockets: a process in the resulting domain cannot signal
 * (kill, pidfd_send_signal, SIGIO) nor connect to abstract sockets of any
 * process outside its domain - the supervisor in particular. Landlock also
 * forbids ptrace of processes outside the domain. The supervisor creates the
 * ruleset once; every spawned child enters it with landlock_scope_enter()
 * (async-signal-safe) after no_new_privs. Each child gets its own domain, so
 * one exec session cannot signal another session or the entrypoint. */
#pragma once

#include <stdbool.h>

/* The kernel's Landlock ABI version, or -errno (-EOPNOTSUPP when disabled). */
int landlock_abi_version(void);
/* A scope ruleset fd (CLOEXEC), or -EOPNOTSUPP when the ABI is < 6. */
int landlock_scope_ruleset(void);
/* In the child: enter a new domain from the ruleset. -errno. */
int landlock_scope_enter(int ruleset_fd);
