/* The daemons' file descriptor limit.
 *
 * A daemon started from a shell, a container runtime or an older init
 * inherits a soft RLIMIT_NOFILE of 1024 (the select() era's default) even
 * where the hard limit is far higher. The net-supervisor needs two
 * descriptors per relayed connection and the proc-supervisor one or two per
 * cached caller, so both raise their own soft limit to the hard one at
 * start, as systemd advises for programs that do not use select(). Workload
 * children get the original limits back before exec: they did not ask for
 * the raise, and a program using select() breaks on descriptors ≥ 1024. */
#pragma once

#include <stddef.h>
#include <sys/resource.h>

/* Never raise the soft limit past this many descriptors (a hard limit of
 * "unlimited" would otherwise make per-descriptor tables huge). */
#define FDLIMIT_CEILING ((rlim_t)1 << 20)

/* Raise the soft RLIMIT_NOFILE to min(hard, FDLIMIT_CEILING); never lowers
 * it. 0 with *orig (may be NULL) = the limits as they were, also when the
 * raise itself fails (logged: the daemon runs with what it has); -errno
 * when the limits cannot be read (nothing changed, *orig untouched). */
int fdlimit_raise(struct rlimit *orig);

/* The soft RLIMIT_NOFILE now in force (FDLIMIT_CEILING when unlimited or
 * unreadable). */
rlim_t fdlimit_current(void);

/* How many connections needing per_conn descriptors each fit under limit
 * after reserving reserve descriptors for everything else (0 when nothing
 * fits). */
size_t fdlimit_capacity(rlim_t limit, size_t per_conn, size_t reserve);
