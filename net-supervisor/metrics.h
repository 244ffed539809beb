/* Counters of one net-supervisor, rendered in the Prometheus text format.
 * Updated on the loop thread only (plain integers); the audit counters are
 * read from the audit queue at render time. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/reason.h"
#include "net-supervisor/identity_strategy.h"
#include "net-supervisor/tunnel.h"

#define METRICS_LATENCY_BUCKETS 23

struct auditq;

struct metrics {
	/* decisions[allow][reason][source] */
	uint64_t decisions[2][REASON__COUNT][FLOW_SOURCE__COUNT];
	uint64_t id_latency_buckets[METRICS_LATENCY_BUCKETS]; /* cumulative at render */
	uint64_t id_latency_count;
	double id_latency_sum_s;
	uint64_t conns_active;
	uint64_t conns_total;
	uint64_t conns_limit;   /* --max-connections as the fd limit allows it */
	uint64_t accept_errors; /* accept() failures (EMFILE: the backlog is dropped) */
	uint64_t conns_dropped; /* over the limit with NETSUP_MAX_REJECTING 503s pending */
	uint64_t fd_exhausted;  /* upstream sockets refused for lack of descriptors */
	uint64_t bytes_up;   /* client → upstream */
	uint64_t bytes_down; /* upstream → client */
	uint64_t relay_held; /* filled at render: buffer bytes held by queued writes */
	uint64_t relay_memory; /* --relay-memory */
	uint64_t resolutions; /* upstream name lookups started */
	/* --upstream-proxy: tunnels it opened, and its failures by reason */
	bool upstream_proxy;
	uint64_t upstream_proxy_tunnels;
	uint64_t upstream_proxy_errors[REASON__COUNT];
	/* transparent capture (transparent.h): flows taken, by what the peek
	 * saw (tls, http, other, incomplete), and connections to the capture
	 * port that had no original destination (reset) */
	uint64_t transparent_flows[4];
	uint64_t transparent_unredirected;
	/* TLS inspection (tls_inspect.h): inspected tunnels, their failures
	 * by reason, and the requests inside by decision and reason */
	uint64_t tls_inspected;
	uint64_t tls_errors[REASON__COUNT];
	uint64_t http_requests[2][REASON__COUNT]; /* [allow][reason] */
	/* flows whose decision could not be written to the audit file */
	uint64_t audit_unrecorded_denied;   /* answered 503 audit_unavailable */
	uint64_t audit_unrecorded_answered; /* --audit-failure allow: answered anyway */
	uint64_t policy_reloads_ok;
	uint64_t policy_reloads_failed;
	uint64_t policy_generation;
	uint64_t tunnels_revoked[REVOKE__COUNT]; /* by revoke_why */
	bool ready;
	/* Local identity only (filled at render time): where its answers were
	 * made, and the loop's attempts that ran past their link budget. */
	bool have_local;
	uint64_t local_on_loop, local_on_pool, local_over_budget;
	uint64_t local_feed_hits, local_feed_fallbacks; /* identity feed (appended) */
	/* Delegated identity only (filled at render time): the control
	 * channel's clock skew (proto/verifier.h verifier_clock). */
	bool have_clock, clock_measured;
	double clock_skew_s, clock_skew_max_s;
};

void metrics_decision(struct metrics *m, bool allow, enum reason reason, enum flow_source src);
void metrics_identity_latency(struct metrics *m, uint64_t ns);
/* malloc'd text; *len without NUL. */
char *metrics_render(const struct metrics *m, const struct auditq *q, size_t *len);
