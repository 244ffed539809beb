#include "net-supervisor/proxy.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "net-supervisor/audit_line.h"
#include "net-supervisor/conn.h"
#include "net-supervisor/hostport.h"
#include "net-supervisor/relay.h"
#include "net-supervisor/tls_inspect.h"
#include "net-supervisor/upstream.h"

#define LINGER_MS 500

struct proxy_listener {
	uv_tcp_t tcp;
	struct netsup *ns;
	char addr[64];
};

/* ---------- small helpers ---------- */

static void side_init_refs(struct conn *c)
{
	c->client.c = c->up.c = c;
	c->client.peer = &c->up;
	c->up.peer = &c->client;
}

/* ---------- closing ---------- */

static void conn_free(struct conn *c)
{
	struct netsup *ns = c->ns;
	if (c->prev)
		c->prev->next = c->next;
	else if (ns->conns == c)
		ns->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->counted_in & CONN_IN_ACTIVE)
		ns->sh->metrics.conns_active--;
	if (c->counted_in & CONN_IN_REJECTING)
		ns->sh->n_rejecting--;
	if (c->counted_in & CONN_IN_RELAYING)
		ns->sh->n_relaying--;
	httpreq_done(&c->req);
	flow_identity_free(c->id);
	upstream_hop_free(c);
	tls_inspect_free(c);
	free(c->early);
	free(c->client.big);
	free(c->client.spare);
	free(c->up.big);
	free(c->up.spare);
	free(c->tp);
	free(c);
}

void conn_maybe_free(struct conn *c)
{
	if (c->state == C_CLOSING && c->open_handles == 0 && !c->gai_pending && !c->recording)
		conn_free(c);
}

static void handle_closed(uv_handle_t *h)
{
	struct conn *c = h->data;
	c->open_handles--;
	conn_maybe_free(c);
}

/* TCP handles carry their side, not the connection. */
static void side_closed(uv_handle_t *h)
{
	struct side *s = h->data;
	struct conn *c = s->c;
	c->open_handles--;
	conn_maybe_free(c);
}

void conn_close(struct conn *c)
{
	if (c->state == C_CLOSING)
		return;
	c->state = C_CLOSING;
	if (c->idreq) {
		identity_request_abandon(c->idreq);
		c->idreq = NULL;
	}
	if (c->gai_pending)
		uv_cancel((uv_req_t *)&c->gai);
	relay_splice_close(c);
	uv_close((uv_handle_t *)&c->timer, handle_closed);
	if (c->client.inited)
		uv_close((uv_handle_t *)&c->client.tcp, side_closed);
	if (c->up.inited)
		uv_close((uv_handle_t *)&c->up.tcp, side_closed);
	conn_maybe_free(c);
}

/* ---------- responses to the client ---------- */

struct resp {
	uv_write_t w;
	struct conn *c;
	char *buf;
};

void conn_alloc_pooled(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct side *s = h->data;
	char *b = bufpool_get(&s->c->ns->pool);
	*buf = uv_buf_init(b, b ? (unsigned)s->c->ns->pool.size : 0);
}

static void linger_timeout(uv_timer_t *t) { conn_close(t->data); }

static void discard_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct side *s = st->data;
	if (buf->base)
		bufpool_put(&s->c->ns->pool, buf->base);
	if (nread < 0)
		conn_close(s->c);
}

static void resp_shut(uv_shutdown_t *sh, int status)
{
	struct conn *c = sh->data;
	if (c->state == C_CLOSING)
		return;
	if (status < 0) {
		conn_close(c);
		return;
	}
	/* Read (and drop) until the client closes, briefly: closing with unread
	 * bytes would make the kernel send RST and lose our answer. */
	uv_timer_start(&c->timer, linger_timeout, LINGER_MS, 0);
	c->client.reading = true;
	if (uv_read_start((uv_stream_t *)&c->client.tcp, conn_alloc_pooled, discard_read) < 0)
		conn_close(c);
}

static void resp_written(uv_write_t *w, int status)
{
	struct resp *r = w->data;
	struct conn *c = r->c;
	free(r->buf);
	free(r);
	if (c->state == C_CLOSING)
		return;
	if (status < 0) {
		conn_close(c);
		return;
	}
	c->client.shut.data = c;
	if (uv_shutdown(&c->client.shut, (uv_stream_t *)&c->client.tcp, resp_shut) < 0)
		conn_close(c);
}

static const char *status_text(int status)
{
	switch (status) {
	case 400: return "Bad Request";
	case 403: return "Forbidden";
	case 408: return "Request Timeout";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default: return "Error";
	}
}

/* Answer with status and a JSON body {error, reason, binary, dest}, then
 * close politely. */
static void respond(struct conn *c, int status, enum reason reason)
{
	if (c->state == C_CLOSING || c->state == C_RESPOND)
		return;
	c->state = C_RESPOND;
	uv_timer_stop(&c->timer);
	if (c->client.reading) {
		uv_read_stop((uv_stream_t *)&c->client.tcp);
		c->client.reading = false;
	}
	if (c->up.inited) {
		uv_close((uv_handle_t *)&c->up.tcp, side_closed);
		c->up.inited = false;
	}
	if (c->tp) {
		/* A transparent client asked nothing of a proxy: no HTTP answer
		 * (it would be read as the server's), a reset at once. */
		if (c->client.inited) {
			c->client.inited = false;
			if (uv_tcp_close_reset(&c->client.tcp, side_closed) < 0)
				uv_close((uv_handle_t *)&c->client.tcp, side_closed);
		}
		conn_close(c);
		return;
	}
	json_t *body = json_object();
	json_object_set_new(body, "error", json_string(status_text(status)));
	json_object_set_new(body, "reason", json_string(reason_word(reason)));
	json_object_set_new(body, "binary", c->id && c->id->binary_path ? json_string(c->id->binary_path) : json_null());
	json_t *dest = json_null();
	if (c->host && c->host[0]) {
		char hp[300];
		bool v6 = strchr(c->host, ':') != NULL;
		snprintf(hp, sizeof(hp), "%s%s%s:%u", v6 ? "[" : "", c->host, v6 ? "]" : "", c->port);
		dest = json_string(hp);
	}
	json_object_set_new(body, "dest", dest);
	if (c->policy_name[0])
		json_object_set_new(body, "policy", json_string(c->policy_name));
	char *js = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(body);
	struct resp *r = calloc(1, sizeof(*r));
	size_t cap = 256 + (js ? strlen(js) : 0);
	char *buf = malloc(cap);
	if (!r || !buf || !js) {
		free(r);
		free(buf);
		free(js);
		conn_close(c);
		return;
	}
	int n = snprintf(buf, cap,
			 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\nX-Tether-Reason: %s\r\n\r\n%s\n",
			 status, status_text(status), strlen(js) + 1, reason_word(reason), js);
	free(js);
	r->c = c;
	r->buf = buf;
	r->w.data = r;
	uv_buf_t b = uv_buf_init(buf, (unsigned)n);
	if (uv_write(&r->w, (uv_stream_t *)&c->client.tcp, &b, 1, resp_written) < 0) {
		free(buf);
		free(r);
		conn_close(c);
	}
}

void conn_respond(struct conn *c, int status, enum reason reason) { respond(c, status, reason); }

static void start_connect(struct conn *c);

/* An allowed flow revoked before the client had its answer: it gets one
 * that says why it ended (the allow is already in the audit, and so is the
 * tunnel_revoked line). */
static void answer_revoked(struct conn *c, enum revoke_why why)
{
	if (why == REVOKE_POLICY_CHANGED)
		respond(c, 403, REASON_POLICY_DENY);
	else if (why == REVOKE_ANCHOR_REPLACED)
		respond(c, 403, REASON_ANCHOR_UNKNOWN);
	else
		respond(c, 503, REASON_NOT_READY);
}

/* The decision is in the audit file (or cannot be): give its answer. While
 * the file cannot take it, --audit-failure deny (the default) answers 503
 * audit_unavailable instead; allow gives the answer, counted. */
static void decision_recorded(struct auditq_waiter *w, bool recorded)
{
	struct conn *c = (struct conn *)((char *)w - offsetof(struct conn, recorded));
	struct netsup *ns = c->ns;
	c->recording = false;
	if (c->state != C_RECORD) {
		conn_maybe_free(c);
		return;
	}
	enum flow_source src = c->id ? c->id->source : FLOW_SOURCE_NONE;
	if (!recorded) {
		if (!ns->cfg.audit_failure_allow) {
			ns->sh->metrics.audit_unrecorded_denied++;
			metrics_decision(&ns->sh->metrics, false, REASON_AUDIT_UNAVAILABLE, src);
			respond(c, 503, REASON_AUDIT_UNAVAILABLE);
			return;
		}
		ns->sh->metrics.audit_unrecorded_answered++;
	}
	metrics_decision(&ns->sh->metrics, c->answer_allow, c->answer_allow ? c->d.reason : c->answer_reason, src);
	if (c->answer_allow && c->revoked != REVOKE_KEEP)
		answer_revoked(c, c->revoked);
	else if (c->answer_allow)
		start_connect(c);
	else
		respond(c, c->answer_status, c->answer_reason);
}

/* Hold the conn (no reads, no timer) until its decision is recorded. */
static void record_then_answer(struct conn *c, bool allow, enum reason reason, int status)
{
	c->state = C_RECORD;
	uv_timer_stop(&c->timer);
	if (c->client.reading) {
		uv_read_stop((uv_stream_t *)&c->client.tcp);
		c->client.reading = false;
	}
	c->answer_allow = allow;
	c->answer_status = status;
	c->answer_reason = reason;
	c->recorded.cb = decision_recorded;
	c->recording = true;
	audit_line_decision(c, allow, reason, status, &c->recorded);
}

/* A request-stage rejection: audit, then answer. */
static void reject(struct conn *c, int status, enum reason reason)
{
	record_then_answer(c, false, reason, status);
}

/* ---------- connecting upstream ---------- */

static void try_connect(struct conn *c);

static void up_closed_retry(uv_handle_t *h)
{
	struct conn *c = ((struct side *)h->data)->c;
	c->open_handles--;
	if (c->state == C_CLOSING) {
		conn_maybe_free(c);
		return;
	}
	try_connect(c);
}

static void upstream_ready(struct conn *c);

/* The corporate proxy's answer to our CONNECT (upstream.h). */
static void hop_done(struct conn *c, enum reason r, int status)
{
	if (c->state != C_CONNECTING)
		return;
	if (r != REASON_OK) {
		c->ns->sh->metrics.upstream_proxy_errors[r]++;
		audit_line_error(c, r, status);
		respond(c, status, r);
		return;
	}
	c->ns->sh->metrics.upstream_proxy_tunnels++;
	upstream_ready(c);
}

static void connected(uv_connect_t *req, int status)
{
	struct conn *c = req->data;
	if (c->state != C_CONNECTING)
		return; /* closing, or the timeout already answered */
	if (status < 0) {
		log_debug("connect to %s:%u failed: %s", c->host, c->port, uv_strerror(status));
		if (c->via_upstream) {
			/* the same proxy for every address: no retry */
			c->ns->sh->metrics.upstream_proxy_errors[REASON_UPSTREAM_PROXY_UNREACHABLE]++;
			audit_line_error(c, REASON_UPSTREAM_PROXY_UNREACHABLE, 502);
			respond(c, 502, REASON_UPSTREAM_PROXY_UNREACHABLE);
			return;
		}
		c->up.inited = false;
		uv_close((uv_handle_t *)&c->up.tcp, up_closed_retry);
		return;
	}
	uv_tcp_nodelay(&c->up.tcp, 1);
	if (c->via_upstream) {
		/* the timer keeps running: it bounds the handshake too */
		if (upstream_hop_start(c, hop_done) < 0) {
			/* out of memory, or a name the CONNECT line cannot carry */
			audit_line_error(c, REASON_INTERNAL_ERROR, 502);
			respond(c, 502, REASON_INTERNAL_ERROR);
		}
		return;
	}
	upstream_ready(c);
}

/* Connected to the destination (directly or through the corporate proxy):
 * answer the client, send what it already gave, relay. */
static void upstream_ready(struct conn *c)
{
	if (c->req.is_connect && c->d.tls_inspect) {
		/* the tunnel's bytes are TLS to terminate (tls_inspect.h); what
		 * the corporate proxy passed on after its 200 is a server that
		 * spoke first, which TLS never does: dropped with its state */
		upstream_hop_free(c);
		tls_inspect_start(c);
		return;
	}
	uv_timer_stop(&c->timer);
	if (c->tp) {
		/* transparent: the client's first bytes are still in its socket */
	} else if (c->req.is_connect) {
		static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
		char *b = strdup(ok);
		if (!b || relay_send(&c->client, b, sizeof(ok) - 1, BUF_MALLOC) < 0) {
			conn_close(c);
			return;
		}
	} else {
		size_t hl;
		char *head = httpreq_upstream_head(&c->req, &hl);
		if (!head || relay_send(&c->up, head, hl, BUF_MALLOC) < 0) {
			conn_close(c);
			return;
		}
	}
	/* what the corporate proxy passed on after its 200 is the
	 * destination's: after our 200, then its state is no longer needed */
	if (upstream_hop_send_leftover(c) < 0) {
		conn_close(c);
		return;
	}
	upstream_hop_free(c);
	if (c->early_len) {
		char *e = c->early;
		c->early = NULL;
		if (relay_send(&c->up, e, c->early_len, BUF_MALLOC) < 0) {
			conn_close(c);
			return;
		}
		c->early_len = 0;
	}
	relay_start(c);
}

static void connect_timeout(uv_timer_t *t)
{
	struct conn *c = t->data;
	if (c->state != C_CONNECTING)
		return;
	enum reason why = c->via_upstream && !c->hop ? REASON_UPSTREAM_PROXY_UNREACHABLE : REASON_UPSTREAM_TIMEOUT;
	if (c->via_upstream)
		c->ns->sh->metrics.upstream_proxy_errors[why]++;
	audit_line_error(c, why, 504);
	respond(c, 504, why);
}

static void netaddr_to_sockaddr(const struct netaddr *a, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (a->family == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		memcpy(&s4->sin_addr, a->a, 4);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		memcpy(&s6->sin6_addr, a->a, 16);
	}
}

static void try_connect(struct conn *c)
{
	while (c->next_addr < c->n_allowed) {
		const struct netaddr *a = &c->allowed[c->next_addr++];
		struct sockaddr_storage ss;
		netaddr_to_sockaddr(a, c->port, &ss);
		c->chosen = *a;
		c->have_chosen = true;
		/* Through the corporate proxy: the socket goes to it, and its
		 * CONNECT names the address checked here (or the name, by
		 * --upstream-proxy-connect name). */
		c->via_upstream = c->ns->upstream && !upstream_bypassed(c->ns->upstream, c->host, a);
		if (c->via_upstream)
			memcpy(&ss, &c->ns->upstream->addr, sizeof(ss));
		uv_tcp_init(c->ns->loop, &c->up.tcp);
		c->up.tcp.data = &c->up;
		c->up.inited = true;
		c->open_handles++;
		c->connreq.data = c;
		/* The socket goes to the address the policy checked: no second
		 * lookup, so DNS cannot rebind it. */
		int r = uv_tcp_connect(&c->connreq, &c->up.tcp, (struct sockaddr *)&ss, connected);
		if (r == 0)
			return;
		if (r == UV_EMFILE || r == UV_ENFILE) {
			/* Our own shortage, not the upstream's: no other address
			 * would fare better, and 502 would blame the server.
			 * (respond() closes the unused upstream handle.) */
			c->ns->sh->metrics.fd_exhausted++;
			audit_line_error(c, REASON_TOO_MANY_CONNECTIONS, 503);
			respond(c, 503, REASON_TOO_MANY_CONNECTIONS);
			return;
		}
		c->up.inited = false;
		uv_close((uv_handle_t *)&c->up.tcp, up_closed_retry);
		return;
	}
	audit_line_error(c, REASON_UPSTREAM_CONNECT_FAILED, 502);
	respond(c, 502, REASON_UPSTREAM_CONNECT_FAILED);
}

/* ---------- deciding ---------- */

static void start_resolve(struct conn *c);

/* Decided before any name lookup: a failed identity (enforce mode), or one
 * for which no rule could allow this host:port whatever it resolves to. */
static void deny_unresolved(struct conn *c, const struct network_policy *np)
{
	c->decided = true;
	if (c->id_reason != REASON_OK)
		c->d = (struct netpolicy_decision){ .allow = false, .reason = c->id_reason };
	else
		c->d = netpolicy_decide(np, c->id, c->host, c->port, NULL);
	if (c->d.allow) {
		/* cannot happen (netpolicy_resolution_may_allow said no): fail closed */
		c->d.allow = false;
		c->d.audit_mode = false;
		c->d.reason = REASON_INTERNAL_ERROR;
	}
	if (c->d.policy)
		strscpy(c->policy_name, c->d.policy, sizeof(c->policy_name));
	reject(c, 403, c->d.reason);
}

static void decide(struct conn *c)
{
	struct netsup *ns = c->ns;
	if (!c->id_done || c->state != C_WAIT || c->gai_pending)
		return;
	if (c->id && ns->identity &&
	    (!ns->identity->anchored || c->id->anchor_epoch != ns->identity->anchor_epoch)) {
		/* resolved under an anchor that is gone now: it would be revoked */
		reject(c, 503, REASON_NOT_READY);
		return;
	}
	const struct network_policy *np = policystore_network(ns->policy);
	c->generation = policystore_generation(ns->policy);
	if (!c->gai_done) {
		/* A name is looked up only once the verified identity could be
		 * allowed to it (or the mode is audit): never for a process
		 * the policy denies anyway. */
		bool need = c->id_reason == REASON_OK
				    ? netpolicy_resolution_may_allow(np, c->id, c->host, c->port)
				    : np && (np->mode == NETPOL_AUDIT || np->learn);
		if (!need) {
			deny_unresolved(c, np);
			return;
		}
		start_resolve(c);
		return;
	}
	if (c->gai_status < 0 || c->n_resolved == 0) {
		reject(c, 502, REASON_RESOLVE_FAILED);
		return;
	}
	if (c->id_reason != REASON_OK) {
		/* No verified identity: fail closed (audit mode lets it pass, logged). */
		c->decided = true;
		c->d = (struct netpolicy_decision){ .allow = false, .reason = c->id_reason };
		if (np && (np->mode == NETPOL_AUDIT || np->learn)) {
			c->d.allow = true;
			c->d.audit_mode = true;
			c->d.learn = np->learn;
		}
		c->have_chosen = true;
		c->chosen = c->resolved[0];
		if (!c->d.allow) {
			reject(c, 403, c->id_reason);
			return;
		}
		memcpy(c->allowed, c->resolved, sizeof(c->resolved));
		c->n_allowed = c->n_resolved;
	} else {
		struct netpolicy_decision first = { 0 };
		bool have_first = false;
		for (size_t i = 0; i < c->n_resolved; i++) {
			struct netpolicy_decision d = netpolicy_decide_flow(np, c->id, c->host, c->port,
									    &c->resolved[i],
									    c->tp ? c->tp->kind : NETPOLICY_FLOW_HTTP);
			if (!have_first) {
				first = d;
				have_first = true;
			}
			if (d.allow) {
				if (c->n_allowed == 0) {
					c->d = d;
					c->chosen = c->resolved[i];
				}
				c->allowed[c->n_allowed++] = c->resolved[i];
			}
		}
		c->decided = true;
		c->have_chosen = true;
		if (c->n_allowed == 0) {
			c->d = first;
			c->chosen = c->resolved[0];
		}
		if (c->d.policy)
			strscpy(c->policy_name, c->d.policy, sizeof(c->policy_name));
		if (!c->d.allow) {
			reject(c, 403, c->d.reason);
			return;
		}
		/* A `tls: inspect` endpoint's HTTP rules and credentials are
		 * judged inside the TLS session of a CONNECT tunnel; a captured
		 * (transparent) flow or a plain-HTTP forward request would pass
		 * them by: refused, fail closed. */
		if (c->d.tls_inspect && (c->tp || !c->req.is_connect)) {
			c->d.allow = false;
			c->d.reason = REASON_TLS_INSPECT_NEEDS_CONNECT;
			reject(c, 403, REASON_TLS_INSPECT_NEEDS_CONNECT);
			return;
		}
	}
	c->allowed_at = uv_now(c->ns->loop);
	record_then_answer(c, true, c->d.reason, 0);
}

static void start_connect(struct conn *c)
{
	c->state = C_CONNECTING;
	uv_timer_start(&c->timer, connect_timeout, c->ns->cfg.connect_timeout_ms, 0);
	try_connect(c);
}

static void identity_done(const struct identity_result *res, void *data)
{
	struct conn *c = data;
	c->idreq = NULL;
	c->id_done = true;
	c->id_reason = res->reason;
	c->id = res->id;
	if (c->id && c->id->context_request_id)
		c->id->context_request_id = netsup_context_request_id(c->ns, c->id->context_request_id);
	metrics_identity_latency(&c->ns->sh->metrics, res->latency_ns);
	decide(c);
}

static void resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	struct conn *c = req->data;
	c->gai_pending = false;
	c->gai_done = true;
	c->gai_status = status;
	for (struct addrinfo *ai = res; ai && c->n_resolved < MAX_ADDRS; ai = ai->ai_next) {
		struct netaddr a;
		if (netaddr_from_sockaddr(ai->ai_addr, &a) < 0)
			continue;
		bool dup = false;
		for (size_t i = 0; i < c->n_resolved; i++)
			if (c->resolved[i].family == a.family && memcmp(c->resolved[i].a, a.a, 16) == 0)
				dup = true;
		if (!dup)
			c->resolved[c->n_resolved++] = a;
	}
	uv_freeaddrinfo(res);
	if (c->state == C_CLOSING) {
		conn_maybe_free(c);
		return;
	}
	decide(c);
}

static void head_complete(struct conn *c)
{
	uv_timer_stop(&c->timer);
	uv_read_stop((uv_stream_t *)&c->client.tcp);
	c->client.reading = false;
	c->host = c->req.host;
	c->port = c->req.port;
	conn_dest_ready(c);
}

void conn_dest_ready(struct conn *c)
{
	struct netsup *ns = c->ns;
	if (!ns->ready) {
		reject(c, 503, netsup_not_ready_reason(ns));
		return;
	}
	c->state = C_WAIT;
	struct netaddr lit;
	if (c->gai_done) {
		/* the front end knows the address (transparent: the original one) */
	} else if (netaddr_parse(c->host, &lit) == 0) {
		c->resolved[0] = lit;
		c->n_resolved = 1;
		c->gai_done = true;
	}
	/* A name waits for the identity: decide() looks it up only if that
	 * identity could be allowed to it. */
	int r = identity_resolve(ns->identity, &c->tuple, ns->cfg.identity_timeout_ms, identity_done, c,
				 &c->idreq);
	if (r < 0) {
		c->id_done = true;
		c->id_reason = REASON_IDENTITY_UNAVAILABLE;
		decide(c);
	}
}

/* The lookup took too long (a resolver that drops queries keeps getaddrinfo
 * for its whole retry schedule, tens of seconds). A running lookup cannot
 * be stopped: the client is answered now and the connection freed when the
 * lookup returns (conn_maybe_free waits for gai_pending). It does not hold
 * the thread pool: libuv runs getaddrinfo as "slow I/O", on at most half
 * of the pool's threads, so identity jobs and reloads always have the rest
 * (test_proxy test_resolver_cannot_take_the_pool). */
static void resolve_timeout(uv_timer_t *t)
{
	struct conn *c = t->data;
	if (c->state == C_WAIT && c->gai_pending)
		reject(c, 504, REASON_RESOLVE_TIMEOUT);
}

static void start_resolve(struct conn *c)
{
	struct netsup *ns = c->ns;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_ADDRCONFIG };
	c->gai.data = c;
	c->gai_pending = true;
	ns->sh->metrics.resolutions++;
	uv_timer_start(&c->timer, resolve_timeout, ns->cfg.resolve_timeout_ms, 0);
	int r = uv_getaddrinfo(ns->loop, &c->gai, resolved, c->host, NULL, &hints);
	if (r < 0) {
		uv_timer_stop(&c->timer);
		c->gai_pending = false;
		c->gai_done = true;
		c->gai_status = r;
		decide(c);
	}
}

static void head_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct side *s = st->data;
	struct conn *c = s->c;
	if (nread <= 0) {
		if (buf->base)
			bufpool_put(&c->ns->pool, buf->base);
		if (nread < 0) {
			/* Closed before finishing a request: nothing to answer. */
			if (c->req.consumed > 0) {
				audit_line_decision(c, false, REASON_BAD_REQUEST, 0, NULL);
				metrics_decision(&c->ns->sh->metrics, false, REASON_BAD_REQUEST,
						 c->id ? c->id->source : FLOW_SOURCE_NONE);
			}
			conn_close(c);
		}
		return;
	}
	size_t used;
	int r = httpreq_feed(&c->req, buf->base, (size_t)nread, &used);
	if (r == 1 && used < (size_t)nread) {
		c->early_len = (size_t)nread - used;
		c->early = malloc(c->early_len);
		if (!c->early) {
			bufpool_put(&c->ns->pool, buf->base);
			conn_close(c);
			return;
		}
		memcpy(c->early, buf->base + used, c->early_len);
	}
	bufpool_put(&c->ns->pool, buf->base);
	if (r < 0) {
		reject(c, c->req.status ? c->req.status : 400, c->req.error);
		return;
	}
	if (r == 1)
		head_complete(c);
}

static void head_timeout(uv_timer_t *t)
{
	struct conn *c = t->data;
	if (c->state == C_HEAD)
		reject(c, 408, REASON_IDLE_TIMEOUT);
}

/* ---------- accepting ---------- */

/* A new conn with its client side initialised (not yet connected), linked
 * into ns->conns; NULL when out of memory. */
static struct conn *conn_new(struct netsup *ns)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->ns = ns;
	side_init_refs(c);
	httpreq_init(&c->req, &(struct httpreq_limits){ ns->cfg.max_header_bytes, ns->cfg.max_headers });
	uv_tcp_init(ns->loop, &c->client.tcp);
	c->client.tcp.data = &c->client;
	c->client.inited = true;
	uv_timer_init(ns->loop, &c->timer);
	c->timer.data = c;
	c->open_handles = 2;
	c->next = ns->conns;
	if (ns->conns)
		ns->conns->prev = c;
	ns->conns = c;
	return c;
}

/* The client is connected: its tuple, the connection limit. False: the
 * conn is being rejected or closed. */
static bool conn_admit(struct conn *c)
{
	struct netsup *ns = c->ns;
	ns->sh->metrics.conns_total++;
	int len = sizeof(c->tuple.client);
	uv_tcp_getpeername(&c->client.tcp, (struct sockaddr *)&c->tuple.client, &len);
	len = sizeof(c->tuple.proxy);
	uv_tcp_getsockname(&c->client.tcp, (struct sockaddr *)&c->tuple.proxy, &len);
	uv_tcp_nodelay(&c->client.tcp, 1);
	ns->sh->metrics.worker_accepted[ns->worker]++;
	/* One limit for every worker: take a slot, give it back if it was
	 * past the limit (two workers racing for the last slot: one wins). */
	if (atomic_fetch_add(&ns->sh->metrics.conns_active, 1) >= ns->cfg.max_conns) {
		ns->sh->metrics.conns_active--;
		if (atomic_fetch_add(&ns->sh->n_rejecting, 1) >= NETSUP_MAX_REJECTING) {
			/* Each 503 holds a descriptor while it is answered: past
			 * this many at once, a flood would spend the ones the
			 * daemon keeps for itself. Closed unanswered, counted. */
			ns->sh->n_rejecting--;
			ns->sh->metrics.conns_dropped++;
			conn_close(c);
			return false;
		}
		c->counted_in |= CONN_IN_REJECTING;
		reject(c, 503, REASON_TOO_MANY_CONNECTIONS);
		return false;
	}
	c->counted_in |= CONN_IN_ACTIVE;
	return true;
}

struct conn *conn_adopt_fd(struct netsup *ns, int fd, struct conn_transparent *tp)
{
	struct conn *c = conn_new(ns);
	if (!c) {
		close(fd);
		free(tp);
		return NULL;
	}
	c->tp = tp;
	if (tp)
		c->host = tp->host;
	if (uv_tcp_open(&c->client.tcp, fd) < 0) {
		close(fd);
		conn_close(c);
		return NULL;
	}
	if (!conn_admit(c))
		return NULL;
	c->state = C_WAIT;
	return c;
}

static void on_accept(uv_stream_t *server, int status)
{
	struct proxy_listener *l = server->data;
	struct netsup *ns = l->ns;
	if (status < 0) {
		/* Out of descriptors, libuv closes the pending connections
		 * unanswered (they cannot be accepted). A flood of them is
		 * one warning per ten seconds, not one per client. */
		ns->sh->metrics.accept_errors++;
		uint64_t held_back;
		if (log_ratelimit_ok(&ns->accept_log, uv_now(ns->loop), 10000, &held_back))
			log_warn("accept on %s: %s (%llu more since the last warning; see "
				 "tether_accept_errors_total)", l->addr, uv_strerror(status),
				 (unsigned long long)held_back);
		return;
	}
	struct conn *c = conn_new(ns);
	if (!c)
		return; /* the pending connection stays in the backlog */
	if (uv_accept(server, (uv_stream_t *)&c->client.tcp) < 0) {
		conn_close(c);
		return;
	}
	if (!conn_admit(c))
		return;
	c->state = C_HEAD;
	uv_timer_start(&c->timer, head_timeout, ns->cfg.header_timeout_ms, 0);
	c->client.reading = true;
	if (uv_read_start((uv_stream_t *)&c->client.tcp, conn_alloc_pooled, head_read) < 0)
		conn_close(c);
}

int proxy_listen(struct netsup *ns, const char *addr, struct proxy_listener **out)
{
	struct sockaddr_storage ss;
	int r = netsup_parse_hostport(addr, &ss);
	if (r < 0) {
		log_error("--listen %s: expected ADDR:PORT (e.g. 127.0.0.1:3128, [::1]:3128)", addr);
		return r;
	}
	struct proxy_listener *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->ns = ns;
	strscpy(l->addr, addr, sizeof(l->addr));
	uv_tcp_init_ex(ns->loop, &l->tcp, ss.ss_family);
	l->tcp.data = l;
	/* --workers > 1: each worker binds its own socket to the address,
	 * one SO_REUSEPORT group (the kernel spreads new connections; only
	 * sockets of our own uid can join it). */
	uv_os_fd_t lfd;
	int one = 1;
	r = 0;
	if (ns->cfg.workers > 1 && (uv_fileno((uv_handle_t *)&l->tcp, &lfd) < 0 ||
				    setsockopt(lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0))
		r = -errno;
	if (r == 0)
		r = uv_tcp_bind(&l->tcp, (struct sockaddr *)&ss, ss.ss_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)&l->tcp, 1024, on_accept);
	if (r < 0) {
		log_error("cannot listen on %s: %s", addr, uv_strerror(r));
		uv_close((uv_handle_t *)&l->tcp, (uv_close_cb)free);
		return r;
	}
	*out = l;
	return 0;
}

static void listener_closed(uv_handle_t *h) { free(h->data); }

void proxy_listener_close(struct proxy_listener *l)
{
	if (l)
		uv_close((uv_handle_t *)&l->tcp, listener_closed);
}

void proxy_close_all(struct netsup *ns)
{
	for (struct conn *c = ns->conns, *n; c; c = n) {
		n = c->next;
		conn_close(c);
	}
}

/* ---------- revocation (revoke.h) ---------- */

size_t proxy_revoke_tunnels(struct netsup *ns,
			    enum revoke_why (*judge)(const struct tunnel_view *t, void *data), void *data)
{
	size_t n = 0;
	for (struct conn *c = ns->conns, *next; c; c = next) {
		next = c->next;
		bool recording = c->state == C_RECORD && c->answer_allow && c->revoked == REVOKE_KEEP;
		if ((c->state != C_CONNECTING && c->state != C_RELAY && !recording) || !c->decided || !c->d.allow)
			continue;
		struct tunnel_view t = { .id = c->id, .host = c->host, .port = c->port,
					 .addr = &c->chosen, .allowed_at_ms = c->allowed_at };
		enum revoke_why why = judge(&t, data);
		if (why == REVOKE_KEEP || why >= REVOKE__COUNT)
			continue;
		audit_line_revoked(c, why);
		n++;
		if (c->state == C_RELAY) {
			conn_close(c);
			continue;
		}
		if (recording) { /* answered when its allow is in the file */
			c->revoked = (uint8_t)why;
			continue;
		}
		/* Still connecting: the client has had no answer yet. */
		answer_revoked(c, why);
	}
	return n;
}

