/* Init duties: what a container init (or a subreaper) must do exactly.
 *
 * init_become_anchor() makes this process the child subreaper (orphans of
 * the tree come back to it, so none is lost and every zombie is reaped) and
 * non-dumpable (a workload cannot read its /proc/<pid>/environ or mem, nor
 * ptrace it, even with the same uid). The reaper collects every exited
 * child without blocking. init_signal_tree() is the lineage fallback for
 * cgroup.kill: it signals every live descendant found by walking procfs
 * parent links to us, each through a pidfd checked against the start time
 * seen in the scan (so a reused pid is never signalled). */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

int init_become_anchor(void);

/* Call cb for every child that has exited (WNOHANG loop). Returns the number
 * reaped; *no_children set when waitpid reports ECHILD (the tree is empty). */
int init_reap(void (*cb)(void *user, pid_t pid, int wstatus), void *user, bool *no_children);

/* Shell convention: exit code, or 128+N for signal N. */
int init_exit_code(int wstatus);

/* Signal every live descendant of this process. Returns how many were
 * signalled, or -errno (-EXDEV: /proc is not our PID namespace's). */
int init_signal_tree(int sig);
