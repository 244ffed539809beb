/* HTTP/2 inside an inspected TLS connection (tls_inspect.h), both sides
 * with libnghttp2: a server session toward the client, a client session
 * toward the upstream, streams mapped 1:1. No I/O here: the caller feeds
 * each session the plaintext its TLS session read (tls_h2_recv) and writes
 * out what each has to send (tls_h2_send).
 *
 * Each client stream is its own decision with the same functions as an
 * HTTP/1.1 request (tls_http_ops: decide on :method and :path — gRPC
 * methods are paths —, rewrite for the credential placeholders in the
 * request's headers, record for the `http_request` audit line). A denied
 * stream is answered 403 (400 for a request that cannot be judged) with
 * `x-tether-reason: <word>` and a JSON body on that stream alone; the other
 * streams go on. Extended CONNECT (WebSocket over h2, RFC 8441) is never
 * enabled; a CONNECT stream is refused websocket_not_allowed. Interim (1xx)
 * answers are not passed on; trailers are, both ways (gRPC's status).
 *
 * Flow control is honoured both ways: neither session opens its peer's
 * window by itself (NO_AUTO_WINDOW_UPDATE); the bytes of a stream's DATA
 * are consumed only when the other session has taken them (its data
 * provider, deferred while nothing is buffered, resumed as data comes).
 * So what waits here per direction is bounded by the connection window we
 * give each peer (TLS_H2_CONN_WINDOW); it is counted in *held (the relay
 * memory budget) while it waits. At most TLS_H2_MAX_STREAMS concurrent
 * client streams (SETTINGS_MAX_CONCURRENT_STREAMS: nghttp2 refuses more
 * with RST_STREAM REFUSED_STREAM); a request's header block at most
 * TLS_H2_HEADERS_MAX bytes (more: refused 400). An upstream RST_STREAM is
 * passed on to its client stream with its error code; an upstream GOAWAY
 * becomes a GOAWAY to the client (the streams it had refused are reset
 * REFUSED_STREAM, so the client may retry them). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "net-supervisor/tls_http.h"

#define TLS_H2_MAX_STREAMS 100
#define TLS_H2_STREAM_WINDOW (256 * 1024)
#define TLS_H2_CONN_WINDOW (1024 * 1024)
#define TLS_H2_HEADERS_MAX (64 * 1024)

struct tls_h2;

/* The ops' decide, record and rewrite are used (forward is not). held:
 * where the bytes waiting here are counted (may be NULL). NULL when out
 * of memory. */
struct tls_h2 *tls_h2_new(const struct tls_http_ops *ops, void *ctx, _Atomic size_t *held);
/* Records every allowed stream no answer came for (status 0), then frees;
 * NULL is fine. */
void tls_h2_free(struct tls_h2 *h);

/* Plaintext one side's TLS session read. 0, or -1: that session failed
 * (a protocol error the library could not answer on a stream); end both. */
int tls_h2_recv(struct tls_h2 *h, bool from_client, const char *buf, size_t len);

/* What the session toward to_client has to send next: > 0 bytes at
 * *data (valid until the next call), 0 nothing now, < 0 an error. */
ssize_t tls_h2_send(struct tls_h2 *h, bool to_client, const uint8_t **data);

/* The server's connection ended (EOF, or its TLS session closed): its
 * streams that had not answered in full are reset toward the client
 * (INTERNAL_ERROR), the answers already here are still delivered, then a
 * GOAWAY; nothing more is sent toward the server. Idempotent. */
void tls_h2_upstream_closed(struct tls_h2 *h);

/* The server's handshake failed (why: upstream_cert_invalid,
 * upstream_tls_failed): there is no server session; every stream the
 * client opens is answered 502 with x-tether-reason: why (not recorded:
 * the connection's egress_error says it), until the client goes. */
void tls_h2_refuse_all(struct tls_h2 *h, enum reason why);

/* Both sessions are done (the client's ended, or the upstream's with no
 * stream left to finish, or its connection ended and every answer was
 * delivered): the connection may close. */
bool tls_h2_done(const struct tls_h2 *h);

/* How many bytes of DATA wait here now (both directions). */
size_t tls_h2_buffered(const struct tls_h2 *h);
