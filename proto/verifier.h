/* The net side's verifier of delegated identity.
 *
 * It pins the provisioning public key(s), holds at most one current anchor
 * certificate per (boot_id, PID namespace) and a replay window, and turns a
 * SignedContext into a validated struct identity_context or a reason word:
 *
 *   signature not by the current certificate's instance key ... context_signature_invalid
 *   instance key id not a current certificate's / not the
 *     channel's, or the context's anchor is not the certificate's ... anchor_unknown
 *   nonce differs from the request's, or was already accepted ..... context_replayed
 *   tuple differs from the flow ................................... context_tuple_mismatch
 *   expired / not yet valid / lifetime too long .................... context_expired
 *   certificate expired meanwhile .................................. anchor_certificate_invalid
 *   the proc side's clock is past max_clock_skew_ns ................ clock_skew
 *   signed but malformed, unknown major version .................... protocol_error
 *
 * One authoritative anchor per PID namespace: a second certificate for the
 * same (boot_id, pidns) is refused while the channel that presented the
 * first is alive; once that channel is gone, a certificate with a newer
 * issued_at replaces it (ANCHOR_CHANGED, so the caller emits the audit event
 * `anchor_changed`), and contexts by the old instance key are refused from
 * then on. The same instance presenting its certificate again on a new
 * channel is ANCHOR_RECONNECTED; a newer certificate for it on the same
 * channel is ANCHOR_RENEWED (verifier_renew_cert).
 *
 * Times are CLOCK_REALTIME ns (the two sides may be different machines);
 * now_ns 0 means "read the clock". Not thread-safe: one loop owns it.
 *
 * Clock skew: the two clocks need not agree. A signed clock sample
 * (proto/clock.h) that comes with the HelloAck, and again with every
 * ClockResponse, measures the proc side's clock against ours; the times the
 * proc side wrote (a context's issued_at/expires_at, a certificate's
 * issued_at/not_after) are then judged on the proc side's clock as
 * measured: at now + skew, with clock_skew_ns plus half the sample's round
 * trip as tolerance. A skew past max_clock_skew_ns refuses the certificate
 * (or, measured again on a live channel, every context of that channel)
 * with clock_skew. A peer that sends no sample (protocol 1.0) is judged at
 * skew 0, as before. Freshness of a live answer is the request's nonce;
 * offline re-verification judges at the context's own issued_at. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/reason.h"
#include "proto/cert.h"
#include "proto/clock.h"
#include "proto/context.h"
#include "proto/keys.h"
#include "proto/mac.h"
#include "proto/signed.h"

struct verifier;

struct verifier_opts {
	uint64_t clock_skew_ns;   /* 0: 1 s; tolerance beyond the measured skew */
	uint64_t max_clock_skew_ns; /* 0: 60 s; a measured skew past it is clock_skew */
	uint64_t max_lifetime_ns; /* 0: 30 s; a context valid for longer is refused */
	size_t max_anchors;       /* 0: 64 */
	size_t max_replay;        /* 0: 1 << 20 remembered nonces per generation */
};

int verifier_new(const struct pub_key *pinned, size_t n_pinned, const struct verifier_opts *opts,
		 struct verifier **out);
void verifier_free(struct verifier *v);

/* Channels: a connection to one proc-supervisor. Ids are never reused. */
uint64_t verifier_channel_open(struct verifier *v);
void verifier_channel_closed(struct verifier *v, uint64_t channel);

enum anchor_event_kind {
	ANCHOR_ESTABLISHED = 1, /* first certificate for this (boot_id, pidns) */
	ANCHOR_RECONNECTED,     /* same instance key, new channel */
	ANCHOR_CHANGED,         /* replaced the previous instance (audit anchor_changed) */
	ANCHOR_RENEWED,         /* a newer certificate for the same instance, same channel */
};

struct anchor_event {
	enum anchor_event_kind kind;
	const struct anchor_cert *cert; /* the current one; valid until the next install */
	struct pub_key old_instance;    /* ANCHOR_CHANGED: the replaced instance key */
	uint64_t old_issued_at_ns;
};

/* Verify and install a certificate presented on `channel`. REASON_OK and
 * *ev filled, or REASON_ANCHOR_CERTIFICATE_INVALID (bad signature, unknown
 * provisioning key, expired, older than the current one, a second anchor
 * while the first one's channel lives, table full). */
enum reason verifier_install_cert(struct verifier *v, const struct signed_cert *sc, uint64_t channel,
				  uint64_t now_ns, struct anchor_event *ev);

/* A clock sample as received: the sample, the nonce we sent for it, and
 * our clock when the nonce went out and the sample came in. */
struct verifier_clock_in {
	const struct clock_sample *sample;
	const uint8_t *nonce; /* PROTO_CLOCK_NONCE_LEN bytes */
	uint64_t sent_ns, recv_ns;
};

/* verifier_install_cert() with the HelloAck's clock sample (clk or
 * clk->sample NULL: none, skew 0). The sample must verify with the
 * certificate's instance key (else protocol_error); a skew past
 * max_clock_skew_ns is REASON_CLOCK_SKEW (the measurement is kept for
 * verifier_clock()); the certificate is then judged on the proc side's
 * clock as measured. */
enum reason verifier_install_cert_clocked(struct verifier *v, const struct signed_cert *sc, uint64_t channel,
					  uint64_t now_ns, const struct verifier_clock_in *clk,
					  struct anchor_event *ev);

/* A ClockResponse on a live channel: verified with that channel's instance
 * key (else protocol_error), it replaces the channel's skew. REASON_OK, or
 * REASON_CLOCK_SKEW past the bound (every context of the channel is then
 * refused clock_skew; the caller closes it). */
enum reason verifier_clock_update(struct verifier *v, uint64_t channel, const struct verifier_clock_in *clk);

/* The latest measurement, whichever channel it came from. */
struct verifier_clock_state {
	bool measured;          /* false: no sample yet (or the peer sends none) */
	bool exceeded;          /* |skew_ns| > max_clock_skew_ns */
	int64_t skew_ns;        /* proc minus net */
	uint64_t uncertainty_ns;
	uint64_t max_skew_ns;   /* the bound in force */
};
void verifier_clock(const struct verifier *v, struct verifier_clock_state *out);

/* A renewed certificate presented on a live channel (a HelloAck after the
 * first, docs/protocol.md): the same instance key, anchor, boot_id and PID
 * namespace as the certificate that channel presented, issued later. It
 * replaces that certificate (ANCHOR_RENEWED); the instance's contexts
 * issued under the previous one stay good. Anything else is
 * REASON_ANCHOR_CERTIFICATE_INVALID and changes nothing. */
enum reason verifier_renew_cert(struct verifier *v, const struct signed_cert *sc, uint64_t channel,
				uint64_t now_ns, struct anchor_event *ev);

/* The current signed certificate for an instance key id (for the audit
 * field `anchor_certificate`), or NULL. */
const struct signed_cert *verifier_cert_for_key(const struct verifier *v,
						const uint8_t key_id[PROTO_KEY_ID_LEN]);

struct verify_expect {
	const uint8_t *nonce;             /* the request's nonce; NULL = offline, not checked */
	const struct proto_tuple *tuple;   /* the flow; NULL = not checked */
	const uint8_t *instance_key_id;   /* the channel's certificate; NULL = any current */
	uint64_t now_ns;                  /* 0 = clock */
	/* Offline re-verification of a recorded context (tether verify-context):
	 * time checks are made at the context's own issued_at and nothing is
	 * recorded in the replay window. */
	bool offline;
};

/* REASON_OK and *out (context_free()) or a reason; *out NULL then. */
enum reason verifier_check_context(struct verifier *v, const struct signed_context *sc,
				   const struct verify_expect *ex, struct identity_context **out);

/* A context authenticated by the channel's MAC (protocol 1.2, proto/mac.h):
 * the context bytes, the MAC and the instance key id as received. */
struct mac_context {
	uint8_t *context;
	size_t context_len;
	uint8_t mac[PROTO_MAC_LEN];
	uint8_t key_id[PROTO_KEY_ID_LEN];
};

/* verifier_check_context() for a MAC'd answer on a live channel: the MAC
 * under that channel's key (mac_key) in place of the signature, then every
 * same check (anchor, nonce, tuple, times, certificate, replay window).
 * ex->instance_key_id is required (the channel's certificate) and
 * ex->offline is refused: a MAC proves nothing to a third party. A MAC
 * that does not verify is REASON_CONTEXT_SIGNATURE_INVALID. */
enum reason verifier_check_context_mac(struct verifier *v, const struct mac_context *mc,
				       const uint8_t mac_key[PROTO_MAC_KEY_LEN], const struct verify_expect *ex,
				       struct identity_context **out);
