/* TLS inspection of an allowed CONNECT (policy endpoint `tls: inspect`;
 * docs/network-policy.md). A sibling of the relay (relay.h): the front end
 * (proxy.c) decides and audits the flow exactly as for any CONNECT and,
 * once connected upstream, hands the conn here instead of to the relay.
 *
 * Order, so that nothing unverified is ever relayed and the client gets
 * the protocol the real server speaks (ALPN carried through):
 *   1. "200 Connection established"; the client's ClientHello is read
 *      (flowpeek.h) without answering it: its ALPN offer is kept (h2 and
 *      http/1.1 only; nothing else inspection can carry).
 *   2. TLS to the real server offering that list (none: no ALPN): SNI
 *      and the host-name check use the name the client sent (an address
 *      literal is checked as an IP SAN), the chain is verified against the
 *      system trust store or --upstream-ca. A failure is audited as
 *      egress_error with upstream_cert_invalid (verification) or
 *      upstream_tls_failed (anything else) and status 502; the client's
 *      TLS is still terminated (http/1.1 if it offered it, else h2: each
 *      stream) and answered 502 with that reason inside it; nothing of
 *      the server is relayed.
 *   3. TLS with the client using a leaf minted for that name by the
 *      sandbox CA (tls_ca.h), selecting by ALPN only what the upstream
 *      selected (none → none, as a real server would). A client that
 *      does not complete it is audited client_tls_failed.
 *   4. HTTP/1.1: plaintext through the request gate (tls_http.h);
 *      HTTP/2 (the server selected h2): two nghttp2 sessions (tls_h2.h).
 *      Plaintext moves between the two sessions (memory BIOs over the two
 *      libuv streams), bounded by --high-water per direction, with the
 *      relay's idle timeout (which also bounds steps 1-3); the conn is
 *      C_RELAY, so revocation closes it like any tunnel. Either side's
 *      close (close_notify or EOF) ends both, after what is queued has
 *      been written (HTTP/2: the server's close first lets the answers
 *      already received reach the client). */
#pragma once

#include <stdbool.h>
#include <openssl/ssl.h>

#include "net-supervisor/conn.h"

/* The client SSL_CTX every upstream session is made from: verify the peer
 * against ca_file (PEM, for tests and private CAs) or, when NULL, the
 * system's default trust store; TLS 1.2 at least. NULL on error (logged). */
SSL_CTX *tls_inspect_upstream_ctx(const char *ca_file);

/* Connected upstream (directly or through the corporate proxy) and the
 * decision says inspect: take over the conn (step 1 on). Answers and
 * audits every failure itself. */
void tls_inspect_start(struct conn *c);

/* Free the conn's inspection state (conn_free); idempotent. */
void tls_inspect_free(struct conn *c);
