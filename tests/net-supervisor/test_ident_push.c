/* Connect-time identity pushes (protocol 1.3, docs/protocol.md "Pushed
 * identities") through the `delegated` strategy, against a stand-in proc
 * side in this process (proto/server.h with an instance key: MAC'd
 * channel, pushes when asked) that pushes by hand:
 *   - fast path: a push before the flow; the flow takes it, no request;
 *     its signature follows and reaches on_context_signed under the push
 *     id, and verifies offline (what tether verify-context does);
 *   - a push while the flow waits: taken, no request;
 *   - no push: the wait runs out, the flow asks (request path) — and a
 *     push that comes after that changes nothing;
 *   - refused pushes (bad MAC, a nonce not from this channel's seed, the
 *     context's request id not the push id, a replayed frame) and a push
 *     bound to another tuple: the flow asks, and the stand-in then denies
 *     it: never allowed on such a push;
 *   - a strategy with pushes off: the Hello asks for none, flows ask at
 *     once;
 *   - two pushes for one tuple: the newer is taken; a push 400 ms old
 *     (past the 250 ms a push is usable) is not: the flow asks;
 *   - the channel lost: unused pushes are dropped;
 *   - a 1.2 proc side (no HelloAck.push): flows ask at once. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "common_test.h"
#include "net-supervisor/identity_delegated.h"
#include "proto/cert.h"
#include "proto/context.h"
#include "proto/mac.h"
#include "proto/server.h"
#include "proto/signed.h"
#include "proto/signer.h"
#include "tests/proto/fixture.h"

struct srv {
	struct proto_server *ps;
	struct sign_key *inst;
	struct procref subject, parent, anchor;
	bool deny;    /* answer requests with foreign_process */
	int requests; /* IdentityRequests seen */
	bool stopped;
};

static struct context_input ctx_in(struct srv *s, const struct proto_tuple *t, const uint8_t *nonce, uint64_t id)
{
	struct context_input in = {
		.topology = PROTO_TOPOLOGY_SPLIT,
		.source = IDENTITY_SOURCE_DELEGATED,
		.subject = &s->subject,
		.ancestors = &s->parent,
		.n_ancestors = 1,
		.anchor = &s->anchor,
		.tuple = t,
		.nonce = nonce,
		.request_id = id,
		.lifetime_ns = 5ull * 1000000000ull,
	};
	return in;
}

/* The request path, as the identity service answers on a MAC channel. */
static void on_identity(struct proto_server *ps, struct proto_request *req, void *ud)
{
	(void)ps;
	struct srv *s = ud;
	s->requests++;
	if (s->deny || !proto_request_wants_mac(req)) {
		proto_request_fail(req, REASON_FOREIGN_PROCESS, "stand-in: denied");
		return;
	}
	struct context_input in = ctx_in(s, &req->tuple, req->nonce, req->request_id);
	struct signed_context sc = { 0 };
	if (context_encode(&in, &sc.context, &sc.context_len) < 0) {
		proto_request_fail(req, REASON_INTERNAL_ERROR, "encode");
		return;
	}
	proto_request_reply_mac(req, sc.context, sc.context_len, s->inst->id);
	sign_detached(s->inst, SIGN_DOMAIN_CONTEXT, sc.context, sc.context_len, sc.signature);
	memcpy(sc.key_id, s->inst->id, PROTO_KEY_ID_LEN);
	proto_request_signature(req, &sc);
	signed_context_clear(&sc);
}

enum tamper { T_NONE, T_MAC, T_NONCE, T_ID, T_REPLAY };

/* Push the context of tuple t as the identity service would; returns the
 * push id (0: no net side asked for pushes). */
static uint64_t push(struct srv *s, const struct proto_tuple *t, enum tamper how, bool sign)
{
	struct proto_push_target tg;
	if (proto_server_push_targets(s->ps, &tg, 1) != 1)
		return 0;
	uint8_t nonce[PROTO_NONCE_LEN];
	push_nonce(tg.seed, tg.push_id, nonce);
	if (how == T_NONCE)
		nonce[3] ^= 0x10;
	struct context_input in = ctx_in(s, t, nonce, how == T_ID ? tg.push_id + 1 : tg.push_id);
	struct signed_context sc = { 0 };
	if (context_encode(&in, &sc.context, &sc.context_len) == 0) {
		uint8_t mac[PROTO_MAC_LEN];
		context_mac(tg.mac_key, sc.context, sc.context_len, mac);
		if (how == T_MAC)
			mac[0] ^= 1;
		proto_push_send(&tg, sc.context, sc.context_len, mac, s->inst->id);
		if (how == T_REPLAY) /* the same frame again */
			proto_push_send(&tg, sc.context, sc.context_len, mac, s->inst->id);
		if (sign) {
			sign_detached(s->inst, SIGN_DOMAIN_CONTEXT, sc.context, sc.context_len, sc.signature);
			memcpy(sc.key_id, s->inst->id, PROTO_KEY_ID_LEN);
			proto_push_signature(&tg, &sc);
		}
	}
	signed_context_clear(&sc);
	uint64_t id = tg.push_id;
	proto_push_target_release(&tg);
	return id;
}

static void srv_done(void *ud) { ((struct srv *)ud)->stopped = true; }

static uint32_t g_minor; /* act as a proc side of this older minor (0: ours) */

static int srv_start(uv_loop_t *loop, struct srv *s, const char *ep, const struct sign_key *prov, struct sign_key *inst)
{
	struct pub_key ip;
	sign_key_public(inst, &ip);
	struct cert_input ci = {
		.instance = &ip,
		.anchor = &s->anchor,
		.pidns = { .dev = 4, .ino = 0xeffff },
		.topology = PROTO_TOPOLOGY_SPLIT,
		.issued_at_ns = now_real_ns(),
		.validity_ns = 3600ull * 1000000000ull,
	};
	struct signed_cert cert;
	if (cert_issue(prov, &ci, &cert) < 0)
		return -1;
	s->inst = inst;
	s->stopped = false;
	struct proto_server_opts o = {
		.endpoint = ep,
		.cert = &cert,
		.instance = inst, /* clock samples and MAC keys: a 1.2+ proc side */
		.version_minor = g_minor,
		.on_identity = on_identity,
		.userdata = s,
	};
	int r = proto_server_start(loop, &o, &s->ps);
	signed_cert_clear(&cert);
	return r;
}

static void srv_stop(uv_loop_t *loop, struct srv *s)
{
	if (!s->ps)
		return;
	proto_server_stop(s->ps, srv_done, s);
	run_until(loop, &s->stopped, 2000);
	s->ps = NULL;
}

struct signed_seen {
	uint64_t id;
	enum reason why;
	char *b64;
	int count;
};

static void on_signed(uint64_t request_id, enum reason why, const char *b64, void *data)
{
	struct signed_seen *g = data;
	g->id = request_id;
	g->why = why;
	free(g->b64);
	g->b64 = b64 ? strdup(b64) : NULL;
	g->count++;
}

static bool g_anchored;
static void on_anchor(struct identity_strategy *st, bool anchored, void *data)
{
	(void)st;
	(void)data;
	g_anchored = anchored;
}

static struct identity_strategy *make(uv_loop_t *loop, const char *ep, const struct pub_key *pin, bool no_push,
				      struct signed_seen *g)
{
	struct identity_delegated_config cfg = {
		.endpoint = ep,
		.pinned = pin,
		.n_pinned = 1,
		.backoff_min_ms = 50,
		.backoff_max_ms = 200,
		.on_context_signed = on_signed,
		.no_push = no_push,
		.push_wait_ms = 40, /* generous: the machine is loaded */
		.data = g,
	};
	struct identity_strategy *st = NULL;
	int r = identity_delegated_new(loop, &cfg, &st);
	CHECK(r == 0, "identity_delegated_new: %d", r);
	if (st) {
		st->on_anchor = on_anchor;
		st->on_anchor_data = NULL;
	}
	return st;
}

static void flow(struct proxy_flow *f, struct proto_tuple *t, uint16_t sport)
{
	memset(f, 0, sizeof(*f));
	struct sockaddr_in *c = (struct sockaddr_in *)&f->client;
	struct sockaddr_in *p = (struct sockaddr_in *)&f->proxy;
	c->sin_family = p->sin_family = AF_INET;
	inet_pton(AF_INET, "127.0.0.1", &c->sin_addr);
	inet_pton(AF_INET, "127.0.0.1", &p->sin_addr);
	c->sin_port = htons(sport);
	p->sin_port = htons(3128);
	CHECK(proto_tuple_from_strings(t, IPPROTO_TCP, "127.0.0.1", sport, "127.0.0.1", 3128) == 0, "tuple");
}

/* A timer that pushes t after a delay (the flow is already waiting). */
struct late {
	uv_timer_t timer;
	struct srv *s;
	struct proto_tuple t;
	uint64_t id;
};
static void late_cb(uv_timer_t *h)
{
	struct late *l = h->data;
	l->id = push(l->s, &l->t, T_NONE, true);
}

static void spin(uv_loop_t *loop, uint64_t ms)
{
	bool never = false;
	run_until(loop, &never, ms);
}

/* Wait until the strategy's counters say so (the push frames travel). */
static bool wait_stat(uv_loop_t *loop, struct identity_strategy *st, uint64_t want_pushes, uint64_t want_refused)
{
	for (int i = 0; i < 300; i++) {
		struct identity_delegated_stats ds;
		identity_delegated_stats(st, &ds);
		if (ds.pushes >= want_pushes && ds.pushes_refused >= want_refused)
			return true;
		spin(loop, 10);
	}
	return false;
}

int main(void)
{
	alarm(50);
	if (proto_crypto_init() < 0)
		return 1;
	char dir[] = "/tmp/tether-ident-push.XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	char ep[160], p1[128];
	snprintf(p1, sizeof(p1), "%s/ctl.sock", dir);
	snprintf(ep, sizeof(ep), "unix:%s", p1);
	struct sign_key *prov = NULL, *inst = NULL;
	if (fix_seeded_key(0x11, &prov) < 0 || sign_key_generate(&inst) < 0)
		return 1;
	struct pub_key prov_pub;
	sign_key_public(prov, &prov_pub);

	uv_loop_t loop;
	uv_loop_init(&loop);
	struct srv s;
	memset(&s, 0, sizeof(s));
	fix_ref(&s.subject, 300, 9003, "/usr/bin/curl");
	fix_ref(&s.parent, 200, 9002, "/bin/sh");
	fix_ref(&s.anchor, 100, 9001, "/usr/libexec/tether/proc-supervisor");
	CHECK(srv_start(&loop, &s, ep, prov, inst) == 0, "server start");
	struct signed_seen g = { 0 };
	struct identity_strategy *st = make(&loop, ep, &prov_pub, false, &g);
	if (!st)
		return 1;
	CHECK(run_until(&loop, &g_anchored, 3000), "never anchored");
	for (int i = 0; i < 100 && !proto_server_push_wanted(s.ps); i++)
		spin(&loop, 10);
	CHECK(proto_server_push_wanted(s.ps), "the net side did not ask for pushes");

	struct proxy_flow f;
	struct proto_tuple t;
	struct box b;
	struct identity_delegated_stats ds;

	/* 1. Fast path: pushed before the flow arrives. */
	flow(&f, &t, 41000);
	uint64_t pid1 = push(&s, &t, T_NONE, true);
	CHECK(pid1 & PROTO_PUSH_ID_BIT, "push id %llx", (unsigned long long)pid1);
	CHECK(wait_stat(&loop, st, 1, 0), "push not kept");
	enum reason r = resolve_within(&loop, st, &f, 1000, &b);
	CHECK(r == REASON_OK, "pushed flow: %s", answer_word(r));
	CHECK(s.requests == 0, "a request was sent for a pushed flow (%d)", s.requests);
	if (r == REASON_OK) {
		CHECK(b.id->source == FLOW_SOURCE_DELEGATED && b.id->pid == 300 &&
			      strcmp(b.id->binary_path, "/usr/bin/curl") == 0,
		      "pushed identity fields");
		CHECK(b.id->context_request_id == pid1, "context_request_id %llu, push %llu",
		      (unsigned long long)b.id->context_request_id, (unsigned long long)pid1);
		CHECK(!b.id->signed_context, "a pushed allow carries the signature itself");
	}
	flow_identity_free(b.id);
	for (int i = 0; i < 200 && g.id != pid1; i++)
		spin(&loop, 10);
	CHECK(g.id == pid1 && g.why == REASON_OK && g.b64, "no context_signed for the push (%llu %s)",
	      (unsigned long long)g.id, reason_word(g.why));
	if (g.b64) {
		/* the audit's signed context verifies offline */
		uint8_t *raw = NULL;
		size_t rl = 0;
		struct signed_context sc;
		CHECK(signed_base64_decode(g.b64, &raw, &rl) == 0 && signed_context_unpack(raw, rl, &sc) == 0,
		      "decode signed context");
		struct verifier *v = NULL;
		verifier_new(&prov_pub, 1, NULL, &v);
		struct pub_key ip;
		sign_key_public(inst, &ip);
		struct cert_input ci = { .instance = &ip, .anchor = &s.anchor, .pidns = { .dev = 4, .ino = 0xeffff },
					 .topology = PROTO_TOPOLOGY_SPLIT, .issued_at_ns = now_real_ns() - 1000000000ull,
					 .validity_ns = 3600ull * 1000000000ull };
		struct signed_cert cert;
		cert_issue(prov, &ci, &cert);
		struct anchor_event ev;
		CHECK(verifier_install_cert(v, &cert, verifier_channel_open(v), 0, &ev) == REASON_OK, "cert");
		struct verify_expect ex = { .offline = true };
		struct identity_context *ctx = NULL;
		enum reason vr = verifier_check_context(v, &sc, &ex, &ctx);
		CHECK(vr == REASON_OK, "offline verification of the pushed context: %s", reason_word(vr));
		CHECK(ctx && ctx->request_id == pid1 && proto_tuple_equal(&ctx->tuple, &t), "pushed context content");
		context_free(ctx);
		signed_cert_clear(&cert);
		signed_context_clear(&sc);
		verifier_free(v);
		free(raw);
	}

	/* The same tuple again: the push was taken once; the flow asks. */
	r = resolve_within(&loop, st, &f, 1000, &b);
	CHECK(r == REASON_OK && s.requests == 1, "second flow of a tuple: %s, %d requests", answer_word(r),
	      s.requests);
	CHECK(!b.id || !(b.id->context_request_id & PROTO_PUSH_ID_BIT), "a push used twice");
	flow_identity_free(b.id);

	/* 2. The push comes while the flow waits. */
	flow(&f, &t, 41001);
	struct late l = { .s = &s, .t = t };
	uv_timer_init(&loop, &l.timer);
	l.timer.data = &l;
	uv_timer_start(&l.timer, late_cb, 5, 0);
	r = resolve_within(&loop, st, &f, 1000, &b);
	CHECK(r == REASON_OK && s.requests == 1, "waited push: %s, %d requests", answer_word(r), s.requests);
	CHECK(b.id && b.id->context_request_id == l.id && l.id, "waited push not the identity");
	flow_identity_free(b.id);
	identity_delegated_stats(st, &ds);
	CHECK(ds.push_hits == 2 && ds.push_waited_hits == 1, "hits %llu waited %llu",
	      (unsigned long long)ds.push_hits, (unsigned long long)ds.push_waited_hits);

	/* 3. No push: the wait runs out and the flow asks. */
	uint64_t timeouts0 = ds.push_wait_timeouts;
	flow(&f, &t, 41002);
	r = resolve_within(&loop, st, &f, 1000, &b);
	CHECK(r == REASON_OK && s.requests == 2, "no push: %s, %d requests", answer_word(r), s.requests);
	CHECK(b.id && !(b.id->context_request_id & PROTO_PUSH_ID_BIT), "no push, yet a pushed identity");
	flow_identity_free(b.id);
	identity_delegated_stats(st, &ds);
	CHECK(ds.push_wait_timeouts == timeouts0 + 1, "wait timeouts %llu (before %llu)",
	      (unsigned long long)ds.push_wait_timeouts, (unsigned long long)timeouts0);
	/* ... and a push that comes after that is not used by a later flow
	 * of another tuple, nor is it audited (nobody took it) */
	CHECK(push(&s, &t, T_NONE, true) != 0, "late push");
	CHECK(wait_stat(&loop, st, ds.pushes + 1, 0), "late push not kept");
	identity_delegated_stats(st, &ds);

	/* 4. Refused pushes and a push for another tuple: the flow asks, the
	 * stand-in denies: nothing is allowed on those pushes. */
	s.deny = true;
	struct {
		enum tamper how;
		const char *what;
		int port_shift; /* push for another tuple */
	} bad[] = {
		{ T_MAC, "bad MAC", 0 },
		{ T_NONCE, "a nonce not from this channel's seed", 0 },
		{ T_ID, "request id not the push id", 0 },
		{ T_NONE, "bound to another tuple", 1 },
	};
	uint64_t refused = ds.pushes_refused, kept = ds.pushes;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		flow(&f, &t, (uint16_t)(41010 + i));
		struct proto_tuple pt = t;
		pt.sport = (uint16_t)(pt.sport + bad[i].port_shift);
		CHECK(push(&s, &pt, bad[i].how, false) != 0, "%s: not pushed", bad[i].what);
		if (bad[i].port_shift)
			CHECK(wait_stat(&loop, st, ++kept, refused), "%s: push not kept", bad[i].what);
		else
			CHECK(wait_stat(&loop, st, kept, ++refused), "%s: push not refused", bad[i].what);
		int before = s.requests;
		r = resolve_within(&loop, st, &f, 1000, &b);
		CHECK(r == REASON_FOREIGN_PROCESS && s.requests == before + 1, "%s: %s (%d requests)", bad[i].what,
		      answer_word(r), s.requests - before);
		flow_identity_free(b.id);
	}
	/* a replayed frame: the first copy is kept, the second refused
	 * (context_replayed); the flow takes the first once, then asks */
	flow(&f, &t, 41020);
	CHECK(push(&s, &t, T_REPLAY, false) != 0, "replay: not pushed");
	CHECK(wait_stat(&loop, st, ++kept, ++refused), "replayed push not refused");
	r = resolve_within(&loop, st, &f, 1000, &b);
	CHECK(r == REASON_OK, "replay: the original push: %s", answer_word(r));
	flow_identity_free(b.id);
	int before = s.requests;
	r = resolve_within(&loop, st, &f, 1000, &b);
	CHECK(r == REASON_FOREIGN_PROCESS && s.requests == before + 1, "replay: allowed again (%s)", answer_word(r));
	flow_identity_free(b.id);
	s.deny = false;

	/* 4b. Two pushes for one tuple: the newer replaces the older (the
	 * older one's socket is gone). A push nobody took for 250 ms is not
	 * used (its connection was dropped before identity; the tuple may be
	 * a later socket's): the flow asks. */
	s.deny = false;
	flow(&f, &t, 41025);
	uint64_t old_id = push(&s, &t, T_NONE, false);
	uint64_t new_id = push(&s, &t, T_NONE, false);
	kept += 2;
	CHECK(wait_stat(&loop, st, kept, refused), "two pushes for a tuple not kept");
	r = resolve_within(&loop, st, &f, 1000, &b);
	CHECK(r == REASON_OK && b.id && b.id->context_request_id == new_id && new_id != old_id,
	      "the newer push was not the one taken (%s)", answer_word(r));
	flow_identity_free(b.id);
	s.deny = true;
	flow(&f, &t, 41026);
	CHECK(push(&s, &t, T_NONE, false) != 0, "stale push");
	CHECK(wait_stat(&loop, st, ++kept, refused), "stale push not kept");
	spin(&loop, 400);
	before = s.requests;
	r = resolve_within(&loop, st, &f, 1000, &b);
	CHECK(r == REASON_FOREIGN_PROCESS && s.requests == before + 1, "a push 400 ms old was used (%s)",
	      answer_word(r));
	flow_identity_free(b.id);
	s.deny = false;

	/* 5. The channel is lost: unused pushes are dropped, never used by a
	 * later channel's flows. */
	flow(&f, &t, 41030);
	CHECK(push(&s, &t, T_NONE, false) != 0, "push before loss");
	CHECK(wait_stat(&loop, st, ++kept, refused), "push before loss not kept");
	srv_stop(&loop, &s);
	for (int i = 0; i < 200 && g_anchored; i++)
		spin(&loop, 10);
	CHECK(!g_anchored, "still anchored after loss");
	CHECK(srv_start(&loop, &s, ep, prov, inst) == 0, "server restart");
	CHECK(run_until(&loop, &g_anchored, 3000), "not re-anchored");
	s.deny = true;
	r = resolve_within(&loop, st, &f, 1000, &b);
	CHECK(r == REASON_FOREIGN_PROCESS, "a push of a lost channel was used: %s", answer_word(r));
	flow_identity_free(b.id);
	s.deny = false;
	identity_delegated_stats(st, &ds);
	printf("pushes %llu refused %llu hits %llu (waited %llu) wait timeouts %llu unused %llu\n",
	       (unsigned long long)ds.pushes, (unsigned long long)ds.pushes_refused, (unsigned long long)ds.push_hits,
	       (unsigned long long)ds.push_waited_hits, (unsigned long long)ds.push_wait_timeouts,
	       (unsigned long long)ds.pushes_unused);
	identity_strategy_destroy(st);
	spin(&loop, 100);

	/* 6. Pushes off on the net side: the Hello asks for none; flows ask at
	 * once (no wait). */
	g_anchored = false;
	st = make(&loop, ep, &prov_pub, true, &g);
	CHECK(run_until(&loop, &g_anchored, 3000), "(no push) never anchored");
	spin(&loop, 50);
	CHECK(!proto_server_push_wanted(s.ps), "pushes asked for with no_push");
	flow(&f, &t, 41040);
	before = s.requests;
	r = resolve_within(&loop, st, &f, 1000, &b);
	CHECK(r == REASON_OK && s.requests == before + 1, "(no push) %s", answer_word(r));
	flow_identity_free(b.id);
	identity_delegated_stats(st, &ds);
	CHECK(ds.push_wait_timeouts == 0 && ds.pushes == 0, "(no push) waited or pushed");
	identity_strategy_destroy(st);
	spin(&loop, 100);

	/* 7. A 1.2 proc side: no HelloAck.push; flows ask at once, allowed. */
	srv_stop(&loop, &s);
	g_minor = 2;
	CHECK(srv_start(&loop, &s, ep, prov, inst) == 0, "1.2 server start");
	g_anchored = false;
	st = make(&loop, ep, &prov_pub, false, &g);
	CHECK(run_until(&loop, &g_anchored, 3000), "(1.2 peer) never anchored");
	spin(&loop, 50);
	CHECK(!proto_server_push_wanted(s.ps), "a 1.2 proc side agreed to push");
	flow(&f, &t, 41050);
	before = s.requests;
	r = resolve_within(&loop, st, &f, 1000, &b);
	CHECK(r == REASON_OK && s.requests == before + 1, "(1.2 peer) %s", answer_word(r));
	flow_identity_free(b.id);
	identity_delegated_stats(st, &ds);
	CHECK(ds.push_wait_timeouts == 0 && ds.by_mac >= 1, "(1.2 peer) waited, or not MAC'd");
	identity_strategy_destroy(st);
	spin(&loop, 100);

	uv_close((uv_handle_t *)&l.timer, NULL);
	srv_stop(&loop, &s);
	free(g.b64);
	sign_key_free(prov);
	sign_key_free(inst);
	unlink(p1);
	rmdir(dir);
	uv_run(&loop, UV_RUN_NOWAIT);
	uv_loop_close(&loop);
	printf("%s (%d failure%s)\n", failures ? "FAILED" : "ok", failures, failures == 1 ? "" : "s");
	return failures ? 1 : 0;
}
