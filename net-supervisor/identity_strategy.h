/* The identity seam: how the proxy learns which verified process owns a flow.
 *
 * A strategy answers one question asynchronously: "the client socket
 * CLIENT → PROXY that I just accepted — which process is it?" It must never
 * block the loop (procfs scans, hashing and control-channel round trips go to
 * the thread pool or to other handles) and must answer every request exactly
 * once with identity_request_complete(): either a verified flow identity or a
 * reason word. The plumbing (identity_resolve) owns the request, enforces the
 * timeout (deny identity_timeout), and drops late answers.
 *
 * Strategies: `local` (identity library, same PID namespace) and `delegated`
 * (signed contexts over the control channel) are the real ones;
 * `static` (identity_static.c) is a TEST-ONLY strategy, built only into
 * net-supervisor-testing, that claims every flow comes from one configured
 * binary. A strategy also says whether it has an
 * established anchor: the proxy is not ready until it has. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <uv.h>

#include "common/flow_identity.h"
#include "common/reason.h"

/* The flow as the proxy sees it: the accepted socket's peer and local name. */
struct proxy_flow {
	struct sockaddr_storage client;
	struct sockaddr_storage proxy;
	/* IPPROTO_UDP for a datagram's sender (the workload's resolver,
	 * dns.h); anything else is a TCP connection (callers that fill only
	 * client and proxy keep meaning TCP). */
	int proto;
};
#define PROXY_FLOW_PROTO(t) ((t)->proto == IPPROTO_UDP ? IPPROTO_UDP : IPPROTO_TCP)

struct identity_request;
struct identity_strategy;

struct identity_strategy_ops {
	const char *name; /* "static", "local", "delegated" */
	/* Start resolving identity_request_tuple(req). Return 0 and complete
	 * later (or right away: the plumbing defers delivery to the next loop
	 * turn), or -errno when it cannot even start (then the plumbing
	 * completes with identity_unavailable). */
	int (*resolve)(struct identity_strategy *s, struct identity_request *req);
	/* The answer is no longer wanted (timeout, client gone). A hint: the
	 * strategy must still call identity_request_complete() once (any
	 * reason), but may stop expensive work. May be NULL. */
	void (*cancel)(struct identity_strategy *s, struct identity_request *req);
	/* Release everything; no request is outstanding when this is called. */
	void (*destroy)(struct identity_strategy *s);
};

typedef void (*identity_anchor_cb)(struct identity_strategy *s, bool anchored, void *data);
typedef void (*identity_replaced_cb)(struct identity_strategy *s, void *data);

/* Embedded at the start of every concrete strategy. */
struct identity_strategy {
	const struct identity_strategy_ops *ops;
	uv_loop_t *loop;
	bool anchored;
	char anchor_desc[128]; /* for the anchor_established audit event */
	identity_anchor_cb on_anchor;
	void *on_anchor_data;
	/* Which anchor instance identities come from: +1 each time a
	 * different instance (another process, another instance key) is
	 * established. Identities keep the epoch they were resolved under, so
	 * the proxy can tell which live tunnels a lost or replaced anchor had
	 * vouched for. A reconnect of the same instance keeps the epoch. */
	uint64_t anchor_epoch;
	char anchor_instance[96];
	/* Called (with on_anchor_data) when the epoch moves past a previous
	 * instance; may be NULL. */
	identity_replaced_cb on_replaced;
};

/* For strategies: announce anchor established (true) or lost (false). */
void identity_strategy_set_anchored(struct identity_strategy *s, bool anchored, const char *desc);
/* For strategies: the anchor instance about to vouch for identities
 * ("<boot_id>:<pidfs ino>", an instance key id). Call before announcing
 * it anchored; a new value moves anchor_epoch. */
void identity_strategy_set_instance(struct identity_strategy *s, const char *instance);

/* Result handed to the requester. On REASON_OK, id is non-NULL and the
 * callback takes ownership; otherwise id is NULL. latency_ns is the time
 * from identity_resolve() to delivery. */
struct identity_result {
	enum reason reason;
	struct flow_identity *id;
	uint64_t latency_ns;
};
typedef void (*identity_cb)(const struct identity_result *res, void *data);

/* Ask s about tuple; cb is called exactly once, on the loop, never from
 * inside identity_resolve(), unless identity_request_abandon() came first.
 * timeout_ms 0 means the default (2000). *out is for abandon. */
int identity_resolve(struct identity_strategy *s, const struct proxy_flow *tuple,
		     uint64_t timeout_ms, identity_cb cb, void *data, struct identity_request **out);
/* The requester goes away: cb will not be called; the request is freed once
 * the strategy has completed it. */
void identity_request_abandon(struct identity_request *req);

/* For strategies. */
const struct proxy_flow *identity_request_tuple(const struct identity_request *req);
void identity_request_set_data(struct identity_request *req, void *p);
void *identity_request_data(const struct identity_request *req);
/* Exactly once per request. Takes ownership of id (NULL unless REASON_OK). */
void identity_request_complete(struct identity_request *req, enum reason reason,
			       struct flow_identity *id);

void identity_strategy_destroy(struct identity_strategy *s);

#define IDENTITY_DEFAULT_TIMEOUT_MS 2000
