/* TLS inspection of an allowed CONNECT (policy endpoint `tls: inspect`;
 * docs/network-policy.md). A sibling of the relay (relay.h): the front end
 * (proxy.c) decides and audits the flow exactly as for any CONNECT and,
 * once connected upstream, hands the conn here instead of to the relay.
 *
 * Order, so that nothing unverified is ever relayed:
 *   1. TLS to the real server first, before the CONNECT is answered: SNI
 *      and the host-name check use the name the client sent (an address
 *      literal is checked as an IP SAN), the chain is verified against the
 *      system trust store or --upstream-ca; ALPN offers http/1.1 only.
 *      A failure is answered 502 with upstream_cert_invalid (verification)
 *      or upstream_tls_failed (anything else), audited as egress_error.
 *   2. "200 Connection established", then TLS with the client using a leaf
 *      minted for that name by the sandbox CA (tls_ca.h). A client that
 *      does not complete it is audited client_tls_failed.
 *   3. Plaintext moves between the two sessions (memory BIOs over the two
 *      libuv streams), bounded by --high-water per direction, with the
 *      relay's idle timeout; the conn is C_RELAY, so revocation closes it
 *      like any tunnel. Either side's close (close_notify or EOF) ends
 *      both, after what is queued has been written. */
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
