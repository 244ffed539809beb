/* Keys, certificates and the context verifier: every rejection path gets
 * its reason word, and nothing bad is ever accepted. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "identity.pb-c.h"
#include "proto/mac.h"
#include "proto/verifier.h"
#include "tests/proto/fixture.h"

#define SEC 1000000000ull

static void test_key_files(void **state)
{
	char dir[] = "/tmp/tether-keys-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char kd[300], kf[320], pf[320];
	snprintf(kd, sizeof(kd), "%s/k", dir);
	snprintf(kf, sizeof(kf), "%s/provisioning.key", kd);
	snprintf(pf, sizeof(pf), "%s/provisioning.pub", kd);
	uint8_t id[PROTO_KEY_ID_LEN];
	assert_int_equal(provkey_write_files(kd, id), 0);
	struct stat st;
	assert_int_equal(stat(kf, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* never overwrites */
	assert_int_equal(provkey_write_files(kd, NULL), -EEXIST);

	struct sign_key *k = NULL;
	struct pub_key pub;
	assert_int_equal(provkey_load_secret(kf, &k), 0);
	assert_int_equal(provkey_load_public(pf, &pub), 0);
	assert_memory_equal(k->pk, pub.pk, 32);
	assert_memory_equal(pub.id, id, PROTO_KEY_ID_LEN);
	/* key id = first 16 bytes of BLAKE2b of the public key */
	uint8_t id2[PROTO_KEY_ID_LEN];
	key_id_compute(pub.pk, id2);
	assert_memory_equal(id2, id, PROTO_KEY_ID_LEN);
	uint8_t sig[64];
	sign_detached(k, SIGN_DOMAIN_CONTEXT, (const uint8_t *)"abc", 3, sig);
	assert_true(verify_detached(&pub, SIGN_DOMAIN_CONTEXT, (const uint8_t *)"abc", 3, sig));
	/* domain separation: a context signature is not a certificate signature */
	assert_false(verify_detached(&pub, SIGN_DOMAIN_CERTIFICATE, (const uint8_t *)"abc", 3, sig));
	sign_key_free(k);

	/* a group/world readable secret key is refused */
	chmod(kf, 0640);
	assert_int_equal(provkey_load_secret(kf, &k), -EPERM);
	chmod(kf, 0604);
	assert_int_equal(provkey_load_secret(kf, &k), -EPERM);
	chmod(kf, 0600);
	/* a public key file is not a secret key file (and vice versa) */
	assert_int_equal(provkey_load_secret(pf, &k), -EPERM); /* 0644 */
	chmod(pf, 0600);
	assert_int_equal(provkey_load_secret(pf, &k), -EBADMSG);
	assert_int_equal(provkey_load_public(kf, &pub), -EBADMSG);
	/* a corrupted file */
	int fd = open(kf, O_WRONLY | O_TRUNC);
	assert_true(write(fd, "tether-provisioning-secret-v1\nzz\n", 33) == 33);
	close(fd);
	assert_int_equal(provkey_load_secret(kf, &k), -EBADMSG);
	unlink(kf);
	unlink(pf);
	rmdir(kd);
	rmdir(dir);
}

struct vfix {
	struct fixture f;
	struct verifier *v;
	uint64_t ch;
};

static int setup(void **state)
{
	struct vfix *x = calloc(1, sizeof(*x));
	if (fix_init(&x->f) < 0 || verifier_new(&x->f.prov_pub, 1, NULL, &x->v) < 0)
		return -1;
	x->ch = verifier_channel_open(x->v);
	struct anchor_event ev;
	if (verifier_install_cert(x->v, &x->f.cert, x->ch, FIX_T0 + SEC, &ev) != REASON_OK ||
	    ev.kind != ANCHOR_ESTABLISHED)
		return -1;
	*state = x;
	return 0;
}

static int teardown(void **state)
{
	struct vfix *x = *state;
	verifier_free(x->v);
	fix_free(&x->f);
	free(x);
	return 0;
}

static enum reason check(struct vfix *x, const struct signed_context *sc, const uint8_t *nonce,
			 const struct proto_tuple *t, uint64_t now)
{
	struct verify_expect ex = { .nonce = nonce ? nonce : x->f.nonce,
				    .tuple = t ? t : &x->f.tuple,
				    .instance_key_id = x->f.inst_pub.id,
				    .now_ns = now ? now : FIX_T0 + 2 * SEC };
	struct identity_context *c = NULL;
	enum reason r = verifier_check_context(x->v, sc, &ex, &c);
	if (r == REASON_OK) {
		assert_non_null(c);
		context_free(c);
	} else {
		assert_null(c);
	}
	return r;
}

static void test_valid_then_replayed(void **state)
{
	struct vfix *x = *state;
	struct signed_context sc;
	assert_int_equal(fix_sign(&x->f, NULL, NULL, NULL, 0, &sc), 0);
	struct verify_expect ex = { .nonce = x->f.nonce, .tuple = &x->f.tuple, .now_ns = FIX_T0 + 2 * SEC };
	struct identity_context *c = NULL;
	assert_int_equal(verifier_check_context(x->v, &sc, &ex, &c), REASON_OK);
	assert_string_equal(c->subject.exe.path, "/usr/bin/curl");
	assert_int_equal(c->n_ancestors, 1);
	assert_string_equal(c->ancestors[0].exe.path, "/bin/sh");
	assert_string_equal(c->anchor.key, x->f.anchor.key);
	assert_int_equal(c->source, IDENTITY_SOURCE_DELEGATED);
	assert_int_equal(c->socket_cookie, 77);
	assert_int_equal(c->expires_at_ns - c->issued_at_ns, PROTO_DEFAULT_LIFETIME_NS);
	context_free(c);
	/* the same context again: replayed */
	assert_int_equal(check(x, &sc, NULL, NULL, 0), REASON_CONTEXT_REPLAYED);
	/* and for another request (another nonce): replayed too */
	uint8_t other[32];
	memset(other, 0x01, sizeof(other));
	assert_int_equal(check(x, &sc, other, NULL, 0), REASON_CONTEXT_REPLAYED);
	signed_context_clear(&sc);
}

static void test_tuple_and_expiry(void **state)
{
	struct vfix *x = *state;
	struct signed_context sc;
	assert_int_equal(fix_sign(&x->f, NULL, NULL, NULL, 0, &sc), 0);
	struct proto_tuple t = x->f.tuple;
	t.sport++;
	assert_int_equal(check(x, &sc, NULL, &t, 0), REASON_CONTEXT_TUPLE_MISMATCH);
	/* expired: lifetime 5 s + skew 1 s */
	assert_int_equal(check(x, &sc, NULL, NULL, FIX_T0 + 1000 + 7 * SEC), REASON_CONTEXT_EXPIRED);
	/* from the future beyond the skew */
	assert_int_equal(check(x, &sc, NULL, NULL, FIX_T0 - 2 * SEC), REASON_CONTEXT_EXPIRED);
	/* within skew after expiry: still fine (and now consumed) */
	assert_int_equal(check(x, &sc, NULL, NULL, FIX_T0 + 1000 + 5 * SEC + SEC / 2), REASON_OK);
	signed_context_clear(&sc);

	/* a lifetime above the verifier's maximum */
	struct context_input in = { .topology = PROTO_TOPOLOGY_SPLIT, .source = IDENTITY_SOURCE_DELEGATED,
		.subject = &x->f.subject, .anchor = &x->f.anchor, .tuple = &x->f.tuple,
		.nonce = x->f.nonce, .issued_at_ns = FIX_T0 + SEC, .lifetime_ns = 3600 * SEC };
	assert_int_equal(context_sign(x->f.inst, &in, &sc), 0);
	assert_int_equal(check(x, &sc, NULL, NULL, 0), REASON_CONTEXT_EXPIRED);
	signed_context_clear(&sc);
}

static void test_bad_signatures(void **state)
{
	struct vfix *x = *state;
	struct signed_context sc;
	assert_int_equal(fix_sign(&x->f, NULL, NULL, NULL, 0, &sc), 0);
	/* a flipped bit in the signature */
	sc.signature[10] ^= 1;
	assert_int_equal(check(x, &sc, NULL, NULL, 0), REASON_CONTEXT_SIGNATURE_INVALID);
	sc.signature[10] ^= 1;
	/* a flipped bit in the signed bytes */
	sc.context[sc.context_len / 2] ^= 0x40;
	assert_int_equal(check(x, &sc, NULL, NULL, 0), REASON_CONTEXT_SIGNATURE_INVALID);
	signed_context_clear(&sc);

	/* signed by another key that claims the instance key id */
	struct sign_key *other;
	assert_int_equal(fix_seeded_key(0x33, &other), 0);
	assert_int_equal(fix_sign(&x->f, other, NULL, NULL, 0, &sc), 0);
	assert_int_equal(check(x, &sc, NULL, NULL, 0), REASON_ANCHOR_UNKNOWN); /* its own id */
	memcpy(sc.key_id, x->f.inst_pub.id, PROTO_KEY_ID_LEN);
	assert_int_equal(check(x, &sc, NULL, NULL, 0), REASON_CONTEXT_SIGNATURE_INVALID);
	signed_context_clear(&sc);
	sign_key_free(other);

	/* a certificate's bytes (with its valid provisioning signature) offered
	 * as a context: wrong key and wrong domain */
	struct signed_context fake = { .context = x->f.cert.cert, .context_len = x->f.cert.cert_len };
	memcpy(fake.signature, x->f.cert.signature, 64);
	memcpy(fake.key_id, x->f.inst_pub.id, PROTO_KEY_ID_LEN);
	assert_int_equal(check(x, &fake, NULL, NULL, 0), REASON_CONTEXT_SIGNATURE_INVALID);
}

static void test_context_anchor_mismatch(void **state)
{
	struct vfix *x = *state;
	/* correctly signed, but naming another anchor than the certificate's */
	struct fixture g = x->f;
	fix_ref(&g.anchor, 101, 8888, "/tmp/fake-supervisor");
	struct signed_context sc;
	assert_int_equal(fix_sign(&g, x->f.inst, NULL, NULL, 0, &sc), 0);
	assert_int_equal(check(x, &sc, NULL, NULL, 0), REASON_ANCHOR_UNKNOWN);
	signed_context_clear(&sc);
}

static void test_certificates(void **state)
{
	struct vfix *x = *state;
	struct anchor_event ev;
	struct signed_cert c;
	/* signed by an unknown provisioning key */
	struct sign_key *rogue, *inst2;
	assert_int_equal(fix_seeded_key(0x44, &rogue), 0);
	assert_int_equal(fix_seeded_key(0x55, &inst2), 0);
	assert_int_equal(fix_cert(&x->f, rogue, inst2, FIX_T0 + 10 * SEC, 0x1234, &c), 0);
	uint64_t ch2 = verifier_channel_open(x->v);
	assert_int_equal(verifier_install_cert(x->v, &c, ch2, FIX_T0 + 11 * SEC, &ev),
			 REASON_ANCHOR_CERTIFICATE_INVALID);
	signed_cert_clear(&c);
	/* an expired certificate (validity 1 h) */
	assert_int_equal(fix_cert(&x->f, x->f.prov, inst2, FIX_T0, 0x1234, &c), 0);
	assert_int_equal(verifier_install_cert(x->v, &c, ch2, FIX_T0 + 2 * 3600 * SEC, &ev),
			 REASON_ANCHOR_CERTIFICATE_INVALID);
	/* a tampered certificate */
	c.cert[c.cert_len - 3] ^= 1;
	assert_int_equal(verifier_install_cert(x->v, &c, ch2, FIX_T0 + SEC, &ev),
			 REASON_ANCHOR_CERTIFICATE_INVALID);
	signed_cert_clear(&c);
	/* garbage bytes with a valid provisioning signature over them are
	 * still refused: they do not decode */
	uint8_t junk[40];
	memset(junk, 0x5a, sizeof(junk));
	struct signed_cert j = { .cert = junk, .cert_len = sizeof(junk) };
	sign_detached(x->f.prov, SIGN_DOMAIN_CERTIFICATE, junk, sizeof(junk), j.signature);
	assert_int_equal(verifier_install_cert(x->v, &j, ch2, FIX_T0 + SEC, &ev),
			 REASON_ANCHOR_CERTIFICATE_INVALID);
	/* a context of an instance whose certificate was refused: anchor_unknown */
	struct signed_context sc;
	assert_int_equal(fix_sign(&x->f, rogue, NULL, NULL, 0, &sc), 0);
	assert_int_equal(check(x, &sc, NULL, NULL, 0), REASON_ANCHOR_UNKNOWN);
	signed_context_clear(&sc);
	sign_key_free(rogue);
	sign_key_free(inst2);
}

static void test_anchor_replacement(void **state)
{
	struct vfix *x = *state;
	struct anchor_event ev;
	struct sign_key *inst2;
	assert_int_equal(fix_seeded_key(0x66, &inst2), 0);
	struct signed_cert c2;
	assert_int_equal(fix_cert(&x->f, x->f.prov, inst2, FIX_T0 + 10 * SEC, 0xeffff, &c2), 0);
	uint64_t ch2 = verifier_channel_open(x->v);
	/* the first anchor's channel is alive: a second one is refused */
	assert_int_equal(verifier_install_cert(x->v, &c2, ch2, FIX_T0 + 11 * SEC, &ev),
			 REASON_ANCHOR_CERTIFICATE_INVALID);
	/* a different PID namespace is a separate anchor */
	struct signed_cert c3;
	assert_int_equal(fix_cert(&x->f, x->f.prov, inst2, FIX_T0 + 10 * SEC, 0xabcd, &c3), 0);
	uint64_t ch3 = verifier_channel_open(x->v);
	assert_int_equal(verifier_install_cert(x->v, &c3, ch3, FIX_T0 + 11 * SEC, &ev), REASON_OK);
	assert_int_equal(ev.kind, ANCHOR_ESTABLISHED);
	verifier_channel_closed(x->v, ch3);
	/* the first channel goes away: now accepted, and reported as a change */
	verifier_channel_closed(x->v, x->ch);
	assert_int_equal(verifier_install_cert(x->v, &c2, ch2, FIX_T0 + 11 * SEC, &ev), REASON_OK);
	assert_int_equal(ev.kind, ANCHOR_CHANGED);
	assert_memory_equal(ev.old_instance.id, x->f.inst_pub.id, PROTO_KEY_ID_LEN);
	assert_memory_equal(ev.cert->instance.pk, inst2->pk, 32);
	assert_non_null(verifier_cert_for_key(x->v, ev.cert->instance.id));
	/* contexts of the old instance are refused from now on */
	struct signed_context sc;
	assert_int_equal(fix_sign(&x->f, NULL, NULL, NULL, FIX_T0 + 12 * SEC, &sc), 0);
	struct verify_expect ex = { .nonce = x->f.nonce, .tuple = &x->f.tuple, .now_ns = FIX_T0 + 12 * SEC };
	struct identity_context *ctx;
	assert_int_equal(verifier_check_context(x->v, &sc, &ex, &ctx), REASON_ANCHOR_UNKNOWN);
	signed_context_clear(&sc);
	/* the new instance's contexts are accepted */
	assert_int_equal(fix_sign(&x->f, inst2, NULL, NULL, FIX_T0 + 12 * SEC, &sc), 0);
	assert_int_equal(verifier_check_context(x->v, &sc, &ex, &ctx), REASON_OK);
	context_free(ctx);
	signed_context_clear(&sc);
	/* the old certificate cannot come back (older), even with its channel gone */
	verifier_channel_closed(x->v, ch2);
	uint64_t ch4 = verifier_channel_open(x->v);
	assert_int_equal(verifier_install_cert(x->v, &x->f.cert, ch4, FIX_T0 + 13 * SEC, &ev),
			 REASON_ANCHOR_CERTIFICATE_INVALID);
	/* the same new instance reconnecting is fine */
	assert_int_equal(verifier_install_cert(x->v, &c2, ch4, FIX_T0 + 13 * SEC, &ev), REASON_OK);
	assert_int_equal(ev.kind, ANCHOR_RECONNECTED);
	signed_cert_clear(&c2);
	signed_cert_clear(&c3);
	sign_key_free(inst2);
}

/* A renewed certificate on the live channel (verifier_renew_cert): only
 * for the same instance, process and PID namespace, only newer; contexts
 * the instance signed under the previous certificate stay good, and its
 * new ones are good past the first certificate's end. */
static void test_renewal(void **state)
{
	struct vfix *x = *state;
	struct anchor_event ev;
	struct sign_key *inst2;
	assert_int_equal(fix_seeded_key(0x67, &inst2), 0);
	const uint64_t T = FIX_T0 + 2400 * SEC; /* two thirds of the first one's hour */
	struct signed_cert renewed, other_inst, other_ns;
	assert_int_equal(fix_cert(&x->f, x->f.prov, x->f.inst, T, 0xeffff, &renewed), 0);
	assert_int_equal(fix_cert(&x->f, x->f.prov, inst2, T, 0xeffff, &other_inst), 0);
	assert_int_equal(fix_cert(&x->f, x->f.prov, x->f.inst, T, 0x1234, &other_ns), 0);
	uint64_t ch2 = verifier_channel_open(x->v);
	assert_int_equal(verifier_renew_cert(x->v, &renewed, ch2, T + SEC, &ev), REASON_ANCHOR_CERTIFICATE_INVALID);
	assert_int_equal(verifier_renew_cert(x->v, &other_inst, x->ch, T + SEC, &ev),
			 REASON_ANCHOR_CERTIFICATE_INVALID);
	assert_int_equal(verifier_renew_cert(x->v, &other_ns, x->ch, T + SEC, &ev), REASON_ANCHOR_CERTIFICATE_INVALID);
	assert_int_equal(verifier_renew_cert(x->v, &x->f.cert, x->ch, T + SEC, &ev),
			 REASON_ANCHOR_CERTIFICATE_INVALID); /* not newer */
	const struct signed_cert *cur = verifier_cert_for_key(x->v, x->f.inst_pub.id);
	assert_memory_equal(cur->cert, x->f.cert.cert, x->f.cert.cert_len); /* nothing changed */

	assert_int_equal(verifier_renew_cert(x->v, &renewed, x->ch, T + SEC, &ev), REASON_OK);
	assert_int_equal(ev.kind, ANCHOR_RENEWED);
	cur = verifier_cert_for_key(x->v, x->f.inst_pub.id);
	assert_int_equal(cur->cert_len, renewed.cert_len);
	assert_memory_equal(cur->cert, renewed.cert, renewed.cert_len);
	/* a context signed 3 s before the renewal, arriving after it */
	uint8_t n1[32], n2[32];
	memset(n1, 0x31, sizeof(n1));
	memset(n2, 0x32, sizeof(n2));
	struct signed_context sc;
	assert_int_equal(fix_sign(&x->f, NULL, n1, NULL, T - 3 * SEC, &sc), 0);
	assert_int_equal(check(x, &sc, n1, NULL, T + SEC), REASON_OK);
	signed_context_clear(&sc);
	/* past the first certificate's hour: good under the renewed one */
	assert_int_equal(fix_sign(&x->f, NULL, n2, NULL, FIX_T0 + 3700 * SEC, &sc), 0);
	assert_int_equal(check(x, &sc, n2, NULL, FIX_T0 + 3700 * SEC + SEC), REASON_OK);
	signed_context_clear(&sc);
	/* once its channel is gone, nothing renews it */
	verifier_channel_closed(x->v, x->ch);
	struct signed_cert later;
	assert_int_equal(fix_cert(&x->f, x->f.prov, x->f.inst, T + 60 * SEC, 0xeffff, &later), 0);
	assert_int_equal(verifier_renew_cert(x->v, &later, x->ch, T + 61 * SEC, &ev), REASON_ANCHOR_CERTIFICATE_INVALID);
	signed_cert_clear(&later);
	signed_cert_clear(&renewed);
	signed_cert_clear(&other_inst);
	signed_cert_clear(&other_ns);
	sign_key_free(inst2);
}

/* A full anchor table reuses the oldest entry whose channel is gone: a
 * long-lived net-supervisor accepts any number of proc-supervisor
 * restarts; while every channel lives, one more anchor is refused. */
static void test_anchor_table_full(void **state)
{
	struct vfix *x = *state;
	struct verifier *v;
	struct verifier_opts o = { .max_anchors = 2 };
	assert_int_equal(verifier_new(&x->f.prov_pub, 1, &o, &v), 0);
	struct anchor_event ev;
	struct signed_cert c[5];
	uint64_t ch[5];
	for (int i = 0; i < 5; i++) {
		assert_int_equal(fix_cert(&x->f, x->f.prov, x->f.inst, FIX_T0 + (uint64_t)i * SEC, 0x1000 + (uint64_t)i, &c[i]), 0);
		ch[i] = verifier_channel_open(v);
	}
	assert_int_equal(verifier_install_cert(v, &c[0], ch[0], FIX_T0 + 10 * SEC, &ev), REASON_OK);
	assert_int_equal(verifier_install_cert(v, &c[1], ch[1], FIX_T0 + 10 * SEC, &ev), REASON_OK);
	/* both channels alive: full */
	assert_int_equal(verifier_install_cert(v, &c[2], ch[2], FIX_T0 + 10 * SEC, &ev),
			 REASON_ANCHOR_CERTIFICATE_INVALID);
	/* one goes away: its slot is reused */
	verifier_channel_closed(v, ch[1]);
	assert_int_equal(verifier_install_cert(v, &c[2], ch[2], FIX_T0 + 10 * SEC, &ev), REASON_OK);
	assert_int_equal(ev.kind, ANCHOR_ESTABLISHED);
	/* restarts without end: each new one replaces the oldest dead entry */
	verifier_channel_closed(v, ch[0]);
	verifier_channel_closed(v, ch[2]);
	assert_int_equal(verifier_install_cert(v, &c[3], ch[3], FIX_T0 + 10 * SEC, &ev), REASON_OK);
	verifier_channel_closed(v, ch[3]);
	assert_int_equal(verifier_install_cert(v, &c[4], ch[4], FIX_T0 + 10 * SEC, &ev), REASON_OK);
	assert_int_equal(ev.kind, ANCHOR_ESTABLISHED);
	for (int i = 0; i < 5; i++)
		signed_cert_clear(&c[i]);
	verifier_free(v);
}

static void test_malformed_signed_context(void **state)
{
	struct vfix *x = *state;
	/* correctly signed garbage: protocol_error, never accepted */
	uint8_t junk[64];
	memset(junk, 0x07, sizeof(junk));
	struct signed_context sc = { .context = junk, .context_len = sizeof(junk) };
	sign_detached(x->f.inst, SIGN_DOMAIN_CONTEXT, junk, sizeof(junk), sc.signature);
	memcpy(sc.key_id, x->f.inst_pub.id, PROTO_KEY_ID_LEN);
	assert_int_equal(check(x, &sc, NULL, NULL, 0), REASON_PROTOCOL_ERROR);
	/* a context of an unknown major version, correctly signed */
	Tether__ProcessIdentityContext m = TETHER__PROCESS_IDENTITY_CONTEXT__INIT;
	m.version_major = 2;
	uint8_t buf[64];
	sc.context = buf;
	sc.context_len = tether__process_identity_context__pack(&m, buf);
	sign_detached(x->f.inst, SIGN_DOMAIN_CONTEXT, buf, sc.context_len, sc.signature);
	assert_int_equal(check(x, &sc, NULL, NULL, 0), REASON_PROTOCOL_ERROR);
	/* wrapper round trip and a malformed wrapper */
	struct signed_context good, back;
	assert_int_equal(fix_sign(&x->f, NULL, NULL, NULL, 0, &good), 0);
	uint8_t *packed;
	size_t plen;
	assert_int_equal(signed_context_pack(&good, &packed, &plen), 0);
	assert_int_equal(signed_context_unpack(packed, plen, &back), 0);
	assert_memory_equal(back.context, good.context, good.context_len);
	signed_context_clear(&back);
	assert_int_equal(signed_context_unpack(packed, plen - 5, &back), -EBADMSG);
	char *b64;
	uint8_t *raw;
	size_t rlen;
	assert_int_equal(signed_base64_encode(packed, plen, &b64), 0);
	assert_int_equal(signed_base64_decode(b64, &raw, &rlen), 0);
	assert_int_equal(rlen, plen);
	assert_memory_equal(raw, packed, plen);
	free(raw);
	assert_int_equal(signed_base64_decode("!!notbase64", &raw, &rlen) < 0, 1);
	free(b64);
	free(packed);
	signed_context_clear(&good);
}

/* Clock skew (issue 19 item 7): the proc side's clock 5 s ahead of ours or
 * 6 s behind used to deny every context context_expired. A signed clock
 * sample at the handshake measures the skew; contexts and certificates are
 * judged on the proc side's clock as measured, a skew past the bound is
 * clock_skew, and offline re-verification does not depend on it. */
static void test_clock_math(void **state)
{
	struct clock_skew sk;
	clock_skew_measure(100, 40, 60, &sk);
	assert_int_equal(sk.skew_ns, 50);
	assert_int_equal(sk.uncertainty_ns, 10);
	clock_skew_measure(10, 40, 60, &sk);
	assert_int_equal(sk.skew_ns, -40);
	clock_skew_measure(50, 60, 40, &sk); /* our clock stepped back */
	assert_int_equal(sk.skew_ns, -10);
	assert_int_equal(sk.uncertainty_ns, 0);

	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	uint8_t n1[PROTO_CLOCK_NONCE_LEN], n2[PROTO_CLOCK_NONCE_LEN];
	memset(n1, 1, sizeof(n1));
	memset(n2, 2, sizeof(n2));
	struct clock_sample cs;
	clock_sample_sign(f.inst, n1, FIX_T0, &cs);
	assert_true(clock_sample_verify(&f.inst_pub, n1, &cs));
	assert_false(clock_sample_verify(&f.inst_pub, n2, &cs)); /* another nonce */
	assert_false(clock_sample_verify(&f.prov_pub, n1, &cs)); /* another key */
	cs.now_ns++;
	assert_false(clock_sample_verify(&f.inst_pub, n1, &cs)); /* another time */
	/* a context signature is not a clock signature (domains) */
	uint8_t msg[PROTO_CLOCK_NONCE_LEN + 8];
	memcpy(msg, n1, PROTO_CLOCK_NONCE_LEN);
	for (int i = 0; i < 8; i++)
		msg[PROTO_CLOCK_NONCE_LEN + i] = (uint8_t)(FIX_T0 >> (56 - 8 * i));
	struct clock_sample forged = { .now_ns = FIX_T0 };
	sign_detached(f.inst, SIGN_DOMAIN_CONTEXT, msg, sizeof(msg), forged.signature);
	assert_false(clock_sample_verify(&f.inst_pub, n1, &forged));
	fix_free(&f);
}

/* A verifier whose net clock is `net_minus_proc` ns off the proc side's,
 * with the fixture's certificate (issued at FIX_T0 on the proc clock)
 * installed with a sample taken at proc time FIX_T0 + 20 s. */
static enum reason skewed_install(struct fixture *f, int64_t net_minus_proc, uint64_t max_skew,
				  bool with_sample, struct verifier **v, uint64_t *ch)
{
	struct verifier_opts o = { .max_clock_skew_ns = max_skew };
	assert_int_equal(verifier_new(&f->prov_pub, 1, &o, v), 0);
	*ch = verifier_channel_open(*v);
	uint64_t proc_now = FIX_T0 + 20 * SEC;
	uint64_t net_now = (uint64_t)((int64_t)proc_now + net_minus_proc);
	uint8_t nonce[PROTO_CLOCK_NONCE_LEN];
	memset(nonce, 0x5a, sizeof(nonce));
	struct clock_sample cs;
	clock_sample_sign(f->inst, nonce, proc_now, &cs);
	struct verifier_clock_in clk = { .sample = &cs, .nonce = nonce, .sent_ns = net_now - 1000000,
					 .recv_ns = net_now + 1000000 };
	struct anchor_event ev;
	return verifier_install_cert_clocked(*v, &f->cert, *ch, net_now + 1000000, with_sample ? &clk : NULL, &ev);
}

static enum reason check_at(struct verifier *v, struct fixture *f, uint64_t issued_proc, uint64_t now_net,
			    bool offline)
{
	struct signed_context sc;
	randombytes_buf(f->nonce, sizeof(f->nonce));
	assert_int_equal(fix_sign(f, NULL, NULL, NULL, issued_proc, &sc), 0);
	struct verify_expect ex = { .nonce = offline ? NULL : f->nonce, .tuple = &f->tuple,
				    .instance_key_id = f->inst_pub.id, .now_ns = now_net, .offline = offline };
	struct identity_context *c = NULL;
	enum reason r = verifier_check_context(v, &sc, &ex, &c);
	context_free(c);
	signed_context_clear(&sc);
	return r;
}

static void test_clock_skew(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct verifier *v;
	uint64_t ch;
	uint64_t issued = FIX_T0 + 21 * SEC; /* proc clock */
	struct verifier_clock_state st;

	/* Without a sample (a 1.0 peer, and the behaviour before): the net
	 * side 5 s behind refuses a fresh context as not yet valid. */
	assert_int_equal(skewed_install(&f, -5 * (int64_t)SEC, 0, false, &v, &ch), REASON_OK);
	assert_int_equal(check_at(v, &f, issued, issued - 5 * SEC + SEC / 10, false), REASON_CONTEXT_EXPIRED);
	verifier_clock(v, &st);
	assert_false(st.measured);
	assert_int_equal(st.max_skew_ns, 60 * SEC);
	verifier_free(v);

	/* net 5 s behind, measured: allowed */
	assert_int_equal(skewed_install(&f, -5 * (int64_t)SEC, 0, true, &v, &ch), REASON_OK);
	verifier_clock(v, &st);
	assert_true(st.measured);
	assert_false(st.exceeded);
	assert_int_equal(st.skew_ns, 5 * (int64_t)SEC);
	assert_int_equal(st.uncertainty_ns, 1000000);
	assert_int_equal(check_at(v, &f, issued, issued - 5 * SEC + SEC / 10, false), REASON_OK);
	/* a context stale on the proc side's own clock is still expired */
	assert_int_equal(check_at(v, &f, issued, issued - 5 * SEC + 10 * SEC, false), REASON_CONTEXT_EXPIRED);
	/* offline re-verification does not depend on any skew */
	assert_int_equal(check_at(v, &f, issued, 0, true), REASON_OK);

	/* the skew measured again on the live channel: +90 s is past the
	 * bound, every context of the channel is clock_skew from then on */
	uint8_t nonce[PROTO_CLOCK_NONCE_LEN];
	memset(nonce, 0x77, sizeof(nonce));
	struct clock_sample cs;
	uint64_t net_now = issued - 5 * SEC + SEC;
	clock_sample_sign(f.inst, nonce, net_now + 90 * SEC, &cs);
	struct verifier_clock_in clk = { .sample = &cs, .nonce = nonce, .sent_ns = net_now, .recv_ns = net_now };
	/* a sample for another nonce, or by another key, changes nothing */
	uint8_t other[PROTO_CLOCK_NONCE_LEN];
	memset(other, 0x78, sizeof(other));
	struct verifier_clock_in bad = clk;
	bad.nonce = other;
	assert_int_equal(verifier_clock_update(v, ch, &bad), REASON_PROTOCOL_ERROR);
	assert_int_equal(verifier_clock_update(v, ch + 1, &clk), REASON_ANCHOR_UNKNOWN);
	verifier_clock(v, &st);
	assert_int_equal(st.skew_ns, 5 * (int64_t)SEC);
	assert_int_equal(verifier_clock_update(v, ch, &clk), REASON_CLOCK_SKEW);
	verifier_clock(v, &st);
	assert_true(st.exceeded);
	assert_int_equal(st.skew_ns, 90 * (int64_t)SEC);
	assert_int_equal(check_at(v, &f, net_now + 90 * SEC, net_now, false), REASON_CLOCK_SKEW);
	/* back within the bound (-6 s): contexts on that clock are fine */
	clock_sample_sign(f.inst, nonce, net_now - 6 * SEC, &cs);
	assert_int_equal(verifier_clock_update(v, ch, &clk), REASON_OK);
	assert_int_equal(check_at(v, &f, net_now - 6 * SEC, net_now + SEC / 10, false), REASON_OK);
	/* a sample answered after 10 minutes (a delayed answer) does not
	 * widen the time checks past twice the tolerance */
	clock_sample_sign(f.inst, nonce, net_now + 300 * SEC, &cs);
	clk.recv_ns = net_now + 600 * SEC;
	assert_int_equal(verifier_clock_update(v, ch, &clk), REASON_OK);
	verifier_clock(v, &st);
	assert_int_equal(st.skew_ns, 0);
	assert_int_equal(st.uncertainty_ns, 300 * SEC);
	assert_int_equal(check_at(v, &f, net_now, net_now + SEC, false), REASON_OK);
	assert_int_equal(check_at(v, &f, net_now, net_now + 5 * SEC + 2 * SEC - SEC / 10, false), REASON_OK);
	assert_int_equal(check_at(v, &f, net_now, net_now + 5 * SEC + 2 * SEC + SEC / 10, false),
			 REASON_CONTEXT_EXPIRED);
	verifier_free(v);

	/* net 6 s ahead: allowed */
	assert_int_equal(skewed_install(&f, 6 * (int64_t)SEC, 0, true, &v, &ch), REASON_OK);
	verifier_clock(v, &st);
	assert_int_equal(st.skew_ns, -6 * (int64_t)SEC);
	assert_int_equal(check_at(v, &f, issued, issued + 6 * SEC + SEC / 10, false), REASON_OK);
	verifier_free(v);

	/* net 120 s ahead: past the default bound, the certificate is refused
	 * clock_skew and the measurement is kept */
	assert_int_equal(skewed_install(&f, 120 * (int64_t)SEC, 0, true, &v, &ch), REASON_CLOCK_SKEW);
	verifier_clock(v, &st);
	assert_true(st.measured && st.exceeded);
	assert_int_equal(st.skew_ns, -120 * (int64_t)SEC);
	verifier_free(v);
	/* a wider bound takes it */
	assert_int_equal(skewed_install(&f, 120 * (int64_t)SEC, 200 * SEC, true, &v, &ch), REASON_OK);
	assert_int_equal(check_at(v, &f, issued, issued + 120 * SEC, false), REASON_OK);
	verifier_free(v);
	/* a sample that does not verify with the certificate's key refuses it */
	struct verifier_opts o = { 0 };
	assert_int_equal(verifier_new(&f.prov_pub, 1, &o, &v), 0);
	ch = verifier_channel_open(v);
	clock_sample_sign(f.prov, nonce, FIX_T0 + SEC, &cs);
	struct verifier_clock_in clk2 = { .sample = &cs, .nonce = nonce, .sent_ns = FIX_T0 + SEC,
					  .recv_ns = FIX_T0 + SEC };
	struct anchor_event ev;
	assert_int_equal(verifier_install_cert_clocked(v, &f.cert, ch, FIX_T0 + SEC, &clk2, &ev),
			 REASON_PROTOCOL_ERROR);
	verifier_free(v);
	fix_free(&f);
}

/* Protocol 1.2: a per-channel MAC key agreed under the instance key, and
 * MAC'd contexts held to every check a signed one is. */
static void test_mac_channel(void **state)
{
	struct vfix *x = *state;
	struct mac_kx net, proc;
	assert_int_equal(mac_kx_generate(&net), 0);
	assert_int_equal(mac_kx_generate(&proc), 0);
	uint8_t sig[PROTO_SIG_LEN];
	mac_kx_sign(x->f.inst, net.pk, proc.pk, sig);
	assert_true(mac_kx_verify(&x->f.inst_pub, net.pk, proc.pk, sig));
	/* not by the provisioning key, not for swapped or substituted keys */
	assert_false(mac_kx_verify(&x->f.prov_pub, net.pk, proc.pk, sig));
	assert_false(mac_kx_verify(&x->f.inst_pub, proc.pk, net.pk, sig));
	struct mac_kx evil;
	assert_int_equal(mac_kx_generate(&evil), 0);
	assert_false(mac_kx_verify(&x->f.inst_pub, net.pk, evil.pk, sig));
	/* a context signature is no transcript signature (domains differ) */
	uint8_t csig[PROTO_SIG_LEN];
	sign_detached(x->f.inst, SIGN_DOMAIN_CONTEXT, net.pk, sizeof(net.pk), csig);
	assert_false(mac_kx_verify(&x->f.inst_pub, net.pk, proc.pk, csig));

	uint8_t kn[PROTO_MAC_KEY_LEN], kp[PROTO_MAC_KEY_LEN], ke[PROTO_MAC_KEY_LEN];
	assert_int_equal(mac_key_net(&net, proc.pk, kn), 0);
	assert_int_equal(mac_key_proc(&proc, net.pk, kp), 0);
	assert_memory_equal(kn, kp, PROTO_MAC_KEY_LEN);
	assert_int_equal(mac_key_net(&net, evil.pk, ke), 0);
	assert_memory_not_equal(kn, ke, PROTO_MAC_KEY_LEN);

	struct signed_context sc;
	assert_int_equal(fix_sign(&x->f, NULL, NULL, NULL, 0, &sc), 0);
	struct mac_context mc = { .context = sc.context, .context_len = sc.context_len };
	memcpy(mc.key_id, sc.key_id, PROTO_KEY_ID_LEN);
	context_mac(kp, mc.context, mc.context_len, mc.mac);
	struct verify_expect ex = { .nonce = x->f.nonce, .tuple = &x->f.tuple,
				    .instance_key_id = x->f.inst_pub.id, .now_ns = FIX_T0 + 2 * SEC };
	struct identity_context *c = NULL;
	/* wrong key: refused before anything is parsed */
	assert_int_equal(verifier_check_context_mac(x->v, &mc, ke, &ex, &c), REASON_CONTEXT_SIGNATURE_INVALID);
	assert_null(c);
	/* one flipped byte of the context */
	mc.context[mc.context_len / 2] ^= 1;
	assert_int_equal(verifier_check_context_mac(x->v, &mc, kn, &ex, &c), REASON_CONTEXT_SIGNATURE_INVALID);
	mc.context[mc.context_len / 2] ^= 1;
	/* offline (a third party) never accepts a MAC */
	struct verify_expect off = ex;
	off.offline = true;
	assert_int_equal(verifier_check_context_mac(x->v, &mc, kn, &off, &c), REASON_CONTEXT_SIGNATURE_INVALID);
	/* another channel's certificate */
	struct verify_expect other_key = ex;
	other_key.instance_key_id = x->f.prov_pub.id;
	assert_int_equal(verifier_check_context_mac(x->v, &mc, kn, &other_key, &c), REASON_ANCHOR_UNKNOWN);
	/* tuple mismatch */
	struct proto_tuple t = x->f.tuple;
	t.sport++;
	struct verify_expect wrong_tuple = ex;
	wrong_tuple.tuple = &t;
	assert_int_equal(verifier_check_context_mac(x->v, &mc, kn, &wrong_tuple, &c), REASON_CONTEXT_TUPLE_MISMATCH);
	/* another request's nonce */
	uint8_t other[PROTO_NONCE_LEN];
	memset(other, 0x01, sizeof(other));
	struct verify_expect wrong_nonce = ex;
	wrong_nonce.nonce = other;
	assert_int_equal(verifier_check_context_mac(x->v, &mc, kn, &wrong_nonce, &c), REASON_CONTEXT_REPLAYED);
	/* expired */
	struct verify_expect late = ex;
	late.now_ns = FIX_T0 + 1000 + 7 * SEC;
	assert_int_equal(verifier_check_context_mac(x->v, &mc, kn, &late, &c), REASON_CONTEXT_EXPIRED);
	/* good */
	assert_int_equal(verifier_check_context_mac(x->v, &mc, kn, &ex, &c), REASON_OK);
	assert_non_null(c);
	assert_string_equal(c->subject.exe.path, "/usr/bin/curl");
	context_free(c);
	c = NULL;
	/* replayed: by MAC, and then the same context by signature */
	assert_int_equal(verifier_check_context_mac(x->v, &mc, kn, &ex, &c), REASON_CONTEXT_REPLAYED);
	assert_int_equal(verifier_check_context(x->v, &sc, &ex, &c), REASON_CONTEXT_REPLAYED);
	/* the signature that follows for the audit verifies offline */
	assert_int_equal(verifier_check_context(x->v, &sc, &off, &c), REASON_OK);
	context_free(c);
	signed_context_clear(&sc);
	mac_kx_clear(&net);
	mac_kx_clear(&proc);
	mac_kx_clear(&evil);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_files),
		cmocka_unit_test_setup_teardown(test_valid_then_replayed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tuple_and_expiry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_signatures, setup, teardown),
		cmocka_unit_test_setup_teardown(test_context_anchor_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_certificates, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anchor_replacement, setup, teardown),
		cmocka_unit_test_setup_teardown(test_renewal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anchor_table_full, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_signed_context, setup, teardown),
		cmocka_unit_test(test_clock_math),
		cmocka_unit_test(test_clock_skew),
		cmocka_unit_test_setup_teardown(test_mac_channel, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
