/* tether verify-context FILE|- --pubkey FILE: re-verify the signed identity
 * contexts recorded in an audit log.
 *
 * Every JSONL line with a `signed_context` field (base64 of a serialized
 * SignedContext) and an `anchor_certificate` field (base64 of a serialized
 * SignedCertificate) is checked offline: the certificate against the pinned
 * provisioning key, the context's signature against the certificate's
 * instance key, the context's anchor against the certificate's, and every
 * time check at the context's own issue time. Other lines are skipped.
 * Exit 0 when every checked line is valid (and at least one was checked),
 * 1 otherwise, 2 on usage errors. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "common/log.h"
#include "common/util.h"
#include "proto/cert.h"
#include "proto/keys.h"
#include "proto/signed.h"
#include "proto/verifier.h"

static void usage(FILE *out)
{
	fprintf(out, "usage: tether verify-context --pubkey FILE [--quiet] FILE|-\n\n"
		     "Verify the signed contexts recorded in an audit log (JSONL). Lines with\n"
		     "`signed_context` and `anchor_certificate` fields are checked against the\n"
		     "provisioning public key; each prints `line N: valid` or `line N: invalid: REASON`.\n"
		     "Exit 0 when all checked lines are valid, 1 otherwise.\n");
}

static enum reason check_line(const struct pub_key *pin, const char *b64ctx, const char *b64cert,
			      char *detail, size_t dsize)
{
	_cleanup_free_ uint8_t *cbuf = NULL, *kbuf = NULL;
	size_t clen, klen;
	struct signed_context sc = { 0 };
	struct signed_cert cert = { 0 };
	struct verifier *v = NULL;
	enum reason r = REASON_PROTOCOL_ERROR;

	if (signed_base64_decode(b64cert, &kbuf, &klen) < 0 || signed_cert_unpack(kbuf, klen, &cert) < 0) {
		snprintf(detail, dsize, "anchor_certificate is not a SignedCertificate");
		r = REASON_ANCHOR_CERTIFICATE_INVALID;
		goto out;
	}
	if (signed_base64_decode(b64ctx, &cbuf, &clen) < 0 || signed_context_unpack(cbuf, clen, &sc) < 0) {
		snprintf(detail, dsize, "signed_context is not a SignedContext");
		goto out;
	}
	if (verifier_new(pin, 1, NULL, &v) < 0) {
		r = REASON_INTERNAL_ERROR;
		goto out;
	}
	/* Install the certificate at the context's own time: decode it first
	 * only to learn that time, from the verified certificate. */
	struct anchor_cert ac;
	r = cert_verify(pin, 1, &cert, &ac);
	if (r != REASON_OK) {
		snprintf(detail, dsize, "certificate not signed by the pinned provisioning key or malformed");
		goto out;
	}
	struct anchor_event ev;
	r = verifier_install_cert(v, &cert, verifier_channel_open(v), ac.issued_at_ns, &ev);
	if (r != REASON_OK) {
		snprintf(detail, dsize, "certificate refused");
		goto out;
	}
	struct verify_expect ex = { .offline = true };
	struct identity_context *ctx = NULL;
	r = verifier_check_context(v, &sc, &ex, &ctx);
	if (r == REASON_OK) {
		snprintf(detail, dsize, "pid %d %s", (int)ctx->subject.pid, ctx->subject.exe.path);
		context_free(ctx);
	} else {
		detail[0] = '\0';
	}
out:
	verifier_free(v);
	signed_context_clear(&sc);
	signed_cert_clear(&cert);
	return r;
}

int cmd_verify_context(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pubkey", required_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *pubfile = NULL;
	bool quiet = false;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "p:qh", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			pubfile = optarg;
			break;
		case 'q':
			quiet = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!pubfile || optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	const char *path = argv[optind];
	struct pub_key pin;
	int r = provkey_load_public(pubfile, &pin);
	if (r < 0) {
		log_error("cannot load provisioning public key %s: %s", pubfile,
			  r == -EBADMSG ? "not a tether provisioning.pub file" : strerror(-r));
		return 2;
	}
	_cleanup_fclose_ FILE *f = strcmp(path, "-") == 0 ? NULL : fopen(path, "re");
	FILE *in = strcmp(path, "-") == 0 ? stdin : f;
	if (!in) {
		log_error("cannot open %s: %s", path, strerror(errno));
		return 2;
	}
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	unsigned long lineno = 0, checked = 0, bad = 0;
	while ((n = getline(&line, &cap, in)) >= 0) {
		lineno++;
		if (n == 0 || line[0] == '\n')
			continue;
		json_error_t jerr;
		json_t *o = json_loadb(line, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
		if (!o || !json_is_object(o)) {
			json_decref(o);
			continue; /* not an event line */
		}
		json_t *jc = json_object_get(o, "signed_context");
		json_t *jk = json_object_get(o, "anchor_certificate");
		if (!jc) {
			json_decref(o);
			continue;
		}
		checked++;
		char detail[PATH_MAX + 64];
		enum reason why;
		if (!json_is_string(jc) || !json_is_string(jk)) {
			why = !json_is_string(jk) ? REASON_ANCHOR_UNKNOWN : REASON_PROTOCOL_ERROR;
			snprintf(detail, sizeof(detail), "%s", !json_is_string(jk) ? "no anchor_certificate on the line" : "signed_context is not a string");
		} else {
			why = check_line(&pin, json_string_value(jc), json_string_value(jk), detail, sizeof(detail));
		}
		if (why == REASON_OK) {
			if (!quiet)
				printf("line %lu: valid (%s)\n", lineno, detail);
		} else {
			bad++;
			printf("line %lu: invalid: %s%s%s\n", lineno, reason_word(why), detail[0] ? ": " : "", detail);
		}
		json_decref(o);
	}
	if (checked == 0) {
		printf("no signed contexts found in %s\n", path);
		return 1;
	}
	if (!quiet || bad)
		printf("%lu checked, %lu valid, %lu invalid\n", checked, checked - bad, bad);
	return bad ? 1 : 0;
}
