/* Test helper: write an audit log (JSONL) with signed contexts, signed
 * with the provisioning key from a `tether keygen` directory.
 *
 *   proto_mklog PROVISIONING.KEY OUT.jsonl [--bad]
 *
 * Writes one line without a context, two valid egress_decision lines and,
 * with --bad, a line whose context signature is flipped and a line whose
 * certificate is signed by another provisioning key. */
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
	char *b64ctx, *b64cert;
	if (signed_context_pack(sc, &p, &n) < 0 || signed_base64_encode(p, n, &b64ctx) < 0)
		exit(1);
	free(p);
	if (signed_cert_pack(cert, &p, &n) < 0 || signed_base64_encode(p, n, &b64cert) < 0)
		exit(1);
	free(p);
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "ts", "2026-12-01T20:00:00.000Z",
			      "event", "egress_decision", "topology", "split", "decision", "allow",
			      "identity_source", "delegated", "signed_context", b64ctx,
			      "anchor_certificate", b64cert);
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
	for (int i = 0; i < 2; i++) {
		uint8_t nonce[32];
		memset(nonce, i + 1, sizeof(nonce));
		if (fix_sign(&f, NULL, nonce, NULL, FIX_T0 + 1000 + (uint64_t)i, &sc) < 0)
			return 1;
		emit(out, &sc, &cert);
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
	fclose(out);
	signed_cert_clear(&cert);
	sign_key_free(prov);
	fix_free(&f);
	return 0;
}
