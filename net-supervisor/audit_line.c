#include "net-supervisor/audit_line.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "policy/netpolicy.h"

static const char *sockaddr_text(const struct sockaddr_storage *ss, char *buf, size_t size,
				 int *port)
{
	struct netaddr a;
	*port = 0;
	if (netaddr_from_sockaddr((const struct sockaddr *)ss, &a) < 0) {
		strscpy(buf, "?", size);
		return buf;
	}
	*port = ss->ss_family == AF_INET ? ntohs(((const struct sockaddr_in *)ss)->sin_port)
					  : ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	return netaddr_format(&a, buf, size);
}

static json_t *identity_json(json_t *o, const struct flow_identity *id, enum flow_source src)
{
	json_object_set_new(o, "identity_source", json_string(flow_source_word(id ? id->source : src)));
	if (!id) {
		json_object_set_new(o, "binary", json_null());
		return o;
	}
	json_t *bin = json_object();
	json_object_set_new(bin, "path", json_string(id->binary_path ? id->binary_path : ""));
	json_object_set_new(bin, "sha256", id->sha256[0] ? json_string(id->sha256) : json_null());
	json_object_set_new(o, "binary", bin);
	json_object_set_new(o, "pid", json_integer(id->pid));
	json_object_set_new(o, "process_key", id->process_key ? json_string(id->process_key) : json_null());
	json_t *anc = json_array();
	for (size_t i = 0; i < id->n_ancestors; i++) {
		json_t *a = json_object();
		json_object_set_new(a, "path", json_string(id->ancestors[i].path));
		json_object_set_new(a, "pid", json_integer(id->ancestors[i].pid));
		if (id->ancestors[i].sha256[0])
			json_object_set_new(a, "sha256", json_string(id->ancestors[i].sha256));
		json_array_append_new(anc, a);
	}
	json_object_set_new(o, "ancestors", anc);
	if (id->signed_context && id->signed_context_len) {
		size_t blen = sodium_base64_encoded_len(id->signed_context_len, sodium_base64_VARIANT_ORIGINAL);
		char *b64 = malloc(blen);
		if (b64) {
			sodium_bin2base64(b64, blen, id->signed_context, id->signed_context_len,
					  sodium_base64_VARIANT_ORIGINAL);
			json_object_set_new(o, "signed_context", json_string(b64));
			free(b64);
		}
	} else if (id->context_request_id) {
		/* MAC'd answer: the signature is in the `context_signed` event
		 * with the same context_request_id. */
		json_object_set_new(o, "context_request_id", json_integer((json_int_t)id->context_request_id));
	}
	return o;
}

void audit_line_identity(json_t *o, const struct flow_identity *id, enum flow_source src)
{
	identity_json(o, id, src);
}

static json_t *dest_json(const struct conn *c)
{
	json_t *d = json_object();
	if (c->host && c->host[0]) {
		json_object_set_new(d, "host", json_string(c->host));
		json_object_set_new(d, "port", json_integer(c->port));
	} else {
		json_object_set_new(d, "host", json_null());
		json_object_set_new(d, "port", json_null());
	}
	char ip[INET6_ADDRSTRLEN];
	if (c->have_chosen)
		json_object_set_new(d, "ip", json_string(netaddr_format(&c->chosen, ip, sizeof(ip))));
	else
		json_object_set_new(d, "ip", json_null());
	return d;
}

static json_t *client_json(const struct conn *c)
{
	char ip[INET6_ADDRSTRLEN];
	int port;
	sockaddr_text(&c->tuple.client, ip, sizeof(ip), &port);
	json_t *cl = json_object();
	json_object_set_new(cl, "ip", json_string(ip));
	json_object_set_new(cl, "port", json_integer(port));
	return cl;
}

/* ---------- the terminal line (--console) ---------- */

#define CONSOLE_WINDOW_MS 10000
#define CONSOLE_BURST 20

/* Under the console lock. */
static void console_summary(struct netsup *ns)
{
	if (ns->sh->console.hidden)
		log_line("tether: %llu more %s not shown (see the audit log)",
			 (unsigned long long)ns->sh->console.hidden,
			 ns->cfg.console == CONSOLE_ALL ? "flows" : "denials");
	ns->sh->console.hidden = 0;
}

void audit_line_console_flush(struct netsup *ns)
{
	pthread_mutex_lock(&ns->sh->console.lock);
	console_summary(ns);
	pthread_mutex_unlock(&ns->sh->console.lock);
}

/* A burst of CONSOLE_BURST lines a window, then one summary line when the
 * next window opens (or at exit): a client retrying in a loop cannot
 * flood the terminal, and nothing is silently lost. One window for every
 * worker (the terminal is one). */
static bool console_admit(struct netsup *ns)
{
	uint64_t now = uv_hrtime() / 1000000;
	bool ok = true;
	pthread_mutex_lock(&ns->sh->console.lock);
	if (ns->sh->console.shown == 0 || now - ns->sh->console.window_start >= CONSOLE_WINDOW_MS) {
		console_summary(ns);
		ns->sh->console.window_start = now;
		ns->sh->console.shown = 0;
	}
	if (ns->sh->console.shown >= CONSOLE_BURST) {
		ns->sh->console.hidden++;
		ok = false;
	} else {
		ns->sh->console.shown++;
	}
	pthread_mutex_unlock(&ns->sh->console.lock);
	return ok;
}

/* "git < bash < sh": the ancestors' base names, nearest first. */
static void ancestors_short(const struct flow_identity *id, char *buf, size_t size)
{
	size_t off = 0;
	buf[0] = '\0';
	for (size_t i = 0; id && i < id->n_ancestors && off < size; i++) {
		const char *p = id->ancestors[i].path ? id->ancestors[i].path : "?";
		const char *slash = strrchr(p, '/');
		int n = snprintf(buf + off, size - off, "%s%s", i ? " < " : "", slash && slash[1] ? slash + 1 : p);
		if (n < 0)
			break;
		off += (size_t)n;
	}
}

/* docs/quickstart.md "See a denial and fix it": the format is a contract
 * (tests grep `tether: denied EXE ` and `reason=WORD`). */
static void console_decision(struct conn *c, bool allow, enum reason reason)
{
	struct netsup *ns = c->ns;
	if (ns->cfg.console == CONSOLE_OFF || (allow && ns->cfg.console != CONSOLE_ALL) || !console_admit(ns))
		return;
	const char *exe = c->id && c->id->binary_path ? c->id->binary_path : "(unidentified)";
	char anc[512], dest[300];
	ancestors_short(c->id, anc, sizeof(anc));
	const char *host = c->host && c->host[0] ? c->host : NULL;
	char ip[INET6_ADDRSTRLEN];
	if (!host && c->have_chosen)
		host = netaddr_format(&c->chosen, ip, sizeof(ip));
	snprintf(dest, sizeof(dest), "%s%s%s:%u", host && strchr(host, ':') ? "[" : "", host ? host : "?",
		 host && strchr(host, ':') ? "]" : "", (unsigned)c->port);
	if (allow) {
		bool would_deny = c->decided && c->d.audit_mode && reason != REASON_ALLOWED;
		log_line("tether: allowed %s (%s) -> %s policy=%s%s%s", exe, anc, dest,
			 c->policy_name[0] ? c->policy_name : "none", would_deny ? " mode=audit would_deny=" : "",
			 would_deny ? reason_word(reason) : "");
		return;
	}
	char hint[900] = "";
	if (reason == REASON_NO_MATCHING_POLICY && c->id && c->id->binary_path && host) {
		const char *rule = netpolicy_rule_for_destination(policystore_network(ns->policy), host, c->port,
								  c->have_chosen ? &c->chosen : NULL);
		if (rule)
			snprintf(hint, sizeof(hint), "; to allow: add to policy \"%s\": binaries: [{path: %s}]", rule, exe);
		else
			snprintf(hint, sizeof(hint),
				 "; to allow: add a policy with binaries: [{path: %s}] and endpoints: [{host: %s, ports: [%u]}]",
				 exe, host, (unsigned)c->port);
	}
	log_line("tether: denied %s (%s) -> %s reason=%s%s", exe, anc, dest, reason_word(reason), hint);
}

/* The egress_decision event (docs/net-supervisor.md), plus client, status, method.
 * Staged with the conn's waiter when w: the answer waits for it. */
void audit_line_decision(struct conn *c, bool allow, enum reason reason, int status, struct auditq_waiter *w)
{
	struct netsup *ns = c->ns;
	json_t *o = json_object();
	if (!o)
		return;
	json_object_set_new(o, "decision", json_string(allow ? "allow" : "deny"));
	json_object_set_new(o, "reason", json_string(reason_word(reason)));
	if (c->decided && c->d.learn) {
		/* --learn: allowed whatever the policy says; "would" is the policy */
		json_object_set_new(o, "mode", json_string("learn"));
		json_object_set_new(o, "learn", json_true());
		json_object_set_new(o, "would", json_string(reason == REASON_ALLOWED ? "allow" : "deny"));
	} else if (c->decided && c->d.audit_mode) {
		json_object_set_new(o, "mode", json_string("audit"));
	}
	identity_json(o, c->id, FLOW_SOURCE_NONE);
	json_object_set_new(o, "dest", dest_json(c));
	json_object_set_new(o, "policy", c->policy_name[0] ? json_string(c->policy_name) : json_null());
	json_object_set_new(o, "policy_generation", json_integer((json_int_t)policystore_generation(ns->policy)));
	json_object_set_new(o, "client", client_json(c));
	if (c->req.method[0])
		json_object_set_new(o, "method", json_string(c->req.method));
	if (c->tp) {
		/* transparent capture (transparent.h): where the name came from */
		json_object_set_new(o, "capture", json_string("transparent"));
		json_object_set_new(o, "name_source", json_string(c->tp->name_source));
		json_object_set_new(o, "peek", json_string(c->tp->peek));
		if (c->tp->peeked_name[0])
			json_object_set_new(o, "peeked_name", json_string(c->tp->peeked_name));
	}
	if (status)
		json_object_set_new(o, "status", json_integer(status));
	if (allow && c->decided && c->d.tls_inspect && c->req.is_connect)
		json_object_set_new(o, "tls", json_string("inspect")); /* its requests follow as http_request */
	netsup_audit_decision(ns, "egress_decision", o, w);
	console_decision(c, allow, reason);
}

/* After an allow: the connection failed or ended abnormally upstream. */
void audit_line_error(struct conn *c, enum reason reason, int status)
{
	json_t *o = json_object();
	if (!o)
		return;
	json_object_set_new(o, "reason", json_string(reason_word(reason)));
	json_object_set_new(o, "dest", dest_json(c));
	json_object_set_new(o, "status", json_integer(status));
	json_object_set_new(o, "binary", c->id && c->id->binary_path ? json_string(c->id->binary_path) : json_null());
	if (c->id)
		json_object_set_new(o, "process_key", c->id->process_key ? json_string(c->id->process_key) : json_null());
	if (c->via_upstream)
		json_object_set_new(o, "upstream_proxy", json_string(c->ns->cfg.upstream_proxy));
	netsup_audit(c->ns, "egress_error", o);
	/* An allowed flow the corporate proxy would not carry: the person at
	 * the terminal sees why (the policy said yes). */
	if (c->via_upstream && c->ns->cfg.console != CONSOLE_OFF && console_admit(c->ns)) {
		const char *exe = c->id && c->id->binary_path ? c->id->binary_path : "(unidentified)";
		log_line("tether: failed %s -> %s:%u reason=%s (via the upstream proxy %s)", exe,
			 c->host ? c->host : "?", (unsigned)c->port, reason_word(reason), c->ns->cfg.upstream_proxy);
	}
}

void audit_line_http(struct conn *c, const char *method, const char *target, int status,
		     const struct netpol_http_decision *d)
{
	json_t *o = json_object();
	if (!o)
		return;
	json_object_set_new(o, "decision", json_string(d->allow ? "allow" : "deny"));
	json_object_set_new(o, "reason", json_string(reason_word(d->reason)));
	if (d->audit_mode)
		json_object_set_new(o, "mode", json_string("audit"));
	json_object_set_new(o, "method", json_string(method));
	json_object_set_new(o, "path", json_string(target));
	if (status)
		json_object_set_new(o, "status", json_integer(status));
	json_object_set_new(o, "rule", d->rule ? json_string(d->rule) : json_null());
	if (d->credential)
		json_object_set_new(o, "credential", json_string(d->credential));
	json_object_set_new(o, "dest", dest_json(c));
	json_object_set_new(o, "policy", c->policy_name[0] ? json_string(c->policy_name) : json_null());
	json_object_set_new(o, "binary", c->id && c->id->binary_path ? json_string(c->id->binary_path) : json_null());
	json_object_set_new(o, "pid", c->id ? json_integer(c->id->pid) : json_null());
	json_object_set_new(o, "process_key", c->id && c->id->process_key ? json_string(c->id->process_key) : json_null());
	netsup_audit(c->ns, "http_request", o);
	if (!d->allow && c->ns->cfg.console != CONSOLE_OFF && console_admit(c->ns)) {
		const char *exe = c->id && c->id->binary_path ? c->id->binary_path : "(unidentified)";
		log_line("tether: denied %s %s %s -> %s:%u reason=%s%s%s", exe, method, target, c->host ? c->host : "?",
			 (unsigned)c->port, reason_word(d->reason), d->rule ? " rule=" : "", d->rule ? d->rule : "");
	}
}

void audit_line_revoked(struct conn *c, enum revoke_why why)
{
	struct netsup *ns = c->ns;
	json_t *o = json_object();
	if (!o)
		return;
	json_object_set_new(o, "reason", json_string(revoke_word(why)));
	json_object_set_new(o, "dest", dest_json(c));
	json_object_set_new(o, "binary", c->id && c->id->binary_path ? json_string(c->id->binary_path) : json_null());
	json_object_set_new(o, "pid", c->id ? json_integer(c->id->pid) : json_null());
	json_object_set_new(o, "process_key", c->id && c->id->process_key ? json_string(c->id->process_key) : json_null());
	json_object_set_new(o, "identity_source", json_string(flow_source_word(c->id ? c->id->source : FLOW_SOURCE_NONE)));
	json_object_set_new(o, "anchor_epoch", c->id ? json_integer((json_int_t)c->id->anchor_epoch) : json_null());
	json_object_set_new(o, "policy", c->policy_name[0] ? json_string(c->policy_name) : json_null());
	json_object_set_new(o, "decision_generation", json_integer((json_int_t)c->generation));
	json_object_set_new(o, "policy_generation", json_integer((json_int_t)policystore_generation(ns->policy)));
	json_object_set_new(o, "age_ms", json_integer((json_int_t)(uv_now(ns->loop) - c->allowed_at)));
	json_object_set_new(o, "client", client_json(c));
	netsup_audit(ns, "tunnel_revoked", o);
	ns->sh->metrics.tunnels_revoked[why]++;
}
