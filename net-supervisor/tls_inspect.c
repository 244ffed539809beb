#include "net-supervisor/tls_inspect.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "common/log.h"
#include "common/netaddr.h"
#include "net-supervisor/audit_line.h"
#include "net-supervisor/relay.h"
#include "net-supervisor/credstore.h"
#include "net-supervisor/credsub.h"
#include "net-supervisor/flowpeek.h"
#include "net-supervisor/policystore.h"
#include "net-supervisor/tls_ca.h"
#include "net-supervisor/tls_h2.h"
#include "net-supervisor/tls_http.h"
#include "policy/credentials.h"
#include "policy/netpolicy.h"

#define TLS_CHUNK 16384
/* The client's first bytes held until its ClientHello is read: a hello
 * is one record in practice (flowpeek.h); more is not TLS we can carry. */
#define HELLO_MAX (FLOWPEEK_MAX + 4096)

struct tls_inspect {
	SSL *up, *cl;
	struct tls_http *http; /* the requests inside (tls_http.h) */
	struct tls_h2 *h2;     /* or, when the upstream selected h2, its streams (tls_h2.h) */
	bool up_done, cl_done, ending;
	bool blocked[2]; /* reading stopped for backpressure: [0] client, [1] upstream */
	/* before the client's session exists: its bytes so far, and its
	 * ALPN offer once read */
	char *hello;
	size_t hello_len;
	struct flowpeek fp;
	/* what the client is given by ALPN: what the upstream selected */
	struct tls_ca_alpn sel;
	/* the upstream handshake failed (upstream_cert_invalid or
	 * upstream_tls_failed): the client is answered 502 inside its TLS */
	enum reason up_fail;
};

struct twrite {
	uv_write_t w;
	struct side *dst;
	char buf[];
};

SSL_CTX *tls_inspect_upstream_ctx(const char *ca_file)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx)
		return NULL;
	bool ok = SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) &&
		  (ca_file ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL) == 1
			   : SSL_CTX_set_default_verify_paths(ctx) == 1);
	if (!ok) {
		unsigned long e = ERR_get_error();
		char why[256] = "unknown error";
		if (e)
			ERR_error_string_n(e, why, sizeof(why));
		ERR_clear_error();
		log_error("TLS inspection: cannot load the upstream trust store %s: %s",
			  ca_file ? ca_file : "(system default)", why);
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	return ctx;
}

void tls_inspect_free(struct conn *c)
{
	struct tls_inspect *t = c->tls;
	if (!t)
		return;
	tls_http_free(t->http); /* records the requests no answer came for */
	tls_h2_free(t->h2);
	SSL_free(t->up);
	SSL_free(t->cl);
	free(t->hello);
	free(t);
	c->tls = NULL;
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);
static void end_both(struct conn *c);
static int h2_out(struct conn *c);

static int side_idx(const struct conn *c, const struct side *s) { return s == &c->up; }

static void maybe_finish(struct conn *c)
{
	if (c->tls && c->tls->ending && c->client.tcp.write_queue_size == 0 && c->up.tcp.write_queue_size == 0)
		conn_close(c);
}

static void written(uv_write_t *w, int status)
{
	struct twrite *tw = w->data;
	struct side *dst = tw->dst;
	struct conn *c = dst->c;
	free(tw);
	if (c->state == C_CLOSING)
		return;
	if (status < 0) {
		conn_close(c);
		return;
	}
	struct tls_inspect *t = c->tls;
	int src = !side_idx(c, dst);
	struct side *s = dst->peer;
	if (t && !t->ending && t->blocked[src] && dst->tcp.write_queue_size <= c->ns->cfg.high_water / 2) {
		t->blocked[src] = false;
		if (uv_read_start((uv_stream_t *)&s->tcp, conn_alloc_pooled, read_cb) < 0)
			conn_close(c);
	}
	/* HTTP/2: what the sessions held back for the queue goes out now */
	if (t && t->h2 && !t->ending && c->state == C_RELAY && h2_out(c) != 0)
		end_both(c);
	maybe_finish(c);
}

/* What ssl has for the wire goes out on dst. */
static int flush(struct conn *c, SSL *ssl, struct side *dst)
{
	BIO *wb = SSL_get_wbio(ssl);
	size_t pending;
	while ((pending = BIO_ctrl_pending(wb)) > 0) {
		size_t n = pending < TLS_CHUNK * 4 ? pending : TLS_CHUNK * 4;
		struct twrite *tw = malloc(sizeof(*tw) + n);
		if (!tw)
			return -ENOMEM;
		int got = BIO_read(wb, tw->buf, (int)n);
		if (got <= 0) {
			free(tw);
			break;
		}
		tw->dst = dst;
		tw->w.data = tw;
		uv_buf_t b = uv_buf_init(tw->buf, (unsigned)got);
		int r = uv_write(&tw->w, (uv_stream_t *)&dst->tcp, &b, 1, written);
		if (r < 0) {
			free(tw);
			return r;
		}
	}
	(void)c;
	return 0;
}

/* Each request is its own decision, on the policy in force now: the flow
 * must still be allowed, then the endpoint's HTTP rules judge it. */
static struct netpol_http_decision http_decide(void *ctx, const char *method, const char *target, bool ws)
{
	struct conn *c = ctx;
	const struct network_policy *np = policystore_network(c->ns->policy);
	struct netpolicy_decision d = netpolicy_decide(np, c->id, c->host, c->port, c->have_chosen ? &c->chosen : NULL);
	if (!d.allow)
		return (struct netpol_http_decision){ .reason = d.reason };
	if (!d.endpoint) /* allowed by the policy's audit mode */
		return (struct netpol_http_decision){ .allow = true, .reason = REASON_ALLOWED, .audit_mode = d.audit_mode };
	return netpol_http_decide(&d.endpoint->http, method, target, ws);
}

static int http_forward(void *ctx, const char *buf, size_t len)
{
	struct conn *c = ctx;
	if (len == 0)
		return 0;
	if (SSL_write(c->tls->up, buf, (int)len) != (int)len)
		return -EIO;
	return flush(c, c->tls->up, &c->up);
}

static void http_record(void *ctx, const char *method, const char *target, int status,
			const struct netpol_http_decision *d)
{
	struct conn *c = ctx;
	if ((unsigned)d->reason < REASON__COUNT)
		c->ns->sh->metrics.http_requests[d->allow][d->reason]++;
	audit_line_http(c, method, target, status, d);
}

/* Credentials (policy/credentials.h, credsub.h): a placeholder is
 * swapped only for a credential whose binaries, ancestors and endpoints
 * match this flow, and whose source gives a secret now. */
struct cred_ctx {
	struct conn *c;
	const struct credential_set *set;
	struct credsub_cred *arr;
	bool unavailable;
	const char *unavailable_name; /* the credential whose source gave nothing */
};

static bool cred_permitted(void *ctx, const struct credsub_cred *sc)
{
	struct cred_ctx *x = ctx;
	const struct credential *cred = &x->set->v[sc - x->arr];
	struct conn *c = x->c;
	if (!credential_permits(cred, c->id, c->host, c->port, c->have_chosen ? &c->chosen : NULL))
		return false;
	const char *secret = credstore_secret(c->ns->creds, cred);
	if (!secret) {
		x->unavailable = true;
		x->unavailable_name = cred->name;
		return false;
	}
	x->arr[sc - x->arr].secret = secret;
	return true;
}

static int http_rewrite(void *ctx, const char *head, size_t len, char **out, size_t *out_len,
			struct netpol_http_decision *d)
{
	struct conn *c = ctx;
	const struct credential_set *set = policystore_credentials(c->ns->policy);
	size_t n = set ? set->n : 0;
	struct credsub_cred *arr = calloc(n ? n : 1, sizeof(*arr));
	if (!arr) {
		*d = (struct netpol_http_decision){ .reason = REASON_INTERNAL_ERROR };
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		arr[i] = (struct credsub_cred){ .name = set->v[i].name,
						.secret = "",
						.header = set->v[i].header,
						.format = set->v[i].header_format };
	struct cred_ctx x = { .c = c, .set = set, .arr = arr };
	struct credsub_result res;
	int r = credsub_head(head, len, arr, n, cred_permitted, &x, &res);
	const char *name = NULL;
	for (size_t i = 0; r == CREDSUB_OK && res.head && i < n; i++)
		if (arr[i].secret[0])
			name = set->v[i].name; /* the (last) credential spent, for the audit */
	if (r == CREDSUB_REFUSED)
		for (size_t i = 0; i < n; i++)
			if (strcmp(set->v[i].name, res.refused) == 0)
				name = set->v[i].name;
	free(arr);
	if (r == CREDSUB_OK && x.unavailable) {
		/* a header the proxy sets for this request, and its source gave
		 * nothing: refused rather than sent without it */
		credsub_result_done(&res);
		r = CREDSUB_REFUSED;
		name = x.unavailable_name;
	}
	if (r == CREDSUB_OK && res.head) {
		*out = res.head;
		*out_len = res.head_len;
		d->credential = name;
		return 1;
	}
	if (r == CREDSUB_OK)
		return 0;
	*d = (struct netpol_http_decision){
		.reason = r == CREDSUB_REFUSED ? (x.unavailable ? REASON_CREDENTIAL_UNAVAILABLE
								: REASON_CREDENTIAL_NOT_PERMITTED)
					       : REASON_HTTP_BAD_REQUEST,
		.rule = d->rule,
		/* an unknown name is the request's, not ours: not echoed */
		.credential = name,
	};
	return -1;
}

static const struct tls_http_ops http_ops = {
	.decide = http_decide, .forward = http_forward, .record = http_record, .rewrite = http_rewrite,
};

/* A request refused inside the TLS session: 403, 400 or (the upstream
 * handshake failed) 502 with the reason, then the connection ends. */
static void http_refuse(struct conn *c, int status, enum reason why, const char *rule)
{
	struct tls_inspect *t = c->tls;
	char body[512], msg[1024];
	const char *text = status == 403 ? "Forbidden" : status == 502 ? "Bad Gateway" : "Bad Request";
	int bl = snprintf(body, sizeof(body), "{\"error\":\"%s\",\"reason\":\"%s\",\"rule\":%s%s%s}\n", text,
			  reason_word(why), rule ? "\"" : "", rule ? rule : "null", rule ? "\"" : "");
	if (bl < 0 || (size_t)bl >= sizeof(body))
		bl = 0;
	int n = snprintf(msg, sizeof(msg),
			 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
			 "Connection: close\r\nX-Tether-Reason: %s\r\n\r\n%.*s",
			 status, text, bl, reason_word(why), bl, body);
	if (n > 0 && (size_t)n < sizeof(msg) && SSL_write(t->cl, msg, n) == n)
		flush(c, t->cl, &c->client);
	end_both(c);
}

/* Move the plaintext `from` has to the other session (dst its wire side):
 * the client's through the request gate, the server's as it comes (its
 * statuses noted for the audit). 0, 1 when `from` was closed
 * (close_notify) or the connection is being ended, -1 on an error. */
static int pump(struct conn *c, bool from_client)
{
	struct tls_inspect *t = c->tls;
	SSL *from = from_client ? t->cl : t->up, *to = from_client ? t->up : t->cl;
	struct side *src = from_client ? &c->client : &c->up, *dst = from_client ? &c->up : &c->client;
	char buf[TLS_CHUNK];
	for (;;) {
		int n = SSL_read(from, buf, sizeof(buf));
		if (n > 0 && t->h2) {
			if (tls_h2_recv(t->h2, from_client, buf, (size_t)n) < 0)
				return -1;
			continue;
		}
		if (n > 0) {
			if (from_client) {
				enum tls_http_verdict v = tls_http_client(t->http, buf, (size_t)n);
				if (v == TLS_HTTP_DENIED || v == TLS_HTTP_BAD) {
					const struct netpol_http_decision *d = tls_http_denial(t->http);
					http_refuse(c, v == TLS_HTTP_DENIED ? 403 : 400, d->reason, d->rule);
					return 1;
				}
				if (v != TLS_HTTP_OK)
					return -1;
			} else {
				tls_http_server(t->http, buf, (size_t)n);
				if (SSL_write(to, buf, n) != n || flush(c, to, dst) < 0)
					return -1;
			}
			continue;
		}
		int e = SSL_get_error(from, n);
		if (flush(c, from, src) < 0)
			return -1;
		if (e == SSL_ERROR_WANT_READ)
			break;
		ERR_clear_error();
		if (e == SSL_ERROR_ZERO_RETURN && !from_client && t->h2) {
			/* the server closed: its answers here still go out */
			uv_read_stop((uv_stream_t *)&c->up.tcp);
			tls_h2_upstream_closed(t->h2);
			break;
		}
		return e == SSL_ERROR_ZERO_RETURN ? 1 : -1;
	}
	if (t->h2) {
		int r = h2_out(c);
		if (r != 0)
			return r;
	}
	int si = side_idx(c, src);
	if (!t->blocked[si] && dst->tcp.write_queue_size > c->ns->cfg.high_water) {
		t->blocked[si] = true;
		uv_read_stop((uv_stream_t *)&src->tcp);
	}
	return 0;
}

/* HTTP/2: what each session has to send, through its TLS session, while
 * its side's write queue is under --high-water (the rest stays in the
 * session until written() calls again). 0, 1 when both sessions are done,
 * -1 on an error. */
static int h2_out(struct conn *c)
{
	struct tls_inspect *t = c->tls;
	for (int i = 0; i < 2; i++) {
		bool to_client = i == 0;
		SSL *to = to_client ? t->cl : t->up;
		struct side *dst = to_client ? &c->client : &c->up;
		while (dst->tcp.write_queue_size <= c->ns->cfg.high_water) {
			const uint8_t *data;
			ssize_t n = tls_h2_send(t->h2, to_client, &data);
			if (n < 0)
				return -1;
			if (n == 0)
				break;
			if (SSL_write(to, data, (int)n) != (int)n || flush(c, to, dst) < 0)
				return -1;
		}
	}
	return tls_h2_done(t->h2) ? 1 : 0;
}

/* Both directions, as far as each can go now. */
static void pump_all(struct conn *c)
{
	struct tls_inspect *t = c->tls;
	if (!t->cl_done || t->ending)
		return;
	int a = pump(c, true);
	int b = a == 0 && !t->ending && !t->up_fail ? pump(c, false) : 0;
	if (a != 0 || b != 0)
		end_both(c);
}

/* One side closed (or failed): say close_notify to the sessions that are
 * up, write out what is queued, then close. */
static void end_both(struct conn *c)
{
	struct tls_inspect *t = c->tls;
	if (t->ending)
		return;
	t->ending = true;
	uv_read_stop((uv_stream_t *)&c->client.tcp);
	uv_read_stop((uv_stream_t *)&c->up.tcp);
	if (t->cl_done) {
		SSL_shutdown(t->cl);
		flush(c, t->cl, &c->client);
	}
	if (t->up_done) {
		SSL_shutdown(t->up);
		flush(c, t->up, &c->up);
	}
	ERR_clear_error();
	maybe_finish(c);
}

static void client_handshake(struct conn *c)
{
	struct tls_inspect *t = c->tls;
	int r = SSL_do_handshake(t->cl);
	int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(t->cl, r);
	if (flush(c, t->cl, &c->client) < 0) {
		conn_close(c);
		return;
	}
	if (r == 1) {
		t->cl_done = true;
		bool h2 = t->sel.len == 3 && memcmp(t->sel.proto, "\x02h2", 3) == 0;
		if (t->up_fail && !h2) {
			http_refuse(c, 502, t->up_fail, NULL);
			return;
		}
		if (h2) {
			t->h2 = tls_h2_new(&http_ops, c, &c->ns->sh->relay_held);
			if (!t->h2) {
				end_both(c);
				return;
			}
			if (t->up_fail)
				tls_h2_refuse_all(t->h2, t->up_fail);
		}
		pump_all(c);
		return;
	}
	if (e == SSL_ERROR_WANT_READ)
		return;
	unsigned long err = ERR_peek_error();
	char why[256] = "closed";
	if (err)
		ERR_error_string_n(err, why, sizeof(why));
	ERR_clear_error();
	log_info("TLS inspection: the client's handshake for %s failed: %s (does it trust the sandbox CA?)",
		 c->host, why);
	c->ns->sh->metrics.tls_errors[REASON_CLIENT_TLS_FAILED]++;
	audit_line_error(c, REASON_CLIENT_TLS_FAILED, 0);
	end_both(c);
}

/* The upstream is settled (its session up, or failed): terminate the
 * client's TLS, giving it by ALPN what the upstream selected. */
static void client_begin(struct conn *c)
{
	struct tls_inspect *t = c->tls;
	SSL_CTX *sctx = tls_ca_server_ctx(c->ns->tls_ca, c->host);
	t->cl = sctx ? SSL_new(sctx) : NULL;
	SSL_CTX_free(sctx);
	BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
	if (!t->cl || !rb || !wb) {
		BIO_free(rb);
		BIO_free(wb);
		conn_close(c);
		return;
	}
	SSL_set_bio(t->cl, rb, wb);
	SSL_set_accept_state(t->cl);
	tls_ca_set_alpn(t->cl, &t->sel);
	t->http = tls_http_new(&http_ops, c);
	if (!t->http) {
		conn_close(c);
		return;
	}
	BIO_write(rb, t->hello, (int)t->hello_len);
	free(t->hello);
	t->hello = NULL;
	t->hello_len = 0;
	client_handshake(c);
}

/* Give the client, by ALPN, the protocol name p (n bytes) if it offered it. */
static void offer_client(struct tls_inspect *t, const unsigned char *p, unsigned n)
{
	t->sel.len = 0;
	if (!n || n + 1 > sizeof(t->sel.proto))
		return;
	for (size_t q = 0; q < t->fp.alpn_len; q += 1 + t->fp.alpn[q])
		if (t->fp.alpn[q] == n && memcmp(t->fp.alpn + q + 1, p, n) == 0) {
			t->sel.proto[0] = (unsigned char)n;
			memcpy(t->sel.proto + 1, p, n);
			t->sel.len = n + 1;
			return;
		}
}

/* The upstream handshake failed: audited with the CONNECT's 502; the
 * client's TLS is still terminated (offering http/1.1 if it did, else h2:
 * each stream answered 502) so that it reads the 502 and its reason;
 * nothing of the server is relayed. */
static void upstream_failed(struct conn *c, enum reason why)
{
	struct tls_inspect *t = c->tls;
	t->up_fail = why;
	uv_read_stop((uv_stream_t *)&c->up.tcp);
	c->ns->sh->metrics.tls_errors[why]++;
	audit_line_error(c, why, 502);
	offer_client(t, (const unsigned char *)"http/1.1", 8);
	if (!t->sel.len)
		offer_client(t, (const unsigned char *)"h2", 2);
	client_begin(c);
}

static void upstream_handshake(struct conn *c)
{
	struct tls_inspect *t = c->tls;
	int r = SSL_do_handshake(t->up);
	int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(t->up, r);
	if (flush(c, t->up, &c->up) < 0) {
		conn_close(c);
		return;
	}
	if (r == 1) {
		t->up_done = true;
		c->ns->sh->metrics.tls_inspected++;
		const unsigned char *p = NULL;
		unsigned n = 0;
		SSL_get0_alpn_selected(t->up, &p, &n);
		offer_client(t, p, n);
		client_begin(c);
		return;
	}
	if (e == SSL_ERROR_WANT_READ)
		return;
	long v = SSL_get_verify_result(t->up);
	enum reason why = v != X509_V_OK ? REASON_UPSTREAM_CERT_INVALID : REASON_UPSTREAM_TLS_FAILED;
	unsigned long err = ERR_peek_error();
	char what[256] = "closed";
	if (err)
		ERR_error_string_n(err, what, sizeof(what));
	ERR_clear_error();
	log_info("TLS inspection: %s:%u: %s (%s)", c->host, c->port,
		 v != X509_V_OK ? X509_verify_cert_error_string(v) : what, reason_word(why));
	upstream_failed(c, why);
}

/* The protocols inspection carries (tls_inspect.h). */
static bool carried(const uint8_t *p, size_t n)
{
	return (n == 8 && memcmp(p, "http/1.1", 8) == 0) || (n == 2 && memcmp(p, "h2", 2) == 0);
}

/* The client's ClientHello is in (or what came is not one): TLS to the
 * real server, offering what the client offered that inspection carries.
 * SNI and the host-name check use the name the client sent the CONNECT
 * for (an address literal is checked as an IP SAN). */
static void upstream_begin(struct conn *c)
{
	struct tls_inspect *t = c->tls;
	BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
	t->up = SSL_new(c->ns->tls_upstream);
	if (!t->up || !rb || !wb) {
		BIO_free(rb);
		BIO_free(wb);
		conn_close(c);
		return;
	}
	SSL_set_bio(t->up, rb, wb);
	SSL_set_connect_state(t->up);
	unsigned char offer[FLOWPEEK_ALPN_MAX];
	size_t on = 0;
	for (size_t q = 0; q < t->fp.alpn_len; q += 1 + t->fp.alpn[q])
		if (carried(t->fp.alpn + q + 1, t->fp.alpn[q])) {
			memcpy(offer + on, t->fp.alpn + q, 1 + t->fp.alpn[q]);
			on += 1 + t->fp.alpn[q];
		}
	struct netaddr lit;
	X509_VERIFY_PARAM *vp = SSL_get0_param(t->up);
	bool ok = on == 0 || SSL_set_alpn_protos(t->up, offer, (unsigned)on) == 0;
	if (netaddr_parse(c->host, &lit) == 0) {
		ok = ok && X509_VERIFY_PARAM_set1_ip_asc(vp, c->host) == 1; /* no SNI for an address */
	} else {
		X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		ok = ok && SSL_set_tlsext_host_name(t->up, c->host) == 1 && SSL_set1_host(t->up, c->host) == 1;
	}
	if (!ok) {
		ERR_clear_error();
		audit_line_error(c, REASON_INTERNAL_ERROR, 0);
		end_both(c);
		return;
	}
	c->up.reading = true;
	if (uv_read_start((uv_stream_t *)&c->up.tcp, conn_alloc_pooled, read_cb) < 0) {
		conn_close(c);
		return;
	}
	upstream_handshake(c);
}

/* Client bytes before its session exists: held until the ClientHello is
 * read. Anything that is not a ClientHello goes to the upstream offering
 * nothing, then fails the client's handshake (client_tls_failed). */
static void hello_bytes(struct conn *c, const char *buf, size_t n)
{
	struct tls_inspect *t = c->tls;
	if (t->up) { /* the upstream handshake is under way: the client waits for it */
		if (t->hello_len + n > HELLO_MAX) {
			end_both(c);
			return;
		}
	}
	if (n) {
		char *b = realloc(t->hello, t->hello_len + n);
		if (!b) {
			conn_close(c);
			return;
		}
		memcpy(b + t->hello_len, buf, n);
		t->hello = b;
		t->hello_len += n;
	}
	if (t->up)
		return;
	enum flowpeek_kind k = flowpeek_parse((const uint8_t *)t->hello, t->hello_len, &t->fp);
	if (k == FLOWPEEK_NEED_MORE)
		return;
	upstream_begin(c);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct side *s = st->data;
	struct conn *c = s->c;
	struct tls_inspect *t = c->tls;
	bool up = s == &c->up;
	bool live = t && c->state == C_RELAY && !t->ending;
	if (nread > 0 && live) {
		c->last_activity = uv_now(c->ns->loop);
		if (!up && !t->cl)
			hello_bytes(c, buf->base, (size_t)nread);
		else
			BIO_write(SSL_get_rbio(up ? t->up : t->cl), buf->base, (int)nread);
	}
	if (buf->base)
		bufpool_put(&c->ns->pool, buf->base);
	if (!live || c->state != C_RELAY || t->ending)
		return;
	if (nread < 0) {
		if (up && !t->up_done && !t->up_fail) {
			/* the server hung up during the handshake */
			upstream_handshake(c);
			if (!t->up_done && !t->up_fail && !t->ending && c->state == C_RELAY)
				upstream_failed(c, REASON_UPSTREAM_TLS_FAILED);
			return;
		}
		if (!up && !t->cl_done) {
			if (t->cl)
				client_handshake(c);
			if (!t->ending && c->state == C_RELAY) {
				c->ns->sh->metrics.tls_errors[REASON_CLIENT_TLS_FAILED]++;
				audit_line_error(c, REASON_CLIENT_TLS_FAILED, 0);
				end_both(c);
			}
			return;
		}
		if (up && t->h2 && t->cl_done) {
			/* HTTP/2: what the server already answered still goes to
			 * the client, at the client's pace; then the end */
			pump_all(c);
			if (t->ending || c->state != C_RELAY)
				return;
			uv_read_stop((uv_stream_t *)&c->up.tcp);
			tls_h2_upstream_closed(t->h2);
			if (h2_out(c) != 0)
				end_both(c);
			return;
		}
		pump_all(c);
		end_both(c);
		return;
	}
	if (nread == 0)
		return;
	if (up) {
		if (!t->up_done && !t->up_fail)
			upstream_handshake(c);
		else if (t->cl_done)
			pump_all(c);
	} else if (t->cl && !t->cl_done) {
		client_handshake(c);
	} else if (t->cl_done) {
		pump_all(c);
	}
}

void tls_inspect_start(struct conn *c)
{
	struct netsup *ns = c->ns;
	if (!ns->tls_ca || !ns->tls_upstream) {
		ns->sh->metrics.tls_errors[REASON_TLS_INSPECT_UNAVAILABLE]++;
		audit_line_error(c, REASON_TLS_INSPECT_UNAVAILABLE, 502);
		conn_respond(c, 502, REASON_TLS_INSPECT_UNAVAILABLE);
		return;
	}
	struct tls_inspect *t = calloc(1, sizeof(*t));
	if (!t) {
		audit_line_error(c, REASON_INTERNAL_ERROR, 502);
		conn_respond(c, 502, REASON_INTERNAL_ERROR);
		return;
	}
	c->tls = t;
	/* bytes that came with the CONNECT head are the client's first TLS */
	t->hello = c->early;
	t->hello_len = c->early_len;
	c->early = NULL;
	c->early_len = 0;
	static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	char *b = strdup(ok);
	if (!b || relay_send(&c->client, b, sizeof(ok) - 1, BUF_MALLOC) < 0) {
		conn_close(c);
		return;
	}
	c->state = C_RELAY;
	c->counted_in |= CONN_IN_RELAYING;
	ns->sh->n_relaying++;
	c->last_activity = uv_now(ns->loop);
	uv_timer_stop(&c->timer);
	uv_timer_start(&c->timer, relay_idle_check, ns->cfg.idle_timeout_ms, 0);
	c->client.reading = true;
	if (uv_read_start((uv_stream_t *)&c->client.tcp, conn_alloc_pooled, read_cb) < 0) {
		conn_close(c);
		return;
	}
	if (t->hello_len)
		hello_bytes(c, NULL, 0);
}
