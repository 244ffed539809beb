/* binpath: what a binary path in a policy really names, seen from the
 * workload's root.
 *
 * A flow's identity is the running image (/proc/PID/exe), never the name a
 * user typed: /usr/bin/python3 is a symlink, the process runs
 * /usr/bin/python3.11; /usr/bin/pip is a script, the process is its
 * interpreter; git fetches over https from git-remote-http. This module
 * answers, for one path:
 *   - binpath_resolve: every symlink followed inside a root directory fd
 *     (absolute links and ".." never leave it, as RESOLVE_IN_ROOT);
 *   - binpath_interpreter: the interpreter a script's "#!" line runs
 *     (`#!/usr/bin/env NAME` looked up in the usual bin directories);
 *   - binpath_hint_find: the table of names that never connect themselves
 *     (docs/network-policy.md, "Names that never connect themselves").
 * The policy loader's callers resolve a loaded policy with
 * netpol_resolve_binaries() (policy/network.h); `tether policy check` and
 * `explain` print the hints. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Resolve the absolute `path` inside the directory rootfd (the workload's
 * root, e.g. an fd of /proc/PID/root, or of "/"): 0 with the canonical path
 * in out, or -ENOENT (a component or a link target is missing), -ELOOP
 * (more than 40 links), -ENOTDIR, -ENAMETOOLONG, -EINVAL (not absolute),
 * -errno. Uses openat2(RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS) per component
 * where the kernel has it (5.6+), else fstatat/readlinkat. */
int binpath_resolve(int rootfd, const char *path, char *out, size_t size);

/* Is the file at `path` (already resolved, inside rootfd) a script? 1 with
 * its interpreter's resolved path in out (for `#!/usr/bin/env NAME`: NAME
 * found in /usr/local/sbin, /usr/local/bin, /usr/sbin, /usr/bin, /sbin or
 * /bin of the root), 0 not a script, -errno when it cannot be read or the
 * interpreter is not found. Follows up to 4 nested scripts, as the kernel. */
int binpath_interpreter(int rootfd, const char *path, char *out, size_t size);

/* Is this interpreter a shell (sh, bash, dash, zsh, ksh, busybox)? A shell
 * script's flows come from the programs it runs, not from the shell. */
bool binpath_is_shell(const char *path);

/* A common name whose network flows come from another program. */
struct binpath_hint {
	const char *const *names;  /* basenames this row is about (NULL-terminated) */
	const char *resolved_base; /* only when the path resolves to this basename, or NULL */
	const char *connects;      /* the binary (path or glob) to name instead, or NULL */
	const char *text;          /* one line: who really connects, and when */
};

/* The row for a written path (by its basename) and its resolved path
 * (NULL when it does not resolve), or NULL. */
const struct binpath_hint *binpath_hint_find(const char *written, const char *resolved);
/* Every row (for docs and tests). */
const struct binpath_hint *binpath_hints(size_t *n);
