/* Proxy request heads: CONNECT authority-form and absolute-form http://
 * requests, parsed incrementally with http-parser and validated into a
 * struct httpreq. Pure (no sockets): the proxy and the fuzzer feed bytes.
 *
 * Limits are enforced while bytes arrive, so a hostile client never makes
 * the proxy buffer more than max_header_bytes: too large (or a request
 * target above 64 KiB, which http-parser cannot describe) → 431
 * header_too_large; too many header lines → 431 too_many_headers; bare LF
 * or bare CR line endings, garbage, origin-form targets, https://
 * absolute-form, userinfo (even empty), bad hosts or ports, duplicate Host,
 * header names that are not RFC 7230 tokens (" Host", "Host ") → 400
 * bad_request; a Host header that differs from the absolute URI → 400
 * host_mismatch. */
#pragma once

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/reason.h"

struct httpreq_limits {
	size_t max_header_bytes; /* default 16 KiB */
	size_t max_headers;      /* default 100 */
};

struct httpreq_header {
	char *name;
	char *value;
};

struct httpreq {
	http_parser parser;
	struct httpreq_limits limits;
	size_t consumed;      /* head bytes seen so far */
	bool prev_cr;         /* line-ending check across feeds */
	bool in_value;        /* last callback was a header value */
	bool done;
	/* error state */
	enum reason error;    /* REASON_OK while fine */
	int status;           /* HTTP status to answer with on error */
	/* result */
	bool is_connect;
	char method[24];
	unsigned http_major, http_minor;
	char host[256];       /* normalised (netpol_host_normalize) */
	uint16_t port;
	char *path;           /* absolute-form: path + query, origin-form for upstream */
	char *url;            /* raw request target */
	size_t url_len;
	struct httpreq_header *headers;
	size_t n_headers;
};

void httpreq_init(struct httpreq *r, const struct httpreq_limits *limits);
void httpreq_done(struct httpreq *r);
/* Feed bytes. Returns 0 when more bytes are needed, 1 when the head is
 * complete (*used = bytes of data that belong to the head; the rest is
 * tunnel or body data), or -1 with r->error / r->status set. */
int httpreq_feed(struct httpreq *r, const char *data, size_t len, size_t *used);
/* The head to send upstream for absolute-form: origin-form request line,
 * hop-by-hop headers dropped, "Connection: close" added. malloc'd, NUL
 * terminated; *len without the NUL. NULL on ENOMEM. */
char *httpreq_upstream_head(const struct httpreq *r, size_t *len);
