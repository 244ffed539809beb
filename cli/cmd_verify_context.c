/* tether verify-context FILE|- --pubkey FILE: re-verify the signed identity
 * contexts recorded in an audit log.
 *
 * Every JSONL line with a `signed_context` field (base64 of a serialized
 * SignedContext) is checked offline against the certificate of its
 * instance key: the `anchor_certificate` field (base64 of a serialized
 * SignedCertificate) of the same line, or of an earlier line (e.g. the
 * anchor_established / anchor_changed / anchor_renewed event; a context is
 * valid when one of its instance's certificates covers it). Checked: the certificate
 * against the pinned provisioning key, the context's signature against the certificate's
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
		     "Verify the signed contexts recorded in an audit log (JSONL). Every line with a\n"
		     "`signed_context` field is checked against the provisioning public key and the\n"
		     "`anchor_certificate` of its instance (on the same or an earlier line); each\n"
		     "prints `line N: valid` or `line N: invalid: REASON`.\n"
		     "Exit 0 when all checked lines are valid, 1 otherwise.\n");
}

/* Certificates seen so far in the log (on decision lines or on
 * anchor_established/anchor_changed/anchor_renewed events), with their
 * instance key ids. */
struct cert_book {
	struct signed_cert *certs;
	uint8_t (*ids)[PROTO_KEY_ID_LEN];
	size_t n;
};

static void book_free(struct cert_book *b)
{
	for (size_t i = 0; i < b->n; i++)
		signed_cert_clear(&b->certs[i]);
	free(b->certs);
	free(b->ids);
}

/* The certificates of an instance key id, the latest first: *pos starts
 * at b->n; NULL when there is none left. An instance has several when it
 * renewed its certificate (anchor_renewed). */
static const struct signed_cert *book_next(const struct cert_book *b, const uint8_t *id, size_t *pos)
{
	while (*pos > 0) {
		size_t i = --*pos;
		if (memcmp(b->ids[i], id, PROTO_KEY_ID_LEN) == 0)
			return &b->certs[i];
	}
	return NULL;
}

static bool book_has(const struct cert_book *b, const uint8_t *id, const struct signed_cert *c)
{
	size_t pos = b->n;
	const struct signed_cert *k;
	while ((k = book_next(b, id, &pos)))
		if (k->cert_len == c->cert_len && memcmp(k->cert, c->cert, c->cert_len) == 0)
			return true;
	return false;
}

/* Remember a certificate that verifies against the pin; the verified one
 * is what later lines are checked with. */
static enum reason book_add(struct cert_book *b, const struct pub_key *pin, const char *b64)
{
	_cleanup_free_ uint8_t *raw = NULL;
	size_t len;
	struct signed_cert c;
	struct anchor_cert ac;
	if (signed_base64_decode(b64, &raw, &len) < 0 || signed_cert_unpack(raw, len, &c) < 0)
		return REASON_ANCHOR_CERTIFICATE_INVALID;
	if (cert_verify(pin, 1, &c, &ac) != REASON_OK) {
		signed_cert_clear(&c);
		return REASON_ANCHOR_CERTIFICATE_INVALID;
	}
	if (book_has(b, ac.instance.id, &c)) {
		signed_cert_clear(&c);
		return REASON_OK;
	}
	struct signed_cert *nc = realloc(b->certs, (b->n + 1) * sizeof(*nc));
	if (nc)
		b->certs = nc;
	uint8_t(*ni)[PROTO_KEY_ID_LEN] = realloc(b->ids, (b->n + 1) * sizeof(*ni));
	if (ni)
		b->ids = ni;
	if (!nc || !ni) {
		signed_cert_clear(&c);
		return REASON_INTERNAL_ERROR;
	}
	b->certs[b->n] = c;
	memcpy(b->ids[b->n], ac.instance.id, PROTO_KEY_ID_LEN);
	b->n++;
	return REASON_OK;
}

/* The context against one certificate of its instance. */
static enum reason check_with(const struct pub_key *pin, const struct signed_context *sc,
			      const struct signed_cert *cert, char *detail, size_t dsize)
{
	struct verifier *v = NULL;
	if (verifier_new(pin, 1, NULL, &v) < 0)
		return REASON_INTERNAL_ERROR;
	/* Install at the certificate's own issue time: the context is then
	 * checked at its own issue time (offline mode). */
	struct anchor_cert ac;
	struct anchor_event ev;
	enum reason r;
	if (cert_verify(pin, 1, cert, &ac) != REASON_OK ||
	    verifier_install_cert(v, cert, verifier_channel_open(v), ac.issued_at_ns, &ev) != REASON_OK) {
		r = REASON_ANCHOR_CERTIFICATE_INVALID;
	} else {
		struct verify_expect ex = { .offline = true };
		struct identity_context *ctx = NULL;
		r = verifier_check_context(v, sc, &ex, &ctx);
		if (r == REASON_OK) {
			snprintf(detail, dsize, "pid %d %s", (int)ctx->subject.pid, ctx->subject.exe.path);
			context_free(ctx);
		}
	}
	verifier_free(v);
	return r;
}

/* Valid when some certificate of the context's instance covers it (each
 * renewal adds one); otherwise the reason against the latest. */
static enum reason check_line(const struct pub_key *pin, const char *b64ctx, const struct cert_book *book,
			      char *detail, size_t dsize)
{
	_cleanup_free_ uint8_t *cbuf = NULL;
	size_t clen;
	struct signed_context sc = { 0 };
	enum reason r = REASON_PROTOCOL_ERROR;
	detail[0] = '\0';

	if (signed_base64_decode(b64ctx, &cbuf, &clen) < 0 || signed_context_unpack(cbuf, clen, &sc) < 0) {
		snprintf(detail, dsize, "signed_context is not a SignedContext");
		goto out;
	}
	size_t pos = book->n;
	const struct signed_cert *cert = book_next(book, sc.key_id, &pos);
	if (!cert) {
		char hex[PROTO_KEY_ID_HEX];
		key_id_hex(sc.key_id, hex);
		snprintf(detail, dsize, "no valid anchor_certificate for instance key %s in the log", hex);
		r = REASON_ANCHOR_UNKNOWN;
		goto out;
	}
	r = check_with(pin, &sc, cert, detail, dsize);
	while (r != REASON_OK && (cert = book_next(book, sc.key_id, &pos)))
		if (check_with(pin, &sc, cert, detail, dsize) == REASON_OK)
			r = REASON_OK;
out:
	signed_context_clear(&sc);
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
	_cleanup_(book_free) struct cert_book book = { 0 };
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
		enum reason cert_why = REASON_OK;
		if (json_is_string(jk))
			cert_why = book_add(&book, &pin, json_string_value(jk));
		if (!jc) {
			json_decref(o);
			continue;
		}
		checked++;
		char detail[PATH_MAX + 64];
		enum reason why;
		if (!json_is_string(jc)) {
			why = REASON_PROTOCOL_ERROR;
			snprintf(detail, sizeof(detail), "signed_context is not a string");
		} else if (cert_why != REASON_OK) {
			why = cert_why;
			snprintf(detail, sizeof(detail), "the line's anchor_certificate is not signed by the pinned key or malformed");
		} else {
			why = check_line(&pin, json_string_value(jc), &book, detail, sizeof(detail));
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
