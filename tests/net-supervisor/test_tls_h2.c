/* HTTP/2 inside inspected connections (net-supervisor/tls_h2.h), between
 * two real libnghttp2 sessions of the test's own: a client and a server
 * ("the upstream"), bytes moved in memory.
 *
 * Asserts: streams multiplexed on one connection are decided one by one
 * (an allowed one reaches the server, a denied one gets 403 with
 * x-tether-reason on its stream alone and never reaches it, a credential
 * placeholder in a header is swapped through the h1 rewrite); one record
 * per stream with its status; 8 MiB up and 8 MiB down while the other side
 * does not read: what waits in the bridge stays within the connection
 * window and is counted in the memory counter, back to 0 at the end;
 * trailers pass; an upstream RST_STREAM reaches the client with its code,
 * an upstream GOAWAY becomes one toward the client; when the upstream's
 * connection ends, a complete answer still waiting in the bridge is
 * delivered in full, an unanswered stream is reset, then a GOAWAY and the
 * end; without a server (its handshake failed) every stream is 502 with
 * the reason; a client that opens
 * 300 streams at once (before our SETTINGS) has the ones past 100 reset
 * REFUSED_STREAM by nghttp2, never more than 100 open upstream; extended CONNECT is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "net-supervisor/credsub.h"
#include "net-supervisor/tls_h2.h"

#define MAXS 512

struct cstream { /* what the test client saw on a stream */
	int status;
	char reason[64], trailer[64];
	size_t body;
	uint32_t rst;
	bool closed;
};

struct up_stream { /* what the test server got on a stream */
	char path[128], auth[128];
	size_t got;
	bool ended;
	size_t send_left; /* body bytes to answer with */
	bool trailers;
};

struct world {
	struct tls_h2 *h;
	_Atomic size_t held;
	char log[16384];
	/* the test client */
	nghttp2_session *cs;
	struct cstream cst[MAXS * 2 + 2];
	int goaways;
	/* the test upstream */
	nghttp2_session *us;
	struct up_stream ust[MAXS * 2 + 2];
	int up_open, up_open_max, up_streams;
	size_t answer_size; /* body size of each answer (0: "ok") */
	/* stalls: bytes for a side held back */
	bool stall_up, stall_cl;
	int32_t stall_cl_once_ended; /* stall the client once this upstream stream's request ended */
	uint8_t *held_up, *held_cl;
	size_t held_up_len, held_cl_len;
	size_t max_buffered;
};

/* ---------- the bridge's ops (what tls_inspect.c gives it) ---------- */

static struct netpol_http_decision decide(void *ctx, const char *method, const char *target, bool ws)
{
	(void)ctx;
	(void)method;
	(void)ws;
	if (strstr(target, "deny"))
		return (struct netpol_http_decision){ .reason = REASON_HTTP_RULE_DENY, .rule = "no-deny" };
	return (struct netpol_http_decision){ .allow = true, .reason = REASON_ALLOWED, .rule = "any" };
}

static void record(void *ctx, const char *method, const char *target, int status,
		   const struct netpol_http_decision *d)
{
	struct world *w = ctx;
	size_t l = strlen(w->log);
	snprintf(w->log + l, sizeof(w->log) - l, "%s %s %d %s%s%s;", method, target, status, reason_word(d->reason),
		 d->credential ? " " : "", d->credential ? d->credential : "");
}

static bool permit_k(void *ctx, const struct credsub_cred *c)
{
	(void)ctx;
	return strcmp(c->name, "K") == 0;
}

static int rewrite(void *ctx, const char *head, size_t len, char **out, size_t *out_len,
		   struct netpol_http_decision *d)
{
	(void)ctx;
	struct credsub_cred creds[] = { { .name = "K", .secret = "s3cret-K" }, { .name = "J", .secret = "s3cret-J" } };
	struct credsub_result res;
	int r = credsub_head(head, len, creds, 2, permit_k, NULL, &res);
	if (r == CREDSUB_REFUSED) {
		*d = (struct netpol_http_decision){ .reason = REASON_CREDENTIAL_NOT_PERMITTED, .credential = "J" };
		return -1;
	}
	assert_int_equal(r, CREDSUB_OK);
	if (!res.head)
		return 0;
	*out = res.head;
	*out_len = res.head_len;
	d->credential = "K";
	return 1;
}

static const struct tls_http_ops ops = { .decide = decide, .record = record, .rewrite = rewrite };

/* ---------- the test client ---------- */

static int c_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *n, size_t nl, const uint8_t *v,
		    size_t vl, uint8_t flags, void *ud)
{
	(void)s;
	(void)nl;
	(void)flags;
	struct world *w = ud;
	struct cstream *c = &w->cst[f->hd.stream_id];
	if (strcmp((const char *)n, ":status") == 0)
		c->status = atoi((const char *)v);
	else if (strcmp((const char *)n, "x-tether-reason") == 0)
		snprintf(c->reason, sizeof(c->reason), "%.*s", (int)vl, v);
	else if (strcmp((const char *)n, "x-checksum") == 0)
		snprintf(c->trailer, sizeof(c->trailer), "%.*s", (int)vl, v);
	return 0;
}

static int c_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *d, size_t len, void *ud)
{
	(void)s;
	(void)flags;
	(void)d;
	struct world *w = ud;
	w->cst[id].body += len;
	return 0;
}

static int c_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
	(void)s;
	struct world *w = ud;
	w->cst[id].closed = true;
	w->cst[id].rst = code;
	return 0;
}

static int c_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	(void)s;
	struct world *w = ud;
	if (f->hd.type == NGHTTP2_GOAWAY)
		w->goaways++;
	return 0;
}

/* ---------- the test upstream ---------- */

static ssize_t u_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
		      nghttp2_data_source *src, void *ud)
{
	(void)src;
	struct world *w = ud;
	struct up_stream *u = &w->ust[id];
	size_t n = u->send_left < length ? u->send_left : length;
	memset(buf, 'b', n);
	u->send_left -= n;
	if (!u->send_left) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		if (u->trailers) {
			nghttp2_nv t[] = { { (uint8_t *)"x-checksum", (uint8_t *)"ok", 10, 2, 0 } };
			*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
			nghttp2_submit_trailer(s, id, t, 1);
		}
	}
	return (ssize_t)n;
}

static void u_answer(struct world *w, int32_t id)
{
	struct up_stream *u = &w->ust[id];
	if (strncmp(u->path, "/rst", 4) == 0) {
		nghttp2_submit_rst_stream(w->us, NGHTTP2_FLAG_NONE, id, NGHTTP2_REFUSED_STREAM);
		return;
	}
	char got[32];
	snprintf(got, sizeof(got), "%zu", u->got);
	nghttp2_nv nva[] = {
		{ (uint8_t *)":status", (uint8_t *)"200", 7, 3, 0 },
		{ (uint8_t *)"x-got", (uint8_t *)got, 5, strlen(got), 0 },
	};
	u->send_left = w->answer_size ? w->answer_size : 2;
	u->trailers = strncmp(u->path, "/trailers", 9) == 0;
	nghttp2_data_provider prd = { .read_callback = u_body };
	assert_int_equal(nghttp2_submit_response(w->us, id, nva, 2, &prd), 0);
}

static int u_begin(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	(void)s;
	struct world *w = ud;
	if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
		w->up_streams++;
		if (++w->up_open > w->up_open_max)
			w->up_open_max = w->up_open;
	}
	return 0;
}

static int u_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *n, size_t nl, const uint8_t *v,
		    size_t vl, uint8_t flags, void *ud)
{
	(void)s;
	(void)nl;
	(void)flags;
	struct world *w = ud;
	struct up_stream *u = &w->ust[f->hd.stream_id];
	if (strcmp((const char *)n, ":path") == 0)
		snprintf(u->path, sizeof(u->path), "%.*s", (int)vl, v);
	else if (strcmp((const char *)n, "authorization") == 0)
		snprintf(u->auth, sizeof(u->auth), "%.*s", (int)vl, v);
	return 0;
}

static int u_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *d, size_t len, void *ud)
{
	(void)s;
	(void)flags;
	(void)d;
	struct world *w = ud;
	w->ust[id].got += len;
	return 0;
}

static int u_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
	(void)s;
	struct world *w = ud;
	if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) && (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
		w->ust[f->hd.stream_id].ended = true;
		u_answer(w, f->hd.stream_id);
	}
	return 0;
}

static int u_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
	(void)s;
	(void)id;
	(void)code;
	struct world *w = ud;
	w->up_open--;
	return 0;
}

/* ---------- the world ---------- */

static void world_init(struct world *w, uint32_t client_peer_max)
{
	memset(w, 0, sizeof(*w));
	w->h = tls_h2_new(&ops, w, &w->held);
	assert_non_null(w->h);
	nghttp2_session_callbacks *cb;
	nghttp2_option *opt;
	assert_int_equal(nghttp2_option_new(&opt), 0);
	if (client_peer_max)
		nghttp2_option_set_peer_max_concurrent_streams(opt, client_peer_max);
	assert_int_equal(nghttp2_session_callbacks_new(&cb), 0);
	nghttp2_session_callbacks_set_on_header_callback(cb, c_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, c_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, c_close);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, c_frame);
	assert_int_equal(nghttp2_session_client_new2(&w->cs, cb, w, opt), 0);
	nghttp2_session_callbacks_del(cb);
	nghttp2_option_del(opt);
	assert_int_equal(nghttp2_submit_settings(w->cs, NGHTTP2_FLAG_NONE, NULL, 0), 0);
	assert_int_equal(nghttp2_session_callbacks_new(&cb), 0);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, u_begin);
	nghttp2_session_callbacks_set_on_header_callback(cb, u_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, u_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, u_frame);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, u_close);
	assert_int_equal(nghttp2_session_server_new(&w->us, cb, w), 0);
	nghttp2_session_callbacks_del(cb);
	nghttp2_settings_entry iv[] = { { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000 } };
	assert_int_equal(nghttp2_submit_settings(w->us, NGHTTP2_FLAG_NONE, iv, 1), 0);
}

static void world_free(struct world *w)
{
	tls_h2_free(w->h);
	nghttp2_session_del(w->cs);
	nghttp2_session_del(w->us);
	free(w->held_up);
	free(w->held_cl);
}

static void hold(uint8_t **b, size_t *len, const uint8_t *d, size_t n)
{
	*b = realloc(*b, *len + n);
	assert_non_null(*b);
	memcpy(*b + *len, d, n);
	*len += n;
}

/* Move bytes until nothing moves (stalled sides keep what is theirs). */
static void pump(struct world *w)
{
	for (int round = 0; round < 100000; round++) {
		bool moved = false;
		const uint8_t *d;
		ssize_t n;
		while ((n = nghttp2_session_mem_send(w->cs, &d)) > 0) {
			assert_int_equal(tls_h2_recv(w->h, true, (const char *)d, (size_t)n), 0);
			moved = true;
		}
		assert_true(n == 0);
		while ((n = nghttp2_session_mem_send(w->us, &d)) > 0) {
			assert_int_equal(tls_h2_recv(w->h, false, (const char *)d, (size_t)n), 0);
			moved = true;
		}
		assert_true(n == 0);
		bool scl = w->stall_cl || (w->stall_cl_once_ended && w->ust[w->stall_cl_once_ended].ended);
		while ((n = tls_h2_send(w->h, true, &d)) > 0) {
			if (scl)
				hold(&w->held_cl, &w->held_cl_len, d, (size_t)n);
			else
				assert_int_equal(nghttp2_session_mem_recv(w->cs, d, (size_t)n), n);
			moved = true;
		}
		assert_true(n == 0);
		while ((n = tls_h2_send(w->h, false, &d)) > 0) {
			if (w->stall_up)
				hold(&w->held_up, &w->held_up_len, d, (size_t)n);
			else
				assert_int_equal(nghttp2_session_mem_recv(w->us, d, (size_t)n), n);
			moved = true;
		}
		assert_true(n == 0);
		if (!scl && w->held_cl_len) {
			assert_int_equal(nghttp2_session_mem_recv(w->cs, w->held_cl, w->held_cl_len), (ssize_t)w->held_cl_len);
			w->held_cl_len = 0;
			moved = true;
		}
		if (!w->stall_up && w->held_up_len) {
			assert_int_equal(nghttp2_session_mem_recv(w->us, w->held_up, w->held_up_len), (ssize_t)w->held_up_len);
			w->held_up_len = 0;
			moved = true;
		}
		if (tls_h2_buffered(w->h) > w->max_buffered)
			w->max_buffered = tls_h2_buffered(w->h);
		assert_int_equal(w->held, tls_h2_buffered(w->h));
		if (!moved)
			return;
	}
	fail_msg("pump did not settle");
}

static int32_t get(struct world *w, const char *path, const char *auth)
{
	nghttp2_nv nva[] = {
		{ (uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0 },
		{ (uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0 },
		{ (uint8_t *)":authority", (uint8_t *)"x.test", 10, 6, 0 },
		{ (uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0 },
		{ (uint8_t *)"authorization", (uint8_t *)auth, 13, auth ? strlen(auth) : 0, 0 },
	};
	int32_t id = nghttp2_submit_request(w->cs, NULL, nva, auth ? 5 : 4, NULL, NULL);
	assert_true(id > 0);
	return id;
}

static void test_multiplexed_decisions(void **state)
{
	(void)state;
	struct world *w = malloc(sizeof(*w));
	world_init(w, 0);
	int32_t a = get(w, "/a", NULL), d = get(w, "/deny/x", NULL), c = get(w, "/cred", "Bearer tether-cred:K"),
		j = get(w, "/credj", "Bearer tether-cred:J"), t = get(w, "/trailers", NULL);
	pump(w);
	assert_int_equal(w->cst[a].status, 200);
	assert_int_equal(w->cst[a].body, 2);
	assert_int_equal(w->cst[d].status, 403);
	assert_string_equal(w->cst[d].reason, "http_rule_deny");
	assert_true(w->cst[d].body > 0);
	assert_int_equal(w->cst[c].status, 200);
	assert_int_equal(w->cst[j].status, 403);
	assert_string_equal(w->cst[j].reason, "credential_not_permitted");
	assert_int_equal(w->cst[t].status, 200);
	assert_string_equal(w->cst[t].trailer, "ok");
	assert_int_equal(w->up_streams, 3); /* /a, /cred, /trailers */
	bool saw_cred = false;
	for (int i = 0; i < 16; i++) {
		assert_null(strstr(w->ust[i].path, "deny"));
		assert_null(strstr(w->ust[i].path, "credj"));
		if (strcmp(w->ust[i].path, "/cred") == 0) {
			assert_string_equal(w->ust[i].auth, "Bearer s3cret-K");
			saw_cred = true;
		}
	}
	assert_true(saw_cred);
	assert_non_null(strstr(w->log, "GET /a 200 allowed;"));
	assert_non_null(strstr(w->log, "GET /deny/x 403 http_rule_deny;"));
	assert_non_null(strstr(w->log, "GET /cred 200 allowed K;"));
	assert_non_null(strstr(w->log, "GET /credj 403 credential_not_permitted J;"));
	assert_false(tls_h2_done(w->h));
	world_free(w);
	free(w);
}

struct src {
	uint8_t *b;
	size_t *off;
};

static ssize_t up_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
		nghttp2_data_source *src, void *ud)
{
	(void)s;
	(void)id;
	(void)ud;
	struct src *sp = src->ptr;
	size_t left = (8 << 20) - *sp->off, n = left < length ? left : length;
	memcpy(buf, sp->b + *sp->off, n);
	*sp->off += n;
	if (*sp->off == (8 << 20))
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

static void test_flow_control_bounded(void **state)
{
	(void)state;
	struct world *w = malloc(sizeof(*w));
	world_init(w, 0);
	/* 8 MiB up while the upstream reads nothing */
	static uint8_t big[8 << 20];
	memset(big, 'u', sizeof(big));
	size_t off = 0;
	nghttp2_nv nva[] = {
		{ (uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0 },
		{ (uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0 },
		{ (uint8_t *)":authority", (uint8_t *)"x.test", 10, 6, 0 },
		{ (uint8_t *)":path", (uint8_t *)"/up", 5, 3, 0 },
	};
	struct src sp = { big, &off };
	nghttp2_data_provider prd = { .source.ptr = &sp, .read_callback = up_read };
	w->answer_size = 8 << 20;
	int32_t id = nghttp2_submit_request(w->cs, NULL, nva, 4, &prd, NULL);
	assert_true(id > 0);
	w->stall_up = true;
	pump(w);
	assert_true(off < sizeof(big)); /* the client is held back by the windows */
	assert_true(w->max_buffered <= TLS_H2_CONN_WINDOW);
	assert_true(w->held > 0);
	/* the upload completes; the 8 MiB answer goes to a client that reads nothing */
	w->stall_up = false;
	w->stall_cl_once_ended = id;
	pump(w);
	assert_int_equal(off, sizeof(big));
	assert_int_equal(w->ust[id].got, sizeof(big));
	assert_true(w->max_buffered <= TLS_H2_CONN_WINDOW);
	assert_true(w->held > 0);
	assert_true(w->cst[id].body < (1 << 20));
	w->stall_cl_once_ended = 0;
	pump(w);
	assert_int_equal(w->ust[id].got, sizeof(big));
	assert_int_equal(w->cst[id].status, 200);
	assert_int_equal(w->cst[id].body, 8 << 20);
	assert_int_equal(w->held, 0);
	assert_int_equal(tls_h2_buffered(w->h), 0);
	world_free(w);
	free(w);
}

static void test_rst_goaway(void **state)
{
	(void)state;
	struct world *w = malloc(sizeof(*w));
	world_init(w, 0);
	int32_t r = get(w, "/rst", NULL), a = get(w, "/a", NULL);
	pump(w);
	assert_true(w->cst[r].closed);
	assert_int_equal(w->cst[r].rst, NGHTTP2_REFUSED_STREAM);
	assert_int_equal(w->cst[a].status, 200);
	assert_non_null(strstr(w->log, "GET /rst 0 allowed;"));
	assert_int_equal(nghttp2_submit_goaway(w->us, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0), 0);
	pump(w);
	assert_int_equal(w->goaways, 1);
	world_free(w);
	free(w);
}

static ssize_t never_ends(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
			  nghttp2_data_source *src, void *ud)
{
	(void)s;
	(void)id;
	(void)buf;
	(void)length;
	(void)flags;
	(void)src;
	(void)ud;
	return NGHTTP2_ERR_DEFERRED;
}

static void test_upstream_closed(void **state)
{
	(void)state;
	struct world *w = malloc(sizeof(*w));
	world_init(w, 0);
	w->answer_size = 200000; /* within our stream window, past the client's (65535) */
	int32_t a = get(w, "/a", NULL);
	nghttp2_nv nva[] = {
		{ (uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0 },
		{ (uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0 },
		{ (uint8_t *)":authority", (uint8_t *)"x.test", 10, 6, 0 },
		{ (uint8_t *)":path", (uint8_t *)"/open", 5, 5, 0 },
	};
	nghttp2_data_provider prd = { .read_callback = never_ends };
	int32_t o = nghttp2_submit_request(w->cs, NULL, nva, 4, &prd, NULL);
	w->stall_cl_once_ended = 1; /* stream 1 upstream: /a */
	pump(w);
	assert_true(w->held > 0); /* part of /a's answer waits in the bridge */
	tls_h2_upstream_closed(w->h);
	assert_false(tls_h2_done(w->h));
	w->stall_cl_once_ended = 0;
	pump(w);
	assert_int_equal(w->cst[a].status, 200);
	assert_int_equal(w->cst[a].body, 200000);
	assert_int_equal(w->cst[a].rst, 0);
	assert_true(w->cst[o].closed);
	assert_int_equal(w->cst[o].rst, NGHTTP2_INTERNAL_ERROR);
	assert_int_equal(w->goaways, 1);
	assert_int_equal(w->held, 0);
	assert_true(tls_h2_done(w->h));
	world_free(w);
	free(w);
}

/* No server (its handshake failed): every stream 502 with the reason, not
 * recorded (the connection's egress_error is), nothing toward the server. */
static void test_refuse_all(void **state)
{
	(void)state;
	struct world *w = malloc(sizeof(*w));
	world_init(w, 0);
	tls_h2_refuse_all(w->h, REASON_UPSTREAM_CERT_INVALID);
	int32_t a = get(w, "/a", NULL), b = get(w, "/b", NULL);
	pump(w);
	assert_int_equal(w->cst[a].status, 502);
	assert_string_equal(w->cst[a].reason, "upstream_cert_invalid");
	assert_int_equal(w->cst[b].status, 502);
	assert_int_equal(w->up_streams, 0);
	assert_string_equal(w->log, "");
	assert_false(tls_h2_done(w->h));
	world_free(w);
	free(w);
}

/* CONNECT (a tunnel, or WebSocket over h2 were extended CONNECT enabled):
 * refused on its stream, never at the server */
static void test_connect_refused(void **state)
{
	(void)state;
	struct world *w = malloc(sizeof(*w));
	world_init(w, 0);
	nghttp2_nv nva[] = {
		{ (uint8_t *)":method", (uint8_t *)"CONNECT", 7, 7, 0 },
		{ (uint8_t *)":authority", (uint8_t *)"x.test:443", 10, 10, 0 },
	};
	int32_t id = nghttp2_submit_request(w->cs, NULL, nva, 2, NULL, NULL);
	assert_true(id > 0);
	pump(w);
	assert_int_equal(w->cst[id].status, 403);
	assert_string_equal(w->cst[id].reason, "websocket_not_allowed");
	assert_int_equal(w->up_streams, 0);
	world_free(w);
	free(w);
}

static void test_stream_flood(void **state)
{
	(void)state;
	struct world *w = malloc(sizeof(*w));
	world_init(w, 1000); /* the client does not wait for our SETTINGS */
	int32_t ids[300];
	char p[32];
	for (int i = 0; i < 300; i++) {
		snprintf(p, sizeof(p), "/f%d", i);
		ids[i] = get(w, p, NULL);
	}
	w->stall_up = true;
	pump(w);
	w->stall_up = false;
	pump(w);
	assert_true(w->up_open_max <= TLS_H2_MAX_STREAMS);
	int ok = 0, refused = 0;
	for (int i = 0; i < 300; i++) {
		if (w->cst[ids[i]].status == 200)
			ok++;
		else if (w->cst[ids[i]].closed && w->cst[ids[i]].rst == NGHTTP2_REFUSED_STREAM)
			refused++;
	}
	print_message("flood: %d answered, %d reset, at most %d open upstream\n", ok, refused, w->up_open_max);
	assert_true(ok >= 1);
	assert_int_equal(ok + refused, 300);
	assert_int_equal(w->held, 0);
	world_free(w);
	free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_multiplexed_decisions),
		cmocka_unit_test(test_flow_control_bounded),
		cmocka_unit_test(test_rst_goaway),
		cmocka_unit_test(test_connect_refused),
		cmocka_unit_test(test_upstream_closed),
		cmocka_unit_test(test_refuse_all),
		cmocka_unit_test(test_stream_flood),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
