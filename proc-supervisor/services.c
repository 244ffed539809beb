/* services: see services.h. */
#include "proc-supervisor/services.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "proc-supervisor/exec_gateway.h"
#include "proc-supervisor/idpublish.h"
#include "proc-supervisor/idservice.h"
#include "proc-supervisor/status.h"
#include "proc-supervisor/supervisor.h"
#include "proto/keys.h"

struct procsup_services {
	struct exec_gw *gw;
	struct status_srv *st;
	struct idservice *ids;
	struct idpublish *feed;
};

static void feed_note(void *user, uint64_t cookie)
{
	idpublish_note(user, cookie);
}

static void push_note(void *user, uint64_t cookie, int sockfd)
{
	idservice_note_connect(user, cookie, sockfd);
}

/* The gateway's exit callback and its token, carried through the one user
 * pointer of a procsup child until the child is reaped. */
struct gw_exit {
	void (*on_exit)(void *token, int wstatus);
	void *token;
};

static void adapter_exit(struct procsup *ps, struct procsup_child *c, int wstatus, void *user)
{
	struct gw_exit e = *(struct gw_exit *)user;
	free(user);
	e.on_exit(e.token, wstatus);
}

static int procsup_spawn_adapter(void *ud, const struct exec_gw_spawn *req, struct exec_gw_spawned *out,
				 struct spawn_error *err)
{
	struct procsup *ps = ud;
	static char *const empty_env[] = { NULL };
	struct procsup_spawn_req r;
	procsup_spawn_req_init(&r);
	r.argv = req->argv;
	/* Never NULL: NULL would mean the supervisor's own environment. */
	r.parent_envp = req->envp ? req->envp : empty_env;
	r.cwd = req->cwd;
	memcpy(r.stdio, req->stdio, sizeof(r.stdio));
	r.session = req->session;
	r.tty_fd = -1;
	r.kind = PROCSUP_EXEC_SESSION;
	struct gw_exit *e = malloc(sizeof(*e));
	if (!e) {
		memset(err, 0, sizeof(*err));
		err->exit_code = 125;
		err->step = "state";
		err->err = ENOMEM;
		snprintf(err->message, sizeof(err->message), "supervisor out of memory");
		return -ENOMEM;
	}
	e->on_exit = req->on_exit;
	e->token = req->token;
	r.on_exit = adapter_exit;
	r.user = e;
	struct procsup_child *c = NULL;
	int rc = procsup_spawn(ps, &r, &c, err);
	if (rc < 0) {
		free(e);
		return rc;
	}
	out->pid = c->pid;
	strscpy(out->key, c->key, sizeof(out->key));
	return 0;
}

static json_t *procsup_snapshot(void *ud)
{
	struct procsup *ps = ud;
	if (!ps->members)
		return NULL;
	json_t *j = members_to_json(ps->members);
	if (j)
		json_object_set_new(j, "supervisor_pid", json_integer(getpid()));
	return j;
}

static void services_done(struct procsup *ps, void *user)
{
	struct procsup_services *sv = user;
	if (sv->gw)
		exec_gw_stop(sv->gw, NULL, NULL);
	if (sv->st)
		status_stop(sv->st, NULL, NULL);
	if (sv->ids) {
		ps->on_record_sock = NULL;
		ps->on_record_sock_user = NULL;
		idservice_stop(sv->ids, NULL, NULL);
	}
	if (sv->feed) {
		ps->on_record = NULL;
		ps->on_record_user = NULL;
		idpublish_stop(sv->feed);
	}
	free(sv);
}

int procsup_services_start(struct procsup *ps, const struct procsup_services_cfg *cfg)
{
	if (!cfg->exec_socket && !cfg->status_socket && !cfg->control && !cfg->identity_feed)
		return 0;
	struct procsup_services *sv = calloc(1, sizeof(*sv));
	if (!sv)
		return -ENOMEM;
	int r;
	if (cfg->exec_socket) {
		struct exec_gw_opts go = {
			.path = cfg->exec_socket, .caps = &ps->caps,
			.allow_uids = cfg->allow_uids, .n_allow_uids = cfg->n_allow_uids,
			.allow_gids = cfg->allow_gids, .n_allow_gids = cfg->n_allow_gids,
			.shell = ps->policy ? ps->policy->exec.shell : NULL,
			.spawn = procsup_spawn_adapter, .spawn_userdata = ps,
		};
		if ((r = exec_gw_start(&ps->loop, &go, &sv->gw)) < 0) {
			fprintf(stderr, "proc-supervisor: --exec-socket %s: %s\n", cfg->exec_socket, strerror(-r));
			goto fail;
		}
	}
	if (cfg->status_socket) {
		struct status_opts so = {
			.path = cfg->status_socket, .caps = &ps->caps,
			.allow_uids = cfg->allow_uids, .n_allow_uids = cfg->n_allow_uids,
			.allow_gids = cfg->allow_gids, .n_allow_gids = cfg->n_allow_gids,
			.snapshot = procsup_snapshot, .userdata = ps,
		};
		if ((r = status_start(&ps->loop, &so, &sv->st)) < 0) {
			fprintf(stderr, "proc-supervisor: --status-socket %s: %s\n", cfg->status_socket, strerror(-r));
			goto fail;
		}
	}
	if (cfg->control) {
		if (!cfg->provisioning_key || !ps->members) {
			fprintf(stderr, "proc-supervisor: --control needs --provisioning-key FILE%s\n",
				ps->members ? "" : " and a process table");
			r = -EINVAL;
			goto fail;
		}
		struct sign_key *prov = NULL;
		if ((r = provkey_load_secret(cfg->provisioning_key, &prov)) < 0) {
			fprintf(stderr, "proc-supervisor: --provisioning-key %s: %s\n", cfg->provisioning_key,
				r == -EPERM ? "readable by group/others or not a regular file" : strerror(-r));
			goto fail;
		}
		enum proto_topology topo = PROTO_TOPOLOGY_SPLIT;
		if (ps->cfg.topology)
			(void)proto_topology_from_word(ps->cfg.topology, &topo);
		struct idservice_opts io = {
			.endpoint = cfg->control, .caps = &ps->caps, .members = ps->members, .cookies = ps->cookies,
			.provisioning = prov, .provisioning_path = cfg->provisioning_key,
			.cert_validity_ns = cfg->cert_validity_s * 1000000000ull, .topology = topo, .audit = ps->audit,
			.strict_socket_owner = cfg->strict_socket_owner,
			/* A push names the connector (the registry's record); the
			 * strict rule asks who holds the socket when the flow is
			 * asked for: no pushes then. */
			.no_push = cfg->no_push || cfg->strict_socket_owner || ps->caps.no_push /* TETHER_FORCE_FALLBACK=push */,
			.check_uid = cfg->control_peer_uid_set, .peer_uid = cfg->control_peer_uid,
		};
		for (size_t i = 0; i < cfg->n_control_allow; i++) {
			if (netcidr_parse(cfg->control_allow[i], &io.allow_peers[i]) < 0) {
				fprintf(stderr, "proc-supervisor: --control-allow %s: expected an address or ADDR/PREFIX "
					"(e.g. 192.0.2.1, 198.51.100.0/24)\n", cfg->control_allow[i]);
				sign_key_free(prov);
				r = -EINVAL;
				goto fail;
			}
			io.n_allow_peers++;
		}
		if (io.check_uid && strncmp(cfg->control, "unix:", 5) != 0) {
			fprintf(stderr, "proc-supervisor: --control-peer-uid applies to a unix: control endpoint, not %s\n",
				cfg->control);
			sign_key_free(prov);
			r = -EINVAL;
			goto fail;
		}
		if (io.n_allow_peers && strncmp(cfg->control, "tcp:", 4) != 0) {
			fprintf(stderr, "proc-supervisor: --control-allow applies to a tcp: control endpoint, not %s\n",
				cfg->control);
			sign_key_free(prov);
			r = -EINVAL;
			goto fail;
		}
		r = idservice_start(&ps->loop, &io, &sv->ids);
		sign_key_free(prov);
		if (r < 0) {
			fprintf(stderr, "proc-supervisor: --control %s: %s\n", cfg->control, strerror(-r));
			goto fail;
		}
		if (!io.no_push) {
			ps->on_record_sock = push_note;
			ps->on_record_sock_user = sv->ids;
		}
	}
	if (cfg->identity_feed) {
		if (!ps->members || !ps->cookies) {
			fprintf(stderr, "proc-supervisor: --identity-feed needs a process table\n");
			r = -EINVAL;
			goto fail;
		}
		if (cfg->strict_socket_owner) {
			/* The feed names the connector (the registry's record); the
			 * strict rule asks who holds the socket now. */
			fprintf(stderr, "proc-supervisor: --identity-feed and --strict-socket-owner cannot be combined\n");
			r = -EINVAL;
			goto fail;
		}
		struct idpublish_opts fo = {
			.path = cfg->identity_feed, .caps = &ps->caps, .members = ps->members, .cookies = ps->cookies,
			.anchor = &ps->anchor,
			.allow_uids = cfg->allow_uids, .n_allow_uids = cfg->n_allow_uids,
			.allow_gids = cfg->allow_gids, .n_allow_gids = cfg->n_allow_gids,
		};
		if ((r = idpublish_start(&ps->loop, &fo, &sv->feed)) < 0) {
			fprintf(stderr, "proc-supervisor: --identity-feed %s: %s\n", cfg->identity_feed, strerror(-r));
			goto fail;
		}
		ps->on_record = feed_note;
		ps->on_record_user = sv->feed;
	}
	if ((r = procsup_on_done(ps, services_done, sv)) < 0)
		goto fail;
	return 0;
fail:
	services_done(ps, sv);
	return r;
}
