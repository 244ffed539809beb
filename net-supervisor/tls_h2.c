#include "net-supervisor/tls_h2.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>
#include <sodium.h>

/* A header block as received, each name and value our own copy (values
 * are wiped when freed: a swapped-in secret is one of them). */
struct nvl {
	nghttp2_nv *v;
	size_t n, cap, bytes;
	bool too_big;
};

/* One direction of a stream: DATA the other session has not taken yet,
 * its end, and its trailers. */
struct half {
	uint8_t *buf;
	size_t off, len, cap;
	bool eof;
	bool have_trailers;
	struct nvl trailers;
};

struct h2s {
	struct tls_h2 *h;
	struct h2s *next, *prev;
	int32_t cid, uid;     /* the stream in the client's and the upstream's session */
	bool cl_open, up_open; /* it still exists there */
	bool allowed, recorded, resp_started;
	struct nvl req_hdr, resp_hdr; /* the header block being received */
	struct half req, resp;        /* client → upstream, upstream → client */
	char method[24];
	char *path;
	char rule[160], credential[72]; /* the decision's strings copied: a reload may free the policy */
	struct netpol_http_decision d;
	char *body; /* a refusal's body */
	size_t body_len, body_off;
};

struct tls_h2 {
	const struct tls_http_ops *ops;
	void *ctx;
	_Atomic size_t *held; /* shared by every worker (atomic) */
	size_t buffered;
	nghttp2_session *cl, *up;
	struct h2s *streams;
	bool failed;
	bool up_gone; /* the server's connection ended (tls_h2_upstream_closed) */
	enum reason refuse_all; /* no server (tls_h2_refuse_all): every stream 502 with this */
};

/* ---------- header lists ---------- */

static void nvl_free(struct nvl *l)
{
	for (size_t i = 0; i < l->n; i++) {
		sodium_memzero(l->v[i].value, l->v[i].valuelen);
		free(l->v[i].name);
		free(l->v[i].value);
	}
	free(l->v);
	*l = (struct nvl){ 0 };
}

static int nvl_add(struct nvl *l, const uint8_t *name, size_t nl, const uint8_t *value, size_t vl)
{
	if (l->too_big || l->bytes + nl + vl + 32 > TLS_H2_HEADERS_MAX) {
		l->too_big = true;
		return 0;
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		nghttp2_nv *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	uint8_t *n = malloc(nl + 1), *val = malloc(vl + 1);
	if (!n || !val) {
		free(n);
		free(val);
		return -ENOMEM;
	}
	memcpy(n, name, nl);
	n[nl] = 0;
	memcpy(val, value, vl);
	val[vl] = 0;
	l->v[l->n++] = (nghttp2_nv){ .name = n, .value = val, .namelen = nl, .valuelen = vl };
	l->bytes += nl + vl + 32;
	return 0;
}

static const char *nvl_get(const struct nvl *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp((const char *)l->v[i].name, name) == 0)
			return (const char *)l->v[i].value;
	return NULL;
}

/* ---------- buffered DATA ---------- */

static void held_add(struct tls_h2 *h, ssize_t n)
{
	h->buffered += (size_t)n;
	if (h->held)
		*h->held += (size_t)n;
}

static int half_put(struct tls_h2 *h, struct half *hf, const uint8_t *data, size_t n)
{
	if (hf->off && hf->len + n > hf->cap) {
		memmove(hf->buf, hf->buf + hf->off, hf->len - hf->off);
		hf->len -= hf->off;
		hf->off = 0;
	}
	if (hf->len + n > hf->cap) {
		size_t cap = hf->cap ? hf->cap : 16384;
		while (cap < hf->len + n)
			cap *= 2;
		uint8_t *b = realloc(hf->buf, cap);
		if (!b)
			return -ENOMEM;
		hf->buf = b;
		hf->cap = cap;
	}
	memcpy(hf->buf + hf->len, data, n);
	hf->len += n;
	held_add(h, (ssize_t)n);
	return 0;
}

/* Give the window of n bytes of stream id back to the session they came
 * from (the connection's always; the stream's while it is open). */
static void consume(nghttp2_session *s, int32_t id, bool open, size_t n)
{
	if (!n)
		return;
	nghttp2_session_consume_connection(s, n);
	if (open)
		nghttp2_session_consume_stream(s, id, n);
}

/* Drop what waits in hf (its source: session from, stream id). */
static void half_drop(struct tls_h2 *h, struct half *hf, nghttp2_session *from, int32_t id, bool open)
{
	size_t n = hf->len - hf->off;
	consume(from, id, open, n);
	held_add(h, -(ssize_t)n);
	free(hf->buf);
	hf->buf = NULL;
	hf->off = hf->len = hf->cap = 0;
	nvl_free(&hf->trailers);
	hf->have_trailers = false;
}

/* ---------- streams ---------- */

static void record(struct h2s *s, int status)
{
	if (s->recorded)
		return;
	s->recorded = true;
	s->h->ops->record(s->h->ctx, s->method, s->path ? s->path : "", status, &s->d);
}

static void maybe_free(struct h2s *s)
{
	if (s->cl_open || s->up_open)
		return;
	struct tls_h2 *h = s->h;
	if (s->allowed)
		record(s, 0);
	half_drop(h, &s->req, h->cl, s->cid, false);
	half_drop(h, &s->resp, h->up, s->uid, false);
	nvl_free(&s->req_hdr);
	nvl_free(&s->resp_hdr);
	if (s->prev)
		s->prev->next = s->next;
	else
		h->streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	free(s->path);
	free(s->body);
	free(s);
}

static ssize_t half_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
			 uint32_t *flags, nghttp2_data_source *source, void *user_data)
{
	struct tls_h2 *h = user_data;
	struct h2s *s = source->ptr;
	bool to_up = session == h->up;
	struct half *hf = to_up ? &s->req : &s->resp;
	size_t avail = hf->len - hf->off, n = avail < length ? avail : length;
	if (n) {
		memcpy(buf, hf->buf + hf->off, n);
		hf->off += n;
		held_add(h, -(ssize_t)n);
		if (to_up)
			consume(h->cl, s->cid, s->cl_open, n);
		else
			consume(h->up, s->uid, s->up_open, n);
	}
	if (hf->off < hf->len)
		return (ssize_t)n;
	if (hf->eof) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		if (hf->have_trailers) {
			*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
			if (nghttp2_submit_trailer(session, stream_id, hf->trailers.v, hf->trailers.n) != 0)
				return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		}
		return (ssize_t)n;
	}
	return n ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
}

static ssize_t body_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
			 uint32_t *flags, nghttp2_data_source *source, void *user_data)
{
	(void)session;
	(void)stream_id;
	(void)user_data;
	struct h2s *s = source->ptr;
	size_t n = s->body_len - s->body_off;
	if (n > length)
		n = length;
	memcpy(buf, s->body + s->body_off, n);
	s->body_off += n;
	if (s->body_off == s->body_len)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

/* A denied stream: status (403, 400, 502) with the reason word, on it
 * alone. */
static void refuse(struct h2s *s, int status, const struct netpol_http_decision *d)
{
	struct tls_h2 *h = s->h;
	s->d = *d;
	if (status == 502)
		s->recorded = true; /* the connection's egress_error says it (as for HTTP/1.1) */
	else
		record(s, status);
	const char *word = reason_word(d->reason);
	const char *text = status == 403 ? "Forbidden" : status == 502 ? "Bad Gateway" : "Bad Request";
	char b[512];
	int bl = snprintf(b, sizeof(b), "{\"error\":\"%s\",\"reason\":\"%s\",\"rule\":%s%s%s}\n", text, word,
			  d->rule ? "\"" : "",
			  d->rule ? d->rule : "null", d->rule ? "\"" : "");
	if (bl < 0 || (size_t)bl >= sizeof(b))
		bl = 0;
	s->body = malloc((size_t)bl + 1);
	if (!s->body) {
		nghttp2_submit_rst_stream(h->cl, NGHTTP2_FLAG_NONE, s->cid, NGHTTP2_INTERNAL_ERROR);
		return;
	}
	memcpy(s->body, b, (size_t)bl);
	s->body_len = (size_t)bl;
	char st[4], len[16];
	snprintf(st, sizeof(st), "%d", status);
	snprintf(len, sizeof(len), "%d", bl);
#define NV(n, v) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME }
	nghttp2_nv nva[] = {
		NV(":status", st),
		NV("content-type", "application/json"),
		NV("content-length", len),
		NV("x-tether-reason", word),
	};
#undef NV
	nghttp2_data_provider prd = { .source.ptr = s, .read_callback = body_read };
	if (nghttp2_submit_response(h->cl, s->cid, nva, sizeof(nva) / sizeof(nva[0]), &prd) != 0)
		nghttp2_submit_rst_stream(h->cl, NGHTTP2_FLAG_NONE, s->cid, NGHTTP2_INTERNAL_ERROR);
}

/* Credential placeholders: the request's headers as an HTTP/1.1 head
 * through the same rewrite as an h1 request (credsub), the rewritten
 * values back into the list. 0 unchanged or rewritten, -1 refused (d the
 * denial). */
static int rewrite(struct h2s *s, const char *method, const char *path, struct netpol_http_decision *d)
{
	struct tls_h2 *h = s->h;
	struct nvl *l = &s->req_hdr;
	size_t cap = strlen(method) + strlen(path) + 16;
	for (size_t i = 0; i < l->n; i++)
		cap += l->v[i].namelen + l->v[i].valuelen + 4;
	char *head = malloc(cap);
	if (!head) {
		*d = (struct netpol_http_decision){ .reason = REASON_INTERNAL_ERROR };
		return -1;
	}
	size_t o = (size_t)snprintf(head, cap, "%s %s HTTP/1.1\r\n", method, path);
	for (size_t i = 0; i < l->n; i++) {
		if (l->v[i].name[0] == ':')
			continue;
		memcpy(head + o, l->v[i].name, l->v[i].namelen);
		o += l->v[i].namelen;
		memcpy(head + o, ": ", 2);
		o += 2;
		memcpy(head + o, l->v[i].value, l->v[i].valuelen);
		o += l->v[i].valuelen;
		memcpy(head + o, "\r\n", 2);
		o += 2;
	}
	memcpy(head + o, "\r\n", 2);
	o += 2;
	char *out = NULL;
	size_t out_len = 0;
	int r = h->ops->rewrite(h->ctx, head, o, &out, &out_len, d);
	free(head);
	if (r <= 0)
		return r;
	/* The rewritten head back into the list: the pseudo-headers as they
	 * were, then every line of the head ("name: value"; some values
	 * swapped, a header the proxy sets added, the client's lines of that
	 * name gone), names lower-cased as HTTP/2 wants them. */
	int ret = 0;
	struct nvl nl = { 0 };
	for (size_t i = 0; i < l->n && ret == 0; i++)
		if (l->v[i].name[0] == ':')
			ret = nvl_add(&nl, l->v[i].name, l->v[i].namelen, l->v[i].value, l->v[i].valuelen);
	const char *p = memchr(out, '\n', out_len), *end = out + out_len;
	while (ret == 0 && p && p + 1 < end) {
		const char *line = p + 1, *eol = memchr(line, '\n', (size_t)(end - line));
		if (!eol || eol == line || eol[-1] != '\r') {
			ret = -1;
			break;
		}
		if (eol - 1 == line)
			break; /* the empty line: the end of the head */
		const char *colon = memchr(line, ':', (size_t)(eol - line));
		if (!colon || colon == line || colon + 1 > eol - 1) {
			ret = -1;
			break;
		}
		const char *v = colon + 1;
		while (v < eol - 1 && *v == ' ')
			v++;
		uint8_t name[256];
		size_t nlen = (size_t)(colon - line);
		if (nlen > sizeof(name)) {
			ret = -1;
			break;
		}
		for (size_t k = 0; k < nlen; k++)
			name[k] = (uint8_t)((line[k] >= 'A' && line[k] <= 'Z') ? line[k] + 32 : line[k]);
		ret = nvl_add(&nl, name, nlen, (const uint8_t *)v, (size_t)(eol - 1 - v));
		p = eol;
	}
	if (ret == 0 && nl.too_big)
		ret = -1;
	if (ret == 0) {
		nvl_free(l);
		*l = nl;
	} else {
		nvl_free(&nl);
	}
	sodium_memzero(out, out_len);
	free(out);
	if (ret < 0)
		*d = (struct netpol_http_decision){ .reason = REASON_INTERNAL_ERROR };
	return ret;
}

/* A client stream's request headers are in: decide it, then refuse it or
 * open its upstream stream. */
static void start_request(struct h2s *s, bool end_stream)
{
	struct tls_h2 *h = s->h;
	struct nvl *l = &s->req_hdr;
	const char *method = nvl_get(l, ":method"), *path = nvl_get(l, ":path");
	snprintf(s->method, sizeof(s->method), "%s", method ? method : "");
	s->path = strdup(path ? path : "");
	s->up_open = false;
	if (h->refuse_all) {
		refuse(s, 502, &(struct netpol_http_decision){ .reason = h->refuse_all });
		return;
	}
	if (l->too_big || !method || !s->path) {
		refuse(s, 400, &(struct netpol_http_decision){ .reason = REASON_HTTP_BAD_REQUEST });
		return;
	}
	if (strcmp(method, "CONNECT") == 0 || nvl_get(l, ":protocol")) {
		/* extended CONNECT (WebSocket over h2) is never enabled */
		refuse(s, 403, &(struct netpol_http_decision){ .reason = REASON_WEBSOCKET_NOT_ALLOWED });
		return;
	}
	if (!path || !path[0]) {
		refuse(s, 400, &(struct netpol_http_decision){ .reason = REASON_HTTP_BAD_REQUEST });
		return;
	}
	struct netpol_http_decision d = h->ops->decide(h->ctx, method, path, false);
	if (d.allow && h->ops->rewrite && rewrite(s, method, path, &d) < 0)
		d.allow = false;
	if (!d.allow) {
		refuse(s, d.reason == REASON_HTTP_BAD_REQUEST ? 400 : 403, &d);
		return;
	}
	s->d = d;
	if (d.rule) {
		snprintf(s->rule, sizeof(s->rule), "%s", d.rule);
		s->d.rule = s->rule;
	}
	if (d.credential) {
		snprintf(s->credential, sizeof(s->credential), "%s", d.credential);
		s->d.credential = s->credential;
	}
	s->allowed = true;
	s->req.eof = end_stream;
	nghttp2_data_provider prd = { .source.ptr = s, .read_callback = half_read };
	int32_t id = nghttp2_submit_request(h->up, NULL, l->v, l->n, end_stream ? NULL : &prd, s);
	nvl_free(l);
	if (id < 0) {
		/* the upstream said GOAWAY: the client may try again */
		nghttp2_submit_rst_stream(h->cl, NGHTTP2_FLAG_NONE, s->cid, NGHTTP2_REFUSED_STREAM);
		return;
	}
	s->uid = id;
	s->up_open = true;
}

/* ---------- callbacks ---------- */

static struct h2s *stream_of(nghttp2_session *session, int32_t id)
{
	return nghttp2_session_get_stream_user_data(session, id);
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
	struct tls_h2 *h = user_data;
	if (session != h->cl || frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct h2s *s = calloc(1, sizeof(*s));
	if (!s)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	s->h = h;
	s->cid = frame->hd.stream_id;
	s->cl_open = true;
	s->next = h->streams;
	if (h->streams)
		h->streams->prev = s;
	h->streams = s;
	nghttp2_session_set_stream_user_data(session, s->cid, s);
	return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t nl,
		     const uint8_t *value, size_t vl, uint8_t flags, void *user_data)
{
	(void)flags;
	struct tls_h2 *h = user_data;
	struct h2s *s = stream_of(session, frame->hd.stream_id);
	if (!s)
		return 0;
	struct nvl *l = session == h->cl ? &s->req_hdr : &s->resp_hdr;
	return nvl_add(l, name, nl, value, vl) < 0 ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
	struct tls_h2 *h = user_data;
	bool from_cl = session == h->cl;
	bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
	if (frame->hd.type == NGHTTP2_GOAWAY && !from_cl) {
		/* the server is going away: so are we, toward the client */
		nghttp2_submit_goaway(h->cl, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h->cl),
				      frame->goaway.error_code, NULL, 0);
		return 0;
	}
	if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
		return 0;
	struct h2s *s = stream_of(session, frame->hd.stream_id);
	if (!s)
		return 0;
	if (from_cl) {
		if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
			start_request(s, end);
			return 0;
		}
		if (frame->hd.type == NGHTTP2_HEADERS && s->up_open) { /* trailers */
			s->req.trailers = s->req_hdr;
			s->req.have_trailers = true;
			s->req_hdr = (struct nvl){ 0 };
		}
		if (end && s->up_open) {
			s->req.eof = true;
			nghttp2_session_resume_data(h->up, s->uid);
		}
		nvl_free(&s->req_hdr);
		return 0;
	}
	if (frame->hd.type == NGHTTP2_HEADERS) {
		if (!s->resp_started) {
			const char *st = nvl_get(&s->resp_hdr, ":status");
			int status = st ? atoi(st) : 0;
			if (status >= 100 && status < 200) {
				/* interim (100 Continue, 103 Early Hints): passed on
				 * as non-final headers, the stream stays open; 101
				 * does not exist in HTTP/2 and is dropped */
				if (status != 101 && s->cl_open &&
				    nghttp2_submit_headers(h->cl, NGHTTP2_FLAG_NONE, s->cid, NULL, s->resp_hdr.v,
							   s->resp_hdr.n, NULL) < 0)
					nghttp2_submit_rst_stream(h->cl, NGHTTP2_FLAG_NONE, s->cid,
								  NGHTTP2_INTERNAL_ERROR);
				nvl_free(&s->resp_hdr);
				return 0;
			}
			s->resp_started = true;
			record(s, status);
			s->resp.eof = end;
			if (s->cl_open) {
				nghttp2_data_provider prd = { .source.ptr = s, .read_callback = half_read };
				if (nghttp2_submit_response(h->cl, s->cid, s->resp_hdr.v, s->resp_hdr.n,
							    end ? NULL : &prd) != 0)
					nghttp2_submit_rst_stream(h->cl, NGHTTP2_FLAG_NONE, s->cid,
								  NGHTTP2_INTERNAL_ERROR);
			}
			nvl_free(&s->resp_hdr);
			return 0;
		}
		s->resp.trailers = s->resp_hdr;
		s->resp.have_trailers = true;
		s->resp_hdr = (struct nvl){ 0 };
	}
	if (end) {
		s->resp.eof = true;
		if (s->cl_open)
			nghttp2_session_resume_data(h->cl, s->cid);
	}
	return 0;
}

static int on_data(nghttp2_session *session, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
		   void *user_data)
{
	(void)flags;
	struct tls_h2 *h = user_data;
	struct h2s *s = stream_of(session, id);
	bool from_cl = session == h->cl;
	bool to_open = s && (from_cl ? s->up_open : s->cl_open && s->resp_started);
	if (!to_open) { /* nowhere to go (refused, reset): dropped */
		consume(session, id, true, len);
		return 0;
	}
	if (half_put(h, from_cl ? &s->req : &s->resp, data, len) < 0)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	if (from_cl)
		nghttp2_session_resume_data(h->up, s->uid);
	else
		nghttp2_session_resume_data(h->cl, s->cid);
	return 0;
}

static int on_close(nghttp2_session *session, int32_t id, uint32_t error_code, void *user_data)
{
	struct tls_h2 *h = user_data;
	struct h2s *s = stream_of(session, id);
	if (!s)
		return 0;
	if (session == h->cl) {
		s->cl_open = false;
		half_drop(h, &s->resp, h->up, s->uid, s->up_open);
		if (s->up_open && (error_code || !s->resp.eof))
			nghttp2_submit_rst_stream(h->up, NGHTTP2_FLAG_NONE, s->uid,
						  error_code ? error_code : NGHTTP2_CANCEL);
	} else {
		s->up_open = false;
		half_drop(h, &s->req, h->cl, s->cid, s->cl_open);
		if (s->cl_open && (error_code || !s->resp_started))
			nghttp2_submit_rst_stream(h->cl, NGHTTP2_FLAG_NONE, s->cid,
						  error_code ? error_code : NGHTTP2_INTERNAL_ERROR);
	}
	maybe_free(s);
	return 0;
}

/* ---------- the connection ---------- */

struct tls_h2 *tls_h2_new(const struct tls_http_ops *ops, void *ctx, _Atomic size_t *held)
{
	struct tls_h2 *h = calloc(1, sizeof(*h));
	nghttp2_session_callbacks *cbs = NULL;
	nghttp2_option *opt = NULL;
	if (!h || nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0) {
		free(h);
		nghttp2_session_callbacks_del(cbs);
		return NULL;
	}
	h->ops = ops;
	h->ctx = ctx;
	h->held = held;
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
	nghttp2_option_set_no_auto_window_update(opt, 1);
	int r = nghttp2_session_server_new2(&h->cl, cbs, h, opt);
	if (r == 0)
		r = nghttp2_session_client_new2(&h->up, cbs, h, opt);
	nghttp2_session_callbacks_del(cbs);
	nghttp2_option_del(opt);
	const nghttp2_settings_entry cl_set[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, TLS_H2_MAX_STREAMS },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, TLS_H2_STREAM_WINDOW },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, TLS_H2_HEADERS_MAX },
	};
	const nghttp2_settings_entry up_set[] = {
		{ NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, TLS_H2_MAX_STREAMS },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, TLS_H2_STREAM_WINDOW },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, TLS_H2_HEADERS_MAX },
	};
	if (r == 0)
		r = nghttp2_submit_settings(h->cl, NGHTTP2_FLAG_NONE, cl_set, sizeof(cl_set) / sizeof(cl_set[0]));
	if (r == 0)
		r = nghttp2_submit_settings(h->up, NGHTTP2_FLAG_NONE, up_set, sizeof(up_set) / sizeof(up_set[0]));
	if (r == 0)
		r = nghttp2_session_set_local_window_size(h->cl, NGHTTP2_FLAG_NONE, 0, TLS_H2_CONN_WINDOW);
	if (r == 0)
		r = nghttp2_session_set_local_window_size(h->up, NGHTTP2_FLAG_NONE, 0, TLS_H2_CONN_WINDOW);
	if (r != 0) {
		tls_h2_free(h);
		return NULL;
	}
	return h;
}

void tls_h2_free(struct tls_h2 *h)
{
	if (!h)
		return;
	while (h->streams) {
		struct h2s *s = h->streams;
		s->cl_open = s->up_open = false;
		maybe_free(s);
	}
	nghttp2_session_del(h->cl);
	nghttp2_session_del(h->up);
	free(h);
}

int tls_h2_recv(struct tls_h2 *h, bool from_client, const char *buf, size_t len)
{
	nghttp2_session *s = from_client ? h->cl : h->up;
	ssize_t r = nghttp2_session_mem_recv(s, (const uint8_t *)buf, len);
	if (r < 0 || (size_t)r != len) {
		h->failed = true;
		return -1;
	}
	return 0;
}

void tls_h2_refuse_all(struct tls_h2 *h, enum reason why)
{
	h->refuse_all = why;
	h->up_gone = true;
}

void tls_h2_upstream_closed(struct tls_h2 *h)
{
	if (h->up_gone)
		return;
	h->up_gone = true;
	for (struct h2s *s = h->streams, *next; s; s = next) {
		next = s->next;
		if (!s->up_open)
			continue;
		s->up_open = false;
		half_drop(h, &s->req, h->cl, s->cid, s->cl_open);
		if (s->cl_open && !(s->resp_started && s->resp.eof))
			nghttp2_submit_rst_stream(h->cl, NGHTTP2_FLAG_NONE, s->cid, NGHTTP2_INTERNAL_ERROR);
		maybe_free(s);
	}
	nghttp2_submit_goaway(h->cl, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h->cl),
			      NGHTTP2_NO_ERROR, NULL, 0);
}

ssize_t tls_h2_send(struct tls_h2 *h, bool to_client, const uint8_t **data)
{
	if (!to_client && h->up_gone) { /* nowhere to go: the session's output is dropped */
		while (nghttp2_session_mem_send(h->up, data) > 0)
			;
		return 0;
	}
	ssize_t r = nghttp2_session_mem_send(to_client ? h->cl : h->up, data);
	if (r < 0)
		h->failed = true;
	return r;
}

bool tls_h2_done(const struct tls_h2 *h)
{
	if (h->failed)
		return true;
	if (!nghttp2_session_want_read(h->cl) && !nghttp2_session_want_write(h->cl))
		return true;
	if (h->streams || h->refuse_all)
		return false;
	return h->up_gone ? !nghttp2_session_want_write(h->cl)
			  : !nghttp2_session_want_read(h->up) && !nghttp2_session_want_write(h->up);
}

size_t tls_h2_buffered(const struct tls_h2 *h) { return h->buffered; }
