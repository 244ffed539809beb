/* gw_harness: the exec gateway, status socket and identity service on one
 * loop, with a minimal spawner (spawn_process, no seccomp/env boundary),
 * so the modules are tested directly, independent of the daemon. It is the
 * anchor of its member table; sessions are recorded as MEMBER_EXEC_SESSION.
 *
 *   gw_harness --exec-socket P --status-socket P --control EP
 *              --provisioning-key FILE [--audit FILE] [--allow-uid U]
 * Runs until SIGTERM/SIGINT. Prints "ready" on stdout once listening. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "common/audit.h"
#include "common/kernel.h"
#include "common/util.h"
#include "identity/members.h"
#include "identity/procref.h"
#include "proc-supervisor/exec_gateway.h"
#include "proc-supervisor/idservice.h"
#include "proc-supervisor/spawn.h"
#include "proc-supervisor/status.h"
#include "proto/keys.h"

struct harness {
	uv_loop_t loop;
	struct kernel_caps caps;
	struct members *members;
	struct exec_gw *gw;
	struct status_srv *st;
	struct idservice *ids;
	uv_signal_t sigterm, sigint;
};

struct child {
	uv_poll_t poll;
	int pidfd;
	pid_t pid;
	char key[PROCREF_KEY_MAX];
	struct harness *h;
	void (*on_exit)(void *, int);
	void *token;
};

static void on_child_closed(uv_handle_t *hd)
{
	struct child *c = hd->data;
	close(c->pidfd);
	free(c);
}

static void on_child_exit(uv_poll_t *p, int status, int events)
{
	struct child *c = p->data;
	siginfo_t si = { 0 };
	if (waitid(P_PIDFD, (id_t)c->pidfd, &si, WEXITED | WNOHANG) < 0 || si.si_pid == 0)
		return;
	int ws = si.si_code == CLD_EXITED ? W_EXITCODE(si.si_status, 0) : si.si_status;
	if (c->key[0])
		(void)members_mark_exited(c->h->members, c->key);
	c->on_exit(c->token, ws);
	uv_poll_stop(p);
	uv_close((uv_handle_t *)p, on_child_closed);
}

static int harness_spawn(void *ud, const struct exec_gw_spawn *req, struct exec_gw_spawned *out,
			 struct spawn_error *err)
{
	struct harness *h = ud;
	static char *const fixed_env[] = { "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", NULL };
	/* A real spawner builds the env through the env boundary; here the
	 * pre-filtered overlay plus a fixed PATH is enough. */
	size_t n = 0;
	while (req->envp && req->envp[n])
		n++;
	char **envp = calloc(n + 2, sizeof(*envp));
	if (!envp)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		envp[i] = req->envp[i];
	envp[n] = fixed_env[0];
	struct spawn_opts o;
	spawn_opts_init(&o);
	o.argv = req->argv;
	o.envp = envp;
	o.cwd = req->cwd;
	memcpy(o.stdio, req->stdio, sizeof(o.stdio));
	o.session = req->session;
	struct spawn_result res;
	int r = spawn_process(&o, &res, err);
	free(envp);
	if (r < 0)
		return r;
	struct child *c = calloc(1, sizeof(*c));
	c->pidfd = res.pidfd;
	c->pid = res.pid;
	c->h = h;
	c->on_exit = req->on_exit;
	c->token = req->token;
	struct procref ref;
	if (procref_from_pidfd(&h->caps, res.pidfd, &ref) == 0) {
		strscpy(c->key, ref.key, sizeof(c->key));
		(void)members_add_spawned(h->members, &ref, MEMBER_EXEC_SESSION);
		procref_close(&ref);
	}
	out->pid = res.pid;
	strscpy(out->key, c->key, sizeof(out->key));
	uv_poll_init(&h->loop, &c->poll, c->pidfd);
	c->poll.data = c;
	uv_poll_start(&c->poll, UV_READABLE, on_child_exit);
	return 0;
}

static json_t *snapshot(void *ud)
{
	struct harness *h = ud;
	return members_to_json(h->members);
}

static void on_stop_signal(uv_signal_t *s, int sig)
{
	struct harness *h = s->data;
	if (h->gw)
		exec_gw_stop(h->gw, NULL, NULL), h->gw = NULL;
	if (h->st)
		status_stop(h->st, NULL, NULL), h->st = NULL;
	if (h->ids)
		idservice_stop(h->ids, NULL, NULL), h->ids = NULL;
	uv_close((uv_handle_t *)&h->sigterm, NULL);
	uv_close((uv_handle_t *)&h->sigint, NULL);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "exec-socket", required_argument, NULL, 'e' },
		{ "status-socket", required_argument, NULL, 's' },
		{ "control", required_argument, NULL, 'c' },
		{ "provisioning-key", required_argument, NULL, 'k' },
		{ "audit", required_argument, NULL, 'a' },
		{ "allow-uid", required_argument, NULL, 'u' },
		{ 0 },
	};
	const char *exec_sock = NULL, *status_sock = NULL, *control = NULL, *keyfile = NULL, *audit_path = NULL;
	uid_t allow[8];
	size_t n_allow = 0;
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'e': exec_sock = optarg; break;
		case 's': status_sock = optarg; break;
		case 'c': control = optarg; break;
		case 'k': keyfile = optarg; break;
		case 'a': audit_path = optarg; break;
		case 'u': if (n_allow < 8) allow[n_allow++] = (uid_t)atoi(optarg); break;
		default: return 2;
		}
	}
	struct harness h = { 0 };
	signal(SIGPIPE, SIG_IGN);
	uv_loop_init(&h.loop);
	kernel_caps_probe(&h.caps);
	struct procref self;
	if (procref_open(&h.caps, getpid(), &self) < 0)
		return 1;
	struct members_config mc = { .mode = MEMBERSHIP_LINEAGE };
	if (members_create(&h.caps, &self, &mc, &h.members) < 0)
		return 1;
	procref_close(&self);
	struct audit_log *audit = NULL;
	if (audit_path && audit_open(audit_path, "split", &audit) < 0)
		return 1;
	int r;
	if (exec_sock) {
		struct exec_gw_opts go = { .path = exec_sock, .caps = &h.caps, .spawn = harness_spawn,
					   .spawn_userdata = &h, .allow_uids = allow, .n_allow_uids = n_allow };
		if (n_allow) { /* also root, the test driver */
			allow[n_allow++] = 0;
			go.n_allow_uids = n_allow;
		}
		if ((r = exec_gw_start(&h.loop, &go, &h.gw)) < 0) {
			fprintf(stderr, "exec gateway: %s\n", strerror(-r));
			return 1;
		}
	}
	if (status_sock) {
		struct status_opts so = { .path = status_sock, .caps = &h.caps, .snapshot = snapshot, .userdata = &h };
		if ((r = status_start(&h.loop, &so, &h.st)) < 0) {
			fprintf(stderr, "status: %s\n", strerror(-r));
			return 1;
		}
	}
	if (control) {
		struct sign_key *prov = NULL;
		if ((r = provkey_load_secret(keyfile, &prov)) < 0) {
			fprintf(stderr, "provisioning key %s: %s\n", keyfile, strerror(-r));
			return 1;
		}
		struct idservice_opts io = { .endpoint = control, .caps = &h.caps, .members = h.members,
					     .provisioning = prov, .topology = PROTO_TOPOLOGY_SPLIT, .audit = audit };
		r = idservice_start(&h.loop, &io, &h.ids);
		sign_key_free(prov);
		if (r < 0) {
			fprintf(stderr, "identity service: %s\n", strerror(-r));
			return 1;
		}
	}
	uv_signal_init(&h.loop, &h.sigterm);
	uv_signal_init(&h.loop, &h.sigint);
	h.sigterm.data = h.sigint.data = &h;
	uv_signal_start(&h.sigterm, on_stop_signal, SIGTERM);
	uv_signal_start(&h.sigint, on_stop_signal, SIGINT);
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	uv_run(&h.loop, UV_RUN_DEFAULT);
	/* Sessions may still be exiting: the loop ran until everything closed. */
	uv_loop_close(&h.loop);
	members_free(h.members);
	if (audit)
		audit_close(audit);
	return 0;
}
