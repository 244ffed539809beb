/* The workload seccomp profile.
 *
 * The filter is compiled with libseccomp in the supervisor (where malloc is
 * safe) into a plain BPF program; the spawned child installs that program
 * with the raw seccomp(2) syscall, which is async-signal-safe, so nothing
 * between clone and execve allocates. Default action: allow. Each deny rule
 * and why it exists is listed in docs/threat-model.md; the table in
 * seccomp.c is the single source of truth for both.
 *
 * With `notify_connect`, connect(2) returns SECCOMP_RET_USER_NOTIF and the
 * child must install the program with SECCOMP_FILTER_FLAG_NEW_LISTENER
 * (workload_filter_install_listener) and hand the listener to the
 * supervisor. A notified syscall fails with ENOSYS once every listener fd is
 * closed: attribution fails closed by construction. */
#pragma once

#include <linux/filter.h>
#include <stdbool.h>
#include <sys/types.h>

struct workload_filter_opts {
	bool notify_connect; /* SCMP_ACT_NOTIFY on connect */
	/* Landlock signal scoping unavailable: deny kill/tkill/tgkill/pidfd_open
	 * aimed at this pid (and its process group), and kill(-1). 0 = off. */
	pid_t protect_pid;
	pid_t protect_pgid;
};

struct workload_filter {
	struct sock_fprog prog; /* filter owned (malloc) */
	bool notify_connect;
	unsigned n_rules; /* rules added, for the log */
};

/* Compile the profile. -errno (libseccomp's) on failure. */
int workload_filter_build(const struct workload_filter_opts *o, struct workload_filter *out);
void workload_filter_free(struct workload_filter *f);

/* Async-signal-safe installers for the child. Both need no_new_privs (or
 * CAP_SYS_ADMIN). _listener returns the new listener fd; both -errno. */
int workload_filter_install(const struct workload_filter *f);
int workload_filter_install_listener(const struct workload_filter *f);

/* The rule table for docs and `--list-seccomp`: i = 0.. until NULL. */
struct workload_rule_doc {
	const char *syscall;
	const char *when;
	const char *action;
	const char *why;
};
const struct workload_rule_doc *workload_filter_rule_doc(size_t i);
