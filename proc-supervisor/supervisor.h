/* struct procsup: the proc-supervisor daemon's top-level context.
 *
 * One libuv loop runs everything: SIGCHLD reaping, signal forwarding, the
 * shutdown grace timer, the seccomp listeners (connect attribution) and,
 * later, the exec gateway and identity service sockets, which attach their
 * own handles to ps->loop and spawn through procsup_spawn(). All state
 * lives here; nothing is global.
 *
 * Lifecycle: procsup_init -> procsup_spawn_entrypoint -> procsup_run
 * (returns the exit code: the entrypoint's status, 128+N for signal N) ->
 * procsup_destroy. Shutdown starts when the entrypoint exits or SIGTERM
 * arrives: the entrypoint gets the signal, the rest of the tree gets
 * SIGTERM once the entrypoint is gone, and after --grace seconds everything
 * left is killed (cgroup.kill and/or pidfds of every descendant). */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <uv.h>

#include "common/audit.h"
#include "common/kernel.h"
#include "identity/cookies.h"
#include "identity/members.h"
#include "policy/policy.h"
#include "proc-supervisor/cgroup.h"
#include "proc-supervisor/notify.h"
#include "proc-supervisor/seccomp.h"
#include "proc-supervisor/spawn.h"

struct procsup_config {
	const char *audit_path;     /* NULL: no audit events */
	const char *topology;       /* for audit lines; "standalone" */
	bool signal_group;          /* forward to the entrypoint's process group */
	unsigned grace_s;           /* shutdown grace, default 10 */
	/* --wait-all: the entrypoint's exit does not end the run while
	 * workload processes remain; the last one's does (or SIGTERM). */
	bool wait_all;
	enum cgroup_mode cgroup_mode;
	const char *cgroup_path;
	bool no_seccomp;            /* debugging only: no filter, no attribution */
	bool no_landlock;           /* force the seccomp fallback for signal scoping */
	const char *debug_registry; /* write the attributions as JSON here at exit */
	size_t registry_capacity;   /* 0 => 65536 */
	/* The env boundary's policy: the usual layers (system, user, project)
	 * plus these command-layer files and agent preset. */
	const char *const *policy_files;
	size_t n_policy_files;
	const char *agent;
	/* --trust-bundle: the workload's trust bundle instead of the policy's
	 * environment.trust_bundle (the net-supervisor's system CAs + sandbox
	 * CA when an endpoint inspects TLS); NULL: the policy's. */
	const char *trust_bundle;
	const char *proxy_url;      /* the net-supervisor's proxy, for HTTP(S)_PROXY */
	/* The fence captures TCP (transparent capture, --transparent-capture):
	 * a TCP connect elsewhere is a captured flow the net-supervisor
	 * decides and audits, not an egress_bypass_attempt (UDP and the rest
	 * still are). */
	bool transparent_capture;
	/* --user: every workload process (entrypoint and exec sessions) runs
	 * as this uid/gid instead of ours; HOME, USER and LOGNAME come from its
	 * passwd entry when it has one. */
	bool run_as;
	uid_t run_uid;
	gid_t run_gid;
	/* RLIMIT_NOFILE as we were started with, given back to every workload
	 * process (we raise our own: common/fdlimit.h); unset: ours. */
	bool have_child_nofile;
	struct rlimit child_nofile;
};

enum procsup_child_kind { PROCSUP_ENTRYPOINT = 1, PROCSUP_EXEC_SESSION };

struct procsup;
struct procsup_child;
typedef void (*procsup_exit_cb)(struct procsup *ps, struct procsup_child *c, int wstatus, void *user);

struct procsup_child {
	pid_t pid;
	int pidfd;
	enum procsup_child_kind kind;
	char key[PROCREF_KEY_MAX];
	bool exited;
	int wstatus;
	procsup_exit_cb on_exit; /* called once, after the audit event */
	void *user;
	struct procsup_child *next;
};

/* What a spawn needs from its caller (the entrypoint, or a gateway session). */
struct procsup_spawn_req {
	char *const *argv;
	char *const *parent_envp; /* filtered by the env boundary; NULL => the supervisor's own */
	const char *cwd;
	int stdio[3];        /* -1 inherit */
	enum spawn_session session;
	int tty_fd;
	enum procsup_child_kind kind;
	procsup_exit_cb on_exit;
	void *user;
};
void procsup_spawn_req_init(struct procsup_spawn_req *r);

enum procsup_state { PROCSUP_RUNNING = 0, PROCSUP_DRAINING, PROCSUP_KILLING, PROCSUP_DONE };

#define PROCSUP_NSIG_FWD 7
#define PROCSUP_MAX_HOOKS 8

struct procsup {
	uv_loop_t loop;
	struct procsup_config cfg;
	struct kernel_caps caps;
	struct audit_log *audit;
	struct sandbox_cgroup cgroup;
	struct spawn_sigconf sigconf;     /* ignored/blocked at our start: given back to every child */
	const char *membership;           /* "cgroup" | "lineage" */
	/* Why membership is lineage although a cgroup was asked for (the
	 * audit's membership_degraded); "" when it is not degraded. */
	char membership_degraded[PATH_MAX + 160];
	struct workload_filter filter;
	bool have_filter;
	int landlock_fd;                  /* -1: signal scoping through seccomp */
	struct notifier *notifier;
	struct cookie_registry *cookies;
	struct members *members;          /* NULL if the table could not be built */
	struct procref anchor;            /* ourselves, recorded */
	struct policy *policy;            /* env boundary policy */
	const char *tether_path;          /* the tether beside us, for git_ssh_via_proxy; NULL: none */
	char tether_path_buf[PATH_MAX];
	struct procsup_child *children;   /* spawned by us, live or not yet reported */
	struct procsup_child *entrypoint;
	int exit_code;                    /* valid once the entrypoint exited */
	enum procsup_state state;
	bool term_received;
	uint64_t debug_cookies_n;         /* --debug-registry: cookies seen */
	uint64_t *debug_cookies;
	size_t debug_cookies_cap;
	uint64_t debug_cookies_next;      /* ring position once the cap is reached */
	uv_signal_t sig_fwd[PROCSUP_NSIG_FWD];
	uv_signal_t sig_chld;
	uv_timer_t grace_timer;           /* SIGTERM -> SIGKILL */
	uv_timer_t kill_timer;            /* re-kill and re-check while killing */
	unsigned kill_rounds;
	struct notifier_stats final_stats; /* the notifier's counters when it closed */
	struct procsup_hook {
		void (*fn)(struct procsup *ps, void *user);
		void *user;
	} done_hooks[PROCSUP_MAX_HOOKS];
	size_t n_done_hooks;
	bool loop_ready, handles_ready;
	/* egress_bypass_attempt reports: at most PROCSUP_BYPASS_PER_SEC a
	 * second, the rest counted into the next one's "suppressed". */
	uint64_t bypass_window_ms;
	unsigned bypass_in_window;
	uint64_t bypass_suppressed;
	/* Called after each cookie the notifier recorded (after CONTINUE, on
	 * the loop): the identity feed's queue (idpublish.h). NULL: none. */
	void (*on_record)(void *user, uint64_t cookie);
	void *on_record_user;
	/* The same, with the recorded socket (borrowed for the call): the
	 * identity service's connect-time pushes (idservice.h). NULL: none. */
	void (*on_record_sock)(void *user, uint64_t cookie, int sockfd);
	void *on_record_sock_user;
};
#define PROCSUP_BYPASS_PER_SEC 20

int procsup_init(struct procsup *ps, const struct procsup_config *cfg);
/* Spawn a workload process. 0 and *out (owned by ps) or -errno with *err. */
int procsup_spawn(struct procsup *ps, const struct procsup_spawn_req *req, struct procsup_child **out,
		  struct spawn_error *err);
int procsup_spawn_entrypoint(struct procsup *ps, char *const argv[], struct spawn_error *err);
/* Run the loop until the tree is gone; returns the exit code. */
int procsup_run(struct procsup *ps);
/* Begin the shutdown now (as on SIGTERM). */
void procsup_shutdown(struct procsup *ps);
void procsup_destroy(struct procsup *ps);
/* Called once when the tree is gone and the loop is winding down: a
 * service (exec gateway, identity service) closes its handles here so
 * procsup_run() can return. -ENOSPC beyond PROCSUP_MAX_HOOKS. */
int procsup_on_done(struct procsup *ps, void (*fn)(struct procsup *ps, void *user), void *user);
/* The notifier's counters (live, or as they were when it closed). */
struct notifier_stats procsup_notifier_stats(const struct procsup *ps);
