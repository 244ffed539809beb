/* Counters of one net-supervisor, rendered in the Prometheus text format.
 * One set for all workers (context.h): the counters are atomics, updated
 * from every worker's thread; the fields "filled at render" are written and
 * read by the main loop only. The audit counters are read from the audit
 * queue at render time. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/reason.h"
#include "net-supervisor/identity_strategy.h"
#include "net-supervisor/tunnel.h"

#define METRICS_LATENCY_BUCKETS 23
#define METRICS_MAX_WORKERS 8 /* at least NETSUP_MAX_WORKERS (context.h) */

struct auditq;

struct metrics {
	/* decisions[allow][reason][source] */
	_Atomic uint64_t decisions[2][REASON__COUNT][FLOW_SOURCE__COUNT];
	_Atomic uint64_t id_latency_buckets[METRICS_LATENCY_BUCKETS]; /* cumulative at render */
	_Atomic uint64_t id_latency_count;
	_Atomic uint64_t id_latency_sum_ns; /* rendered in seconds */
	_Atomic uint64_t conns_active;
	_Atomic uint64_t conns_total;
	_Atomic uint64_t conns_limit;   /* --max-connections as the fd limit allows it */
	_Atomic uint64_t accept_errors; /* accept() failures (EMFILE: the backlog is dropped) */
	_Atomic uint64_t conns_dropped; /* over the limit with NETSUP_MAX_REJECTING 503s pending */
	_Atomic uint64_t fd_exhausted;  /* upstream sockets refused for lack of descriptors */
	_Atomic uint64_t bytes_up;   /* client → upstream */
	_Atomic uint64_t bytes_down; /* upstream → client */
	_Atomic uint64_t relay_held; /* filled at render: buffer bytes held by queued writes */
	_Atomic uint64_t relay_memory; /* --relay-memory */
	_Atomic uint64_t resolutions; /* upstream name lookups started */
	/* --upstream-proxy: tunnels it opened, and its failures by reason */
	bool upstream_proxy;
	_Atomic uint64_t upstream_proxy_tunnels;
	_Atomic uint64_t upstream_proxy_errors[REASON__COUNT];
	/* transparent capture (transparent.h): flows taken, by what the peek
	 * saw (tls, http, other, incomplete), and connections to the capture
	 * port that had no original destination (reset) */
	_Atomic uint64_t transparent_flows[4];
	_Atomic uint64_t transparent_unredirected;
	/* TLS inspection (tls_inspect.h): inspected tunnels, their failures
	 * by reason, and the requests inside by decision and reason */
	_Atomic uint64_t tls_inspected;
	_Atomic uint64_t tls_errors[REASON__COUNT];
	_Atomic uint64_t http_requests[2][REASON__COUNT]; /* [allow][reason] */
	/* flows whose decision could not be written to the audit file */
	_Atomic uint64_t audit_unrecorded_denied;   /* answered 503 audit_unavailable */
	_Atomic uint64_t audit_unrecorded_answered; /* --audit-failure allow: answered anyway */
	_Atomic uint64_t policy_reloads_ok;
	_Atomic uint64_t policy_reloads_failed;
	_Atomic uint64_t policy_generation;
	_Atomic uint64_t tunnels_revoked[REVOKE__COUNT]; /* by revoke_why */
	_Atomic bool ready;
	/* Local identity only (filled at render time): where its answers were
	 * made, and the loop's attempts that ran past their link budget. */
	bool have_local;
	_Atomic uint64_t local_on_loop, local_on_pool, local_over_budget;
	_Atomic uint64_t local_feed_hits, local_feed_fallbacks; /* identity feed (appended) */
	/* Delegated identity only (filled at render time): the control
	 * channel's clock skew (proto/verifier.h verifier_clock). */
	bool have_clock, clock_measured;
	/* ... and its identity pushes (protocol 1.3), summed over the workers */
	bool have_push;
	uint64_t push_kept, push_refused, push_hits, push_waited_hits, push_wait_timeouts, push_unused;
	double clock_skew_s, clock_skew_max_s;
	/* connections each worker accepted (proxy and transparent ports) */
	_Atomic uint64_t worker_accepted[METRICS_MAX_WORKERS];
	unsigned n_workers;
};

void metrics_decision(struct metrics *m, bool allow, enum reason reason, enum flow_source src);
void metrics_identity_latency(struct metrics *m, uint64_t ns);
/* malloc'd text; *len without NUL. */
char *metrics_render(const struct metrics *m, const struct auditq *q, size_t *len);
