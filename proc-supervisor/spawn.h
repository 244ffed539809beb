/* The hardened spawner: every workload process starts here.
 *
 * spawn_process() resolves the program (PATH of the child's environment),
 * then clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD) on a private stack with
 * all signals blocked - posix_spawn's shape (no page-table copy; we sleep
 * until the child has exec'd or died) with a pidfd from birth. The child,
 * in order: sets every signal disposition to default, or to ignored where
 * the supervisor's start had it so (sigconf), writes itself into the
 * sandbox cgroup's cgroup.procs (before any workload code exists: as good
 * as CLONE_INTO_CGROUP, which vfork-style clone cannot use), starts a
 * session or process group, moves stdio into place, closes every other fd
 * except keep_fds, drops CAP_SYS_PTRACE (and, with set_ids, switches to the
 * workload's uid/gid with no supplementary groups), chdir,
 * PR_SET_PDEATHSIG(SIGKILL) (after the id change, which would clear it),
 * PR_SET_NO_NEW_PRIVS, RLIMIT_CORE=0, enters the Landlock scope domain,
 * installs the seccomp program (with a listener it sends to the parent over
 * SCM_RIGHTS: the in-flight fd keeps it alive until the parent, resumed
 * after execve, receives it; no ack is possible or needed), sets the
 * signal mask the supervisor started with (sigconf) and execs. With
 * set_ids the program is also opened by the supervisor beforehand: when
 * the workload's uid cannot reach its path (a build in a 0700 home) the
 * child execs that fd (execveat AT_EMPTY_PATH), the same file; a #!
 * script cannot be run that way (its interpreter opens it by path) and
 * fails with a message that says so. The child runs only async-signal-safe code and
 * writes nothing but its own stack (it shares our memory). Failures come
 * back over a CLOEXEC socket as (step, errno) and the child exits 127; EOF
 * on that socket means execve succeeded. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "proc-supervisor/seccomp.h"

enum spawn_session {
	SPAWN_SETSID = 0,     /* new session, no controlling tty (daemon/container) */
	SPAWN_FOREGROUND,     /* new process group made foreground on tty_fd (interactive) */
	SPAWN_PTY,            /* new session with stdio[0] (a pty slave) as controlling tty */
};

#define SPAWN_MAX_KEEP 16

/* The signal configuration a workload process starts with: what was
 * ignored and blocked when the supervisor started (under nohup SIGHUP is
 * ignored; a job-control shell may leave SIGTTOU/SIGTTIN ignored), given
 * back as tini does. Bit n-1 = signal n (the kernel's sigset, 64 signals),
 * so the vfork child can set the mask with the raw syscall, glibc's
 * reserved signals included in the mask. SIGCHLD and glibc's own signals
 * (32 up to SIGRTMIN) are never restored as ignored: the first would make
 * the workload's children vanish unwaited, the others belong to its C
 * library. */
struct spawn_sigconf {
	uint64_t ignored;
	uint64_t blocked;
};
/* Read ours now: call before the supervisor changes any disposition. */
void spawn_sigconf_capture(struct spawn_sigconf *sc);

struct spawn_opts {
	char *const *argv;        /* argv[0] is the program; required */
	char *const *envp;        /* the child's whole environment; NULL => spawn_build_env() */
	const char *cwd;          /* NULL: inherit */
	int stdio[3];             /* fd to become 0/1/2 in the child; -1 inherit */
	const int *keep_fds;      /* kept open at the same number (CLOEXEC cleared) */
	size_t n_keep;
	enum spawn_session session;
	int tty_fd;               /* SPAWN_FOREGROUND: the terminal (-1 none) */
	const struct workload_filter *filter; /* NULL: no seccomp (--no-seccomp) */
	int landlock_fd;          /* scope ruleset, -1 none */
	int cgroup_fd;            /* sandbox cgroup directory (O_PATH ok), -1 none */
	int timeout_ms;           /* reading the child's report; 0 => 5000 */
	const struct rlimit *nofile; /* RLIMIT_NOFILE for the child (set after closing fds); NULL: ours */
	const struct spawn_sigconf *sigconf; /* NULL: every disposition default, nothing blocked */
	bool set_ids;             /* run as uid/gid (real, effective, saved; groups = {gid}) */
	uid_t uid;
	gid_t gid;
};

struct spawn_result {
	pid_t pid;
	int pidfd;       /* owned by the caller */
	int listener_fd; /* seccomp listener, owned by the caller; -1 when no filter */
	bool in_cgroup;  /* the child joined the sandbox cgroup before exec */
	int cgroup_err;  /* why it did not (errno), 0 when it did or was not asked to */
	bool exec_by_fd; /* the path was not reachable for the workload's uid: exec'd by fd */
	char path[4096]; /* the program that was executed */
};

struct spawn_error {
	int exit_code;     /* 126 not executable, 127 not found / setup failed */
	const char *step;  /* "execve", "seccomp", "resolve", ... */
	int err;           /* errno */
	char message[512]; /* one line for the user */
};

/* 0 with *res filled, or -errno with *err filled. */
int spawn_process(const struct spawn_opts *o, struct spawn_result *res, struct spawn_error *err);
void spawn_opts_init(struct spawn_opts *o);

/* The environment every child gets until the env boundary builds one:
 * empty but for a fixed PATH. Never the supervisor's own environment. This
 * is the one place to wire the env boundary in. */
char *const *spawn_build_env(void);

/* PATH search the way execvp does, over `path_list` (":"-separated); -ENOENT
 * not found, -EACCES found but not executable. */
int spawn_resolve(const char *prog, const char *path_list, char *out, size_t size);
