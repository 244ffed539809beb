/* The audit lines a connection leaves (docs/audit.md): egress_decision
 * (every decision, staged so its answer can wait for it), egress_error
 * (an allowed flow that failed or ended abnormally upstream) and
 * tunnel_revoked (revoke.h), and with --console the terminal line of
 * each decision (docs/quickstart.md). Built from the conn's fields only: any front
 * end that fills them gets the same lines. */
#pragma once

#include <stdbool.h>

#include "common/reason.h"
#include "net-supervisor/auditq.h"
#include "net-supervisor/conn.h"
#include "net-supervisor/tunnel.h"

/* egress_decision: decision, reason, mode, identity, dest, policy, client,
 * method, status (when not 0). Staged with w (may be NULL): w->cb runs
 * once the line is written or could not be. */
void audit_line_decision(struct conn *c, bool allow, enum reason reason, int status, struct auditq_waiter *w);
/* With --console, audit_line_decision also prints the terminal line
 * (rate-limited); this prints the count of lines held back (at exit). */
void audit_line_console_flush(struct netsup *ns);
/* egress_error after an allow; status 0 leaves it out of the answer. */
void audit_line_error(struct conn *c, enum reason reason, int status);
/* http_request: one request inside an inspected TLS connection
 * (tls_http.h): method, path (the target as sent), status (0: no answer
 * came; left out), decision, reason, rule, mode audit, binary, dest. */
struct netpol_http_decision;
void audit_line_http(struct conn *c, const char *method, const char *target, int status,
		     const struct netpol_http_decision *d);
/* tunnel_revoked, and its counter. */
void audit_line_revoked(struct conn *c, enum revoke_why why);
/* The identity fields every decision line carries (identity_source,
 * binary, pid, process_key, ancestors, signed_context) into o; id NULL:
 * identity_source src and a null binary. */
void audit_line_identity(json_t *o, const struct flow_identity *id, enum flow_source src);
