/* services: the daemon's wiring of its local services onto struct procsup.
 *
 * proc-supervisor's main.c (and the test daemon tests/proc-supervisor/gw_procsup.c)
 * start the exec gateway (exec_gateway.h), the status socket (status.h) and
 * the identity service (idservice.h) here, after procsup_init and before
 * procsup_run. The services themselves know nothing of struct procsup: this
 * file adapts procsup_spawn and the process table to their callbacks. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proc-supervisor/idservice.h"

struct procsup;

#define PROCSUP_SVC_MAX_IDS 16
struct procsup_services_cfg {
	const char *exec_socket;      /* --exec-socket PATH */
	uid_t allow_uids[PROCSUP_SVC_MAX_IDS]; /* --exec-allow-uid (also for the status socket) */
	size_t n_allow_uids;
	gid_t allow_gids[PROCSUP_SVC_MAX_IDS]; /* --exec-allow-gid */
	size_t n_allow_gids;
	const char *status_socket;    /* --status-socket PATH */
	const char *control;          /* --control unix:PATH|tcp:HOST:PORT|vsock:CID:PORT */
	const char *control_allow[IDSERVICE_MAX_PEERS]; /* --control-allow ADDR[/PREFIX] (tcp) */
	size_t n_control_allow;
	bool control_peer_uid_set;    /* --control-peer-uid UID (unix:) */
	uid_t control_peer_uid;
	const char *provisioning_key; /* --provisioning-key FILE (required with --control) */
	uint64_t cert_validity_s;     /* --cert-validity; 0: 30 days */
	bool strict_socket_owner;     /* --strict-socket-owner (idservice.h) */
	bool no_push;                 /* --no-identity-push (idservice.h) */
	const char *identity_feed;    /* --identity-feed PATH (idpublish.h) */
};

/* Start the services cfg names on ps's loop: the exec gateway (spawning
 * through procsup_spawn as PROCSUP_EXEC_SESSION, shell from the policy's
 * exec.shell), the status socket (members_to_json of ps->members) and the
 * identity service (ps->members, ps->cookies, ps->audit). Each closes at
 * procsup_on_done. Call after procsup_init, before procsup_run. -errno
 * with a one-line message on stderr. */
int procsup_services_start(struct procsup *ps, const struct procsup_services_cfg *cfg);
