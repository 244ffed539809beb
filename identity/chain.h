/* chain: an ancestry chain verified once, pinned by pidfds, re-proved cheaply.
 *
 * A full ancestry walk opens every hop (stat, exe, maps: about 18 syscalls
 * a hop). A chain the walk proved can be proved again for a later flow
 * with the processes pinned by pidfds taken after that walk, about four
 * syscalls a hop:
 *   - the live ppid of the child (subject, then each hop) names the next
 *     cached hop, read BEFORE that hop's pidfd is confirmed alive: a pidfd
 *     alive now was alive, at that pid, when the child named it (a pid is
 *     not reused while its process lives);
 *   - every hop still runs the same exe file version under the same path
 *     (stat through the magic link, readlink), else its cached exe and
 *     hash are not its exe and hash (an exec, or a file swapped in place);
 *   - cgroup membership when the table uses it;
 *   - the last hop's parent is the anchor, and the anchor is alive (or is
 *     the caller itself).
 * The re-proof is stricter than the walk: a reparented hop, an exec, a
 * hop that exited all fail it, and the caller then walks in full. Only
 * chains of live hops with plain images (no deleted, memfd or
 * maps-mismatch exe) are pinned. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/kernel.h"
#include "identity/ancestry.h"
#include "identity/members.h"
#include "identity/procref.h"

#define CHAIN_MAX_HOPS 6

struct pinned_chain {
	size_t n;                            /* hops below the anchor, parent first */
	struct procref hops[CHAIN_MAX_HOPS]; /* each owns a pidfd; exe as proved */
};

/* Same exe file version under the same label as `want`, read now through
 * /proc/<procfs_pid>/exe (relative to proc_fd, an O_DIRECTORY fd on /proc):
 * one stat through the magic link, one readlink. Only plain images
 * qualify: a deleted, memfd or maps-mismatch tuple is -ESTALE. 0 same,
 * -ESTALE changed, -ESRCH gone, other -errno. */
int chain_exe_unchanged(int proc_fd, pid_t procfs_pid, const struct exe_tuple *want);

/* The live ppid of a pinned process, its pidfd checked alive AFTER the
 * read: PIDFD_GET_INFO when the kernel has it (ppid in our pidns,
 * *procfs_ns false), else /proc/<pid>/stat (ppid in the procfs mount's
 * pidns, *procfs_ns true; pid and start_time must still match). */
int chain_live_ppid(const struct kernel_caps *caps, int proc_fd, const struct procref *ref,
		    pid_t *ppid_out, bool *procfs_ns);

/* Is `ppid` (as chain_live_ppid returned it) the pid of `parent`? */
bool chain_ppid_is(pid_t ppid, bool procfs_ns, const struct procref *parent);

/* A pidfd on the recorded `rec` that provably names it (alive, same key),
 * or -1. */
int chain_pin(const struct kernel_caps *caps, const struct procref *rec);

/* Pin the hops of a successful walk (res->hops[0..n-2]; [n-1] is the
 * anchor) into c; none when the subject is the anchor's child. 0, or
 * -ESTALE when the chain cannot be re-proved cheaply (more than CHAIN_MAX_HOPS, a hop not confirmed live, without an
 * exe or with a non-plain one, or gone before it was pinned). c is always
 * left valid for chain_release. */
int chain_pin_walk(const struct kernel_caps *caps, const struct ancestry_result *res,
		   struct pinned_chain *c);

/* A copy of src with its own pidfds (c left empty on failure: -errno). */
int chain_dup(const struct pinned_chain *src, struct pinned_chain *dst);

void chain_release(struct pinned_chain *c);

/* Re-prove c below `child` (live, with a pidfd), whose live ppid was just
 * read (ppid, pns as chain_live_ppid returns them): the child's cgroup,
 * then every hop nearest first, then the anchor. anchor_pidfd < 0 means
 * the caller IS the anchor (alive while it asks). table may be NULL (no
 * cgroup checks). 0 proved, -ESTALE otherwise. */
int chain_verify(const struct kernel_caps *caps, int proc_fd, struct members *table,
		 const struct pinned_chain *c, const struct procref *child, pid_t ppid, bool pns,
		 const struct procref *anchor, int anchor_pidfd);
