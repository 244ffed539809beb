/* The egress proxy: listeners and client connections.
 *
 * Per connection: read the request head (httpreq, with size/count/time
 * limits) → not ready? 503 → resolve identity (strategy, with timeout) and
 * the destination (uv_getaddrinfo on the thread pool) in parallel → decide
 * for every resolved address (netpolicy_decide) → 403 with a JSON body, or
 * connect to the checked addresses in order (never resolving again) →
 * CONNECT: "200 Connection established" and a raw tunnel; absolute-form: the
 * rewritten head (origin-form, Connection: close), then the relay
 * (relay.h). Every outcome is one audit event (audit_line.h). */
#pragma once

#include "net-supervisor/context.h"
#include "net-supervisor/tunnel.h"

int proxy_listen(struct netsup *ns, const char *addr, struct proxy_listener **out);
void proxy_listener_close(struct proxy_listener *l);
/* Close every open connection (shutdown). */
void proxy_close_all(struct netsup *ns);
/* Close every allowed flow still open (connecting or relaying) for which
 * judge gives a reason, auditing each as tunnel_revoked (revoke.h).
 * Returns how many were closed. */
size_t proxy_revoke_tunnels(struct netsup *ns,
			    enum revoke_why (*judge)(const struct tunnel_view *t, void *data), void *data);
