/* exec_gateway: `tether exec` sessions as the supervisor's own children.
 *
 * A Unix socket (0600 by default). Each connection is one session
 * (docs/exec-gateway.md):
 *   client -> ExecRequest frame; for a non-PTY session the client's three
 *             stdio fds ride on it by SCM_RIGHTS and become the child's 0/1/2;
 *   gateway -> ExecStarted {pid, key}; for a PTY session the gateway
 *             allocated the pty (posix_openpt in the supervisor, the slave is
 *             the child's controlling tty) and the MASTER fd rides on this
 *             frame back to the client, which relays its own stdio;
 *   client -> ExecResize (applied to the master: the kernel sends SIGWINCH
 *             to the session's foreground group), ExecSignal;
 *   gateway -> ExecData on stream 2 for the gateway's own error messages,
 *             then ExecExited {exit code, signal}.
 * The connection closing before the child exited kills the session's process
 * group (SIGKILL). Peers are checked with SO_PEERCRED (uid or primary gid in
 * the allow lists, or the supervisor's own euid) and, where
 * caps->peer_pidfd, must also yield an SO_PEERPIDFD.
 *
 * argv[0] == "" asks for the login shell resolved on the supervisor's side
 * (exec_gw_opts.shell, else the passwd entry of the supervisor's user if it
 * is an executable non-empty file, else /bin/sh): [""] is the login shell
 * ("-l"), ["", "-c", CMD] runs CMD through it. The env overlay is pre-filtered
 * here to TERM, LANG, LC_* and extra_env_names; what survives goes through the
 * spawner's env boundary as the parent environment.
 *
 * The gateway does not spawn or reap by itself: it calls the spawner given
 * (procsup_spawn in the daemon, which applies seccomp, the env boundary, the
 * cgroup and records the member as MEMBER_EXEC_SESSION) and is told of the
 * exit through the token. One libuv loop; not thread-safe. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

#include "common/kernel.h"
#include "identity/procref.h"
#include "proc-supervisor/spawn.h"

struct exec_gw;

/* What a session asks of the spawner. */
struct exec_gw_spawn {
	char *const *argv;
	char *const *envp;           /* pre-filtered overlay (NULL-terminated, may be empty) */
	const char *cwd;             /* NULL: the spawner's default */
	int stdio[3];                /* borrowed; the spawner dups/moves them into the child */
	enum spawn_session session;  /* SPAWN_SETSID or SPAWN_PTY (stdio = the slave) */
	/* Call exactly once when the child was reaped (after a 0 return). */
	void (*on_exit)(void *token, int wstatus);
	void *token;
};

struct exec_gw_spawned {
	pid_t pid;                   /* also the process group (new session) */
	char key[PROCREF_KEY_MAX];   /* procref key, "" if the child was already gone */
};

/* 0 and *out, or -errno with *err filled (exit_code 126/127/125 and a message). */
typedef int (*exec_gw_spawn_fn)(void *userdata, const struct exec_gw_spawn *req,
				struct exec_gw_spawned *out, struct spawn_error *err);

struct exec_gw_opts {
	const char *path;               /* the socket path; required */
	unsigned socket_mode;           /* 0: 0600 */
	const struct kernel_caps *caps; /* required */
	const uid_t *allow_uids;
	size_t n_allow_uids;
	const gid_t *allow_gids;
	size_t n_allow_gids;
	const char *shell;              /* the policy's exec.shell, or NULL */
	const char *const *extra_env_names; /* besides TERM/LANG/LC_*; may be NULL */
	size_t n_extra_env_names;
	uint64_t handshake_timeout_ms;  /* 0: 5000 */
	size_t max_sessions;            /* 0: 64 */
	exec_gw_spawn_fn spawn;         /* required */
	void *spawn_userdata;
};

/* -EINVAL bad options, -errno from socket/bind/listen. */
int exec_gw_start(uv_loop_t *loop, const struct exec_gw_opts *opts, struct exec_gw **out);
/* Stop accepting, kill every live session's group and close its
 * connection. The gateway frees itself once every spawned session has
 * reported its exit and every handle is closed; done(userdata) then. */
void exec_gw_stop(struct exec_gw *gw, void (*done)(void *userdata), void *userdata);
size_t exec_gw_session_count(const struct exec_gw *gw);

/* The shell for argv[0] == "" (see above) into out; -ENOENT with a message
 * in msg when none is usable. */
int exec_gw_resolve_shell(const char *policy_shell, uid_t uid, char *out, size_t size, char *msg,
			  size_t msg_size);
