/* The net side of the identity channel.
 *
 * Connects to a proc-supervisor's endpoint, says Hello, installs the
 * HelloAck certificate in the verifier (refusing the channel when the
 * verifier does), and then turns proto_client_request() into a verified
 * identity or a reason — always through the callback, exactly once, never
 * synchronously from inside proto_client_request():
 *
 *   verified context ............................ REASON_OK, res->ctx set
 *   the verifier refused it ...................... its reason word
 *   the proc side answered an error .............. the proc side's reason word
 *   no answer within request_timeout_ms .......... REASON_IDENTITY_TIMEOUT
 *   channel down / dropped while in flight /
 *   not connected / too many in flight ........... REASON_IDENTITY_UNAVAILABLE
 *
 * A dropped or refused channel is reconnected with exponential backoff
 * (backoff_min_ms doubling to backoff_max_ms, 25% jitter). A channel that
 * was up for PROTO_CLIENT_STABLE_MS or more is redialled at once and the
 * backoff starts over; one that closes sooner counts as a failed attempt.
 * Requests made while connecting or handshaking wait (their timeout
 * running); requests made while backing off fail at once. Fail closed:
 * nothing hangs.
 *
 * Clock: the Hello carries a clock nonce; the HelloAck's signed clock
 * sample measures the proc side's clock (verifier_install_cert_clocked),
 * and on a live channel a ClockRequest measures it again every
 * clock_probe_ms and after a context failed its time check. A skew past
 * the verifier's bound refuses the channel with clock_skew (on_refused,
 * then closed and retried after the backoff, which measures again).
 *
 * MAC'd answers (protocol 1.2, proto/mac.h): the Hello offers an ephemeral
 * kx key; a peer that answers with its own, signed by the instance key,
 * gives the channel a MAC key, and its answers are then checked by MAC
 * (every check of verifier_check_context_mac) instead of Ed25519. The
 * signature over the same bytes follows in a ContextSignature and goes to
 * on_signature. A 1.1 peer (no kx in its HelloAck) is served as before; a
 * 1.2 peer that drops the kx is refused (protocol_error).
 *
 * Not thread-safe: one loop thread owns the client and its verifier. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/reason.h"
#include "proto/context.h"
#include "proto/signed.h"
#include "proto/verifier.h"

/* A channel up this long before it closed is redialled at once. */
#define PROTO_CLIENT_STABLE_MS 1000

struct proto_client;

struct proto_identity_result {
	uint64_t request_id;
	enum reason reason;                          /* REASON_OK: ctx verified */
	const struct identity_context *ctx;          /* valid during the callback */
	const struct signed_context *signed_context; /* as received, for the audit log; may be NULL */
	bool by_mac; /* 1.2: authenticated by the channel's MAC; the signature comes to on_signature */
	const struct signed_cert *anchor_cert;       /* the channel's certificate; may be NULL */
	const char *message;                         /* detail for logs; never NULL */
};

typedef void (*proto_identity_cb)(const struct proto_identity_result *res, void *userdata);

struct proto_client_opts {
	const char *endpoint;
	struct verifier *verifier; /* required, borrowed; must outlive the client */
	const char *role;          /* Hello role; NULL: "net-supervisor" */
	uint64_t request_timeout_ms; /* 0: 2000 */
	uint64_t connect_timeout_ms; /* connect + handshake; 0: 2000 */
	uint64_t backoff_min_ms;     /* 0: 100 */
	uint64_t backoff_max_ms;     /* 0: 5000 */
	size_t max_frame;            /* 0: PROTO_MAX_FRAME */
	uint64_t read_deadline_ms;   /* 0: 5000 */
	size_t max_inflight;         /* 0: 4096 */
	uint64_t clock_probe_ms;     /* 0: 10000 */
	/* A certificate was installed (emit anchor_established/anchor_changed). */
	void (*on_anchor)(struct proto_client *c, const struct anchor_event *ev, void *userdata);
	/* The channel became ready (why REASON_OK) or went down (why says so). */
	void (*on_state)(struct proto_client *c, bool ready, enum reason why, void *userdata);
	/* The peer's certificate was refused (why: the verifier's word); the
	 * channel is closed and retried after the backoff. May be NULL. */
	void (*on_refused)(struct proto_client *c, enum reason why, void *userdata);
	/* 1.2: do not offer a MAC key in the Hello (every answer then comes
	 * signed, as with a 1.1 peer). For tests and measurements. */
	bool no_mac;
	/* 1.2: verify each ContextSignature's Ed25519 signature as it comes
	 * (offline-style, verifier_check_context). Off by default: the MAC
	 * already authenticated the bytes on the live path; the client checks
	 * only that the signature is over exactly those bytes by the channel's
	 * instance key id, and the signature itself is for the audit, where
	 * `tether verify-context` verifies it. */
	bool check_signatures;
	/* 1.2: the signature over a MAC'd answer (res->by_mac) came after it:
	 * REASON_OK with sc (the SignedContext over exactly the bytes the MAC
	 * covered, by the channel's key id; its signature verified too with
	 * check_signatures; valid during the call) and the
	 * channel's certificate; or why it will not come: identity_timeout (not
	 * within 10 s), control_channel_lost, context_signature_invalid (the
	 * channel is then closed), internal_error; sc NULL. Called once per
	 * by_mac answer while the client runs. May be NULL. */
	void (*on_signature)(struct proto_client *c, uint64_t request_id, enum reason why,
			     const struct signed_context *sc, const struct signed_cert *anchor_cert, void *userdata);
	/* 1.3: ask for connect-time identity pushes (Hello.push_seed; only
	 * with a MAC key, so not with no_mac). Each IdentityPush is checked like
	 * a MAC'd answer (MAC under the channel's key, key id, anchor, nonce =
	 * push_nonce(this channel's seed, push id), replay window, times,
	 * certificate; the context's request_id must be the push id) and
	 * handed here: res->reason REASON_OK with res->ctx (valid during the
	 * call; its tuple is the flow it is bound to) and request_id = the push
	 * id, whose signature then comes to on_signature like a MAC'd answer's;
	 * or the reason it was refused (ctx NULL: ignore it). NULL: no pushes. */
	void (*on_push)(struct proto_client *c, const struct proto_identity_result *res, void *userdata);
	void *userdata;
};

int proto_client_start(uv_loop_t *loop, const struct proto_client_opts *opts,
		       struct proto_client **out);
/* 0 (cb will be called) or -EINVAL / -ENOMEM (cb will not be called). */
int proto_client_request(struct proto_client *c, const struct proto_tuple *tuple,
			 uint64_t socket_cookie, proto_identity_cb cb, void *userdata,
			 uint64_t *request_id_out);
/* The callback of that request will not be called. Unknown ids are ignored. */
void proto_client_cancel(struct proto_client *c, uint64_t request_id);
bool proto_client_ready(const struct proto_client *c);
/* Ready, and the proc side agreed to push identities on this channel. */
bool proto_client_push_active(const struct proto_client *c);
/* Fail every request (REASON_IDENTITY_UNAVAILABLE), close, then done(). */
void proto_client_stop(struct proto_client *c, void (*done)(void *userdata), void *userdata);
