#include "net-supervisor/httpreq.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "policy/network.h"

static int fail(struct httpreq *r, enum reason reason, int status)
{
	if (r->error == REASON_OK) {
		r->error = reason;
		r->status = status;
	}
	return -1;
}

static int append(char **dst, size_t *dlen, const char *at, size_t len)
{
	char *n = realloc(*dst, *dlen + len + 1);
	if (!n)
		return -1;
	memcpy(n + *dlen, at, len);
	*dlen += len;
	n[*dlen] = '\0';
	*dst = n;
	return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
	struct httpreq *r = p->data;
	return append(&r->url, &r->url_len, at, len) < 0 ? (fail(r, REASON_INTERNAL_ERROR, 500), 1) : 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
	struct httpreq *r = p->data;
	if (r->in_value || r->n_headers == 0) {
		if (r->n_headers >= r->limits.max_headers) {
			fail(r, REASON_TOO_MANY_HEADERS, 431);
			return 1;
		}
		struct httpreq_header *h = realloc(r->headers, (r->n_headers + 1) * sizeof(*h));
		if (!h)
			return fail(r, REASON_INTERNAL_ERROR, 500), 1;
		r->headers = h;
		h[r->n_headers].name = NULL;
		h[r->n_headers].value = NULL;
		r->n_headers++;
		r->in_value = false;
	}
	struct httpreq_header *h = &r->headers[r->n_headers - 1];
	size_t cur = h->name ? strlen(h->name) : 0;
	return append(&h->name, &cur, at, len) < 0 ? (fail(r, REASON_INTERNAL_ERROR, 500), 1) : 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
	struct httpreq *r = p->data;
	if (r->n_headers == 0)
		return fail(r, REASON_BAD_REQUEST, 400), 1;
	struct httpreq_header *h = &r->headers[r->n_headers - 1];
	if (!h->value) {
		h->value = strdup("");
		if (!h->value)
			return fail(r, REASON_INTERNAL_ERROR, 500), 1;
	}
	r->in_value = true;
	size_t cur = strlen(h->value);
	return append(&h->value, &cur, at, len) < 0 ? (fail(r, REASON_INTERNAL_ERROR, 500), 1) : 0;
}

/* 2 = "skip the body and stop": http-parser then returns right after the
 * head with parser->upgrade set; whatever follows is relayed raw. */
static int on_headers_complete(http_parser *p) { return 2; }

static const http_parser_settings settings = {
	.on_url = on_url,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
};

void httpreq_init(struct httpreq *r, const struct httpreq_limits *limits)
{
	memset(r, 0, sizeof(*r));
	r->limits.max_header_bytes = limits && limits->max_header_bytes ? limits->max_header_bytes : 16384;
	r->limits.max_headers = limits && limits->max_headers ? limits->max_headers : 100;
	http_parser_init(&r->parser, HTTP_REQUEST);
	r->parser.data = r;
}

void httpreq_done(struct httpreq *r)
{
	for (size_t i = 0; i < r->n_headers; i++) {
		free(r->headers[i].name);
		free(r->headers[i].value);
	}
	free(r->headers);
	free(r->url);
	free(r->path);
	r->headers = NULL;
	r->n_headers = 0;
	r->url = r->path = NULL;
}

static const char *header_get(const struct httpreq *r, const char *name, size_t *count)
{
	const char *v = NULL;
	size_t c = 0;
	for (size_t i = 0; i < r->n_headers; i++)
		if (r->headers[i].name && strcasecmp(r->headers[i].name, name) == 0) {
			if (!v)
				v = r->headers[i].value ? r->headers[i].value : "";
			c++;
		}
	if (count)
		*count = c;
	return v;
}

/* "host", "host:port", "[v6]", "[v6]:port" → normalised host and port. */
static int split_hostport(const char *s, size_t len, char *host, size_t hsize, uint16_t *port,
			  bool port_required)
{
	char buf[300];
	const char *hs, *ps = NULL;
	size_t hl;
	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (buf[0] == '[') {
		char *rb = strchr(buf, ']');
		if (!rb)
			return -1;
		hs = buf;
		hl = (size_t)(rb - buf) + 1;
		if (rb[1] == ':')
			ps = rb + 2;
		else if (rb[1] != '\0')
			return -1;
	} else {
		char *colon = strchr(buf, ':');
		if (colon && strchr(colon + 1, ':'))
			return -1; /* bare IPv6 is ambiguous here */
		hs = buf;
		hl = colon ? (size_t)(colon - buf) : len;
		if (colon)
			ps = colon + 1;
	}
	if (ps) {
		if (!*ps || strlen(ps) > 5)
			return -1;
		unsigned long v = 0;
		for (const char *q = ps; *q; q++) {
			if (!isdigit((unsigned char)*q))
				return -1;
			v = v * 10 + (unsigned long)(*q - '0');
		}
		if (v == 0 || v > 65535)
			return -1;
		*port = (uint16_t)v;
	} else if (port_required) {
		return -1;
	}
	char h[300];
	memcpy(h, hs, hl);
	h[hl] = '\0';
	return netpol_host_normalize(h, host, hsize) < 0 ? -1 : 0;
}

/* RFC 7230 token (a header name). http-parser, built without
 * HTTP_PARSER_STRICT, also lets a space through: " Host: x" (a first line
 * that starts with whitespace) or "Host : x" would then escape the Host and
 * framing checks below under a name of their own, and a lenient upstream
 * would read them as Host. */
static bool is_token(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s))
			return false;
	return true;
}

static int finish(struct httpreq *r)
{
	http_parser *p = &r->parser;
	r->http_major = p->http_major;
	r->http_minor = p->http_minor;
	strscpy(r->method, http_method_str((enum http_method)p->method), sizeof(r->method));
	if (p->http_major != 1 || p->http_minor > 1)
		return fail(r, REASON_BAD_REQUEST, 400);
	if (!r->url || r->url_len == 0 || memchr(r->url, '\0', r->url_len))
		return fail(r, REASON_BAD_REQUEST, 400);
	/* http-parser describes URL fields with 16-bit offsets and lengths: a
	 * longer target would be cut at the wrong places. */
	if (r->url_len > UINT16_MAX)
		return fail(r, REASON_HEADER_TOO_LARGE, 431);
	for (size_t i = 0; i < r->n_headers; i++)
		if (!r->headers[i].name || !is_token(r->headers[i].name))
			return fail(r, REASON_BAD_REQUEST, 400);
	size_t n_host;
	const char *host_hdr = header_get(r, "Host", &n_host);
	if (n_host > 1)
		return fail(r, REASON_BAD_REQUEST, 400);

	if (p->method == HTTP_CONNECT) {
		r->is_connect = true;
		if (split_hostport(r->url, r->url_len, r->host, sizeof(r->host), &r->port, true) < 0)
			return fail(r, REASON_BAD_REQUEST, 400);
		return 0;
	}
	if (r->url[0] == '/')
		return fail(r, REASON_BAD_REQUEST, 400); /* origin-form: not a proxy request */
	struct http_parser_url u;
	http_parser_url_init(&u);
	if (http_parser_parse_url(r->url, r->url_len, 0, &u) != 0)
		return fail(r, REASON_BAD_REQUEST, 400);
	if (!(u.field_set & (1 << UF_SCHEMA)) || !(u.field_set & (1 << UF_HOST)) ||
	    (u.field_set & (1 << UF_USERINFO)))
		return fail(r, REASON_BAD_REQUEST, 400);
	if (u.field_data[UF_SCHEMA].len != 4 ||
	    strncasecmp(r->url + u.field_data[UF_SCHEMA].off, "http", 4) != 0)
		return fail(r, REASON_BAD_REQUEST, 400);
	/* The authority as written: host plus optional [..] and :port. */
	size_t hoff = u.field_data[UF_HOST].off, hlen = u.field_data[UF_HOST].len;
	if (hoff > 0 && r->url[hoff - 1] == '[') {
		hoff--;
		hlen += 2;
	}
	/* The host must open the authority, right after "http://": anything
	 * before it is userinfo, which http-parser does not report when it is
	 * empty ("http://@evil.example/"). */
	if (hoff != (size_t)u.field_data[UF_SCHEMA].off + 4 + 3)
		return fail(r, REASON_BAD_REQUEST, 400);
	r->port = 80;
	if (u.field_set & (1 << UF_PORT)) {
		if (u.port == 0)
			return fail(r, REASON_BAD_REQUEST, 400);
		r->port = u.port;
	}
	if (split_hostport(r->url + hoff, hlen, r->host, sizeof(r->host), &(uint16_t){ 0 }, false) < 0)
		return fail(r, REASON_BAD_REQUEST, 400);
	size_t plen = (u.field_set & (1 << UF_PATH)) ? u.field_data[UF_PATH].len : 0;
	size_t qlen = (u.field_set & (1 << UF_QUERY)) ? u.field_data[UF_QUERY].len : 0;
	r->path = malloc(plen + qlen + 3);
	if (!r->path)
		return fail(r, REASON_INTERNAL_ERROR, 500);
	size_t o = 0;
	if (plen) {
		memcpy(r->path, r->url + u.field_data[UF_PATH].off, plen);
		o = plen;
	} else {
		r->path[o++] = '/';
	}
	if (qlen) {
		r->path[o++] = '?';
		memcpy(r->path + o, r->url + u.field_data[UF_QUERY].off, qlen);
		o += qlen;
	}
	r->path[o] = '\0';
	if (host_hdr) {
		char hh[256];
		uint16_t hport = 80;
		if (split_hostport(host_hdr, strlen(host_hdr), hh, sizeof(hh), &hport, false) < 0)
			return fail(r, REASON_HOST_MISMATCH, 400);
		if (strcmp(hh, r->host) != 0 || hport != r->port)
			return fail(r, REASON_HOST_MISMATCH, 400);
	}
	size_t n_te, n_cl;
	header_get(r, "Transfer-Encoding", &n_te);
	header_get(r, "Content-Length", &n_cl);
	if ((n_te && n_cl) || n_cl > 1)
		return fail(r, REASON_BAD_REQUEST, 400); /* request smuggling shapes */
	return 0;
}

int httpreq_feed(struct httpreq *r, const char *data, size_t len, size_t *used)
{
	*used = 0;
	if (r->error != REASON_OK)
		return -1;
	if (r->done)
		return 1;
	if (len == 0)
		return 0;
	size_t room = r->limits.max_header_bytes - r->consumed;
	size_t n = len < room ? len : room;
	size_t np = http_parser_execute(&r->parser, &settings, data, n);
	/* Strict line endings: every LF must follow a CR and every CR be
	 * followed by LF. http-parser tolerates bare LF, and takes any byte
	 * after the head's last CR as its end; a proxy that reads a head
	 * differently from the upstream is a smuggling vector, so refuse. */
	for (size_t i = 0; i < np; i++) {
		if ((data[i] == '\n') != r->prev_cr)
			return fail(r, REASON_BAD_REQUEST, 400);
		r->prev_cr = data[i] == '\r';
	}
	r->consumed += np;
	if (r->error != REASON_OK)
		return -1;
	if (r->parser.upgrade) {
		r->done = true;
		*used = np;
		if (finish(r) < 0)
			return -1;
		return 1;
	}
	if (HTTP_PARSER_ERRNO(&r->parser) != HPE_OK || np != n) {
		if (HTTP_PARSER_ERRNO(&r->parser) == HPE_HEADER_OVERFLOW)
			return fail(r, REASON_HEADER_TOO_LARGE, 431);
		return fail(r, REASON_BAD_REQUEST, 400);
	}
	if (r->consumed >= r->limits.max_header_bytes)
		return fail(r, REASON_HEADER_TOO_LARGE, 431);
	*used = np;
	return 0;
}

static bool hop_by_hop(const char *name, const char *connection)
{
	static const char *const fixed[] = { "connection", "proxy-connection", "keep-alive",
					     "proxy-authorization", "proxy-authenticate", "te",
					     "trailer", "upgrade" };
	for (size_t i = 0; i < ARRAY_SIZE(fixed); i++)
		if (strcasecmp(name, fixed[i]) == 0)
			return true;
	/* Headers the client listed in Connection are hop-by-hop too. */
	if (connection) {
		size_t nl = strlen(name);
		for (const char *t = connection; *t;) {
			while (*t == ' ' || *t == '\t' || *t == ',')
				t++;
			size_t tl = strcspn(t, ", \t");
			if (tl == nl && strncasecmp(t, name, nl) == 0)
				return true;
			t += tl;
		}
	}
	return false;
}

char *httpreq_upstream_head(const struct httpreq *r, size_t *len)
{
	const char *connection = header_get(r, "Connection", NULL);
	size_t cap = strlen(r->method) + strlen(r->path) + 64 + strlen(r->host) + 16;
	for (size_t i = 0; i < r->n_headers; i++)
		cap += strlen(r->headers[i].name) + (r->headers[i].value ? strlen(r->headers[i].value) : 0) + 4;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	size_t o = (size_t)snprintf(out, cap, "%s %s HTTP/%u.%u\r\n", r->method, r->path,
				    r->http_major, r->http_minor);
	bool have_host = false;
	for (size_t i = 0; i < r->n_headers; i++) {
		const struct httpreq_header *h = &r->headers[i];
		if (hop_by_hop(h->name, connection))
			continue;
		if (strcasecmp(h->name, "Host") == 0)
			have_host = true;
		o += (size_t)snprintf(out + o, cap - o, "%s: %s\r\n", h->name, h->value ? h->value : "");
	}
	if (!have_host) {
		bool v6 = strchr(r->host, ':') != NULL;
		if (r->port == 80)
			o += (size_t)snprintf(out + o, cap - o, "Host: %s%s%s\r\n", v6 ? "[" : "", r->host, v6 ? "]" : "");
		else
			o += (size_t)snprintf(out + o, cap - o, "Host: %s%s%s:%u\r\n", v6 ? "[" : "", r->host,
					      v6 ? "]" : "", r->port);
	}
	o += (size_t)snprintf(out + o, cap - o, "Connection: close\r\n\r\n");
	*len = o;
	return out;
}
