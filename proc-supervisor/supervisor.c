#include "proc-supervisor/supervisor.h"

#include "policy/credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "common/harden.h"
#include "common/log.h"
#include "common/util.h"
#include "proc-supervisor/env_build.h"
#include "proc-supervisor/env_redact.h"
#include "proc-supervisor/init.h"
#include "proc-supervisor/landlock.h"

static const int fwd_signals[PROCSUP_NSIG_FWD] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH };

void procsup_spawn_req_init(struct procsup_spawn_req *r)
{
	memset(r, 0, sizeof(*r));
	r->stdio[0] = r->stdio[1] = r->stdio[2] = -1;
	r->tty_fd = -1;
	r->kind = PROCSUP_EXEC_SESSION;
}

/* ---- attribution glue: notifier -> identity library ---- */

static void glue_release(void *user, struct procref *ref)
{
	if (ref->pidfd >= 0)
		procref_close(ref);
}

/* egress_bypass_attempt: a workload's connect to somewhere other than the
 * proxy. The fences refuse it (nftables, where the workload cannot touch
 * them); this is the record of who tried, what and where. */
static void glue_bypass(void *user, const struct sockaddr_storage *dst, int sotype, const struct procref *ref)
{
	struct procsup *ps = user;
	if (!ps->audit)
		return;
	if (ps->cfg.transparent_capture && sotype == SOCK_STREAM)
		return; /* captured: the net-supervisor's egress_decision is its record */
	uint64_t now = now_mono_ns() / 1000000u;
	if (now - ps->bypass_window_ms >= 1000) {
		ps->bypass_window_ms = now;
		ps->bypass_in_window = 0;
	}
	if (ps->bypass_in_window >= PROCSUP_BYPASS_PER_SEC) {
		ps->bypass_suppressed++;
		return;
	}
	ps->bypass_in_window++;
	char addr[INET6_ADDRSTRLEN] = "";
	unsigned port = 0;
	if (dst->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)dst;
		inet_ntop(AF_INET, &a->sin_addr, addr, sizeof(addr));
		port = ntohs(a->sin_port);
	} else {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)dst;
		inet_ntop(AF_INET6, &a->sin6_addr, addr, sizeof(addr));
		port = ntohs(a->sin6_port);
	}
	json_t *o = json_object();
	if (!o)
		return;
	json_object_set_new(o, "destination", json_string(addr));
	json_object_set_new(o, "port", json_integer(port));
	json_object_set_new(o, "transport", json_string(sotype == SOCK_STREAM ? "tcp" : sotype == SOCK_DGRAM ? "udp" :
							 sotype == SOCK_RAW ? "raw" : "other"));
	json_object_set_new(o, "source", json_string("connect_notifier"));
	if (ref) {
		json_object_set_new(o, "pid", json_integer(ref->pid));
		json_object_set_new(o, "process_key", json_string(ref->key));
		json_object_set_new(o, "uid", json_integer((json_int_t)ref->euid));
		if (ref->exe_err == 0 && ref->exe.path[0])
			json_object_set_new(o, "exe", json_string(ref->exe.path));
		if (ref->comm[0])
			json_object_set_new(o, "comm", json_string(ref->comm));
	}
	if (ps->bypass_suppressed) {
		json_object_set_new(o, "suppressed", json_integer((json_int_t)ps->bypass_suppressed));
		ps->bypass_suppressed = 0;
	}
	audit_emit(ps->audit, "egress_bypass_attempt", o);
	json_decref(o);
}

/* The proxy's address from --proxy (http://HOST:PORT, HOST an IP literal)
 * for the bypass reports, and its port on any address of the other family
 * (the proxy's second listener, which the proc side is not told); an IPv4
 * proxy host's port 53 too (the workload's resolver beside the proxy). */
static void allow_proxy(struct procsup *ps)
{
	const char *u = ps->cfg.proxy_url;
	if (!u || strncmp(u, "http://", 7) != 0)
		return;
	char host[INET6_ADDRSTRLEN + 2];
	const char *h = u + 7, *end;
	if (*h == '[') {
		end = strchr(h, ']');
		if (!end || end[1] != ':')
			return;
		h++;
	} else {
		end = strrchr(h, ':');
		if (!end)
			return;
	}
	if ((size_t)(end - h) >= sizeof(host))
		return;
	memcpy(host, h, (size_t)(end - h));
	host[end - h] = '\0';
	const char *ps_port = end + (*end == ']' ? 2 : 1);
	char *e;
	unsigned long port = strtoul(ps_port, &e, 10);
	if (!port || port > 65535 || (*e && *e != '/'))
		return;
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port) };
	if (inet_pton(AF_INET, host, &a4.sin_addr) == 1) {
		notifier_allow_destination(ps->notifier, (struct sockaddr *)&a4, sizeof(a4));
		/* the workload's resolver sits on the proxy's host, port 53
		 * (tether run): its lookups are not bypass attempts */
		struct sockaddr_in d4 = a4;
		d4.sin_port = htons(53);
		notifier_allow_destination(ps->notifier, (struct sockaddr *)&d4, sizeof(d4));
		a6.sin6_addr = in6addr_any;
		notifier_allow_destination(ps->notifier, (struct sockaddr *)&a6, sizeof(a6));
	} else if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) {
		notifier_allow_destination(ps->notifier, (struct sockaddr *)&a6, sizeof(a6));
		a4.sin_addr.s_addr = INADDR_ANY;
		notifier_allow_destination(ps->notifier, (struct sockaddr *)&a4, sizeof(a4));
	}
}

/* Only delegated pushes want the socket (services.c sets the hook). */
static bool glue_wants_sock(void *user)
{
	const struct procsup *ps = user;
	return ps->on_record_sock != NULL;
}

static void glue_record_sock(void *user, uint64_t cookie, int sockfd)
{
	struct procsup *ps = user;
	if (ps->on_record_sock)
		ps->on_record_sock(ps->on_record_sock_user, cookie, sockfd);
}

static int glue_record(void *user, uint64_t cookie, const struct procref *ref)
{
	struct procsup *ps = user;
	int r = cookie_registry_put(ps->cookies, cookie, ref);
	if (r < 0)
		return r;
	if (ps->members) {
		struct member_entry e;
		if (members_lookup_key(ps->members, ref->key, &e) == -ENOENT) {
			/* Born in the tree and never seen: learn it now, while it
			 * is alive. It sent a notification on our listener, so it
			 * carries the workload filter: a daemon whose middle
			 * parents are gone is still ours (members_learn_filtered). */
			enum reason why = REASON_OK;
			int lr = members_learn_filtered(ps->members, ref->pid, ref->key, &why, NULL);
			if (lr < 0)
				log_debug("members: learning pid %d: %s (%s)", (int)ref->pid, strerror(-lr),
					  reason_word(why));
		}
		(void)members_note_connect(ps->members, ref->key, &ref->exe);
	}
	if (ps->on_record)
		ps->on_record(ps->on_record_user, cookie);
	if (ps->cfg.debug_registry) {
		if (ps->debug_cookies_n == ps->debug_cookies_cap && ps->debug_cookies_cap < 65536) {
			size_t cap = ps->debug_cookies_cap ? 2 * ps->debug_cookies_cap : 64;
			uint64_t *v = realloc(ps->debug_cookies, cap * sizeof(*v));
			if (v)
				ps->debug_cookies = v, ps->debug_cookies_cap = cap;
		}
		/* at most 65536 kept: past that, the latest overwrite the oldest
		 * (a storm's last connect is the one a test looks for) */
		if (ps->debug_cookies_n < ps->debug_cookies_cap)
			ps->debug_cookies[ps->debug_cookies_n++] = cookie;
		else if (ps->debug_cookies_cap)
			ps->debug_cookies[ps->debug_cookies_next++ % ps->debug_cookies_cap] = cookie;
	}
	return 0;
}

/* ---- audit ---- */

static const char *kind_word(enum procsup_child_kind k)
{
	return k == PROCSUP_ENTRYPOINT ? "entrypoint" : "exec_session";
}

static void audit_spawn(struct procsup *ps, const struct procsup_child *c, const struct spawn_result *res,
			char *const *argv)
{
	if (!ps->audit)
		return;
	json_t *o = json_object();
	if (!o)
		return;
	json_object_set_new(o, "pid", json_integer(c->pid));
	json_object_set_new(o, "process_key", json_string(c->key));
	json_object_set_new(o, "kind", json_string(kind_word(c->kind)));
	json_object_set_new(o, "argv0", json_string(argv[0]));
	/* Through the redactor: a command line may carry secrets. */
	char **red = redact_argv(argv);
	json_t *a = json_array();
	for (size_t i = 0; red && a && red[i]; i++)
		json_array_append_new(a, json_string(red[i]));
	redact_argv_free(red);
	if (a)
		json_object_set_new(o, "argv", a);
	json_object_set_new(o, "exe", json_string(res->path));
	if (res->exec_by_fd)
		json_object_set_new(o, "exec_by_fd", json_true());
	json_object_set_new(o, "membership", json_string(res->in_cgroup ? "cgroup" : "lineage"));
	if (res->in_cgroup)
		json_object_set_new(o, "cgroup", json_string(ps->cgroup.workload));
	else if (ps->cfg.cgroup_mode != CGROUP_MODE_NONE) {
		/* lineage although a cgroup was asked for: say why */
		char why[sizeof(ps->membership_degraded)];
		if (ps->cgroup.active)
			snprintf(why, sizeof(why), "join %.4000s: %s", ps->cgroup.workload,
				 strerror(res->cgroup_err ? res->cgroup_err : EIO));
		else
			snprintf(why, sizeof(why), "%s", ps->membership_degraded);
		json_object_set_new(o, "membership_degraded", json_string(why));
	}
	json_object_set_new(o, "seccomp", json_boolean(ps->have_filter));
	json_object_set_new(o, "connect_notify", json_boolean(res->listener_fd >= 0));
	json_object_set_new(o, "landlock_scope", json_boolean(ps->landlock_fd >= 0));
	if (o) {
		audit_emit(ps->audit, "process_spawn", o);
		json_decref(o);
	}
}

static void audit_exit(struct procsup *ps, const struct procsup_child *c)
{
	if (!ps->audit)
		return;
	json_t *o = json_pack("{s:i, s:s, s:s, s:i}", "pid", (int)c->pid, "process_key", c->key, "kind",
			      kind_word(c->kind), "exit_code", init_exit_code(c->wstatus));
	if (o && WIFSIGNALED(c->wstatus))
		json_object_set_new(o, "signal", json_integer(WTERMSIG(c->wstatus)));
	if (o) {
		audit_emit(ps->audit, "process_exit", o);
		json_decref(o);
	}
}

/* ---- shutdown ---- */

static void handle_closed(uv_handle_t *h)
{
}

static void finish(struct procsup *ps)
{
	if (ps->state == PROCSUP_DONE)
		return;
	ps->state = PROCSUP_DONE;
	if (!ps->handles_ready)
		return;
	for (int i = 0; i < PROCSUP_NSIG_FWD; i++)
		uv_close((uv_handle_t *)&ps->sig_fwd[i], handle_closed);
	uv_close((uv_handle_t *)&ps->sig_chld, handle_closed);
	uv_close((uv_handle_t *)&ps->grace_timer, handle_closed);
	uv_close((uv_handle_t *)&ps->kill_timer, handle_closed);
	for (size_t i = 0; i < ps->n_done_hooks; i++)
		ps->done_hooks[i].fn(ps, ps->done_hooks[i].user);
	if (ps->notifier)
		ps->final_stats = *notifier_stats(ps->notifier);
	notifier_close(ps->notifier);
	ps->notifier = NULL;
}

int procsup_on_done(struct procsup *ps, void (*fn)(struct procsup *ps, void *user), void *user)
{
	if (ps->n_done_hooks == PROCSUP_MAX_HOOKS)
		return -ENOSPC;
	ps->done_hooks[ps->n_done_hooks++] = (struct procsup_hook){ fn, user };
	return 0;
}

struct notifier_stats procsup_notifier_stats(const struct procsup *ps)
{
	return ps->notifier ? *notifier_stats(ps->notifier) : ps->final_stats;
}

static void kill_tree(struct procsup *ps, int sig)
{
	if (sig == SIGKILL && ps->cgroup.active) {
		int r = sandbox_cgroup_kill(&ps->cgroup);
		if (r < 0 && ps->kill_rounds == 0)
			log_warn("cgroup.kill: %s; killing by lineage", strerror(-r));
	}
	/* Always also by lineage: a root workload can leave the cgroup, and
	 * orphans adopted from outside the tree are our children too. */
	int n = init_signal_tree(sig);
	if (n == -EXDEV) {
		/* /proc is not our namespace's: signal the children we know. */
		for (struct procsup_child *c = ps->children; c; c = c->next)
			if (!c->exited)
				sys_pidfd_send_signal(c->pidfd, sig, NULL, 0);
	}
}

static void reap_and_check(struct procsup *ps);

static void on_kill_timer(uv_timer_t *t)
{
	struct procsup *ps = t->data;
	reap_and_check(ps);
	if (ps->state != PROCSUP_KILLING)
		return;
	if (++ps->kill_rounds > 200) { /* 10 s: something is stuck in D state */
		log_error("shutdown: processes survive SIGKILL; exiting anyway");
		finish(ps);
		return;
	}
	kill_tree(ps, SIGKILL);
}

static void start_killing(struct procsup *ps)
{
	if (ps->state == PROCSUP_KILLING || ps->state == PROCSUP_DONE)
		return;
	ps->state = PROCSUP_KILLING;
	uv_timer_stop(&ps->grace_timer);
	kill_tree(ps, SIGKILL);
	uv_timer_start(&ps->kill_timer, on_kill_timer, 50, 50);
}

static void on_grace(uv_timer_t *t)
{
	struct procsup *ps = t->data;
	log_info("grace period of %us over: killing the tree", ps->cfg.grace_s);
	start_killing(ps);
}

static void start_grace(struct procsup *ps)
{
	if (!uv_is_active((uv_handle_t *)&ps->grace_timer) && ps->state < PROCSUP_KILLING)
		uv_timer_start(&ps->grace_timer, on_grace, (uint64_t)ps->cfg.grace_s * 1000, 0);
}

/* Workload processes still alive after the entrypoint: the sandbox
 * cgroup's count, or by lineage the members still known alive. */
static long remaining_workload(struct procsup *ps)
{
	if (ps->cgroup.active) {
		int n = sandbox_cgroup_nprocs(&ps->cgroup);
		return n > 0 ? n : 0;
	}
	return ps->members ? (long)members_live_pids(ps->members, NULL, 0) : 0;
}

static void start_draining(struct procsup *ps)
{
	if (ps->state >= PROCSUP_DRAINING)
		return;
	ps->state = PROCSUP_DRAINING;
	bool none = false;
	init_reap(NULL, NULL, &none);
	if (none && (!ps->cgroup.active || sandbox_cgroup_nprocs(&ps->cgroup) <= 0)) {
		finish(ps);
		return;
	}
	long left = ps->term_received ? 0 : remaining_workload(ps);
	if (left > 0) {
		/* for the person at the terminal: the run is not hung, and what
		 * to pass to keep them (tether run --wait-all) */
		fprintf(stderr, "tether: entrypoint exited; stopping %ld remaining process%s%s\n", left,
			left == 1 ? "" : "es", ps->cfg.grace_s ? " (--wait-all waits for them)" : "");
		fflush(stderr);
	}
	if (ps->cfg.grace_s == 0) {
		start_killing(ps);
		return;
	}
	kill_tree(ps, SIGTERM);
	start_grace(ps);
}

void procsup_shutdown(struct procsup *ps)
{
	ps->term_received = true;
	if (ps->entrypoint && !ps->entrypoint->exited)
		sys_pidfd_send_signal(ps->entrypoint->pidfd, SIGTERM, NULL, 0);
	if (ps->cfg.grace_s == 0)
		start_killing(ps);
	else
		start_grace(ps);
}

/* ---- reaping ---- */

static void on_reaped(void *user, pid_t pid, int wstatus)
{
	struct procsup *ps = user;
	for (struct procsup_child **pp = &ps->children; *pp; pp = &(*pp)->next) {
		struct procsup_child *c = *pp;
		if (c->pid != pid || c->exited)
			continue;
		c->exited = true;
		c->wstatus = wstatus;
		/* Unlink before any callback: on_exit may spawn (and so push onto
		 * the list). The entrypoint's record stays for the exit code. */
		if (c != ps->entrypoint)
			*pp = c->next;
		audit_exit(ps, c);
		if (ps->members && c->key[0])
			(void)members_mark_exited(ps->members, c->key);
		if (c == ps->entrypoint) {
			ps->exit_code = init_exit_code(wstatus);
			log_debug("entrypoint %d exited: %d", (int)pid, ps->exit_code);
		}
		if (c->on_exit)
			c->on_exit(ps, c, wstatus, c->user);
		if (c != ps->entrypoint) {
			close(c->pidfd);
			free(c);
		}
		return;
	}
	/* An orphan from the tree (or adopted from outside): reaped, no more. */
}

static void reap_and_check(struct procsup *ps)
{
	bool none = false;
	int n = init_reap(on_reaped, ps, &none);
	if (n > 0 && ps->members)
		(void)members_reap(ps->members);
	if (ps->entrypoint && ps->entrypoint->exited && ps->state == PROCSUP_RUNNING &&
	    !(ps->cfg.wait_all && !ps->term_received && remaining_workload(ps) > 0))
		start_draining(ps);
	if (ps->state == PROCSUP_DRAINING || ps->state == PROCSUP_KILLING) {
		if (none && (!ps->cgroup.active || sandbox_cgroup_nprocs(&ps->cgroup) <= 0))
			finish(ps);
	}
}

static void on_sigchld(uv_signal_t *h, int signum)
{
	reap_and_check(h->data);
}

static void on_fwd_signal(uv_signal_t *h, int signum)
{
	struct procsup *ps = h->data;
	struct procsup_child *e = ps->entrypoint;
	if (e && !e->exited) {
		int r = ps->cfg.signal_group ? (kill(-e->pid, signum) < 0 ? -errno : 0)
					     : sys_pidfd_send_signal(e->pidfd, signum, NULL, 0);
		if (r < 0 && r != -ESRCH)
			log_warn("forwarding signal %d: %s", signum, strerror(-r));
	}
	if (signum == SIGTERM && !ps->term_received) {
		ps->term_received = true;
		if (ps->cfg.grace_s == 0)
			start_killing(ps);
		else
			start_grace(ps);
	}
}

/* ---- the env boundary ---- */

/* May uid:gid (no other groups, as a workload runs) execute path? Asked of
 * the kernel itself (ACLs included) in a short-lived child that takes those
 * ids: 0 or -errno of access(2). Runs before any thread of ours exists. */
static int exec_access_as(const char *path, uid_t uid, gid_t gid)
{
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		gid_t groups[1] = { gid };
		if (syscall(SYS_setgroups, 1, groups) < 0 || syscall(SYS_setresgid, gid, gid, gid) < 0 ||
		    syscall(SYS_setresuid, uid, uid, uid) < 0)
			_exit(255);
		_exit(access(path, X_OK) == 0 ? 0 : (errno & 0x7f));
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (!WIFEXITED(st) || WEXITSTATUS(st) == 255)
		return 0; /* could not ask: say nothing */
	return -WEXITSTATUS(st);
}

static int load_policy(struct procsup *ps)
{
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)))
		return -errno;
	struct policy_paths paths;
	int r = policy_paths_default(&paths, cwd);
	if (r < 0)
		return r;
	paths.agent = ps->cfg.agent;
	paths.command_files = ps->cfg.policy_files;
	paths.n_command_files = ps->cfg.n_policy_files;
	struct policy_diag diag;
	static const struct policy_section *const sections[] = { &credentials_section };
	r = policy_load_layers(&paths, sections, 1, &ps->policy, &diag);
	policy_paths_done(&paths);
	if (r < 0) {
		log_error("%s", diag.msg);
		return r;
	}
	/* the secrets we can see never reach the audit (argv) or a log line */
	credentials_register_values(policy_section_data(ps->policy, "credentials"));
	for (size_t i = 0; i < ps->policy->n_warnings; i++)
		log_warn("%s", ps->policy->warnings[i]);
	if (ps->cfg.trust_bundle) {
		/* written by the net-supervisor before it is ready, so before
		 * the workload starts: only its path is needed now */
		char *tb = strdup(ps->cfg.trust_bundle);
		if (!tb)
			return -ENOMEM;
		free(ps->policy->env.trust_bundle);
		ps->policy->env.trust_bundle = tb;
	}
	/* resolved once: every spawn's GIT_SSH_COMMAND names the same binary */
	if (ps->policy->env.git_ssh_via_proxy && envb_sibling_tether(ps->tether_path_buf, sizeof(ps->tether_path_buf))) {
		ps->tether_path = ps->tether_path_buf;
		/* git runs it by that path as the workload's uid: a tether built
		 * in a 0700 home is out of its reach (the entrypoint is exec'd by
		 * fd, a GIT_SSH_COMMAND cannot be). */
		int a = ps->cfg.run_as ? exec_access_as(ps->tether_path, ps->cfg.run_uid, ps->cfg.run_gid) : 0;
		if (a < 0)
			log_warn("environment.git_ssh_via_proxy: uid %u cannot execute %s (%s), so git over ssh will "
				 "fail in the workload: install tether where that user can reach it",
				 (unsigned)ps->cfg.run_uid, ps->tether_path, strerror(-a));
	}
	return 0;
}

/* The child's whole environment: built from nothing by the env boundary
 * from the parent environment given (the supervisor's own by default). */
static int build_env(struct procsup *ps, const struct procsup_spawn_req *req, struct envb_result *res)
{
	extern char **environ;
	char cwd[PATH_MAX];
	struct envb_extra x = {
		.cwd = req->cwd ? req->cwd : getcwd(cwd, sizeof(cwd)),
		.has_target_uid = true,
		.target_uid = ps->cfg.run_as ? ps->cfg.run_uid : getuid(),
		.proxy_url = ps->cfg.proxy_url,
		.tether_path = ps->tether_path,
	};
	char *const *parent = req->parent_envp ? req->parent_envp : environ;
	if (!ps->cfg.run_as)
		return envb_build(ps->policy, parent, &x, res);
	/* Another user's session: its HOME/USER/LOGNAME, not ours (the
	 * boundary then filters them like any inherited value). */
	struct passwd pw, *pwr = NULL;
	char pwbuf[4096];
	if (getpwuid_r(ps->cfg.run_uid, &pw, pwbuf, sizeof(pwbuf), &pwr) != 0)
		pwr = NULL;
	size_t n = 0;
	while (parent[n])
		n++;
	_cleanup_free_ char **v = calloc(n + 4, sizeof(char *));
	_cleanup_free_ char *home = NULL, *user = NULL, *logname = NULL;
	if (!v)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(parent[i], "HOME=", 5) != 0 && strncmp(parent[i], "USER=", 5) != 0 &&
		    strncmp(parent[i], "LOGNAME=", 8) != 0)
			v[k++] = parent[i];
	if (pwr) {
		if (asprintf(&home, "HOME=%s", pwr->pw_dir) < 0 || asprintf(&user, "USER=%s", pwr->pw_name) < 0 ||
		    asprintf(&logname, "LOGNAME=%s", pwr->pw_name) < 0)
			return -ENOMEM;
		v[k++] = home;
		v[k++] = user;
		v[k++] = logname;
	}
	v[k] = NULL;
	return envb_build(ps->policy, v, &x, res);
}

static void audit_env(struct procsup *ps, const struct envb_result *res, pid_t pid)
{
	if (!ps->audit)
		return;
	json_t *j = envb_audit_json(res);
	if (!j)
		return;
	json_object_set_new(j, "pid", json_integer(pid));
	audit_emit(ps->audit, "env_boundary", j);
	json_decref(j);
}

/* ---- setup ---- */

int procsup_init(struct procsup *ps, const struct procsup_config *cfg)
{
	memset(ps, 0, sizeof(*ps));
	/* First, before anything here changes a disposition or the mask: the
	 * workload gets back what we were started with (as tini does). */
	spawn_sigconf_capture(&ps->sigconf);
	ps->landlock_fd = -1;
	ps->cgroup.workload_fd = ps->cgroup.base_fd = -1;
	ps->anchor.pidfd = -1;
	ps->cfg = *cfg;
	if (!ps->cfg.topology)
		ps->cfg.topology = "standalone";
	int r = kernel_caps_probe(&ps->caps);
	if (r < 0) {
		log_error("kernel probe: %s", strerror(-r));
		return r;
	}
	/* Kernel features were probed (TETHER_FORCE_FALLBACK read); hide the
	 * supervisor's own environment from /proc/<pid>/environ. */
	if ((r = harden_hide_environ()) < 0)
		return r;
	/* Before anything is spawned, so no orphan can escape to PID 1. */
	r = init_become_anchor();
	if (r < 0) {
		log_error("PR_SET_CHILD_SUBREAPER/PR_SET_DUMPABLE: %s", strerror(-r));
		return r;
	}
	/* A supervisor in the background must not be stopped by its tty, nor
	 * die writing to a closed pipe; and it must receive SIGCHLD and the
	 * signals it forwards even when started with them blocked. Children
	 * get the start configuration back (ps->sigconf). */
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTTOU, SIG_IGN);
	signal(SIGTTIN, SIG_IGN);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	if (cfg->audit_path && (r = audit_open(cfg->audit_path, ps->cfg.topology, &ps->audit)) < 0) {
		log_error("audit %s: %s", cfg->audit_path, strerror(-r));
		return r;
	}

	r = sandbox_cgroup_setup(&ps->caps, cfg->cgroup_mode, cfg->cgroup_path, &ps->cgroup);
	if (r < 0) {
		if (cfg->cgroup_mode == CGROUP_MODE_PATH) {
			log_error("cgroup: %s", ps->cgroup.error);
			return r;
		}
		/* auto: a weaker mode, so a warning and an audit field (every
		 * process_spawn carries membership_degraded). */
		snprintf(ps->membership_degraded, sizeof(ps->membership_degraded), "%s", ps->cgroup.error);
		log_warn("cgroup: %s: membership falls back to lineage", ps->cgroup.error);
	} else if (ps->cgroup.active) {
		if (ps->cgroup.stale_killed > 0)
			log_warn("cgroup: %s was left by a dead proc-supervisor with %d process(es) still in it: "
				 "killed them and reused it", ps->cgroup.base, ps->cgroup.stale_killed);
		else if (ps->cgroup.reclaimed)
			log_info("cgroup: %s was left by a dead proc-supervisor: reused", ps->cgroup.base);
		if (ps->cgroup.busy_skipped > 0)
			log_warn("cgroup: %d name(s) before %s are held by live proc-supervisors (or hold processes "
				 "not provably a dead one's): using %s", ps->cgroup.busy_skipped, ps->cgroup.base,
				 ps->cgroup.workload);
	}
	ps->membership = ps->cgroup.active ? "cgroup" : "lineage";

	if (!cfg->no_landlock) {
		ps->landlock_fd = landlock_scope_ruleset();
		if (ps->landlock_fd < 0)
			log_warn("landlock signal scoping unavailable (%s): seccomp guards kill/ptrace of the "
				 "supervisor instead (weaker: see docs/threat-model.md)",
				 strerror(-ps->landlock_fd));
	}
	if (cfg->no_seccomp) {
		log_warn("*** --no-seccomp: workloads run WITHOUT the seccomp profile and WITHOUT connect "
			 "attribution; for debugging only ***");
	} else {
		struct workload_filter_opts fo = {
			.notify_connect = true,
			.protect_pid = ps->landlock_fd < 0 ? getpid() : 0,
			.protect_pgid = ps->landlock_fd < 0 ? getpgrp() : 0,
		};
		r = workload_filter_build(&fo, &ps->filter);
		if (r < 0) {
			log_error("seccomp profile: %s", strerror(-r));
			return r;
		}
		ps->have_filter = true;
	}

	r = load_policy(ps);
	if (r < 0)
		return r;

	size_t cap = cfg->registry_capacity ? cfg->registry_capacity : 65536;
	ps->cookies = cookie_registry_new(cap);
	if (!ps->cookies)
		return -ENOMEM;

	r = procref_open(&ps->caps, getpid(), &ps->anchor);
	if (r < 0) {
		log_error("anchor ref: %s", strerror(-r));
		return r;
	}
	struct members_config mc = { .mode = MEMBERSHIP_LINEAGE };
	const char *root = ps->caps.cgroup_root;
	size_t rl = strlen(root);
	if (ps->cgroup.active && rl && strncmp(ps->cgroup.workload, root, rl) == 0) {
		mc.mode = MEMBERSHIP_CGROUP;
		mc.cgroup_path = ps->cgroup.workload + rl;
	}
	/* A daemon whose middle parents exited unseen is reparented to us. As
	 * a subreaper below some other init (pause, a VM's init) only our own
	 * descendants can be; as PID 1 every orphan of the namespace is, and
	 * only the sandbox cgroup tells ours from an nsenter'd session's. */
	mc.orphans = getpid() != 1 ? MEMBERS_ORPHANS_DESCENDANTS
				   : mc.mode == MEMBERSHIP_CGROUP ? MEMBERS_ORPHANS_IN_CGROUP
								  : MEMBERS_ORPHANS_FOREIGN;
	r = members_create(&ps->caps, &ps->anchor, &mc, &ps->members);
	if (r < 0) {
		log_warn("process table: %s; lineage not recorded", strerror(-r));
		ps->members = NULL;
	}

	if ((r = uv_loop_init(&ps->loop)) < 0)
		return r;
	ps->loop_ready = true;
	struct notifier_ops ops = { .identify = notifier_identify_default, .record = glue_record, .release = glue_release,
				    .user = ps, .bypass = glue_bypass, .record_sock = glue_record_sock,
				    .wants_sock = glue_wants_sock };
	if ((r = notifier_new(&ps->loop, &ps->caps, &ops, &ps->notifier)) < 0) {
		log_error("seccomp notifier: %s", strerror(-r));
		return r;
	}
	allow_proxy(ps);
	for (int i = 0; i < PROCSUP_NSIG_FWD; i++) {
		uv_signal_init(&ps->loop, &ps->sig_fwd[i]);
		ps->sig_fwd[i].data = ps;
	}
	uv_signal_init(&ps->loop, &ps->sig_chld);
	ps->sig_chld.data = ps;
	uv_timer_init(&ps->loop, &ps->grace_timer);
	uv_timer_init(&ps->loop, &ps->kill_timer);
	ps->grace_timer.data = ps->kill_timer.data = ps;
	ps->handles_ready = true;
	for (int i = 0; i < PROCSUP_NSIG_FWD; i++)
		if ((r = uv_signal_start(&ps->sig_fwd[i], on_fwd_signal, fwd_signals[i])) < 0)
			return r;
	if ((r = uv_signal_start(&ps->sig_chld, on_sigchld, SIGCHLD)) < 0)
		return r;
	return 0;
}

int procsup_spawn(struct procsup *ps, const struct procsup_spawn_req *req, struct procsup_child **out,
		  struct spawn_error *err)
{
	if (ps->state != PROCSUP_RUNNING) {
		memset(err, 0, sizeof(*err));
		err->exit_code = 125;
		err->step = "state";
		err->err = ESHUTDOWN;
		snprintf(err->message, sizeof(err->message), "supervisor is shutting down");
		return -ESHUTDOWN;
	}
	struct envb_result env;
	int r = build_env(ps, req, &env);
	if (r < 0) {
		memset(err, 0, sizeof(*err));
		err->exit_code = 125;
		err->step = "env boundary";
		err->err = -r;
		snprintf(err->message, sizeof(err->message), "environment: %.400s",
			 env.error[0] ? env.error : strerror(-r));
		envb_result_done(&env);
		return r;
	}
	struct spawn_opts o;
	spawn_opts_init(&o);
	o.argv = req->argv;
	o.envp = env.envp;
	o.cwd = req->cwd;
	memcpy(o.stdio, req->stdio, sizeof(o.stdio));
	o.session = req->session;
	o.tty_fd = req->tty_fd;
	o.filter = ps->have_filter ? &ps->filter : NULL;
	o.landlock_fd = ps->landlock_fd;
	o.cgroup_fd = ps->cgroup.active ? ps->cgroup.workload_fd : -1;
	o.nofile = ps->cfg.have_child_nofile ? &ps->cfg.child_nofile : NULL;
	o.sigconf = &ps->sigconf;
	o.set_ids = ps->cfg.run_as;
	o.uid = ps->cfg.run_uid;
	o.gid = ps->cfg.run_gid;
	struct spawn_result res;
	r = spawn_process(&o, &res, err);
	if (r < 0) {
		envb_result_done(&env);
		return r;
	}
	audit_env(ps, &env, res.pid);
	envb_result_done(&env);
	if (ps->cgroup.active && !res.in_cgroup)
		log_warn("pid %d could not join cgroup %s (%s): its membership is by lineage", (int)res.pid,
			 ps->cgroup.workload, strerror(res.cgroup_err ? res.cgroup_err : EIO));
	struct procsup_child *c = calloc(1, sizeof(*c));
	if (!c) {
		sys_pidfd_send_signal(res.pidfd, SIGKILL, NULL, 0);
		close(res.pidfd);
		if (res.listener_fd >= 0)
			close(res.listener_fd);
		return -ENOMEM; /* the reaper collects it */
	}
	c->pid = res.pid;
	c->pidfd = res.pidfd;
	c->kind = req->kind;
	c->on_exit = req->on_exit;
	c->user = req->user;
	c->next = ps->children;
	ps->children = c;
	if (res.listener_fd >= 0 && (r = notifier_add_listener(ps->notifier, res.listener_fd)) < 0)
		log_error("watching the seccomp listener of %d: %s (its connects will fail)", (int)c->pid,
			  strerror(-r));

	struct procref ref;
	r = procref_from_pidfd(&ps->caps, c->pidfd, &ref);
	if (r == 0) {
		strscpy(c->key, ref.key, sizeof(c->key));
		if (ps->members) {
			enum member_join how = req->kind == PROCSUP_ENTRYPOINT ? MEMBER_ENTRYPOINT : MEMBER_EXEC_SESSION;
			int mr = members_add_spawned(ps->members, &ref, how);
			if (mr < 0)
				log_warn("process table: adding %d: %s", (int)c->pid, strerror(-mr));
		}
		procref_close(&ref);
	} else
		log_debug("ref of spawned %d: %s", (int)c->pid, strerror(-r)); /* it may have exited already */
	audit_spawn(ps, c, &res, req->argv);
	if (out)
		*out = c;
	return 0;
}

int procsup_spawn_entrypoint(struct procsup *ps, char *const argv[], struct spawn_error *err)
{
	struct procsup_spawn_req req;
	procsup_spawn_req_init(&req);
	req.argv = argv;
	req.kind = PROCSUP_ENTRYPOINT;
	/* Interactive use: keep the terminal, as the foreground group. */
	if (isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp()) {
		req.session = SPAWN_FOREGROUND;
		req.tty_fd = STDIN_FILENO;
	} else
		req.session = SPAWN_SETSID;
	return procsup_spawn(ps, &req, &ps->entrypoint, err);
}

static void write_debug_registry(struct procsup *ps, const struct notifier_stats *st)
{
	json_t *root = json_object(), *arr = json_array();
	if (!root || !arr) {
		json_decref(root);
		json_decref(arr);
		return;
	}
	for (uint64_t i = 0; i < ps->debug_cookies_n; i++) {
		struct procref ref;
		uint64_t ck = ps->debug_cookies[i];
		char cks[32];
		snprintf(cks, sizeof(cks), "%llu", (unsigned long long)ck);
		/* Read back from the registry itself: this shows what attribution
		 * would find, not what we meant to store. */
		if (cookie_registry_get(ps->cookies, ck, &ref) == 0)
			json_array_append_new(arr, json_pack("{s:s, s:b, s:i, s:s, s:s, s:s, s:I, s:I}", "cookie", cks,
							     "found", 1, "pid", (int)ref.pid, "key", ref.key, "comm",
							     ref.comm, "exe", ref.exe.path, "exe_dev",
							     (json_int_t)ref.exe.dev, "exe_ino", (json_int_t)ref.exe.ino));
		else
			json_array_append_new(arr, json_pack("{s:s, s:b}", "cookie", cks, "found", 0));
	}
	json_object_set_new(root, "attributions", arr);
	if (st)
		json_object_set_new(root, "stats",
				    json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "notifications",
					      (json_int_t)st->notifications, "recorded", (json_int_t)st->recorded,
					      "not_inet", (json_int_t)st->not_inet, "stale", (json_int_t)st->stale,
					      "failures", (json_int_t)st->failures, "respond_errors",
					      (json_int_t)st->respond_errors, "sync_wakeup", st->sync_wakeup));
	if (json_dump_file(root, ps->cfg.debug_registry, JSON_INDENT(1)) < 0)
		log_warn("--debug-registry %s: could not write", ps->cfg.debug_registry);
	json_decref(root);
}

int procsup_run(struct procsup *ps)
{
	/* The entrypoint may have exited during spawn_process already. */
	reap_and_check(ps);
	uv_run(&ps->loop, UV_RUN_DEFAULT);
	if (ps->cfg.debug_registry) {
		struct notifier_stats st = procsup_notifier_stats(ps);
		write_debug_registry(ps, &st);
	}
	sandbox_cgroup_remove(&ps->cgroup);
	return ps->exit_code;
}

void procsup_destroy(struct procsup *ps)
{
	if (ps->notifier && !ps->handles_ready) {
		notifier_close(ps->notifier);
		ps->notifier = NULL;
	}
	if (ps->state != PROCSUP_DONE)
		finish(ps);
	if (ps->loop_ready) {
		uv_run(&ps->loop, UV_RUN_DEFAULT);
		uv_loop_close(&ps->loop);
	}
	sandbox_cgroup_remove(&ps->cgroup);
	while (ps->children) {
		struct procsup_child *c = ps->children;
		ps->children = c->next;
		close(c->pidfd);
		free(c);
	}
	ps->entrypoint = NULL;
	if (ps->members)
		members_free(ps->members);
	if (ps->cookies)
		cookie_registry_free(ps->cookies);
	if (ps->have_filter)
		workload_filter_free(&ps->filter);
	if (ps->landlock_fd >= 0)
		close(ps->landlock_fd);
	if (ps->anchor.pidfd >= 0)
		procref_close(&ps->anchor);
	if (ps->policy)
		policy_free(ps->policy);
	free(ps->debug_cookies);
	audit_close(ps->audit);
}
