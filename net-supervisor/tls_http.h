/* The HTTP/1.1 requests inside an inspected TLS connection (tls_inspect.h),
 * each its own decision (policy/httprules.h). Plaintext from the client
 * goes through tls_http_client(): a request's head is held until it is
 * decided, then it and its body are passed on (forward), and the next
 * request's bytes wait for their own decision; pipelined requests are
 * decided one at a time. A WebSocket upgrade that is allowed turns the rest
 * of the connection into opaque bytes. Plaintext from the server goes
 * through tls_http_server() only to learn each answer's status for the
 * audit (it never holds anything back).
 *
 * Bounds: a request head (line + headers) of at most 64 KiB; a request
 * target of at most 8 KiB; at most 64 requests decided and not yet
 * answered (a client pipelining more is refused). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "policy/httprules.h"

struct tls_http;

struct tls_http_ops {
	/* Decide one request (method, target as sent, websocket upgrade?). */
	struct netpol_http_decision (*decide)(void *ctx, const char *method, const char *target, bool websocket);
	/* Pass len bytes on to the server. 0 or -errno. */
	int (*forward)(void *ctx, const char *buf, size_t len);
	/* One request is done with: status is the server's (0: none came,
	 * the connection ended first), or 403 for a denied request. */
	void (*record)(void *ctx, const char *method, const char *target, int status,
		       const struct netpol_http_decision *d);
	/* Optional: an allowed request's head (through CRLF CRLF) before it is
	 * passed on: 0 unchanged, 1 *out (malloc'd, *out_len) goes instead,
	 * -1 refused (d turned into the denial, d->credential set). */
	int (*rewrite)(void *ctx, const char *head, size_t len, char **out, size_t *out_len,
		       struct netpol_http_decision *d);
};

/* What tls_http_client() says. */
enum tls_http_verdict {
	TLS_HTTP_OK = 0,  /* go on */
	TLS_HTTP_DENIED,  /* the current request is denied: answer 403 (already recorded), then close */
	TLS_HTTP_BAD,     /* not HTTP/1.1 we can judge: answer 400 http_bad_request, then close */
	TLS_HTTP_ERROR,   /* forward failed or out of memory: close */
};

struct tls_http *tls_http_new(const struct tls_http_ops *ops, void *ctx);
/* Records every decided request no answer came for (status 0), then frees. */
void tls_http_free(struct tls_http *h);

enum tls_http_verdict tls_http_client(struct tls_http *h, const char *buf, size_t len);
void tls_http_server(struct tls_http *h, const char *buf, size_t len);

/* The denial the last TLS_HTTP_DENIED was for. */
const struct netpol_http_decision *tls_http_denial(const struct tls_http *h);
