/* Signed clock samples: how the net side measures the proc side's clock.
 *
 * The net side sends 32 fresh random bytes (in Hello, or a ClockRequest);
 * the proc side answers with its CLOCK_REALTIME and an Ed25519 signature by
 * its instance key over (domain "tether-clock-v1", nonce, now_ns). Only the
 * holder of the instance key can make one, and only after it saw the
 * nonce: a sample is fresh and cannot be forged or replayed by anyone on
 * the channel. The net side takes the skew as
 *
 *   skew = sample.now_ns - (sent_ns + recv_ns) / 2   (proc minus net)
 *
 * with an uncertainty of half the round trip (clock_skew_measure). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "proto/keys.h"

#define PROTO_CLOCK_NONCE_LEN 32

struct clock_sample {
	uint64_t now_ns; /* the proc side's CLOCK_REALTIME */
	uint8_t signature[PROTO_SIG_LEN];
};

/* now_ns 0: read the clock. */
void clock_sample_sign(const struct sign_key *instance, const uint8_t nonce[PROTO_CLOCK_NONCE_LEN],
		       uint64_t now_ns, struct clock_sample *out);
bool clock_sample_verify(const struct pub_key *instance, const uint8_t nonce[PROTO_CLOCK_NONCE_LEN],
			 const struct clock_sample *s);

/* A verified sample and the net side's clock when the nonce went out and
 * the answer came in -> skew (proc minus net, ns) and its uncertainty. */
struct clock_skew {
	int64_t skew_ns;
	uint64_t uncertainty_ns;
};
void clock_skew_measure(uint64_t sample_ns, uint64_t sent_ns, uint64_t recv_ns, struct clock_skew *out);
