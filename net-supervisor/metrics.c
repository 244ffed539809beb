#include "net-supervisor/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net-supervisor/auditq.h"

/* Finer below 60 us (connect-time identity's targets: 30 us local, 60 us
 * delegated) and between 100 and 300 us. */
static const double bucket_s[METRICS_LATENCY_BUCKETS] = {
	0.00001, 0.00002, 0.00003, 0.00005, 0.00006, 0.0001, 0.00015, 0.0002, 0.00025, 0.0003, 0.0005, 0.001, 0.0025, 0.005,
	0.01,    0.025,  0.05,    0.1,    0.25,    0.5,    1.0,    2.5,   5.0,
};

void metrics_decision(struct metrics *m, bool allow, enum reason reason, enum flow_source src)
{
	if ((unsigned)reason >= REASON__COUNT)
		reason = REASON_INTERNAL_ERROR;
	if ((unsigned)src >= FLOW_SOURCE__COUNT)
		src = FLOW_SOURCE_NONE;
	m->decisions[allow ? 1 : 0][reason][src]++;
}

void metrics_identity_latency(struct metrics *m, uint64_t ns)
{
	double s = (double)ns / 1e9;
	for (size_t i = 0; i < METRICS_LATENCY_BUCKETS; i++)
		if (s <= bucket_s[i]) {
			m->id_latency_buckets[i]++;
			break;
		}
	m->id_latency_count++;
	m->id_latency_sum_ns += ns;
}

struct buf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void bprintf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(struct buf *b, const char *fmt, ...)
{
	if (b->oom)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = true;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t ncap = b->cap * 2 + (size_t)n;
		char *np = realloc(b->p, ncap);
		if (!np) {
			b->oom = true;
			return;
		}
		b->p = np;
		b->cap = ncap;
	}
}

char *metrics_render(const struct metrics *m, const struct auditq *q, size_t *len)
{
	struct buf b = { .p = malloc(8192), .cap = 8192 };
	if (!b.p)
		return NULL;
	b.p[0] = '\0';
	bprintf(&b, "# HELP tether_egress_decisions_total Egress decisions by decision, reason and identity source.\n"
		    "# TYPE tether_egress_decisions_total counter\n");
	for (int a = 0; a < 2; a++)
		for (int r = 0; r < REASON__COUNT; r++)
			for (int s = 0; s < FLOW_SOURCE__COUNT; s++)
				if (m->decisions[a][r][s])
					bprintf(&b, "tether_egress_decisions_total{decision=\"%s\",reason=\"%s\",source=\"%s\"} %llu\n",
						a ? "allow" : "deny", reason_word((enum reason)r),
						flow_source_word((enum flow_source)s),
						(unsigned long long)m->decisions[a][r][s]);
	bprintf(&b, "# HELP tether_identity_resolution_seconds Time to resolve a flow's process identity.\n"
		    "# TYPE tether_identity_resolution_seconds histogram\n");
	uint64_t cum = 0;
	for (size_t i = 0; i < METRICS_LATENCY_BUCKETS; i++) {
		cum += m->id_latency_buckets[i];
		bprintf(&b, "tether_identity_resolution_seconds_bucket{le=\"%g\"} %llu\n", bucket_s[i],
			(unsigned long long)cum);
	}
	bprintf(&b, "tether_identity_resolution_seconds_bucket{le=\"+Inf\"} %llu\n"
		    "tether_identity_resolution_seconds_sum %.9f\n"
		    "tether_identity_resolution_seconds_count %llu\n",
		(unsigned long long)m->id_latency_count, (double)m->id_latency_sum_ns / 1e9,
		(unsigned long long)m->id_latency_count);
	bprintf(&b, "# HELP tether_connections_active Client connections open now.\n"
		    "# TYPE tether_connections_active gauge\ntether_connections_active %llu\n"
		    "# HELP tether_connections_total Client connections accepted.\n"
		    "# TYPE tether_connections_total counter\ntether_connections_total %llu\n"
		    "# HELP tether_connections_limit Concurrent client connections served before 503\n"
		    "# (--max-connections, lowered when RLIMIT_NOFILE cannot hold it).\n"
		    "# TYPE tether_connections_limit gauge\ntether_connections_limit %llu\n"
		    "# HELP tether_accept_errors_total Failed accepts (out of descriptors: the pending\n"
		    "# connections are closed unanswered).\n"
		    "# TYPE tether_accept_errors_total counter\ntether_accept_errors_total %llu\n"
		    "# HELP tether_connections_dropped_total Over-limit connections closed unanswered because\n"
		    "# 64 others were already being answered 503.\n"
		    "# TYPE tether_connections_dropped_total counter\ntether_connections_dropped_total %llu\n"
		    "# HELP tether_fd_exhausted_total Allowed flows answered 503 because no descriptor was\n"
		    "# left for the upstream socket.\n"
		    "# TYPE tether_fd_exhausted_total counter\ntether_fd_exhausted_total %llu\n",
		(unsigned long long)m->conns_active, (unsigned long long)m->conns_total,
		(unsigned long long)m->conns_limit, (unsigned long long)m->accept_errors,
		(unsigned long long)m->conns_dropped, (unsigned long long)m->fd_exhausted);
	bprintf(&b, "# HELP tether_bytes_relayed_total Bytes relayed, by direction.\n"
		    "# TYPE tether_bytes_relayed_total counter\n"
		    "tether_bytes_relayed_total{direction=\"upstream\"} %llu\n"
		    "tether_bytes_relayed_total{direction=\"downstream\"} %llu\n",
		(unsigned long long)m->bytes_up, (unsigned long long)m->bytes_down);
	bprintf(&b, "# HELP tether_relay_buffered_bytes Buffer bytes held for destinations that have not taken\n"
		    "# their data yet (kept near --relay-memory, tether_relay_memory_bytes: past half of it each\n"
		    "# direction gets a fair share, at least 64 KiB).\n"
		    "# TYPE tether_relay_buffered_bytes gauge\ntether_relay_buffered_bytes %llu\n"
		    "# HELP tether_relay_memory_bytes --relay-memory.\n"
		    "# TYPE tether_relay_memory_bytes gauge\ntether_relay_memory_bytes %llu\n",
		(unsigned long long)m->relay_held, (unsigned long long)m->relay_memory);
	bprintf(&b, "# HELP tether_upstream_resolutions_total Upstream name lookups started (only for flows\n"
		    "# the verified identity could be allowed to).\n"
		    "# TYPE tether_upstream_resolutions_total counter\ntether_upstream_resolutions_total %llu\n",
		(unsigned long long)m->resolutions);
	if (m->upstream_proxy) {
		bprintf(&b, "# HELP tether_upstream_proxy_tunnels_total Allowed flows the corporate upstream proxy\n"
			    "# (--upstream-proxy) carried: its CONNECT answered 2xx.\n"
			    "# TYPE tether_upstream_proxy_tunnels_total counter\n"
			    "tether_upstream_proxy_tunnels_total %llu\n"
			    "# HELP tether_upstream_proxy_errors_total Allowed flows the corporate upstream proxy did not\n"
			    "# carry, by reason.\n"
			    "# TYPE tether_upstream_proxy_errors_total counter\n",
			(unsigned long long)m->upstream_proxy_tunnels);
		static const enum reason rs[] = { REASON_UPSTREAM_PROXY_UNREACHABLE, REASON_UPSTREAM_PROXY_REFUSED,
						  REASON_UPSTREAM_PROXY_AUTH_REQUIRED, REASON_UPSTREAM_TIMEOUT };
		for (size_t i = 0; i < sizeof(rs) / sizeof(rs[0]); i++)
			bprintf(&b, "tether_upstream_proxy_errors_total{reason=\"%s\"} %llu\n", reason_word(rs[i]),
				(unsigned long long)m->upstream_proxy_errors[rs[i]]);
	}
	bprintf(&b, "# HELP tether_transparent_flows_total Captured (transparent) flows, by what their first\n"
		    "# bytes were.\n"
		    "# TYPE tether_transparent_flows_total counter\n"
		    "tether_transparent_flows_total{peek=\"tls\"} %llu\n"
		    "tether_transparent_flows_total{peek=\"http\"} %llu\n"
		    "tether_transparent_flows_total{peek=\"other\"} %llu\n"
		    "tether_transparent_flows_total{peek=\"incomplete\"} %llu\n"
		    "# HELP tether_transparent_unredirected_total Connections to the capture port without an\n"
		    "# original destination (not redirected by the fence), reset.\n"
		    "# TYPE tether_transparent_unredirected_total counter\ntether_transparent_unredirected_total %llu\n",
		(unsigned long long)m->transparent_flows[0], (unsigned long long)m->transparent_flows[1],
		(unsigned long long)m->transparent_flows[2], (unsigned long long)m->transparent_flows[3],
		(unsigned long long)m->transparent_unredirected);
	bprintf(&b, "# HELP tether_tls_inspected_total Inspected CONNECTs whose server passed verification\n"
		    "# (tls: inspect).\n# TYPE tether_tls_inspected_total counter\ntether_tls_inspected_total %llu\n"
		    "# HELP tether_tls_errors_total Inspected CONNECTs that failed, by reason.\n"
		    "# TYPE tether_tls_errors_total counter\n",
		(unsigned long long)m->tls_inspected);
	static const enum reason tr[] = { REASON_UPSTREAM_CERT_INVALID, REASON_UPSTREAM_TLS_FAILED,
					  REASON_CLIENT_TLS_FAILED, REASON_TLS_INSPECT_UNAVAILABLE };
	for (size_t i = 0; i < sizeof(tr) / sizeof(tr[0]); i++)
		bprintf(&b, "tether_tls_errors_total{reason=\"%s\"} %llu\n", reason_word(tr[i]),
			(unsigned long long)m->tls_errors[tr[i]]);
	bprintf(&b, "# HELP tether_http_requests_total Requests inside inspected connections, by decision\n"
		    "# and reason.\n# TYPE tether_http_requests_total counter\n");
	for (int a = 0; a < 2; a++)
		for (int r = 0; r < REASON__COUNT; r++)
			if (m->http_requests[a][r])
				bprintf(&b, "tether_http_requests_total{decision=\"%s\",reason=\"%s\"} %llu\n",
					a ? "allow" : "deny", reason_word((enum reason)r),
					(unsigned long long)m->http_requests[a][r]);
	bprintf(&b, "# HELP tether_audit_writable 1 while audit events can be written, 0 from a failed write\n"
		    "# (ENOSPC, EIO, ...) until a write works again.\n"
		    "# TYPE tether_audit_writable gauge\ntether_audit_writable %d\n"
		    "# HELP tether_audit_write_failures_total Audit events that could not be written.\n"
		    "# TYPE tether_audit_write_failures_total counter\ntether_audit_write_failures_total %llu\n"
		    "# HELP tether_audit_write_failure_episodes_total Times the audit file stopped taking events.\n"
		    "# TYPE tether_audit_write_failure_episodes_total counter\n"
		    "tether_audit_write_failure_episodes_total %llu\n"
		    "# HELP tether_audit_unrecorded_flows_total Flows whose decision could not be written, by what\n"
		    "# they were answered (--audit-failure): denied (503 audit_unavailable) or answered.\n"
		    "# TYPE tether_audit_unrecorded_flows_total counter\n"
		    "tether_audit_unrecorded_flows_total{action=\"denied\"} %llu\n"
		    "tether_audit_unrecorded_flows_total{action=\"answered\"} %llu\n"
		    "# HELP tether_audit_dropped_total Audit events dropped because the queue was full.\n"
		    "# TYPE tether_audit_dropped_total counter\ntether_audit_dropped_total %llu\n",
		auditq_writable(q) ? 1 : 0, (unsigned long long)auditq_write_failures(q),
		(unsigned long long)auditq_failure_episodes(q), (unsigned long long)m->audit_unrecorded_denied,
		(unsigned long long)m->audit_unrecorded_answered, (unsigned long long)auditq_dropped(q));
	bprintf(&b, "# HELP tether_policy_reloads_total Policy reloads by result.\n"
		    "# TYPE tether_policy_reloads_total counter\n"
		    "tether_policy_reloads_total{result=\"ok\"} %llu\n"
		    "tether_policy_reloads_total{result=\"error\"} %llu\n"
		    "# HELP tether_policy_generation Generation of the policy in force.\n"
		    "# TYPE tether_policy_generation gauge\ntether_policy_generation %llu\n"
		    "# HELP tether_ready 1 when a policy is loaded and an anchor is established.\n"
		    "# TYPE tether_ready gauge\ntether_ready %d\n",
		(unsigned long long)m->policy_reloads_ok, (unsigned long long)m->policy_reloads_failed,
		(unsigned long long)m->policy_generation, m->ready ? 1 : 0);
	bprintf(&b, "# HELP tether_tunnels_revoked_total Open tunnels closed because what allowed them ended.\n"
		    "# TYPE tether_tunnels_revoked_total counter\n");
	for (int w = REVOKE_KEEP + 1; w < REVOKE__COUNT; w++)
		bprintf(&b, "tether_tunnels_revoked_total{reason=\"%s\"} %llu\n", revoke_word(w),
			(unsigned long long)m->tunnels_revoked[w]);
	if (m->have_local)
		bprintf(&b, "# HELP tether_identity_local_answers_total Local identity answers, by where they were made\n"
			    "# (the event loop answers cheap bounded cases itself, the thread pool the rest).\n"
			    "# TYPE tether_identity_local_answers_total counter\n"
			    "tether_identity_local_answers_total{where=\"loop\"} %llu\n"
			    "tether_identity_local_answers_total{where=\"pool\"} %llu\n"
			    "# HELP tether_identity_local_loop_over_budget_total Loop attempts whose holder search ran past\n"
			    "# its fd-link budget and went to the pool.\n"
			    "# TYPE tether_identity_local_loop_over_budget_total counter\n"
			    "tether_identity_local_loop_over_budget_total %llu\n",
			(unsigned long long)m->local_on_loop, (unsigned long long)m->local_on_pool,
			(unsigned long long)m->local_over_budget);
	if (m->have_local)
		bprintf(&b, "# HELP tether_identity_feed_total Local identity and the anchor's identity feed: flows\n"
			    "# answered from it (hit), and flows it did not answer while connected (fallback).\n"
			    "# TYPE tether_identity_feed_total counter\n"
			    "tether_identity_feed_total{result=\"hit\"} %llu\n"
			    "tether_identity_feed_total{result=\"fallback\"} %llu\n",
			(unsigned long long)m->local_feed_hits, (unsigned long long)m->local_feed_fallbacks);
	if (m->have_push)
		bprintf(&b, "# HELP tether_identity_push_total Delegated identity pushed at connect time (protocol 1.3):\n"
			    "# pushes verified and kept, refused (MAC, nonce, replay, anchor, time), never taken;\n"
			    "# flows answered from one at once or after waiting, and waits that ran out (then asked).\n"
			    "# TYPE tether_identity_push_total counter\n"
			    "tether_identity_push_total{result=\"kept\"} %llu\n"
			    "tether_identity_push_total{result=\"refused\"} %llu\n"
			    "tether_identity_push_total{result=\"unused\"} %llu\n"
			    "tether_identity_push_total{result=\"hit\"} %llu\n"
			    "tether_identity_push_total{result=\"waited_hit\"} %llu\n"
			    "tether_identity_push_total{result=\"wait_timeout\"} %llu\n",
			(unsigned long long)m->push_kept, (unsigned long long)m->push_refused,
			(unsigned long long)m->push_unused, (unsigned long long)m->push_hits,
			(unsigned long long)m->push_waited_hits, (unsigned long long)m->push_wait_timeouts);
	if (m->have_clock) {
		if (m->clock_measured)
			bprintf(&b, "# HELP tether_clock_skew_seconds The proc side's clock minus ours, last measured on the\n"
				    "# control channel (signed clock samples).\n"
				    "# TYPE tether_clock_skew_seconds gauge\ntether_clock_skew_seconds %.6f\n",
				m->clock_skew_s);
		bprintf(&b, "# HELP tether_clock_skew_max_seconds --max-clock-skew: past it the net side is not ready\n"
			    "# and flows are denied clock_skew.\n"
			    "# TYPE tether_clock_skew_max_seconds gauge\ntether_clock_skew_max_seconds %g\n",
			m->clock_skew_max_s);
	}
	bprintf(&b, "# HELP tether_workers Event loops (--workers).\n"
		    "# TYPE tether_workers gauge\ntether_workers %u\n"
		    "# HELP tether_worker_accepted_total Client connections each worker's loop accepted.\n"
		    "# TYPE tether_worker_accepted_total counter\n", m->n_workers);
	for (unsigned w = 0; w < m->n_workers && w < METRICS_MAX_WORKERS; w++)
		bprintf(&b, "tether_worker_accepted_total{worker=\"%u\"} %llu\n", w,
			(unsigned long long)m->worker_accepted[w]);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	*len = b.len;
	return b.p;
}
