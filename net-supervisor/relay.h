/* The relay: once a flow is allowed and connected upstream, bytes move both
 * ways between the two sides of a conn (conn.h) until both have closed,
 * whatever front end accepted the flow. Large reads, uv_try_write first,
 * backpressure by stopping reads when the other side's write queue passes
 * its share of --high-water / --relay-memory, half-close via shutdown,
 * idle timeout (audited egress_error idle_timeout). With --splice the
 * bytes move by splice(2) instead (relay_splice.c), falling back to the
 * buffer relay when that cannot be set up. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "net-supervisor/conn.h"

/* Who owns a buffer handed to relay_send. */
enum bufown {
	BUF_MALLOC,  /* free() it */
	BUF_POOLED,  /* bufpool_put() it */
	BUF_BIG,     /* the source side's bulk buffer: stays with it unless queued */
};

/* Send len bytes of buf to dst (before or during the relay); own says who
 * owns buf, and the relay takes it over either way. 0, or -errno (the
 * caller closes the conn). */
int relay_send(struct side *dst, char *buf, size_t len, enum bufown own);
/* Move the conn to C_RELAY and start moving bytes. */
void relay_start(struct conn *c);
/* The idle timer's callback while relaying (c->timer). */
void relay_idle_check(uv_timer_t *t);

/* relay_splice.c: true when the conn now relays by splice (--splice on,
 * nothing queued in libuv, the pipes set up). */
bool relay_splice_start(struct conn *c);
/* Stop splicing and close its handles (on conn_close). */
void relay_splice_close(struct conn *c);
