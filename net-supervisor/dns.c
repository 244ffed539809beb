#include "net-supervisor/dns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/util.h"
#include "net-supervisor/audit_line.h"
#include "net-supervisor/dnsmsg.h"
#include "net-supervisor/hostport.h"
#include "policy/netpolicy.h"

#define DNS_MAX_LISTEN NETSUP_MAX_LISTEN
#define DNS_MAX_TCP 64            /* TCP clients at once; more are closed */
#define DNS_TCP_IDLE_MS 10000     /* a TCP client that sends nothing for this long is closed */
#define DNS_REC_MIN_TTL_S 300     /* an address is recorded for at least this long */
#define DNS_REC_MAX_TTL_S 86400
#define DNS_MAX_CHAIN 16          /* CNAME hops followed from the question */

struct dns_tcp;

struct dns_server {
	struct netsup *ns;
	uv_loop_t *loop;
	struct sockaddr_storage upstream;
	char upstream_text[64];
	struct dns_udp_listener {
		uv_udp_t h;
		struct dns_server *s;
		struct sockaddr_storage local;
	} *udp[DNS_MAX_LISTEN];
	size_t n_udp;
	uv_tcp_t *tcp[DNS_MAX_LISTEN];
	size_t n_tcp;
	uint8_t rbuf[65536];          /* UDP receive buffer (one datagram at a time) */
	bool rbuf_busy;
	struct dnsrec *rec;
	struct dns_query_state *queries;
	struct dns_tcp *conns;
	size_t outstanding, n_conns;
	size_t handles_open;
	bool closing;
	struct log_ratelimit busy_log, upstream_log;
	struct dns_stats st;
};

enum dq_state { DQ_IDENTITY = 0, DQ_UPSTREAM, DQ_RECORD, DQ_DONE };

/* One query from arrival to answer. */
struct dns_query_state {
	struct dns_server *s;
	struct dns_query_state *next, *prev;
	enum dq_state state;
	bool tcp;
	struct dns_udp_listener *l;      /* UDP: where to answer */
	struct dns_tcp *conn;            /* TCP: NULL once the client is gone */
	struct proxy_flow tuple;
	struct identity_request *idreq;
	struct flow_identity *id;
	enum reason reason;              /* the decision's */
	bool allow, audit_mode;
	int rcode;
	bool malformed;
	uint16_t raw_id, raw_flags;      /* header of a malformed query */
	struct dns_query q;
	/* upstream */
	uv_udp_t up;
	bool up_open;
	/* the same over TCP, when the UDP answer was truncated */
	uv_tcp_t tup;
	bool tup_open;
	uv_connect_t tconn;
	uv_write_t tw;
	uint8_t tq[2 + DNS_HEADER_LEN + DNS_NAME_MAX + 4 + 11];
	size_t tq_len;
	uint8_t *tbuf;                   /* 2 + 65535 */
	size_t tlen;
	uv_timer_t timer;
	bool timer_open;
	uint16_t up_id;
	struct dns_answer *ans;
	struct dns_rr *keep;             /* what the client gets */
	size_t n_keep;
	struct netaddr removed[DNSMSG_MAX_RR];
	size_t n_removed;
	struct auditq_waiter recorded;
	bool recording;
	int handles;
};

struct dns_tcp {
	uv_tcp_t h;
	struct dns_server *s;
	struct dns_tcp *next, *prev;
	uv_timer_t idle;
	uint8_t *buf;                    /* 2 + 65535 */
	size_t len;
	struct dns_query_state *busy;    /* the query being answered (one at a time) */
	struct proxy_flow tuple;
	int handles;
	bool closing;
};

struct dns_write {
	uv_write_t w;
	uv_udp_send_t u;
	uint8_t *buf;
	size_t len;
	struct dns_tcp *conn;
};

static void tcp_continue(struct dns_tcp *c);
static void tcp_close(struct dns_tcp *c);

/* ---------- small helpers ---------- */

static void server_maybe_free(struct dns_server *s)
{
	if (s->closing && s->handles_open == 0 && !s->queries && !s->conns) {
		dnsrec_free(s->rec);
		free(s);
	}
}

static void server_handle_closed(uv_handle_t *h)
{
	struct dns_server *s = h->data;
	s->handles_open--;
	free(h);
	server_maybe_free(s);
}

static int hostport_with_default(const char *in, uint16_t def_port, struct sockaddr_storage *out)
{
	if (netsup_parse_hostport(in, out) == 0)
		return 0;
	struct netaddr a;
	if (netaddr_parse(in, &a) < 0)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (a.family == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)out;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(def_port);
		memcpy(&s4->sin_addr, a.a, 4);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(def_port);
		memcpy(&s6->sin6_addr, a.a, 16);
	}
	return 0;
}

int dns_upstream_from_resolv(const char *text, char *out, size_t size)
{
	for (const char *line = text; line && *line;) {
		const char *eol = strchr(line, '\n');
		size_t ll = eol ? (size_t)(eol - line) : strlen(line);
		char buf[256];
		if (ll < sizeof(buf)) {
			memcpy(buf, line, ll);
			buf[ll] = '\0';
			char *save = NULL, *kw = strtok_r(buf, " \t\r", &save);
			char *val = kw ? strtok_r(NULL, " \t\r", &save) : NULL;
			struct netaddr a;
			if (kw && val && strcmp(kw, "nameserver") == 0 && netaddr_parse(val, &a) == 0) {
				int n = snprintf(out, size, a.family == AF_INET6 ? "[%s]:53" : "%s:53", val);
				return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
			}
		}
		line = eol ? eol + 1 : NULL;
	}
	return -ENOENT;
}

static json_t *addr_array(const struct netaddr *a, size_t n)
{
	json_t *arr = json_array();
	char ip[INET6_ADDRSTRLEN];
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, json_string(netaddr_format(&a[i], ip, sizeof(ip))));
	return arr;
}

static const char *rcode_word(int rcode)
{
	static const char *const w[] = { "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED" };
	return rcode >= 0 && rcode < 6 ? w[rcode] : "OTHER";
}

/* ---------- a query's end ---------- */

static void dq_maybe_free(struct dns_query_state *dq)
{
	if (dq->state != DQ_DONE || dq->handles > 0 || dq->recording || dq->idreq)
		return;
	struct dns_server *s = dq->s;
	if (dq->prev)
		dq->prev->next = dq->next;
	else
		s->queries = dq->next;
	if (dq->next)
		dq->next->prev = dq->prev;
	s->outstanding--;
	flow_identity_free(dq->id);
	free(dq->tbuf);
	free(dq->ans);
	free(dq->keep);
	free(dq);
	server_maybe_free(s);
}

static void dq_handle_closed(uv_handle_t *h)
{
	struct dns_query_state *dq = h->data;
	dq->handles--;
	dq_maybe_free(dq);
}

static void dq_stop_upstream(struct dns_query_state *dq)
{
	if (dq->up_open) {
		dq->up_open = false;
		uv_close((uv_handle_t *)&dq->up, dq_handle_closed);
	}
	if (dq->tup_open) {
		dq->tup_open = false;
		uv_close((uv_handle_t *)&dq->tup, dq_handle_closed);
	}
	if (dq->timer_open) {
		dq->timer_open = false;
		uv_close((uv_handle_t *)&dq->timer, dq_handle_closed);
	}
}

/* The query is over (answered or abandoned). */
static void dq_finish(struct dns_query_state *dq)
{
	if (dq->state == DQ_DONE)
		return;
	dq->state = DQ_DONE;
	if (dq->idreq) {
		identity_request_abandon(dq->idreq);
		dq->idreq = NULL;
	}
	dq_stop_upstream(dq);
	struct dns_tcp *c = dq->conn;
	dq->conn = NULL;
	if (c && c->busy == dq) {
		c->busy = NULL;
		tcp_continue(c);
	}
	dq_maybe_free(dq);
}

static void udp_sent(uv_udp_send_t *u, int status)
{
	(void)status;
	struct dns_write *w = u->data;
	free(w->buf);
	free(w);
}

static void tcp_written(uv_write_t *req, int status)
{
	struct dns_write *w = req->data;
	if (status < 0 && w->conn)
		tcp_close(w->conn);
	free(w->buf);
	free(w);
}

/* Send the answer to the client (nothing when it is gone). */
static void dq_send(struct dns_query_state *dq)
{
	struct dns_server *s = dq->s;
	size_t cap = dq->tcp ? 65535 : 4096;
	size_t limit = dq->tcp ? 65535 : dq->q.edns ? (dq->q.udp_size < DNS_EDNS_UDP_SIZE ? dq->q.udp_size : DNS_EDNS_UDP_SIZE) : 512;
	uint8_t *buf = malloc(cap + 2);
	struct dns_write *w = calloc(1, sizeof(*w));
	if (!buf || !w)
		goto fail;
	int n;
	if (dq->malformed) {
		/* Header only: the question could not be read. */
		uint16_t f = DNS_FLAG_QR | DNS_FLAG_RA | (dq->raw_flags & DNS_FLAG_RD) | DNS_RCODE_FORMERR;
		memset(buf + 2, 0, DNS_HEADER_LEN);
		buf[2] = (uint8_t)(dq->raw_id >> 8);
		buf[3] = (uint8_t)dq->raw_id;
		buf[4] = (uint8_t)(f >> 8);
		buf[5] = (uint8_t)f;
		n = DNS_HEADER_LEN;
	} else {
		n = dnsmsg_build_answer(buf + 2, cap, limit, &dq->q, dq->rcode, dq->keep, dq->n_keep);
	}
	if (n < 0)
		goto fail;
	s->st.answered++;
	w->buf = buf;
	if (dq->tcp) {
		if (!dq->conn || dq->conn->closing)
			goto fail;
		buf[0] = (uint8_t)(n >> 8);
		buf[1] = (uint8_t)n;
		w->conn = dq->conn;
		w->w.data = w;
		uv_buf_t b = uv_buf_init((char *)buf, (unsigned)n + 2);
		if (uv_write(&w->w, (uv_stream_t *)&dq->conn->h, &b, 1, tcp_written) < 0)
			goto fail;
		return;
	}
	w->u.data = w;
	uv_buf_t b = uv_buf_init((char *)buf + 2, (unsigned)n);
	if (uv_udp_send(&w->u, &dq->l->h, &b, 1, (const struct sockaddr *)&dq->tuple.client, udp_sent) < 0)
		goto fail;
	return;
fail:
	free(buf);
	free(w);
}

/* The dns audit line is in the file (or cannot be): answer. */
static void dq_recorded(struct auditq_waiter *w, bool recorded)
{
	struct dns_query_state *dq = (struct dns_query_state *)((char *)w - offsetof(struct dns_query_state, recorded));
	dq->recording = false;
	if (dq->state == DQ_DONE) {
		dq_maybe_free(dq);
		return;
	}
	if (!recorded && !dq->s->ns->cfg.audit_failure_allow) {
		dq->n_keep = 0;
		dq->rcode = DNS_RCODE_SERVFAIL;
		dq->malformed = false;
	}
	if (dq->malformed || dq->q.q.wire_len)
		dq_send(dq);
	dq_finish(dq);
}

/* Audit the decision, then answer (dq_recorded). */
static void dq_decide(struct dns_query_state *dq, bool allow, enum reason reason, int rcode)
{
	struct dns_server *s = dq->s;
	struct netsup *ns = s->ns;
	dq_stop_upstream(dq);
	dq->state = DQ_RECORD;
	dq->allow = allow;
	dq->reason = reason;
	dq->rcode = rcode;
	if (!allow)
		dq->n_keep = 0;
	json_t *o = json_object();
	json_object_set_new(o, "decision", json_string(allow ? "allow" : "deny"));
	json_object_set_new(o, "reason", json_string(reason_word(reason)));
	if (dq->audit_mode)
		json_object_set_new(o, "mode", json_string("audit"));
	audit_line_identity(o, dq->id, FLOW_SOURCE_NONE);
	char tb[16];
	json_t *q = json_object();
	json_object_set_new(q, "name", dq->malformed ? json_null() : json_string(dq->q.q.name));
	json_object_set_new(q, "type", dq->malformed ? json_null()
						   : json_string(dnsmsg_type_word(dq->q.q.qtype, tb, sizeof(tb))));
	json_object_set_new(o, "query", q);
	json_object_set_new(o, "rcode", json_string(rcode_word(rcode)));
	struct netaddr got[DNSMSG_MAX_RR];
	size_t n_got = 0;
	json_t *cn = json_array();
	for (size_t i = 0; i < dq->n_keep; i++) {
		if (dq->keep[i].type == DNS_TYPE_CNAME)
			json_array_append_new(cn, json_string(dq->keep[i].target));
		else
			got[n_got++] = dq->keep[i].addr;
	}
	json_object_set_new(o, "answers", addr_array(got, n_got));
	if (json_array_size(cn))
		json_object_set_new(o, "cnames", cn);
	else
		json_decref(cn);
	if (dq->n_removed)
		json_object_set_new(o, "removed_blocked", addr_array(dq->removed, dq->n_removed));
	json_object_set_new(o, "policy_generation", json_integer((json_int_t)policystore_generation(ns->policy)));
	char ip[INET6_ADDRSTRLEN];
	struct netaddr ca;
	json_t *cl = json_object();
	if (netaddr_from_sockaddr((const struct sockaddr *)&dq->tuple.client, &ca) == 0) {
		json_object_set_new(cl, "ip", json_string(netaddr_format(&ca, ip, sizeof(ip))));
		uint16_t port = dq->tuple.client.ss_family == AF_INET
					? ((struct sockaddr_in *)&dq->tuple.client)->sin_port
					: ((struct sockaddr_in6 *)&dq->tuple.client)->sin6_port;
		json_object_set_new(cl, "port", json_integer(ntohs(port)));
	}
	json_object_set_new(cl, "transport", json_string(dq->tcp ? "tcp" : "udp"));
	json_object_set_new(o, "client", cl);
	metrics_decision(&ns->sh->metrics, allow, reason, dq->id ? dq->id->source : FLOW_SOURCE_NONE);
	dq->recorded.cb = dq_recorded;
	dq->recording = true;
	netsup_audit_decision(ns, "dns", o, &dq->recorded);
}

/* ---------- the upstream answer ---------- */

static bool in_chain(char (*chain)[DNS_NAME_TEXT_MAX], size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(chain[i], name) == 0)
			return true;
	return false;
}

static void sockaddr_of(const struct netaddr *a, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (a->family == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
		s4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, a->a, 4);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, a->a, 16);
	}
}

/* Keep the question's CNAME chain and its addresses of the asked type,
 * minus those in blocked ranges; record what is kept. */
static void dq_filter(struct dns_query_state *dq)
{
	struct dns_answer *a = dq->ans;
	char chain[DNS_MAX_CHAIN + 1][DNS_NAME_TEXT_MAX];
	size_t n_chain = 1;
	strscpy(chain[0], dq->q.q.name, sizeof(chain[0]));
	bool used[DNSMSG_MAX_RR] = { false };
	dq->n_keep = 0;
	/* CNAMEs first, in any order: follow the chain as far as it goes. */
	for (bool grew = true; grew && n_chain <= DNS_MAX_CHAIN;) {
		grew = false;
		for (size_t i = 0; i < a->n_an && n_chain <= DNS_MAX_CHAIN; i++) {
			const struct dns_rr *rr = &a->an[i];
			if (used[i] || rr->type != DNS_TYPE_CNAME || !in_chain(chain, n_chain, rr->name))
				continue;
			used[i] = true;
			dq->keep[dq->n_keep++] = *rr;
			if (!in_chain(chain, n_chain, rr->target)) {
				strscpy(chain[n_chain++], rr->target, sizeof(chain[0]));
				grew = true;
			}
		}
	}
	uint16_t want = dq->q.q.qtype;
	for (size_t i = 0; i < a->n_an; i++) {
		const struct dns_rr *rr = &a->an[i];
		if (used[i] || rr->type != want || (want != DNS_TYPE_A && want != DNS_TYPE_AAAA) ||
		    !in_chain(chain, n_chain, rr->name))
			continue;
		if (netpolicy_ip_blocked(&rr->addr, NULL)) {
			dq->removed[dq->n_removed++] = rr->addr;
			dq->s->st.addrs_removed++;
			continue;
		}
		dq->keep[dq->n_keep++] = *rr;
		struct sockaddr_storage ss;
		sockaddr_of(&rr->addr, &ss);
		uint32_t ttl = rr->ttl < DNS_REC_MIN_TTL_S ? DNS_REC_MIN_TTL_S
			       : rr->ttl > DNS_REC_MAX_TTL_S ? DNS_REC_MAX_TTL_S : rr->ttl;
		dnsrec_set_now(dq->s->rec, uv_now(dq->s->loop));
		dnsrec_add(dq->s->rec, dq->q.q.name, (struct sockaddr *)&ss, ttl);
		if (strcmp(rr->name, dq->q.q.name) != 0)
			dnsrec_add(dq->s->rec, rr->name, (struct sockaddr *)&ss, ttl);
	}
}

static void upstream_failed(struct dns_query_state *dq, const char *why)
{
	struct dns_server *s = dq->s;
	uint64_t held;
	if (log_ratelimit_ok(&s->upstream_log, uv_now(s->loop), 10000, &held))
		log_warn("dns: upstream %s: %s for %s (%llu more since the last warning)", s->upstream_text, why,
			 dq->q.q.name, (unsigned long long)held);
	dq_decide(dq, false, REASON_DNS_UPSTREAM_FAILED, DNS_RCODE_SERVFAIL);
}

static void up_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	struct dns_query_state *dq = h->data;
	struct dns_server *s = dq->s;
	if (s->rbuf_busy) {
		*buf = uv_buf_init(NULL, 0);
		return;
	}
	s->rbuf_busy = true;
	*buf = uv_buf_init((char *)s->rbuf, sizeof(s->rbuf));
}

static void tcp_up_start(struct dns_query_state *dq);
static void up_timeout(uv_timer_t *t);

/* An upstream answer (UDP datagram or TCP message). */
static void up_answer(struct dns_query_state *dq, const uint8_t *msg, size_t len, bool tcp)
{
	if (!dq->ans && !(dq->ans = malloc(sizeof(*dq->ans)))) {
		upstream_failed(dq, "out of memory");
		return;
	}
	int r = dnsmsg_parse_answer(msg, len, dq->ans);
	/* Over UDP, not ours (an id or question that does not match): keep
	 * waiting. Over TCP the connection is ours: anything wrong fails. */
	if (r < 0 && r != -E2BIG) {
		uint16_t id, fl;
		if (tcp || (dnsmsg_header(msg, len, &id, &fl) == 0 && id == dq->up_id))
			upstream_failed(dq, "malformed answer");
		return;
	}
	if (dq->ans->id != dq->up_id || strcmp(dq->ans->q.name, dq->q.q.name) != 0 ||
	    dq->ans->q.qtype != dq->q.q.qtype || dq->ans->q.qclass != dq->q.q.qclass) {
		if (tcp)
			upstream_failed(dq, "answer to another question");
		return;
	}
	if (r == -E2BIG) {
		upstream_failed(dq, "too many answer records");
		return;
	}
	if (dq->ans->flags & DNS_FLAG_TC) {
		if (tcp)
			upstream_failed(dq, "truncated answer over TCP");
		else
			tcp_up_start(dq); /* the whole answer over TCP */
		return;
	}
	int rcode = DNS_RCODE(dq->ans->flags);
	dq_filter(dq);
	dq_decide(dq, true, dq->reason == REASON_OK ? REASON_ALLOWED : dq->reason, rcode);
}

static void up_read(uv_udp_t *h, ssize_t nread, const uv_buf_t *buf, const struct sockaddr *from,
		    unsigned flags)
{
	(void)from;
	struct dns_query_state *dq = h->data;
	struct dns_server *s = dq->s;
	if (buf->base)
		s->rbuf_busy = false;
	if (nread <= 0 || dq->state != DQ_UPSTREAM || (flags & UV_UDP_PARTIAL))
		return;
	up_answer(dq, (const uint8_t *)buf->base, (size_t)nread, false);
}

/* ---------- the upstream over TCP (after a truncated UDP answer) ---------- */

static void tcp_up_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	struct dns_query_state *dq = h->data;
	*buf = uv_buf_init((char *)dq->tbuf + dq->tlen, (unsigned)(2 + 65535 - dq->tlen));
}

static void tcp_up_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	(void)buf;
	struct dns_query_state *dq = st->data;
	if (dq->state != DQ_UPSTREAM)
		return;
	if (nread < 0) {
		upstream_failed(dq, nread == UV_EOF ? "TCP closed before the answer" : uv_strerror((int)nread));
		return;
	}
	dq->tlen += (size_t)nread;
	if (dq->tlen < 2)
		return;
	size_t ml = (size_t)dq->tbuf[0] << 8 | dq->tbuf[1];
	if (dq->tlen >= 2 + ml)
		up_answer(dq, dq->tbuf + 2, ml, true);
}

static void tcp_up_written(uv_write_t *w, int status)
{
	struct dns_query_state *dq = w->data;
	if (status < 0 && dq->state == DQ_UPSTREAM)
		upstream_failed(dq, uv_strerror(status));
}

static void tcp_up_connected(uv_connect_t *c, int status)
{
	struct dns_query_state *dq = c->data;
	if (dq->state != DQ_UPSTREAM)
		return;
	if (status < 0) {
		upstream_failed(dq, uv_strerror(status));
		return;
	}
	dq->tw.data = dq;
	uv_buf_t b = uv_buf_init((char *)dq->tq, (unsigned)dq->tq_len);
	int r = uv_write(&dq->tw, (uv_stream_t *)&dq->tup, &b, 1, tcp_up_written);
	if (r == 0)
		r = uv_read_start((uv_stream_t *)&dq->tup, tcp_up_alloc, tcp_up_read);
	if (r < 0)
		upstream_failed(dq, uv_strerror(r));
}

static void tcp_up_start(struct dns_query_state *dq)
{
	struct dns_server *s = dq->s;
	if (dq->up_open) {
		dq->up_open = false;
		uv_close((uv_handle_t *)&dq->up, dq_handle_closed);
	}
	free(dq->ans);
	dq->ans = NULL;
	dq->tbuf = malloc(2 + 65535);
	if (!dq->tbuf || getrandom(&dq->up_id, sizeof(dq->up_id), 0) != sizeof(dq->up_id)) {
		upstream_failed(dq, "no memory or randomness");
		return;
	}
	int n = dnsmsg_build_query(dq->tq + 2, sizeof(dq->tq) - 2, dq->up_id, &dq->q.q);
	if (n < 0) {
		upstream_failed(dq, "query too long");
		return;
	}
	dq->tq[0] = (uint8_t)(n >> 8);
	dq->tq[1] = (uint8_t)n;
	dq->tq_len = (size_t)n + 2;
	uv_tcp_init(s->loop, &dq->tup);
	dq->tup.data = dq;
	dq->tup_open = true;
	dq->handles++;
	dq->tconn.data = dq;
	int r = uv_tcp_connect(&dq->tconn, &dq->tup, (const struct sockaddr *)&s->upstream, tcp_up_connected);
	if (r < 0) {
		upstream_failed(dq, uv_strerror(r));
		return;
	}
	/* a new timeout for the TCP exchange */
	uv_timer_start(&dq->timer, up_timeout, s->ns->cfg.dns_timeout_ms, 0);
}

static void up_timeout(uv_timer_t *t)
{
	struct dns_query_state *dq = t->data;
	if (dq->state != DQ_UPSTREAM)
		return;
	dq->s->st.upstream_timeouts++;
	upstream_failed(dq, "no answer in time");
}

static void dq_forward(struct dns_query_state *dq)
{
	struct dns_server *s = dq->s;
	dq->state = DQ_UPSTREAM;
	dq->keep = calloc(DNSMSG_MAX_RR, sizeof(*dq->keep));
	uint8_t q[DNS_HEADER_LEN + DNS_NAME_MAX + 4 + 11];
	if (!dq->keep || getrandom(&dq->up_id, sizeof(dq->up_id), 0) != sizeof(dq->up_id)) {
		upstream_failed(dq, "no memory or randomness");
		return;
	}
	int n = dnsmsg_build_query(q, sizeof(q), dq->up_id, &dq->q.q);
	uv_timer_init(s->loop, &dq->timer);
	dq->timer.data = dq;
	dq->timer_open = true;
	dq->handles++;
	uv_udp_init(s->loop, &dq->up);
	dq->up.data = dq;
	dq->up_open = true;
	dq->handles++;
	/* A fresh socket: the kernel picks a random source port; connected, it
	 * only ever reads the upstream's datagrams. */
	int r = n < 0 ? n : uv_udp_connect(&dq->up, (const struct sockaddr *)&s->upstream);
	if (r == 0)
		r = uv_udp_recv_start(&dq->up, up_alloc, up_read);
	uv_buf_t b = uv_buf_init((char *)q, n > 0 ? (unsigned)n : 0);
	if (r == 0 && (r = uv_udp_try_send(&dq->up, &b, 1, NULL)) >= 0)
		r = 0;
	if (r < 0) {
		upstream_failed(dq, n < 0 ? "query too long" : uv_strerror(r));
		return;
	}
	uv_timer_start(&dq->timer, up_timeout, s->ns->cfg.dns_timeout_ms, 0);
}

/* ---------- deciding ---------- */

static void identity_done(const struct identity_result *res, void *data)
{
	struct dns_query_state *dq = data;
	struct dns_server *s = dq->s;
	const struct network_policy *np = policystore_network(s->ns->policy);
	dq->idreq = NULL;
	dq->id = res->id;
	dq->reason = res->reason;
	struct identity_strategy *st = s->ns->identity;
	if (dq->id && st && (!st->anchored || dq->id->anchor_epoch != st->anchor_epoch)) {
		/* resolved under an anchor that is gone now (as the proxy does) */
		dq_decide(dq, false, REASON_NOT_READY, DNS_RCODE_REFUSED);
		return;
	}
	if (res->reason != REASON_OK) {
		if (!(np && np->mode == NETPOL_AUDIT) || dq->malformed) {
			dq_decide(dq, false, res->reason, DNS_RCODE_REFUSED);
			return;
		}
		dq->audit_mode = true; /* audit mode: no identity, forwarded, logged */
	}
	if (dq->malformed) {
		dq_decide(dq, false, REASON_DNS_MALFORMED, DNS_RCODE_FORMERR);
		return;
	}
	const struct dns_question *q = &dq->q.q;
	if (DNS_OPCODE(dq->q.flags) != 0) {
		dq_decide(dq, false, REASON_DNS_TYPE_REFUSED, DNS_RCODE_NOTIMP);
		return;
	}
	if (q->qclass != DNS_CLASS_IN || !q->name[0]) {
		dq_decide(dq, false, REASON_DNS_TYPE_REFUSED, DNS_RCODE_REFUSED);
		return;
	}
	if (!np) {
		dq_decide(dq, false, REASON_POLICY_NOT_LOADED, DNS_RCODE_REFUSED);
		return;
	}
	if (dq->reason == REASON_OK && !netpolicy_name_may_allow(np, dq->id, q->name)) {
		dq_decide(dq, false, REASON_DNS_NO_RULE, DNS_RCODE_NXDOMAIN);
		return;
	}
	if (np->mode == NETPOL_AUDIT && dq->reason == REASON_OK) {
		/* netpolicy_name_may_allow is true in audit mode: would enforce
		 * mode have refused the name? (the rules with the mode flipped) */
		struct network_policy enforce = *np;
		enforce.mode = NETPOL_ENFORCE;
		if (!netpolicy_name_may_allow(&enforce, dq->id, q->name)) {
			dq->reason = REASON_DNS_NO_RULE;
			dq->audit_mode = true;
		}
	}
	switch (q->qtype) {
	case DNS_TYPE_A:
	case DNS_TYPE_AAAA:
	case DNS_TYPE_CNAME:
		dq_forward(dq);
		return;
	case DNS_TYPE_HTTPS:
	case DNS_TYPE_SVCB:
		dq_decide(dq, true, dq->reason == REASON_OK ? REASON_ALLOWED : dq->reason, DNS_RCODE_NOERROR);
		return;
	default:
		dq_decide(dq, false, REASON_DNS_TYPE_REFUSED, DNS_RCODE_REFUSED);
		return;
	}
}

/* A query arrived (msg is only valid during the call). NULL when dropped. */
static struct dns_query_state *dq_start(struct dns_server *s, const uint8_t *msg, size_t len,
					const struct proxy_flow *tuple, struct dns_udp_listener *l,
					struct dns_tcp *conn)
{
	struct netsup *ns = s->ns;
	uint16_t id, flags;
	if (dnsmsg_header(msg, len, &id, &flags) < 0 || (flags & DNS_FLAG_QR))
		return NULL; /* not even a header, or an answer: nothing to say */
	s->st.queries++;
	if (s->outstanding >= ns->cfg.dns_max_outstanding || s->closing) {
		s->st.dropped_busy++;
		uint64_t held;
		if (log_ratelimit_ok(&s->busy_log, uv_now(s->loop), 10000, &held))
			log_warn("dns: %zu queries in flight, dropping more (%llu dropped since the last warning)",
				 s->outstanding, (unsigned long long)held);
		return NULL;
	}
	struct dns_query_state *dq = calloc(1, sizeof(*dq));
	if (!dq)
		return NULL;
	dq->s = s;
	dq->tuple = *tuple;
	dq->l = l;
	dq->conn = conn;
	dq->tcp = conn != NULL;
	dq->raw_id = id;
	dq->raw_flags = flags;
	dq->malformed = dnsmsg_parse_query(msg, len, &dq->q) < 0;
	dq->next = s->queries;
	if (s->queries)
		s->queries->prev = dq;
	s->queries = dq;
	s->outstanding++;
	if (!ns->ready) {
		dq_decide(dq, false, netsup_not_ready_reason(ns), DNS_RCODE_REFUSED);
		return dq;
	}
	int r = identity_resolve(ns->identity, &dq->tuple, ns->cfg.identity_timeout_ms, identity_done, dq,
				 &dq->idreq);
	if (r < 0)
		dq_decide(dq, false, REASON_IDENTITY_UNAVAILABLE, DNS_RCODE_REFUSED);
	return dq;
}

/* ---------- UDP listener ---------- */

static void udp_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	struct dns_udp_listener *l = h->data;
	if (l->s->rbuf_busy) {
		*buf = uv_buf_init(NULL, 0);
		return;
	}
	l->s->rbuf_busy = true;
	*buf = uv_buf_init((char *)l->s->rbuf, sizeof(l->s->rbuf));
}

static void udp_read(uv_udp_t *h, ssize_t nread, const uv_buf_t *buf, const struct sockaddr *from,
		     unsigned flags)
{
	struct dns_udp_listener *l = h->data;
	if (buf->base)
		l->s->rbuf_busy = false;
	if (nread <= 0 || !from || (flags & UV_UDP_PARTIAL))
		return;
	struct proxy_flow t = { .proto = IPPROTO_UDP };
	memcpy(&t.client, from, from->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
	t.proxy = l->local;
	dq_start(l->s, (const uint8_t *)buf->base, (size_t)nread, &t, l, NULL);
}

/* ---------- TCP listener ---------- */

static void tcp_conn_closed(uv_handle_t *h)
{
	struct dns_tcp *c = h->data;
	if (--c->handles > 0)
		return;
	struct dns_server *s = c->s;
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->n_conns--;
	free(c->buf);
	free(c);
	server_maybe_free(s);
}

static void tcp_close(struct dns_tcp *c)
{
	if (c->closing)
		return;
	c->closing = true;
	if (c->busy) {
		c->busy->conn = NULL;
		c->busy = NULL;
	}
	uv_close((uv_handle_t *)&c->h, tcp_conn_closed);
	uv_close((uv_handle_t *)&c->idle, tcp_conn_closed);
}

static void tcp_idle(uv_timer_t *t) { tcp_close(t->data); }

/* Take the next whole message from the buffer, one at a time. */
static void tcp_continue(struct dns_tcp *c)
{
	if (c->closing || c->busy || c->len < 2)
		return;
	size_t ml = (size_t)c->buf[0] << 8 | c->buf[1];
	if (c->len < 2 + ml)
		return;
	if (ml < DNS_HEADER_LEN) {
		tcp_close(c);
		return;
	}
	struct dns_query_state *dq = dq_start(c->s, c->buf + 2, ml, &c->tuple, NULL, c);
	memmove(c->buf, c->buf + 2 + ml, c->len - 2 - ml);
	c->len -= 2 + ml;
	if (!dq) {
		tcp_close(c); /* busy or not a query: the client may retry */
		return;
	}
	if (dq->state != DQ_DONE)
		c->busy = dq;
	uv_timer_again(&c->idle);
}

static void tcp_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	struct dns_tcp *c = h->data;
	size_t room = 2 + 65535 - c->len;
	*buf = uv_buf_init((char *)c->buf + c->len, (unsigned)room);
}

static void tcp_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	(void)buf;
	struct dns_tcp *c = st->data;
	if (nread < 0) {
		tcp_close(c);
		return;
	}
	/* A full buffer gets a 0-byte read buffer next: libuv reports
	 * UV_ENOBUFS and the client is closed (it pipelined 64 KiB). */
	c->len += (size_t)nread;
	tcp_continue(c);
}

static void on_tcp_accept(uv_stream_t *server, int status)
{
	struct dns_server *s = server->data;
	if (status < 0)
		return;
	struct dns_tcp *c = calloc(1, sizeof(*c));
	if (c)
		c->buf = malloc(2 + 65535);
	if (!c || !c->buf) {
		free(c);
		return;
	}
	c->s = s;
	uv_tcp_init(s->loop, &c->h);
	uv_timer_init(s->loop, &c->idle);
	c->h.data = c->idle.data = c;
	c->handles = 2;
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->n_conns++;
	if (uv_accept(server, (uv_stream_t *)&c->h) < 0 || s->n_conns > DNS_MAX_TCP || s->closing) {
		tcp_close(c);
		return;
	}
	int len = sizeof(c->tuple.client);
	uv_tcp_getpeername(&c->h, (struct sockaddr *)&c->tuple.client, &len);
	len = sizeof(c->tuple.proxy);
	uv_tcp_getsockname(&c->h, (struct sockaddr *)&c->tuple.proxy, &len);
	c->tuple.proto = IPPROTO_TCP;
	uv_timer_start(&c->idle, tcp_idle, DNS_TCP_IDLE_MS, DNS_TCP_IDLE_MS);
	if (uv_read_start((uv_stream_t *)&c->h, tcp_alloc, tcp_read) < 0)
		tcp_close(c);
}

/* ---------- lifecycle ---------- */

int dns_new(struct netsup *ns, const char *resolv_conf, struct dns_server **out)
{
	struct dns_server *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->ns = ns;
	s->loop = ns->loop;
	s->rec = dnsrec_new(ns->cfg.dns_record_max);
	if (!s->rec) {
		free(s);
		return -ENOMEM;
	}
	char from_file[64];
	const char *up = ns->cfg.dns_upstream;
	if (!up) {
		FILE *f = fopen(resolv_conf, "re");
		char text[8192];
		size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
		if (f)
			fclose(f);
		text[n] = '\0';
		if (dns_upstream_from_resolv(text, from_file, sizeof(from_file)) < 0) {
			log_error("--dns-listen without --dns-upstream, and no usable nameserver in %s", resolv_conf);
			dnsrec_free(s->rec);
			free(s);
			return -ENOENT;
		}
		up = from_file;
	}
	if (hostport_with_default(up, 53, &s->upstream) < 0) {
		log_error("--dns-upstream %s: expected ADDR or ADDR:PORT ([v6]:PORT)", up);
		dnsrec_free(s->rec);
		free(s);
		return -EINVAL;
	}
	strscpy(s->upstream_text, up, sizeof(s->upstream_text));
	*out = s;
	return 0;
}

int dns_listen(struct dns_server *s, const char *addr)
{
	struct sockaddr_storage ss;
	if (netsup_parse_hostport(addr, &ss) < 0) {
		log_error("--dns-listen %s: expected ADDR:PORT (e.g. 127.0.0.1:53, [::1]:53)", addr);
		return -EINVAL;
	}
	if (s->n_udp >= DNS_MAX_LISTEN)
		return -E2BIG;
	struct dns_udp_listener *l = calloc(1, sizeof(*l));
	uv_tcp_t *t = calloc(1, sizeof(*t));
	if (!l || !t) {
		free(l);
		free(t);
		return -ENOMEM;
	}
	l->s = s;
	l->local = ss;
	uv_udp_init(s->loop, &l->h);
	l->h.data = l;
	uv_tcp_init(s->loop, t);
	t->data = s;
	s->udp[s->n_udp++] = l;
	s->tcp[s->n_tcp++] = t;
	s->handles_open += 2;
	unsigned v6only = ss.ss_family == AF_INET6;
	int r = uv_udp_bind(&l->h, (struct sockaddr *)&ss, v6only ? UV_UDP_IPV6ONLY : 0);
	if (r == 0)
		r = uv_udp_recv_start(&l->h, udp_alloc, udp_read);
	if (r == 0)
		r = uv_tcp_bind(t, (struct sockaddr *)&ss, v6only ? UV_TCP_IPV6ONLY : 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)t, 128, on_tcp_accept);
	if (r < 0) {
		log_error("dns: cannot listen on %s (UDP and TCP): %s", addr, uv_strerror(r));
		return r;
	}
	return 0;
}

void dns_close(struct dns_server *s)
{
	if (!s || s->closing)
		return;
	s->closing = true;
	for (size_t i = 0; i < s->n_udp; i++) {
		s->udp[i]->h.data = s;
		uv_close((uv_handle_t *)&s->udp[i]->h, server_handle_closed);
	}
	for (size_t i = 0; i < s->n_tcp; i++)
		uv_close((uv_handle_t *)s->tcp[i], server_handle_closed);
	for (struct dns_tcp *c = s->conns; c; c = c->next)
		tcp_close(c);
	for (struct dns_query_state *dq = s->queries, *n; dq; dq = n) {
		n = dq->next;
		dq_finish(dq);
	}
	server_maybe_free(s);
}

struct dnsrec *dns_records(struct dns_server *s)
{
	if (!s)
		return NULL;
	dnsrec_set_now(s->rec, uv_now(s->loop));
	return s->rec;
}

void dns_get_stats(const struct dns_server *s, struct dns_stats *out)
{
	if (s)
		*out = s->st;
	else
		memset(out, 0, sizeof(*out));
}
