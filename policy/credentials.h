/* The `credentials:` section (issue 24, stage 3; docs/credentials.md):
 * secrets only some binaries may spend, on some endpoints, through the
 * TLS-inspecting proxy. The workload never holds the secret: it gets the
 * placeholder `tether-cred:NAME`, which the net-supervisor swaps for the
 * secret in an inspected request (net-supervisor/credsub.h) only when the
 * request's binary, ancestors and endpoint match the credential.
 *
 *   credentials:
 *     - name: GITHUB                    # [A-Za-z0-9_.-]{1,64}
 *       source: {file: /etc/tether/github-token}   # or {env: GH_TOKEN}
 *       binaries: [{path: /usr/lib/git-core/git-remote-http}]
 *       ancestors: [...]                # optional, as in network rules
 *       endpoints: [{host: github.com, ports: [443]}]
 *       variable: GITHUB_TOKEN          # the workload's, = tether-cred:GITHUB (default: the name)
 *       header: {name: Authorization, format: "Bearer {}"}   # optional: the proxy sets it
 *
 * With `header:` the proxy also sets that header itself on every inspected
 * request the credential permits (replacing a value the client sent),
 * format's one `{}` becoming the secret: the client needs no placeholder.
 * The name is an HTTP token other than the framing and hop-by-hop headers
 * (Host, Content-Length, Transfer-Encoding, Connection, Upgrade, TE, ...);
 * format (default "{}") has exactly one `{}`, at most 256 bytes, no CR,
 * LF or NUL.
 *
 * binaries, ancestors and endpoints match exactly as a network rule's do
 * (a symlinked path matches its target too: netpol_resolve_binaries)
 * (the section keeps them as a one-rule network_policy per credential and
 * asks netpolicy_decide). Names are unique across layers. The source is
 * the net-supervisor's: a file (absolute path; read by the net-supervisor,
 * which refuses one the group or others can read) or a variable of its own
 * environment. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "common/flow_identity.h"
#include "common/netaddr.h"
#include "policy/network.h"

struct credential {
	char *name;
	char *source_file; /* absolute, or NULL */
	char *source_env;  /* a variable name, or NULL */
	char *variable;    /* the workload's variable holding the placeholder (`variable:`, default the name) */
	char *header;      /* `header.name`: set by the proxy on permitted requests, or NULL */
	char *header_format; /* `header.format` ("{}" by default) when header is set */
	struct network_policy *access; /* one rule, named after the credential */
	char *origin;      /* FILE:LINE */
};

struct credential_set {
	struct credential *v;
	size_t n;
};

extern const struct policy_section credentials_section;

/* The credential whose workload variable is name, or NULL (set NULL: none). */
const struct credential *credential_for_variable(const struct credential_set *set, const char *name);

/* May id spend cred on host:port (ip the address connected to, or NULL)? */
bool credential_permits(const struct credential *cred, const struct flow_identity *id, const char *host,
			uint16_t port, const struct netaddr *ip);

/* Register with the redactor (common/secrets.h, audit_secret_add) every
 * secret of set this process can see: a source variable of its own
 * environment, a source file it may read (8 KiB at most, one trailing
 * newline dropped, as the net-supervisor reads it). What it cannot read it
 * cannot print either way; nothing is logged. For `tether run` (--dry-run,
 * errors) and the proc-supervisor (argv in audit events). */
void credentials_register_values(const struct credential_set *set);
