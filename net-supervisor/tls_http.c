#include "net-supervisor/tls_http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>
#include <sodium.h>

#define HEAD_MAX (64 * 1024)
#define TARGET_MAX 8192
#define PENDING_MAX 64

struct pending {
	char method[24];
	char *target;
	char rule[160]; /* d.rule copied: a reload may free the policy before the answer */
	char credential[72];
	struct netpol_http_decision d;
};

enum { EV_NONE, EV_HEADERS, EV_DONE };

struct tls_http {
	const struct tls_http_ops *ops;
	void *ctx;
	http_parser req, resp;
	bool raw;        /* an allowed upgrade: opaque bytes from now on */
	bool in_body;    /* the current request is decided: its bytes pass */
	bool resp_off;   /* the answers stopped parsing (an upgrade, an error) */
	int event;
	/* the request being read */
	char *newhead; /* the rewritten head of the current request, or NULL */
	size_t newhead_len;
	size_t skip;   /* leading buffered bytes replaced by newhead: dropped, not passed on */
	char target[TARGET_MAX + 1];
	size_t target_len;
	bool target_long;
	char field[16], upgrade[32];
	size_t field_len, upgrade_len;
	bool field_upgrade, in_value;
	/* client bytes not yet passed on; the parser has seen `parsed` of them */
	char *buf;
	size_t len, cap, parsed;
	/* decided, waiting for their answers (FIFO) */
	struct pending q[PENDING_MAX];
	size_t q_head, q_n;
	struct netpol_http_decision denial;
};

static int req_url(http_parser *p, const char *at, size_t n)
{
	struct tls_http *h = p->data;
	if (h->target_len + n > TARGET_MAX) {
		h->target_long = true;
		return 0;
	}
	memcpy(h->target + h->target_len, at, n);
	h->target_len += n;
	h->target[h->target_len] = '\0';
	return 0;
}

static int req_field(http_parser *p, const char *at, size_t n)
{
	struct tls_http *h = p->data;
	if (h->in_value) {
		h->in_value = false;
		h->field_len = 0;
	}
	for (size_t i = 0; i < n; i++)
		if (h->field_len < sizeof(h->field) - 1)
			h->field[h->field_len++] = at[i];
		else
			h->field_len = sizeof(h->field); /* too long to be "upgrade" */
	return 0;
}

static int req_value(http_parser *p, const char *at, size_t n)
{
	struct tls_http *h = p->data;
	if (!h->in_value) {
		h->in_value = true;
		h->field_upgrade = h->field_len == 7 && strncasecmp(h->field, "upgrade", 7) == 0;
		if (h->field_upgrade)
			h->upgrade_len = 0;
	}
	for (size_t i = 0; h->field_upgrade && i < n && h->upgrade_len < sizeof(h->upgrade) - 1; i++)
		h->upgrade[h->upgrade_len++] = at[i];
	h->upgrade[h->upgrade_len] = '\0';
	return 0;
}

static int req_begin(http_parser *p)
{
	struct tls_http *h = p->data;
	h->target_len = 0;
	h->target[0] = '\0';
	h->target_long = false;
	h->field_len = h->upgrade_len = 0;
	h->upgrade[0] = '\0';
	h->in_value = false;
	return 0;
}

static int req_headers(http_parser *p)
{
	struct tls_http *h = p->data;
	h->event = EV_HEADERS;
	http_parser_pause(p, 1);
	return 0;
}

static int req_done(http_parser *p)
{
	struct tls_http *h = p->data;
	h->event = EV_DONE;
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings req_settings = {
	.on_message_begin = req_begin,
	.on_url = req_url,
	.on_header_field = req_field,
	.on_header_value = req_value,
	.on_headers_complete = req_headers,
	.on_message_complete = req_done,
};

static void pop_record(struct tls_http *h, int status)
{
	struct pending *e = &h->q[h->q_head];
	h->ops->record(h->ctx, e->method, e->target ? e->target : "", status, &e->d);
	free(e->target);
	e->target = NULL;
	h->q_head = (h->q_head + 1) % PENDING_MAX;
	h->q_n--;
}

static int resp_headers(http_parser *p)
{
	struct tls_http *h = p->data;
	unsigned st = p->status_code;
	if (st >= 100 && st < 200 && st != 101)
		return 0; /* interim: the real answer follows */
	bool head = false;
	if (h->q_n) {
		head = strcmp(h->q[h->q_head].method, "HEAD") == 0;
		pop_record(h, (int)st);
	}
	if (st == 101) {
		h->resp_off = true;
		return 0;
	}
	return head ? 1 : 0; /* an answer to HEAD has no body */
}

static const http_parser_settings resp_settings = {
	.on_headers_complete = resp_headers,
};

struct tls_http *tls_http_new(const struct tls_http_ops *ops, void *ctx)
{
	struct tls_http *h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	h->ops = ops;
	h->ctx = ctx;
	http_parser_init(&h->req, HTTP_REQUEST);
	http_parser_init(&h->resp, HTTP_RESPONSE);
	h->req.data = h->resp.data = h;
	return h;
}

void tls_http_free(struct tls_http *h)
{
	if (!h)
		return;
	while (h->q_n)
		pop_record(h, 0);
	if (h->newhead) {
		sodium_memzero(h->newhead, h->newhead_len);
		free(h->newhead);
	}
	free(h->buf);
	free(h);
}

const struct netpol_http_decision *tls_http_denial(const struct tls_http *h) { return &h->denial; }

/* Pass on the first n buffered bytes. */
static int pass(struct tls_http *h, size_t n)
{
	int r = 0;
	if (h->newhead) {
		r = h->ops->forward(h->ctx, h->newhead, h->newhead_len);
		sodium_memzero(h->newhead, h->newhead_len);
		free(h->newhead);
		h->newhead = NULL;
	}
	size_t drop = h->skip < n ? h->skip : n;
	h->skip -= drop;
	if (n > drop && r == 0)
		r = h->ops->forward(h->ctx, h->buf + drop, n - drop);
	if (n == 0)
		return r;
	memmove(h->buf, h->buf + n, h->len - n);
	h->len -= n;
	h->parsed -= n;
	return r;
}

static enum tls_http_verdict decide(struct tls_http *h)
{
	const char *method = http_method_str(h->req.method);
	if (h->target_long || h->target_len == 0) {
		h->denial = (struct netpol_http_decision){ .reason = REASON_HTTP_BAD_REQUEST };
		return TLS_HTTP_BAD;
	}
	if (h->q_n == PENDING_MAX) {
		/* a client pipelining far ahead of the answers */
		h->denial = (struct netpol_http_decision){ .reason = REASON_HTTP_BAD_REQUEST };
		return TLS_HTTP_BAD;
	}
	bool ws = h->req.upgrade && strcasecmp(h->upgrade, "websocket") == 0;
	bool other_upgrade = h->req.upgrade && !ws;
	struct netpol_http_decision d = h->ops->decide(h->ctx, method, h->target, ws);
	if (other_upgrade && d.allow && !d.audit_mode) {
		/* h2c and the like: not something the rules can judge */
		d.allow = false;
		d.reason = REASON_WEBSOCKET_NOT_ALLOWED;
	}
	if (d.allow && h->ops->rewrite) {
		const char *end = memmem(h->buf, h->len, "\r\n\r\n", 4);
		if (end) {
			size_t hl = (size_t)(end - h->buf) + 4;
			int rr = h->ops->rewrite(h->ctx, h->buf, hl, &h->newhead, &h->newhead_len, &d);
			if (rr == 1)
				h->skip = hl;
		} else if (memmem(h->buf, h->len, "tether-cred:", 12)) {
			/* a head with bare LF line ends: not one to rewrite */
			d = (struct netpol_http_decision){ .reason = REASON_HTTP_BAD_REQUEST };
		}
	}
	if (!d.allow) {
		h->denial = d;
		h->ops->record(h->ctx, method, h->target, 403, &d);
		return TLS_HTTP_DENIED;
	}
	struct pending *e = &h->q[(h->q_head + h->q_n) % PENDING_MAX];
	snprintf(e->method, sizeof(e->method), "%s", method);
	e->target = strdup(h->target);
	e->d = d;
	if (d.rule) {
		snprintf(e->rule, sizeof(e->rule), "%s", d.rule);
		e->d.rule = e->rule;
	}
	if (d.credential) {
		snprintf(e->credential, sizeof(e->credential), "%s", d.credential);
		e->d.credential = e->credential;
	}
	if (!e->target)
		return TLS_HTTP_ERROR;
	h->q_n++;
	return TLS_HTTP_OK;
}

enum tls_http_verdict tls_http_client(struct tls_http *h, const char *data, size_t n)
{
	if (h->raw)
		return h->ops->forward(h->ctx, data, n) < 0 ? TLS_HTTP_ERROR : TLS_HTTP_OK;
	if (h->len + n > h->cap) {
		size_t cap = (h->len + n) * 2;
		char *b = realloc(h->buf, cap);
		if (!b)
			return TLS_HTTP_ERROR;
		h->buf = b;
		h->cap = cap;
	}
	memcpy(h->buf + h->len, data, n);
	h->len += n;
	while (h->parsed < h->len) {
		h->event = EV_NONE;
		size_t used = http_parser_execute(&h->req, &req_settings, h->buf + h->parsed, h->len - h->parsed);
		h->parsed += used;
		enum http_errno e = HTTP_PARSER_ERRNO(&h->req);
		if (e == HPE_PAUSED) {
			http_parser_pause(&h->req, 0);
			if (h->event == EV_HEADERS) {
				enum tls_http_verdict v = decide(h);
				if (v != TLS_HTTP_OK)
					return v;
				h->in_body = true;
				if (pass(h, h->parsed) < 0)
					return TLS_HTTP_ERROR;
			} else if (h->event == EV_DONE) {
				h->in_body = false;
				if (pass(h, h->parsed) < 0)
					return TLS_HTTP_ERROR;
				if (h->req.upgrade) {
					/* the rest is the upgraded protocol's */
					h->raw = true;
					size_t rest = h->len;
					h->parsed = h->len;
					return pass(h, rest) < 0 ? TLS_HTTP_ERROR : TLS_HTTP_OK;
				}
			}
			continue;
		}
		if (e != HPE_OK) {
			h->denial = (struct netpol_http_decision){ .reason = REASON_HTTP_BAD_REQUEST };
			return TLS_HTTP_BAD;
		}
		if (used == 0)
			break;
	}
	if (h->in_body)
		return pass(h, h->parsed) < 0 ? TLS_HTTP_ERROR : TLS_HTTP_OK;
	if (h->len > HEAD_MAX) {
		h->denial = (struct netpol_http_decision){ .reason = REASON_HTTP_BAD_REQUEST };
		return TLS_HTTP_BAD;
	}
	return TLS_HTTP_OK;
}

void tls_http_server(struct tls_http *h, const char *data, size_t n)
{
	if (h->resp_off)
		return;
	size_t used = http_parser_execute(&h->resp, &resp_settings, data, n);
	if (HTTP_PARSER_ERRNO(&h->resp) != HPE_OK || (used < n && !h->resp_off))
		h->resp_off = true; /* the audit loses statuses, nothing else */
}
