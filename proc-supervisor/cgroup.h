/* The per-sandbox cgroup v2: <parent>/tether-<pid>/workload.
 *
 * Children place themselves into `workload` before exec (spawn.h),
 * which a non-root workload cannot leave (it was not delegated), so
 * cgroup.kill ends the whole tree, daemons and double-forked orphans
 * included. <parent> is the supervisor's own cgroup (so a delegated
 * container subtree works) unless a path is given. When cgroup v2 is
 * missing or not writable, membership falls back to lineage (the process
 * table and the subreaper), and the mode says so.
 *
 * Ownership: the supervisor holds an exclusive flock(2) on the
 * tether-<pid> directory for its whole life (the lock goes with the
 * process, SIGKILL included) and marks it (xattr user.tether.owner). A
 * directory of that name that already exists is a predecessor's whose pid
 * we got again (a restarted PID 1 of a namespace is always 1): when it is
 * marked and its lock can be taken its owner is gone, so the processes
 * still in it are the dead supervisor's workload; they are killed
 * (cgroup.kill, waited for until the cgroup is unpopulated), the
 * sub-cgroups removed and the directory reused. An unmarked one (no
 * proof) is reused only when it holds no process. A lock held by a live
 * supervisor (another PID namespace's PID 1 under the same parent), or an
 * unproven directory with processes, is left alone and the next name
 * tried: tether-<pid>-2, -3, ... */
#pragma once

#include <limits.h>
#include <stdbool.h>

#include "common/kernel.h"

enum cgroup_mode { CGROUP_MODE_NONE = 0, CGROUP_MODE_AUTO, CGROUP_MODE_PATH };

struct sandbox_cgroup {
	bool active;
	char base[PATH_MAX];     /* <parent>/tether-<pid>[-N] (ours, locked) */
	char workload[PATH_MAX]; /* base/workload */
	int workload_fd;         /* O_PATH directory fd (the spawner opens cgroup.procs from it); -1 */
	int base_fd;             /* base, holding the flock; -1 */
	/* What setup found (for the log and the audit). */
	bool reclaimed;          /* base was a dead predecessor's, reused */
	int stale_killed;        /* processes of that predecessor still in it, killed */
	int busy_skipped;        /* names held by live supervisors, skipped */
	char error[PATH_MAX + 128]; /* setup failure: "<step> <path>: <reason>" */
};

/* Parse "auto" | "none" | PATH. */
int cgroup_mode_parse(const char *arg, enum cgroup_mode *mode, const char **path);
/* Create (or reclaim, above) the cgroup. -errno when it cannot, with
 * cg->error naming the step and the exact path (the caller falls back to
 * lineage or fails); mode NONE gives 0 and an inactive cgroup. */
int sandbox_cgroup_setup(const struct kernel_caps *caps, enum cgroup_mode mode, const char *path,
			 struct sandbox_cgroup *cg);
/* Write 1 to cgroup.kill (>= 5.14); -errno (-ENOENT: no cgroup.kill). */
int sandbox_cgroup_kill(const struct sandbox_cgroup *cg);
/* Number of processes in the workload cgroup (cgroup.procs lines), -errno. */
int sandbox_cgroup_nprocs(const struct sandbox_cgroup *cg);
/* Remove both directories (and any sub-cgroup a root workload made; all
 * must be empty), then release the lock; the fds are closed. */
int sandbox_cgroup_remove(struct sandbox_cgroup *cg);
