/* Test helper: write an audit log (JSONL) with signed contexts, signed
 * with the provisioning key from a `tether keygen` directory.
 *
 *   proto_mklog PROVISIONING.KEY OUT.jsonl [--bad | --cert-once]
 *
 * Writes one line without a context, two valid egress_decision lines and,
 * with --bad, a line whose context signature is flipped and a line whose
 * certificate is signed by another provisioning key. With --cert-once the
 * certificate is logged once, on an anchor_established line, and the
 * decision lines carry only signed_context; then a context of an instance
 * whose certificate is not in the log follows. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "proto/signed.h"
#include "tests/proto/fixture.h"

static void emit(FILE *out, const struct signed_context *sc, const struct signed_cert *cert)
{
	uint8_t *p;
	size_t n;
	char *b64ctx = NULL, *b64cert = NULL;
	if (sc && (signed_context_pack(sc, &p, &n) < 0 || signed_base64_encode(p, n, &b64ctx) < 0))
		exit(1);
	if (sc)
		free(p);
	if (cert && (signed_cert_pack(cert, &p, &n) < 0 || signed_base64_encode(p, n, &b64cert) < 0))
		exit(1);
	if (cert)
		free(p);
	json_t *o = json_pack("{s:s, s:s, s:s}", "ts", "2026-12-01T20:00:00.000Z", "event",
			      sc ? "egress_decision" : "anchor_established", "topology", "split");
	if (sc) {
		json_object_set_new(o, "decision", json_string("allow"));
		json_object_set_new(o, "identity_source", json_string("delegated"));
		json_object_set_new(o, "signed_context", json_string(b64ctx));
	}
	if (cert)
		json_object_set_new(o, "anchor_certificate", json_string(b64cert));
	char *s = json_dumps(o, JSON_COMPACT);
	fprintf(out, "%s\n", s);
	free(s);
	json_decref(o);
	free(b64ctx);
	free(b64cert);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	bool bad = argc > 3 && strcmp(argv[3], "--bad") == 0;
	bool once = argc > 3 && strcmp(argv[3], "--cert-once") == 0;
	struct fixture f;
	if (fix_init(&f) < 0)
		return 1;
	struct sign_key *prov;
	if (provkey_load_secret(argv[1], &prov) < 0) {
		fprintf(stderr, "cannot load %s\n", argv[1]);
		return 1;
	}
	struct signed_cert cert;
	if (fix_cert(&f, prov, f.inst, FIX_T0, 0xeffff, &cert) < 0)
		return 1;
	FILE *out = fopen(argv[2], "w");
	if (!out)
		return 1;
	fprintf(out, "{\"ts\":\"2026-12-01T20:00:00.000Z\",\"event\":\"policy_loaded\",\"topology\":\"split\"}\n");
	struct signed_context sc;
	if (once)
		emit(out, NULL, &cert);
	for (int i = 0; i < 2; i++) {
		uint8_t nonce[32];
		memset(nonce, i + 1, sizeof(nonce));
		if (fix_sign(&f, NULL, nonce, NULL, FIX_T0 + 1000 + (uint64_t)i, &sc) < 0)
			return 1;
		emit(out, &sc, once ? NULL : &cert);
		if (bad && i == 1) {
			sc.signature[0] ^= 1;
			emit(out, &sc, &cert);
			struct signed_cert rogue;
			if (fix_cert(&f, f.prov, f.inst, FIX_T0, 0xeffff, &rogue) < 0)
				return 1;
			sc.signature[0] ^= 1;
			emit(out, &sc, &rogue);
			signed_cert_clear(&rogue);
		}
		signed_context_clear(&sc);
	}
	if (once) {
		/* an instance whose certificate never made it into the log */
		struct sign_key *stray;
		if (fix_seeded_key(0x77, &stray) < 0 || fix_sign(&f, stray, NULL, NULL, 0, &sc) < 0)
			return 1;
		emit(out, &sc, NULL);
		signed_context_clear(&sc);
		sign_key_free(stray);
	}
	fclose(out);
	signed_cert_clear(&cert);
	sign_key_free(prov);
	fix_free(&f);
	return 0;
}
