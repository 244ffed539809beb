/* `delegated` identity strategy (split, vm with a host-side net-supervisor):
 * the proc-supervisor's identity service answers, over the control channel,
 * with a SignedContext for each flow; nothing about the client process is
 * read locally.
 *
 * Contract:
 *   - anchored iff the channel is up AND its HelloAck certificate verified
 *     against a pinned provisioning key (proto verifier); a lost channel is
 *     not ready at once;
 *   - each flow: IdentityRequest {request_id, fresh 32-byte nonce, the tuple
 *     client -> proxy as this side sees it}; the reply is verified
 *     (signature, certificate, nonce, tuple, expiry, instance) before it
 *     becomes a flow_identity (source delegated, signed_context = the packed
 *     SignedContext, kept for the audit and `tether verify-context`);
 *   - on a channel with a MAC key (protocol 1.2, proto/mac.h) the reply is
 *     checked by MAC instead of the signature (every other check the same);
 *     the flow_identity then has context_request_id and no signed_context,
 *     and the signature that follows goes to on_context_signed;
 *   - failures are the verifier's / the proc side's reason word; a request in
 *     flight when a channel that was up drops is control_channel_lost, one
 *     that never had a channel identity_unavailable, no answer in time
 *     identity_timeout;
 *   - every certificate installed is reported through on_anchor_event
 *     (ANCHOR_ESTABLISHED / ANCHOR_RECONNECTED / ANCHOR_CHANGED — the last is
 *     the audit event `anchor_changed`; contexts of the replaced instance are
 *     refused by the verifier from then on).
 * Everything runs on the loop (the proto client is libuv; verification of one
 * context is a few tens of µs of Ed25519). */
#pragma once

#include "net-supervisor/identity_strategy.h"
#include "proto/keys.h"
#include "proto/verifier.h"

struct identity_delegated_config {
	const char *endpoint;           /* unix:PATH, tcp:HOST:PORT, vsock:CID:PORT */
	const struct pub_key *pinned;   /* provisioning public keys (copied) */
	size_t n_pinned;
	uint64_t request_timeout_ms;    /* 0: IDENTITY_DEFAULT_TIMEOUT_MS */
	uint64_t connect_timeout_ms;    /* 0: 2000 */
	uint64_t backoff_min_ms;        /* 0: 100 */
	uint64_t backoff_max_ms;        /* 0: 2000 */
	uint64_t max_lifetime_ns;       /* verifier: longest accepted context lifetime; 0: 30 s */
	uint64_t max_clock_skew_ns;     /* verifier: the proc side's clock may be this far off; 0: 60 s */
	/* A certificate was installed. kind_word: "anchor_established",
	 * "anchor_reconnected" or "anchor_changed"; desc names the instance key
	 * id and the anchor. May be NULL. */
	void (*on_anchor_event)(enum anchor_event_kind kind, const char *kind_word, const char *desc,
				void *data);
	/* The peer's anchor certificate was refused (an impostor without the
	 * provisioning key, a second anchor for one PID namespace, ...).
	 * Called once per distinct reason until an anchor is established
	 * (every reconnect is refused the same way). May be NULL. */
	void (*on_anchor_refused)(enum reason why, const char *detail, void *data);
	/* Protocol 1.2: the Ed25519 signature over a context that was accepted
	 * by the channel's MAC (flow_identity.context_request_id): why
	 * REASON_OK and signed_context_b64 (base64 of the SignedContext, as in
	 * the audit field `signed_context`), or why it did not come
	 * (identity_timeout, control_channel_lost, context_signature_invalid,
	 * internal_error) and NULL. May be NULL. */
	void (*on_context_signed)(uint64_t request_id, enum reason why, const char *signed_context_b64,
				  void *data);
	bool no_mac; /* offer no MAC key: every answer signed (1.1 behaviour) */
	/* Protocol 1.3, connect-time pushes (docs/protocol.md "Pushed
	 * identities"): unless no_push (or no_mac, or TETHER_FORCE_FALLBACK
	 * =push), the Hello asks the proc side to push the identity of each
	 * connect its notifier saw. A verified push is kept (IDENTITY_PUSH_TABLE
	 * entries at most, for 250 ms within the context's lifetime; a newer
	 * push for the same tuple replaces it) under the tuple it carries; a
	 * flow with exactly that tuple takes it (once) without a
	 * request. A flow with no push yet waits up to push_wait_ms (0: 5;
	 * the environment's TETHER_PUSH_WAIT_MS, 1-60000, wins: tests) for
	 * one when the channel pushes, then asks as before; after 8 waits in a
	 * row ran out, flows ask at once for a second. A push that does not
	 * verify is counted and ignored. */
	bool no_push;
	uint64_t push_wait_ms;
	void *data;
};

#define IDENTITY_PUSH_TABLE 8192
#define IDENTITY_PUSH_WAIT_MS 5

int identity_delegated_new(uv_loop_t *loop, const struct identity_delegated_config *cfg,
			   struct identity_strategy **out);

/* Counters for tests and metrics. */
struct identity_delegated_stats {
	uint64_t requests, verified, denied, anchor_changes, channel_losses;
	uint64_t by_mac;             /* verified by the channel's MAC (1.2) */
	uint64_t signatures;         /* signatures that followed MAC'd answers, verified */
	uint64_t signatures_missing; /* ... that did not come or did not verify */
	/* 1.3 pushes: verified and kept, refused (bad MAC, replayed, wrong
	 * anchor, expired, ...), flows answered from a push (at once, after
	 * waiting), waits that ran out (then asked), pushes never taken (expired
	 * or evicted) */
	uint64_t pushes, pushes_refused, push_hits, push_waited_hits, push_wait_timeouts, pushes_unused;
};
void identity_delegated_stats(const struct identity_strategy *s, struct identity_delegated_stats *out);
/* The latest clock-skew measurement of the control channel (proto/verifier.h);
 * false when s is not the delegated strategy. out->exceeded: the proc side's
 * clock was past the bound when last measured (the channel is refused until
 * a measurement is within it: not ready, reason clock_skew). */
bool identity_delegated_clock(const struct identity_strategy *s, struct verifier_clock_state *out);

/* "anchor_established" / "anchor_reconnected" / "anchor_changed". */
const char *anchor_event_kind_word(enum anchor_event_kind k);
