/* identity_feed: the net-supervisor's reader of the anchor's identity feed
 * (connect-time identity, identity/idfeed.h; docs/identity.md).
 *
 * The local strategy owns one client. Once the strategy has established its
 * anchor it calls idfeed_client_set_anchor with the anchor's process key;
 * the client connects to the feed socket and accepts it only when the
 * process at the other end (SO_PEERPIDFD) has exactly that key, i.e. is the
 * verified anchor itself — anything else is closed, counted (rejected) and
 * retried later; nothing read from it is ever used. Losing or changing the
 * anchor closes the connection and forgets every record.
 *
 * Records (cookie -> verified identity, or "refused") are kept in a bounded
 * table (IDFEED_TABLE entries, oldest overwritten). A flow is looked up by
 * its socket's cookie:
 *   idfeed_client_lookup  1: a verified identity (*out, the caller's);
 *                         0: fall back now (no feed, or the anchor said it
 *                            could not verify the connector);
 *                         -EINPROGRESS: not known yet; idfeed_client_wait.
 *   idfeed_client_wait    calls cb once, on the loop: with the identity when
 *                         its record arrives, or NULL (fall back) when the
 *                         anchor refused it or the wait ran out: wait_ms for
 *                         a cookie the feed never mentioned (a socket the
 *                         notifier did not see: inherited, handed in), due_ms
 *                         once the anchor announced the record ("due").
 *                         When a wait ran out with nothing at all read from
 *                         the feed meanwhile (it is stalled), cookies it has
 *                         not mentioned fall back at once for 100 ms.
 * One feed subscription per net-supervisor (--workers): the client made by
 * idfeed_client_new (the owner, the main worker's) holds the connection and
 * reads it on its loop; each other worker gets a view
 * (idfeed_client_new_view) on its own loop that shares the owner's table
 * (one mutex guards the table and every client's waiters). A view's
 * lookups read the shared table; its waiters are woken through its own
 * loop (uv_async) only when their record arrives, the connection goes, or
 * their wait runs out: a line no worker waits for wakes nobody. A client
 * (owner or view) uses the table only while the connection's peer is the
 * anchor its own strategy verified (idfeed_client_set_anchor on each);
 * otherwise it falls back. Losing or changing the owner's anchor closes
 * the connection, forgets every record and answers every client's waiters
 * NULL. Every function but the two constructors is called on the client's
 * own loop; idfeed_client_stats from any thread. TETHER_FORCE_FALLBACK=idfeed
 * (or all) disables the client and its views: every lookup falls back. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/flow_identity.h"
#include "common/kernel.h"

#define IDFEED_TABLE 16384

struct idfeed_client;

struct idfeed_client_stats {
	uint64_t connects;      /* accepted feed connections (peer = anchor) */
	uint64_t rejected;      /* connections whose peer was not the anchor */
	uint64_t records, refusals, dues, malformed; /* the shared connection's */
	/* this client's own (a view counts its worker's lookups only) */
	uint64_t hits;          /* lookups answered from the table */
	uint64_t waited_hits;   /* ... after waiting for the record */
	uint64_t fallbacks;     /* lookups that fell back (any cause) */
	uint64_t wait_timeouts; /* waits that ran out */
	uint64_t wakeups;       /* a view's loop woken by the owner's (uv_async) */
};

typedef void (*idfeed_wait_cb)(void *arg, struct flow_identity *id);

/* path: "unix:PATH" or a bare path. wait_ms/due_ms: 0 for the defaults
 * (3 and 200). -errno. */
int idfeed_client_new(uv_loop_t *loop, const struct kernel_caps *caps, const char *path, uint64_t wait_ms,
		      uint64_t due_ms, struct idfeed_client **out);
/* A view of owner's feed for another loop (a worker's; made before that
 * loop runs). Closed with idfeed_client_close, before or after the owner
 * (the shared table lives until the last client closed). -errno. */
int idfeed_client_new_view(struct idfeed_client *owner, uv_loop_t *loop, struct idfeed_client **out);
/* The anchor's process key, NULL when there is none (disconnect, forget). */
void idfeed_client_set_anchor(struct idfeed_client *c, const char *anchor_key);
int idfeed_client_lookup(struct idfeed_client *c, uint64_t cookie, struct flow_identity **out);
int idfeed_client_wait(struct idfeed_client *c, uint64_t cookie, idfeed_wait_cb cb, void *arg);
bool idfeed_client_active(const struct idfeed_client *c); /* connected to the verified anchor */
void idfeed_client_stats(const struct idfeed_client *c, struct idfeed_client_stats *out);
/* Pending waits are answered NULL; done(arg) runs once every handle closed. */
void idfeed_client_close(struct idfeed_client *c, void (*done)(void *arg), void *arg);
