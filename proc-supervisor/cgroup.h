/* The per-sandbox cgroup v2: <parent>/tether-<pid>/workload.
 *
 * Children place themselves into `workload` before exec (spawn.h),
 * which a non-root workload cannot leave (it was not delegated), so
 * cgroup.kill ends the whole tree, daemons and double-forked orphans
 * included. <parent> is the supervisor's own cgroup (so a delegated
 * container subtree works) unless a path is given. When cgroup v2 is
 * missing or not writable, membership falls back to lineage (the process
 * table and the subreaper), and the mode says so. */
#pragma once

#include <limits.h>
#include <stdbool.h>

#include "common/kernel.h"

enum cgroup_mode { CGROUP_MODE_NONE = 0, CGROUP_MODE_AUTO, CGROUP_MODE_PATH };

struct sandbox_cgroup {
	bool active;
	char base[PATH_MAX];     /* <parent>/tether-<pid> (created by us) */
	char workload[PATH_MAX]; /* base/workload */
	int workload_fd;         /* O_PATH directory fd (the spawner opens cgroup.procs from it); -1 */
};

/* Parse "auto" | "none" | PATH. */
int cgroup_mode_parse(const char *arg, enum cgroup_mode *mode, const char **path);
/* Create the cgroup. -errno when it cannot (the caller falls back to
 * lineage and logs why); mode NONE gives 0 and an inactive cgroup. */
int sandbox_cgroup_setup(const struct kernel_caps *caps, enum cgroup_mode mode, const char *path,
			 struct sandbox_cgroup *cg);
/* Write 1 to cgroup.kill (>= 5.14); -errno (-ENOENT: no cgroup.kill). */
int sandbox_cgroup_kill(const struct sandbox_cgroup *cg);
/* Number of processes in the workload cgroup (cgroup.procs lines), -errno. */
int sandbox_cgroup_nprocs(const struct sandbox_cgroup *cg);
/* Remove both directories (must be empty); the fd is closed. */
int sandbox_cgroup_remove(struct sandbox_cgroup *cg);
