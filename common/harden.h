/* Self-protection of a supervisor that holds secrets (the anchor's keys,
 * the sandbox CA key, credential values).
 *
 * harden_hide_environ() moves the environment to the heap and zeroes the
 * original strings, which is the memory /proc/<pid>/environ shows: a
 * workload that may open that file (root with Landlock, which does not
 * guard it) then reads only NULs. getenv keeps working. Call once, early,
 * before any thread exists.
 *
 * harden_no_dumps() makes the process non-dumpable (no core file, and its
 * /proc/<pid>/environ, mem and fds are closed to a same-uid peer without
 * CAP_SYS_PTRACE; no ptrace attach) and, with core_limit, sets RLIMIT_CORE
 * to 0 as well (inherited by children: only where none is spawned whose
 * limit is meant to differ). Both return 0 or -errno. */
#pragma once

#include <stdbool.h>

int harden_hide_environ(void);
int harden_no_dumps(bool core_limit);
