/* The corporate upstream proxy's handshake on a connection of the proxy
 * (common/upstream_proxy.h has the configuration, the CONNECT request
 * and the reply parser). proxy.c calls upstream_hop_start() once a flow
 * is decided and its address checked. */
#pragma once

#include "common/reason.h"
#include "common/upstream_proxy.h"

/* The handshake on a connected upstream socket (conn.h): send the
 * CONNECT, read the reply head, then call done with REASON_OK or the
 * reason and the status to answer our client with. Bytes the corporate
 * proxy sent after its head belong to the tunnel: done sends them on with
 * upstream_hop_send_leftover() after its own answer, before the relay. */
struct conn;
typedef void (*upstream_done_cb)(struct conn *c, enum reason r, int status);
int upstream_hop_start(struct conn *c, upstream_done_cb done);
int upstream_hop_send_leftover(struct conn *c);
/* Free the handshake's state (once the tunnel is up, and in conn_free);
 * idempotent. */
void upstream_hop_free(struct conn *c);
