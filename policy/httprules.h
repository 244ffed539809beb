/* HTTP rules of an inspected endpoint (`rules:` beside `tls: inspect`;
 * docs/network-policy.md). Each request in an inspected connection is its
 * own decision, a pure function of the endpoint and the request line: no
 * I/O, no clock, so the proxy, `tether policy explain` and the tests call
 * the same thing.
 *
 *   rules:
 *     - {method: GET, path: "/repos/ **"}          (allow; no space)
 *     - {method: "*", path: "/admin/ **", action: deny}
 *     - {method: GET, path: /socket, websocket: true}
 *
 * method is a glob over the method word ('*' any), path a path glob
 * ('*' within a segment, '**' across, policy/network.h) matched against the
 * path of the request target without its query. With rules, a request is
 * allowed when an allow rule matches and no deny rule does (deny wins,
 * whatever the order); a WebSocket upgrade only by an allow rule that says
 * `websocket: true`. A path with dot segments, an empty segment, a
 * backslash or an encoded '/', '.', '\' or '%' is refused before any rule
 * (http_path_not_canonical): a glob cannot be trusted on a path the server
 * may read differently. No rules: every request is allowed (and audited).
 * `mode: audit` on the endpoint lets a would-be denial through, audited. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "common/reason.h"

struct netpol_http_rule {
	char *name;   /* `name:`, else "METHOD PATH" */
	char *method; /* glob */
	char *path;   /* glob, starts with '/' */
	bool deny;
	bool websocket;
};

struct netpol_http_rules {
	struct netpol_http_rule *rules;
	size_t n;
	bool audit; /* endpoint `mode: audit` */
};

struct netpol_http_decision {
	bool allow;            /* false: answer 403 (unless audit) */
	enum reason reason;    /* REASON_ALLOWED, or why it is (would be) denied */
	const char *rule;      /* the deciding rule's name (into the policy), or NULL */
	bool audit_mode;       /* allowed only because the endpoint is in audit mode */
	const char *credential; /* the credential swapped in, or refused (never its value); NULL */
};

/* Decide one request. target is the request target as sent (origin-form
 * "/p?q", or absolute-form, whose path is used); websocket: the request
 * asks to upgrade to WebSocket. rules NULL or empty: allowed (no rule). */
struct netpol_http_decision netpol_http_decide(const struct netpol_http_rules *rules, const char *method,
					       const char *target, bool websocket);

/* The path of target (no query, no fragment) into out; -EINVAL when it
 * is not canonical (see above) or does not fit. */
int netpol_http_path(const char *target, char *out, size_t size);

void netpol_http_rules_free(struct netpol_http_rules *r);
