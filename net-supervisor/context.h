/* The net-supervisor daemon's top-level context: the one place its mutable
 * state lives (configuration, the loop, policy store, identity strategy,
 * audit queue, metrics, listeners, open connections).
 *
 * Workers (--workers N): N event loops on N threads. Worker 0 is the main
 * loop (signals, DNS, admin, the policy store and its reloads); workers 1..
 * N-1 each run their own loop. A `struct netsup` is one worker's view: its
 * loop, its listeners (SO_REUSEPORT: the kernel spreads new connections),
 * its conns, its identity strategy instance, its buffer pool, its audit
 * batch and its policy view (policystore.h). What is GLOBAL lives in
 * `struct netsup_shared` (ns->sh, one for all workers, atomics): the
 * metrics, the connection limits and the relay memory budget. Each handle
 * and conn belongs to one worker's loop and is touched only on its thread.
 * Slow work goes to the thread pool (DNS, policy parsing) or to the audit
 * writer thread.
 *
 * This header is the data and the few services every part of the daemon
 * uses (audit, readiness); the parts (proxy.h, revoke.h) depend on it and
 * netsup.h wires them together, so no part depends on the wiring. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/audit.h"
#include "common/log.h"
#include "net-supervisor/auditq.h"
#include "net-supervisor/bufpool.h"
#include "net-supervisor/identity_strategy.h"
#include "net-supervisor/metrics.h"
#include "net-supervisor/policystore.h"

#define NETSUP_MAX_LISTEN 16
#define NETSUP_MAX_POLICY 16
#define NETSUP_MAX_ANCESTORS 16
/* Over-limit connections answered 503 at once; more are closed unanswered
 * (their descriptors come out of the daemon's reserve, NETSUP_FD_RESERVE). */
#define NETSUP_MAX_REJECTING 64

struct netsup_config {
	const char *listen[NETSUP_MAX_LISTEN]; /* "ADDR:PORT", "[v6]:PORT" */
	size_t n_listen;
	/* Create the proxy listeners in this network namespace (nsfs path)
	 * instead of ours: a pod-shaped netns whose workloads reach the proxy
	 * on their loopback while our upstream connections leave from our own
	 * netns (the local stand-in for a pod whose egress the node routes). */
	const char *listen_netns;
	/* --topology was given: a promise about where we run, checked at
	 * start (the identity strategy it implies, and the anchor's PID
	 * namespace). Without it the name only labels audit lines. */
	bool topology_given;
	const char *admin;                     /* NULL: no admin endpoint */
	const char *policy[NETSUP_MAX_POLICY];
	enum policy_layer policy_layer[NETSUP_MAX_POLICY]; /* of each (--policy-layer; else command) */
	size_t n_policy;
	/* --console: a line per decision on stderr for the person at the
	 * terminal (`tether run`), beside the audit record. */
	enum netsup_console { CONSOLE_OFF, CONSOLE_DENIALS, CONSOLE_ALL } console;
	const char *audit_path;                /* "-" = stdout */
	const char *topology;
	size_t max_header_bytes;               /* 16 KiB */
	size_t max_headers;                    /* 100 */
	size_t max_conns;                      /* 1024, in total over every worker */
	/* --workers: event loops (threads); 0 = online CPUs, at most
	 * NETSUP_MAX_WORKERS. 1 = everything on the main loop. */
	unsigned workers;
	uint64_t header_timeout_ms;            /* 10 s: whole request head */
	uint64_t connect_timeout_ms;           /* 10 s */
	uint64_t idle_timeout_ms;              /* 300 s */
	uint64_t identity_timeout_ms;          /* 2 s */
	uint64_t resolve_timeout_ms;           /* 5 s: an upstream name lookup, waiting included */
	size_t relay_buffer;                   /* 256 KiB reads */
	size_t high_water;                     /* 1 MiB queued → stop reading the other side */
	size_t relay_memory;                   /* 64 MiB: all tunnels' queued buffers (proxy.c) */
	size_t audit_queue;                    /* 8192 events */
	/* --audit-failure: while a decision cannot be written to the audit
	 * file, false (deny, the default) answers the flow 503
	 * audit_unavailable; true relays it and counts it. */
	bool audit_failure_allow;
	/* --learn: every flow is allowed and recorded as learned (policy
	 * decided as usual, "would" in the audit); runs without a policy. */
	bool learn;
	bool splice;                           /* relay tunnels with splice(2) (default off: measured slower, less CPU) */
	uint64_t revoke_grace_ms;              /* 3 s: a lost/replaced anchor's tunnels close after this (revoke.h) */
	uint64_t max_tunnel_lifetime_ms;       /* 0 = off */
	/* TEST ONLY: a strategy the test build makes (net-supervisor-testing's
	 * --identity static, identity_static.h), called once at start with
	 * identity_test_arg; NULL in the production daemon, which has no such
	 * strategy. */
	int (*identity_test_new)(uv_loop_t *loop, const void *arg, struct identity_strategy **out);
	const void *identity_test_arg;
	/* The real strategies (identity_local.h, identity_delegated.h).
	 * identity_mode: "local", "delegated", "static" (identity_test_new)
	 * or NULL (identity_test_new when set, else none). */
	const char *identity_mode;
	int anchor_pid;                        /* local: > 0 */
	const char *anchor_socket;             /* local: unix:PATH */
	const char *identity_feed;             /* local: the anchor's identity feed, unix:PATH */
	uint64_t identity_feed_wait_ms;        /* local: --identity-feed-wait; 0: default */
	const char *expected_anchor_sha256;    /* local: NULL = the proc-supervisor beside us */
	const char *workload_netns;            /* local: sock_diag netns (nsfs path) */
	const char *sandbox_cgroup;            /* local: optional cgroup membership */
	const char *control;                   /* delegated: endpoint */
	const char *provisioning_pubkey[4];    /* delegated: pinned key files */
	size_t n_provisioning_pubkey;
	uint64_t max_clock_skew_s;             /* delegated: --max-clock-skew (60 s) */
	bool no_identity_mac;                  /* delegated: --no-identity-mac */
	/* The workload's resolver (dns.h): --dns-listen (UDP and TCP, in
	 * listen_netns like the proxy listeners), none = no resolver. */
	const char *dns_listen[NETSUP_MAX_LISTEN];
	size_t n_dns_listen;
	const char *dns_upstream;              /* ADDR[:PORT]; NULL = our /etc/resolv.conf's first nameserver */
	uint64_t dns_timeout_ms;               /* 3 s: the upstream's answer */
	size_t dns_max_outstanding;            /* 256 queries in flight */
	size_t dns_record_max;                 /* 4096 name/address pairs (dnsrec.h) */
	/* The corporate upstream proxy (upstream.h); NULL: connect directly. */
	const char *upstream_proxy;            /* http://HOST:PORT */
	const char *upstream_proxy_auth_file;  /* USER:PASSWORD, mode 0600 */
	const char *upstream_proxy_connect;    /* "address" (default) or "name" */
	const char *no_upstream_proxy[NETSUP_MAX_LISTEN]; /* lists of direct destinations */
	size_t n_no_upstream_proxy;
	/* Transparent capture (transparent.h): listeners that take flows
	 * redirected by nftables (in listen_netns like the proxy's);
	 * transparent_off ignores them. */
	const char *transparent_listen[NETSUP_MAX_LISTEN];
	size_t n_transparent_listen;
	bool transparent_off;
	uint64_t transparent_peek_ms;          /* 1000: wait for the first bytes */
	/* TLS inspection (tls_ca.h, tls_inspect.h): where the sandbox CA's
	 * certificate, and the system bundle with it appended, are written;
	 * the upstream trust store (NULL: the system's). */
	const char *tls_ca_out;
	const char *tls_bundle_out;
	const char *tls_system_bundle;         /* default /etc/ssl/certs/ca-certificates.crt */
	const char *upstream_ca;
};

void netsup_config_defaults(struct netsup_config *cfg);

struct conn;
struct proxy_listener;
struct transparent_listener;
struct admin;
struct dns_server;
struct upstream_proxy;
struct tls_ca;
typedef struct ssl_ctx_st SSL_CTX;

/* Shared by every worker (atomics; see the top of this file). */
struct netsup_shared {
	struct metrics metrics;
	_Atomic size_t n_rejecting;  /* over-limit connections being answered 503 */
	_Atomic size_t n_relaying;   /* tunnels relayed in user space (not splice) */
	_Atomic size_t relay_held;   /* buffer bytes held by queued relay writes */
	_Atomic size_t n_peeking;    /* transparent flows still being peeked at */
	/* the reason of the last anchor_refused line (0: none since the main
	 * loop's anchor was established): each worker's channel meets a
	 * refusal on its own, the audit says it once */
	_Atomic int anchor_refused_last;
	/* --console lines: a burst per window over all workers, then one
	 * summary (audit_line.c) */
	struct {
		pthread_mutex_t lock;
		uint64_t window_start;
		unsigned shown;
		uint64_t hidden;
	} console;
};

#define NETSUP_MAX_WORKERS 8
_Static_assert(NETSUP_MAX_WORKERS <= METRICS_MAX_WORKERS, "a worker_accepted counter per worker");

struct netsup {
	uv_loop_t *loop;
	/* --workers: this worker's index (0: the main loop) and, on the main
	 * one only, the others (workers[0] is the main itself). */
	unsigned worker;
	struct netsup *main;         /* worker 0 */
	struct netsup *workers[NETSUP_MAX_WORKERS];
	unsigned n_workers;
	struct netsup_shared *sh;    /* the main's shared_store */
	struct netsup_shared shared_store;
	struct netsup_worker *wk;    /* workers 1..N-1: thread, async (netsup.c) */
	struct netsup_config cfg;
	struct policystore *policy;
	struct identity_strategy *identity;
	struct audit_log *audit_log;
	struct auditq *audit;
	struct proxy_listener *listeners[NETSUP_MAX_LISTEN];
	size_t n_listeners;
	struct admin *admin;
	struct dns_server *dns;      /* the workload's resolver, or NULL (dns.h) */
	struct upstream_proxy *upstream; /* --upstream-proxy, or NULL (upstream.h) */
	struct transparent_listener *tlisteners[NETSUP_MAX_LISTEN];
	size_t n_tlisteners;
	struct tls_ca *tls_ca;           /* the sandbox CA (tls_ca.h) */
	SSL_CTX *tls_upstream;           /* verifies the real servers (tls_inspect.h) */
	struct credstore *creds;         /* secrets of `credentials:` (credstore.h) */
	struct conn *conns; /* every open client connection */
	struct bufpool pool;
	uv_signal_t sigterm, sigint, sigusr1;
	/* Write the staged decisions before the loop polls and after its I/O
	 * callbacks: once per iteration, before their answers (auditq.h). */
	uv_prepare_t audit_prepare;
	uv_check_t audit_check;
	bool audit_handles;
	uv_timer_t revoke_grace, revoke_lifetime; /* revoke.c */
	bool revoke_started;
	struct log_ratelimit accept_log; /* failed accepts: a warning per 10 s */
	_Atomic bool ready;          /* this worker's: policy in its view, its anchor */
	bool stopping;
};

/* A delegated context's request id as the audit names it
 * (`context_request_id`, joining a decision to its `context_signed`
 * event): each worker has its own control channel, whose ids start at 1,
 * so workers past the first add worker << 48 (ids stay exact JSON
 * integers: below 2^51). */
static inline uint64_t netsup_context_request_id(const struct netsup *ns, uint64_t id)
{
	return id + ((uint64_t)ns->worker << 48);
}

void netsup_update_ready(struct netsup *ns);
/* Why a flow is refused while not ready: clock_skew when the delegated
 * control channel's clock is past --max-clock-skew, else not_ready. */
enum reason netsup_not_ready_reason(const struct netsup *ns);

/* Queue an audit event (takes fields). */
void netsup_audit(struct netsup *ns, const char *event, json_t *fields);
/* Stage a decision's event (takes fields); w->cb runs after it was written
 * (or could not be), later in this loop iteration. w may be NULL. */
void netsup_audit_decision(struct netsup *ns, const char *event, json_t *fields, struct auditq_waiter *w);
