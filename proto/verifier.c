#include "proto/verifier.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define NSEC 1000000000ull

struct anchor_entry {
	bool used;
	struct anchor_cert cert;
	struct signed_cert signed_cert;
	uint64_t channel;
	bool channel_alive;
	/* issued_at of the first certificate of this instance key: a renewed
	 * certificate (verifier_renew_cert) moves cert.issued_at on, but the
	 * instance's earlier contexts stay good. */
	uint64_t instance_since_ns;
	/* The channel's measured clock skew (proc minus net) and half the
	 * round trip of its sample; 0/0 when the peer sends no samples. */
	int64_t skew_ns;
	uint64_t skew_unc_ns;
	bool skew_exceeded;
};

/* One generation of remembered nonces: open addressing, no deletion; a
 * generation is dropped whole when it ages out. */
struct nonce_set {
	uint8_t (*slots)[PROTO_NONCE_LEN];
	uint8_t *used;
	size_t cap, count;
};

struct verifier {
	struct pub_key *pinned;
	size_t n_pinned;
	struct verifier_opts opts;
	struct anchor_entry *anchors;
	uint64_t next_channel;
	struct nonce_set gen[2]; /* [0] current, [1] previous */
	uint64_t gen_start_ns;
	uint8_t hash_key[crypto_shorthash_KEYBYTES];
	struct verifier_clock_state clock; /* the latest measurement */
};

/* now (our clock) as the proc side's clock reads it, skew ns ahead. */
static uint64_t shift_ns(uint64_t now, int64_t skew)
{
	if (skew >= 0)
		return now + (uint64_t)skew;
	uint64_t back = (uint64_t)(-(skew + 1)) + 1;
	return now > back ? now - back : 0;
}

static uint64_t abs_ns(int64_t x) { return x >= 0 ? (uint64_t)x : (uint64_t)(-(x + 1)) + 1; }

/* Verify a sample with `instance` and measure; the verifier remembers the
 * result. REASON_OK, REASON_PROTOCOL_ERROR (bad signature) or
 * REASON_CLOCK_SKEW (past the bound; *out still filled). */
static enum reason clock_measure(struct verifier *v, const struct pub_key *instance,
				 const struct verifier_clock_in *clk, struct clock_skew *out)
{
	if (!clk->nonce || !clock_sample_verify(instance, clk->nonce, clk->sample))
		return REASON_PROTOCOL_ERROR;
	clock_skew_measure(clk->sample->now_ns, clk->sent_ns, clk->recv_ns, out);
	bool exceeded = abs_ns(out->skew_ns) > v->opts.max_clock_skew_ns;
	v->clock = (struct verifier_clock_state){ .measured = true, .exceeded = exceeded,
		.skew_ns = out->skew_ns, .uncertainty_ns = out->uncertainty_ns,
		.max_skew_ns = v->opts.max_clock_skew_ns };
	/* Whoever can delay the answer widens the round trip: it does not
	 * widen the time checks past twice the tolerance (a sample that far
	 * off is corrected by the next one, measured after a context fails). */
	if (out->uncertainty_ns > v->opts.clock_skew_ns)
		out->uncertainty_ns = v->opts.clock_skew_ns;
	return exceeded ? REASON_CLOCK_SKEW : REASON_OK;
}

static void nonce_set_free(struct nonce_set *s)
{
	free(s->slots);
	free(s->used);
	memset(s, 0, sizeof(*s));
}

static size_t nonce_hash(const struct verifier *v, const uint8_t *nonce)
{
	uint8_t h[crypto_shorthash_BYTES];
	crypto_shorthash(h, nonce, PROTO_NONCE_LEN, v->hash_key);
	uint64_t x;
	memcpy(&x, h, sizeof(x));
	return (size_t)x;
}

static bool nonce_set_has(const struct verifier *v, const struct nonce_set *s, const uint8_t *nonce)
{
	if (s->cap == 0)
		return false;
	for (size_t i = nonce_hash(v, nonce) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		if (!s->used[i])
			return false;
		if (memcmp(s->slots[i], nonce, PROTO_NONCE_LEN) == 0)
			return true;
	}
}

static void nonce_set_put_raw(const struct verifier *v, struct nonce_set *s, const uint8_t *nonce)
{
	size_t i = nonce_hash(v, nonce) & (s->cap - 1);
	while (s->used[i])
		i = (i + 1) & (s->cap - 1);
	memcpy(s->slots[i], nonce, PROTO_NONCE_LEN);
	s->used[i] = 1;
	s->count++;
}

static int nonce_set_add(const struct verifier *v, struct nonce_set *s, const uint8_t *nonce)
{
	if (s->count + 1 > s->cap / 2) {
		size_t ncap = s->cap ? s->cap * 2 : 1024;
		if (s->count + 1 > v->opts.max_replay)
			return -ENOSPC;
		struct nonce_set n = { .cap = ncap };
		n.slots = calloc(ncap, sizeof(*n.slots));
		n.used = calloc(ncap, 1);
		if (!n.slots || !n.used) {
			nonce_set_free(&n);
			return -ENOMEM;
		}
		for (size_t i = 0; i < s->cap; i++)
			if (s->used[i])
				nonce_set_put_raw(v, &n, s->slots[i]);
		nonce_set_free(s);
		*s = n;
	}
	nonce_set_put_raw(v, s, nonce);
	return 0;
}

static uint64_t replay_window_ns(const struct verifier *v)
{
	return v->opts.max_lifetime_ns + 2 * v->opts.clock_skew_ns;
}

static void replay_rotate(struct verifier *v, uint64_t now)
{
	if (now < v->gen_start_ns) {
		v->gen_start_ns = now; /* clock stepped back: keep both generations */
		return;
	}
	uint64_t w = replay_window_ns(v);
	if (now - v->gen_start_ns < w)
		return;
	nonce_set_free(&v->gen[1]);
	if (now - v->gen_start_ns < 2 * w) {
		v->gen[1] = v->gen[0];
		memset(&v->gen[0], 0, sizeof(v->gen[0]));
	} else {
		nonce_set_free(&v->gen[0]); /* both aged out */
	}
	v->gen_start_ns = now;
}

int verifier_new(const struct pub_key *pinned, size_t n_pinned, const struct verifier_opts *opts,
		 struct verifier **out)
{
	if (proto_crypto_init() < 0)
		return -EIO;
	if (n_pinned == 0)
		return -EINVAL;
	struct verifier *v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	if (opts)
		v->opts = *opts;
	if (!v->opts.clock_skew_ns)
		v->opts.clock_skew_ns = 1 * NSEC;
	if (!v->opts.max_clock_skew_ns)
		v->opts.max_clock_skew_ns = 60 * NSEC;
	v->clock.max_skew_ns = v->opts.max_clock_skew_ns;
	if (!v->opts.max_lifetime_ns)
		v->opts.max_lifetime_ns = 30 * NSEC;
	if (!v->opts.max_anchors)
		v->opts.max_anchors = 64;
	if (!v->opts.max_replay)
		v->opts.max_replay = 1u << 20;
	v->pinned = calloc(n_pinned, sizeof(*v->pinned));
	v->anchors = calloc(v->opts.max_anchors, sizeof(*v->anchors));
	if (!v->pinned || !v->anchors) {
		verifier_free(v);
		return -ENOMEM;
	}
	memcpy(v->pinned, pinned, n_pinned * sizeof(*pinned));
	v->n_pinned = n_pinned;
	v->next_channel = 1;
	randombytes_buf(v->hash_key, sizeof(v->hash_key));
	*out = v;
	return 0;
}

void verifier_free(struct verifier *v)
{
	if (!v)
		return;
	if (v->anchors)
		for (size_t i = 0; i < v->opts.max_anchors; i++)
			signed_cert_clear(&v->anchors[i].signed_cert);
	free(v->anchors);
	free(v->pinned);
	nonce_set_free(&v->gen[0]);
	nonce_set_free(&v->gen[1]);
	free(v);
}

uint64_t verifier_channel_open(struct verifier *v) { return v->next_channel++; }

void verifier_channel_closed(struct verifier *v, uint64_t channel)
{
	for (size_t i = 0; i < v->opts.max_anchors; i++)
		if (v->anchors[i].used && v->anchors[i].channel == channel)
			v->anchors[i].channel_alive = false;
}

static struct anchor_entry *entry_for_key(const struct verifier *v, const uint8_t *id);

/* Valid at now_ns (0: the clock) on the proc side's clock, sk ahead of ours. */
static enum reason cert_time_ok(const struct verifier *v, const struct anchor_cert *c, uint64_t now_ns,
				const struct clock_skew *sk)
{
	return cert_time_check(c, shift_ns(now_ns ? now_ns : now_real_ns(), sk->skew_ns),
			       v->opts.clock_skew_ns + sk->uncertainty_ns);
}

enum reason verifier_install_cert(struct verifier *v, const struct signed_cert *sc, uint64_t channel,
				  uint64_t now_ns, struct anchor_event *ev)
{
	return verifier_install_cert_clocked(v, sc, channel, now_ns, NULL, ev);
}

enum reason verifier_install_cert_clocked(struct verifier *v, const struct signed_cert *sc, uint64_t channel,
					  uint64_t now_ns, const struct verifier_clock_in *clk,
					  struct anchor_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	struct anchor_cert c;
	enum reason r = cert_verify(v->pinned, v->n_pinned, sc, &c);
	if (r != REASON_OK)
		return r;
	struct clock_skew sk = { 0, 0 };
	if (clk && clk->sample && (r = clock_measure(v, &c.instance, clk, &sk)) != REASON_OK)
		return r;
	if ((r = cert_time_ok(v, &c, now_ns, &sk)) != REASON_OK)
		return r;

	struct anchor_entry *e = NULL, *free_slot = NULL, *stale = NULL;
	for (size_t i = 0; i < v->opts.max_anchors; i++) {
		struct anchor_entry *a = &v->anchors[i];
		if (!a->used) {
			if (!free_slot)
				free_slot = a;
			continue;
		}
		/* the oldest anchor whose channel is gone: reused when the table
		 * is full (a long-lived net-supervisor outlives any number of
		 * proc-supervisor restarts in new PID namespaces) */
		if (!a->channel_alive && (!stale || a->cert.issued_at_ns < stale->cert.issued_at_ns))
			stale = a;
		if (strcmp(a->cert.boot_id, c.boot_id) == 0 && a->cert.pidns.dev == c.pidns.dev &&
		    a->cert.pidns.ino == c.pidns.ino) {
			e = a;
			break;
		}
	}

	struct signed_cert copy;
	if (signed_cert_copy(&copy, sc) < 0)
		return REASON_INTERNAL_ERROR;

	if (!e) {
		if (!free_slot && stale) {
			/* Its contexts are refused from now on (anchor_unknown), as
			 * they would be anyway: nothing answers on its channel. */
			signed_cert_clear(&stale->signed_cert);
			memset(stale, 0, sizeof(*stale));
			free_slot = stale;
		}
		if (!free_slot) {
			/* max_anchors proc-supervisors connected at once */
			signed_cert_clear(&copy);
			return REASON_ANCHOR_CERTIFICATE_INVALID;
		}
		e = free_slot;
		ev->kind = ANCHOR_ESTABLISHED;
	} else if (sodium_memcmp(e->cert.instance.pk, c.instance.pk, PROTO_PUBKEY_LEN) == 0) {
		/* The same instance on a new channel (reconnect). Keep whichever
		 * certificate is newer. */
		if (e->channel_alive && e->channel != channel) {
			signed_cert_clear(&copy);
			return REASON_ANCHOR_CERTIFICATE_INVALID;
		}
		if (c.issued_at_ns < e->cert.issued_at_ns) {
			signed_cert_clear(&copy);
			e->channel = channel;
			e->channel_alive = true;
			e->skew_ns = sk.skew_ns;
			e->skew_unc_ns = sk.uncertainty_ns;
			e->skew_exceeded = false;
			ev->kind = ANCHOR_RECONNECTED;
			ev->cert = &e->cert;
			return REASON_OK;
		}
		ev->kind = ANCHOR_RECONNECTED;
	} else {
		/* A different instance for the same PID namespace: only as the
		 * replacement of one whose channel is gone, and only newer. */
		if (e->channel_alive || c.issued_at_ns <= e->cert.issued_at_ns) {
			signed_cert_clear(&copy);
			return REASON_ANCHOR_CERTIFICATE_INVALID;
		}
		ev->kind = ANCHOR_CHANGED;
		ev->old_instance = e->cert.instance;
		ev->old_issued_at_ns = e->cert.issued_at_ns;
	}
	if (ev->kind != ANCHOR_RECONNECTED)
		e->instance_since_ns = c.issued_at_ns;
	else if (c.issued_at_ns < e->instance_since_ns)
		e->instance_since_ns = c.issued_at_ns;
	signed_cert_clear(&e->signed_cert);
	e->used = true;
	e->cert = c;
	e->signed_cert = copy;
	e->channel = channel;
	e->channel_alive = true;
	e->skew_ns = sk.skew_ns;
	e->skew_unc_ns = sk.uncertainty_ns;
	e->skew_exceeded = false;
	ev->cert = &e->cert;
	return REASON_OK;
}

enum reason verifier_renew_cert(struct verifier *v, const struct signed_cert *sc, uint64_t channel,
				uint64_t now_ns, struct anchor_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	struct anchor_cert c;
	enum reason r = cert_verify(v->pinned, v->n_pinned, sc, &c);
	if (r != REASON_OK)
		return r;
	struct anchor_entry *e = entry_for_key(v, c.instance.id);
	if (e) {
		struct clock_skew sk = { e->skew_ns, e->skew_unc_ns };
		if ((r = cert_time_ok(v, &c, now_ns, &sk)) != REASON_OK)
			return r;
	}
	/* Only for the anchor this channel presented, for the same process in
	 * the same PID namespace, and only forward in time. */
	if (!e || !e->channel_alive || e->channel != channel ||
	    sodium_memcmp(e->cert.instance.pk, c.instance.pk, PROTO_PUBKEY_LEN) != 0 ||
	    strcmp(e->cert.boot_id, c.boot_id) != 0 || e->cert.pidns.dev != c.pidns.dev ||
	    e->cert.pidns.ino != c.pidns.ino || strcmp(e->cert.anchor.key, c.anchor.key) != 0 ||
	    c.issued_at_ns <= e->cert.issued_at_ns)
		return REASON_ANCHOR_CERTIFICATE_INVALID;
	struct signed_cert copy;
	if (signed_cert_copy(&copy, sc) < 0)
		return REASON_INTERNAL_ERROR;
	signed_cert_clear(&e->signed_cert);
	e->cert = c;
	e->signed_cert = copy;
	ev->kind = ANCHOR_RENEWED;
	ev->cert = &e->cert;
	return REASON_OK;
}

static struct anchor_entry *entry_for_key(const struct verifier *v, const uint8_t *id)
{
	for (size_t i = 0; i < v->opts.max_anchors; i++)
		if (v->anchors[i].used && memcmp(v->anchors[i].cert.instance.id, id, PROTO_KEY_ID_LEN) == 0)
			return &v->anchors[i];
	return NULL;
}

enum reason verifier_clock_update(struct verifier *v, uint64_t channel, const struct verifier_clock_in *clk)
{
	struct anchor_entry *e = NULL;
	for (size_t i = 0; i < v->opts.max_anchors && !e; i++)
		if (v->anchors[i].used && v->anchors[i].channel_alive && v->anchors[i].channel == channel)
			e = &v->anchors[i];
	if (!e || !clk || !clk->sample)
		return REASON_ANCHOR_UNKNOWN;
	struct clock_skew sk;
	enum reason r = clock_measure(v, &e->cert.instance, clk, &sk);
	if (r == REASON_PROTOCOL_ERROR)
		return r;
	e->skew_ns = sk.skew_ns;
	e->skew_unc_ns = sk.uncertainty_ns;
	e->skew_exceeded = r == REASON_CLOCK_SKEW;
	return r;
}

void verifier_clock(const struct verifier *v, struct verifier_clock_state *out) { *out = v->clock; }

const struct signed_cert *verifier_cert_for_key(const struct verifier *v,
						const uint8_t key_id[PROTO_KEY_ID_LEN])
{
	struct anchor_entry *e = entry_for_key(v, key_id);
	return e ? &e->signed_cert : NULL;
}

/* Every check after the context's bytes are known authentic (signature or
 * channel MAC): the same for both. */
static enum reason check_authentic(struct verifier *v, struct anchor_entry *e, const uint8_t *bytes, size_t len,
				   const struct verify_expect *ex, struct identity_context **out);

enum reason verifier_check_context(struct verifier *v, const struct signed_context *sc,
				   const struct verify_expect *ex, struct identity_context **out)
{
	*out = NULL;
	if (!sc->context || sc->context_len == 0 || sc->context_len > PROTO_MAX_SIGNED_LEN)
		return REASON_PROTOCOL_ERROR;
	if (ex->instance_key_id && memcmp(ex->instance_key_id, sc->key_id, PROTO_KEY_ID_LEN) != 0)
		return REASON_ANCHOR_UNKNOWN;
	struct anchor_entry *e = entry_for_key(v, sc->key_id);
	if (!e)
		return REASON_ANCHOR_UNKNOWN;
	/* Nothing of the context is parsed before its signature is known good. */
	if (!verify_detached(&e->cert.instance, SIGN_DOMAIN_CONTEXT, sc->context, sc->context_len,
			     sc->signature))
		return REASON_CONTEXT_SIGNATURE_INVALID;
	return check_authentic(v, e, sc->context, sc->context_len, ex, out);
}

enum reason verifier_check_context_mac(struct verifier *v, const struct mac_context *mc,
				       const uint8_t mac_key[PROTO_MAC_KEY_LEN], const struct verify_expect *ex,
				       struct identity_context **out)
{
	*out = NULL;
	if (!mc->context || mc->context_len == 0 || mc->context_len > PROTO_MAX_SIGNED_LEN)
		return REASON_PROTOCOL_ERROR;
	/* A MAC proves only the channel: the offline path needs a signature. */
	if (ex->offline || !ex->instance_key_id || !mac_key)
		return REASON_CONTEXT_SIGNATURE_INVALID;
	if (memcmp(ex->instance_key_id, mc->key_id, PROTO_KEY_ID_LEN) != 0)
		return REASON_ANCHOR_UNKNOWN;
	struct anchor_entry *e = entry_for_key(v, mc->key_id);
	if (!e)
		return REASON_ANCHOR_UNKNOWN;
	if (!context_mac_verify(mac_key, mc->context, mc->context_len, mc->mac))
		return REASON_CONTEXT_SIGNATURE_INVALID;
	return check_authentic(v, e, mc->context, mc->context_len, ex, out);
}

static enum reason check_authentic(struct verifier *v, struct anchor_entry *e, const uint8_t *bytes, size_t len,
				   const struct verify_expect *ex, struct identity_context **out)
{
	struct identity_context *c = NULL;
	if (context_decode(bytes, len, &c) < 0)
		return REASON_PROTOCOL_ERROR;
	enum reason r = REASON_OK;
	uint64_t skew = v->opts.clock_skew_ns;
	uint64_t now = ex->offline ? c->issued_at_ns : (ex->now_ns ? ex->now_ns : now_real_ns());
	/* Our clock (the replay window's) and the proc side's as measured: the
	 * times in the context and the certificate are the proc side's. */
	uint64_t pnow = now;
	if (!ex->offline) {
		pnow = shift_ns(now, e->skew_ns);
		skew += e->skew_unc_ns;
	}

	if (!ex->offline && e->skew_exceeded)
		r = REASON_CLOCK_SKEW;
	else if (strcmp(c->anchor.key, e->cert.anchor.key) != 0 ||
	    strcmp(c->anchor.boot_id, e->cert.boot_id) != 0)
		r = REASON_ANCHOR_UNKNOWN;
	else if (ex->nonce && memcmp(ex->nonce, c->nonce, PROTO_NONCE_LEN) != 0)
		r = REASON_CONTEXT_REPLAYED;
	else if (ex->tuple && !proto_tuple_equal(ex->tuple, &c->tuple))
		r = REASON_CONTEXT_TUPLE_MISMATCH;
	else if (c->expires_at_ns - c->issued_at_ns > v->opts.max_lifetime_ns ||
		 c->issued_at_ns > pnow + skew || pnow > c->expires_at_ns + skew)
		r = REASON_CONTEXT_EXPIRED;
	else if (cert_time_check(&e->cert, pnow, skew) != REASON_OK ||
		 c->issued_at_ns + skew < e->instance_since_ns)
		r = REASON_ANCHOR_CERTIFICATE_INVALID;
	else if (!ex->offline) {
		replay_rotate(v, now);
		if (nonce_set_has(v, &v->gen[0], c->nonce) || nonce_set_has(v, &v->gen[1], c->nonce))
			r = REASON_CONTEXT_REPLAYED;
		else if (nonce_set_add(v, &v->gen[0], c->nonce) < 0)
			r = REASON_INTERNAL_ERROR; /* window full: fail closed */
	}
	if (r != REASON_OK) {
		context_free(c);
		return r;
	}
	*out = c;
	return REASON_OK;
}
