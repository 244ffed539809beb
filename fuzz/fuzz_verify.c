/* libFuzzer target: the net side's verification edge. Byte 0 selects:
 *   0  a serialized SignedContext, checked against the fixture's nonce and
 *      tuple by a verifier holding the fixture's certificate
 *      (tests/proto/fixture.h keys)
 *   1  a serialized SignedCertificate, installed in a fresh verifier
 *   2  raw ProcessIdentityContext bytes to the post-signature decoder
 * Nothing may crash, and nothing but a context actually signed by the
 * fixture's instance key may be accepted. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/verifier.h"
#include "tests/proto/fixture.h"

#define SEC 1000000000ull

/* Set up once: keys and a verifier holding the fixture's certificate. The
 * verifier is used in offline mode for contexts, so no input changes its
 * state and every run is reproducible. */
struct harness {
	struct fixture f;
	struct verifier *v;
};

static struct harness *harness(void)
{
	static struct harness h;
	static int ready;
	if (!ready) {
		struct anchor_event ev;
		if (fix_init(&h.f) < 0 || verifier_new(&h.f.prov_pub, 1, NULL, &h.v) < 0 ||
		    verifier_install_cert(h.v, &h.f.cert, verifier_channel_open(h.v), FIX_T0 + SEC, &ev) != REASON_OK)
			abort();
		ready = 1;
	}
	return &h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t mode = data[0] % 3;
	data++, size--;
	struct harness *h = harness();
	if (mode == 2) {
		struct identity_context *c = NULL;
		if (context_decode(data, size, &c) == 0)
			context_free(c);
		return 0;
	}
	if (mode == 1) {
		struct signed_cert sc;
		if (signed_cert_unpack(data, size, &sc) == 0) {
			struct verifier *v;
			struct anchor_event ev;
			if (verifier_new(&h->f.prov_pub, 1, NULL, &v) < 0)
				abort();
			verifier_install_cert(v, &sc, verifier_channel_open(v), FIX_T0 + SEC, &ev);
			verifier_free(v);
			signed_cert_clear(&sc);
		}
		return 0;
	}
	struct signed_context sc;
	if (signed_context_unpack(data, size, &sc) == 0) {
		struct verify_expect ex = { .nonce = h->f.nonce, .tuple = &h->f.tuple, .offline = true };
		struct identity_context *c = NULL;
		if (verifier_check_context(h->v, &sc, &ex, &c) == REASON_OK) {
			/* accepted: it must really carry the instance key's signature */
			if (!verify_detached(&h->f.inst_pub, SIGN_DOMAIN_CONTEXT, sc.context, sc.context_len,
					     sc.signature))
				abort();
			context_free(c);
		}
		signed_context_clear(&sc);
	}
	return 0;
}
