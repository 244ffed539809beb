#include "proto/clock.h"

#include <string.h>

#include "common/util.h"

static void clock_message(const uint8_t nonce[PROTO_CLOCK_NONCE_LEN], uint64_t now_ns,
			  uint8_t msg[PROTO_CLOCK_NONCE_LEN + 8])
{
	memcpy(msg, nonce, PROTO_CLOCK_NONCE_LEN);
	for (int i = 0; i < 8; i++)
		msg[PROTO_CLOCK_NONCE_LEN + i] = (uint8_t)(now_ns >> (56 - 8 * i));
}

void clock_sample_sign(const struct sign_key *instance, const uint8_t nonce[PROTO_CLOCK_NONCE_LEN],
		       uint64_t now_ns, struct clock_sample *out)
{
	uint8_t msg[PROTO_CLOCK_NONCE_LEN + 8];
	out->now_ns = now_ns ? now_ns : now_real_ns();
	clock_message(nonce, out->now_ns, msg);
	sign_detached(instance, SIGN_DOMAIN_CLOCK, msg, sizeof(msg), out->signature);
}

bool clock_sample_verify(const struct pub_key *instance, const uint8_t nonce[PROTO_CLOCK_NONCE_LEN],
			 const struct clock_sample *s)
{
	uint8_t msg[PROTO_CLOCK_NONCE_LEN + 8];
	if (s->now_ns == 0)
		return false;
	clock_message(nonce, s->now_ns, msg);
	return verify_detached(instance, SIGN_DOMAIN_CLOCK, msg, sizeof(msg), s->signature);
}

void clock_skew_measure(uint64_t sample_ns, uint64_t sent_ns, uint64_t recv_ns, struct clock_skew *out)
{
	if (recv_ns < sent_ns) /* our clock stepped back meanwhile */
		recv_ns = sent_ns;
	uint64_t mid = sent_ns + (recv_ns - sent_ns) / 2;
	out->skew_ns = sample_ns >= mid ? (int64_t)(sample_ns - mid) : -(int64_t)(mid - sample_ns);
	out->uncertainty_ns = (recv_ns - sent_ns + 1) / 2;
}
