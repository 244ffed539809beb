/* The `delegated` identity strategy against a stand-in proc-supervisor
 * identity service (proto/server.h + proto/signer.h in this process, on a
 * Unix socket in a temp dir): valid context, bad signature, replay,
 * expired, tuple mismatch, wrong instance key, an error answer, no answer,
 * an impostor certificate, the server going away with a request in flight,
 * and a restart with a new instance (anchor_changed; old contexts refused).
 * With --bench N it prints identity latency percentiles. */
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
#include "proto/server.h"
#include "proto/signed.h"
#include "proto/signer.h"
#include "tests/proto/fixture.h"

enum mode { VALID, BADSIG, REPLAY, EXPIRED, TUPLE, WRONGKEY, ERROR, NEVER, OLDKEY };

struct srv {
	struct proto_server *ps;
	enum mode mode;
	struct sign_key *inst;      /* the certificate's instance key */
	struct sign_key *other;     /* some other key (WRONGKEY / OLDKEY) */
	struct procref subject, parent, anchor;
	struct signed_context saved; /* a previously valid context (REPLAY) */
	bool have_saved;
	struct proto_request *held[8];
	int n_held;
	bool stopped;
	int requests;
};

static void answer(struct srv *s, struct proto_request *req)
{
	struct proto_tuple t = req->tuple;
	if (s->mode == TUPLE)
		t.sport++;
	uint64_t now = now_real_ns();
	struct context_input in = {
		.topology = PROTO_TOPOLOGY_SPLIT,
		.source = IDENTITY_SOURCE_DELEGATED,
		.subject = &s->subject,
		.ancestors = &s->parent,
		.n_ancestors = 1,
		.anchor = &s->anchor,
		.tuple = &t,
		.nonce = req->nonce,
		.request_id = req->request_id,
		.issued_at_ns = s->mode == EXPIRED ? now - 60ull * 1000000000ull : now,
		.lifetime_ns = 5ull * 1000000000ull,
	};
	struct signed_context sc;
	const struct sign_key *k = (s->mode == WRONGKEY || s->mode == OLDKEY) ? s->other : s->inst;
	if (context_sign(k, &in, &sc) < 0) {
		proto_request_fail(req, REASON_INTERNAL_ERROR, "sign");
		return;
	}
	if (s->mode == BADSIG)
		sc.signature[7] ^= 0x40;
	if (s->mode == REPLAY && s->have_saved) {
		proto_request_reply(req, &s->saved);
		signed_context_clear(&sc);
		return;
	}
	if (s->mode == VALID && !s->have_saved) {
		signed_context_copy(&s->saved, &sc);
		s->have_saved = true;
	}
	proto_request_reply(req, &sc);
	signed_context_clear(&sc);
}

static void on_identity(struct proto_server *ps, struct proto_request *req, void *ud)
{
	(void)ps;
	struct srv *s = ud;
	s->requests++;
	if (s->mode == ERROR) {
		proto_request_fail(req, REASON_FOREIGN_PROCESS, "not in the tree");
		return;
	}
	if (s->mode == NEVER) {
		if (s->n_held < 8)
			s->held[s->n_held++] = req;
		else
			proto_request_fail(req, REASON_INTERNAL_ERROR, "full");
		return;
	}
	answer(s, req);
}

static void srv_done(void *ud)
{
	struct srv *s = ud;
	s->stopped = true;
}

static int srv_start(uv_loop_t *loop, struct srv *s, const char *ep, const struct sign_key *prov,
		     struct sign_key *inst, uint64_t issued_at)
{
	struct pub_key ip;
	sign_key_public(inst, &ip);
	struct cert_input ci = {
		.instance = &ip,
		.anchor = &s->anchor,
		.pidns = { .dev = 4, .ino = 0xeffff },
		.topology = PROTO_TOPOLOGY_SPLIT,
		.issued_at_ns = issued_at,
		.validity_ns = 3600ull * 1000000000ull,
	};
	struct signed_cert cert;
	if (cert_issue(prov, &ci, &cert) < 0)
		return -1;
	s->inst = inst;
	s->stopped = false;
	s->n_held = 0;
	struct proto_server_opts o = {
		.endpoint = ep,
		.cert = &cert,
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
	for (int i = 0; i < s->n_held; i++)
		proto_request_fail(s->held[i], REASON_IDENTITY_UNAVAILABLE, "stopping");
	s->n_held = 0;
	run_until(loop, &s->stopped, 2000);
	s->ps = NULL;
}

struct watch {
	bool anchored, lost, changed;
	int established;
};

static void on_anchor(struct identity_strategy *st, bool anchored, void *data)
{
	(void)st;
	struct watch *w = data;
	if (anchored)
		w->anchored = true;
	else
		w->lost = true;
}

static void on_event(enum anchor_event_kind k, const char *word, const char *desc, void *data)
{
	(void)word;
	(void)desc;
	struct watch *w = data;
	if (k == ANCHOR_CHANGED)
		w->changed = true;
	if (k == ANCHOR_ESTABLISHED)
		w->established++;
}

static struct proxy_flow g_tuple;

static enum reason ask(uv_loop_t *loop, struct identity_strategy *st, uint64_t timeout_ms, struct box *b)
{
	return resolve_within(loop, st, &g_tuple, timeout_ms, b);
}

static void expect(uv_loop_t *loop, struct identity_strategy *st, struct srv *s, enum mode m,
		   enum reason want, const char *what)
{
	s->mode = m;
	struct box b;
	enum reason r = ask(loop, st, 1000, &b);
	CHECK(r == want, "%s: got %s, want %s", what, answer_word(r), answer_word(want));
	flow_identity_free(b.id);
}

static struct identity_strategy *make(uv_loop_t *loop, const char *ep, const struct pub_key *pin,
				      struct watch *w)
{
	memset(w, 0, sizeof(*w));
	struct identity_delegated_config cfg = {
		.endpoint = ep,
		.pinned = pin,
		.n_pinned = 1,
		.backoff_min_ms = 50,
		.backoff_max_ms = 200,
		.on_anchor_event = on_event,
		.data = w,
	};
	struct identity_strategy *st = NULL;
	int r = identity_delegated_new(loop, &cfg, &st);
	CHECK(r == 0, "identity_delegated_new: %d", r);
	if (st) {
		st->on_anchor = on_anchor;
		st->on_anchor_data = w;
	}
	return st;
}

static void destroy(uv_loop_t *loop, struct identity_strategy *st)
{
	identity_strategy_destroy(st);
	bool never = false;
	run_until(loop, &never, 200);
}

int main(int argc, char **argv)
{
	int bench = 0;
	if (argc >= 3 && strcmp(argv[1], "--bench") == 0)
		bench = atoi(argv[2]);
	alarm(50);
	if (proto_crypto_init() < 0)
		return 1;
	char dir[] = "/tmp/tether-ident-deleg.XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	char ep[160], ep2[160], p1[128], p2[128];
	snprintf(p1, sizeof(p1), "%s/ctl.sock", dir);
	snprintf(p2, sizeof(p2), "%s/impostor.sock", dir);
	snprintf(ep, sizeof(ep), "unix:%s", p1);
	snprintf(ep2, sizeof(ep2), "unix:%s", p2);

	struct sign_key *prov = NULL, *rogue = NULL, *inst1 = NULL, *inst2 = NULL, *other = NULL;
	if (fix_seeded_key(0x11, &prov) < 0 || fix_seeded_key(0x99, &rogue) < 0 ||
	    sign_key_generate(&inst1) < 0 || sign_key_generate(&inst2) < 0 ||
	    sign_key_generate(&other) < 0)
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
	s.other = other;
	struct sockaddr_in *c = (struct sockaddr_in *)&g_tuple.client;
	struct sockaddr_in *p = (struct sockaddr_in *)&g_tuple.proxy;
	c->sin_family = p->sin_family = AF_INET;
	inet_pton(AF_INET, "127.0.0.1", &c->sin_addr);
	inet_pton(AF_INET, "127.0.0.1", &p->sin_addr);
	c->sin_port = htons(40000);
	p->sin_port = htons(3128);

	uint64_t t0 = now_real_ns();
	CHECK(srv_start(&loop, &s, ep, prov, inst1, t0) == 0, "server start");
	struct watch w;
	struct identity_strategy *st = make(&loop, ep, &prov_pub, &w);
	if (!st)
		return 1;
	CHECK(run_until(&loop, &w.anchored, 3000), "never anchored");
	CHECK(w.established == 1, "established events %d", w.established);

	/* A valid context becomes the identity, with the bytes kept. */
	s.mode = VALID;
	struct box b;
	enum reason r = ask(&loop, st, 1000, &b);
	CHECK(r == REASON_OK, "valid: %s", answer_word(r));
	if (r == REASON_OK) {
		CHECK(strcmp(b.id->binary_path, "/usr/bin/curl") == 0, "binary %s", b.id->binary_path);
		char want[65];
		hex_encode(s.subject.exe.sha256, 32, want);
		CHECK(strcmp(b.id->sha256, want) == 0, "sha256 %s", b.id->sha256);
		CHECK(b.id->source == FLOW_SOURCE_DELEGATED, "source");
		CHECK(b.id->pid == 300, "pid %d", b.id->pid);
		CHECK(b.id->n_ancestors == 1 && strcmp(b.id->ancestors[0].path, "/bin/sh") == 0 &&
			      b.id->ancestors[0].pid == 200,
		      "ancestors");
		CHECK(strcmp(b.id->process_key, s.subject.key) == 0, "key %s", b.id->process_key);
		CHECK(b.id->signed_context && b.id->signed_context_len > 0, "signed context kept");
		/* The kept bytes verify offline (what tether verify-context does). */
		struct signed_context sc;
		struct verifier *v = NULL;
		struct anchor_event ev;
		CHECK(b.id->signed_context &&
			      signed_context_unpack(b.id->signed_context, b.id->signed_context_len, &sc) == 0,
		      "unpack kept context");
		verifier_new(&prov_pub, 1, NULL, &v);
		/* install the same certificate the channel presented */
		struct pub_key ip;
		sign_key_public(inst1, &ip);
		struct cert_input ci = { .instance = &ip, .anchor = &s.anchor, .pidns = { .dev = 4, .ino = 0xeffff },
					 .topology = PROTO_TOPOLOGY_SPLIT, .issued_at_ns = t0,
					 .validity_ns = 3600ull * 1000000000ull };
		struct signed_cert cert;
		cert_issue(prov, &ci, &cert);
		uint64_t ch = verifier_channel_open(v);
		CHECK(verifier_install_cert(v, &cert, ch, 0, &ev) == REASON_OK, "offline cert");
		struct verify_expect ex = { .offline = true };
		struct identity_context *ctx = NULL;
		enum reason vr = verifier_check_context(v, &sc, &ex, &ctx);
		CHECK(vr == REASON_OK, "offline re-verification: %s", answer_word(vr));
		context_free(ctx);
		signed_cert_clear(&cert);
		signed_context_clear(&sc);
		verifier_free(v);
	}
	flow_identity_free(b.id);

	expect(&loop, st, &s, BADSIG, REASON_CONTEXT_SIGNATURE_INVALID, "bad signature");
	expect(&loop, st, &s, REPLAY, REASON_CONTEXT_REPLAYED, "replay");
	expect(&loop, st, &s, EXPIRED, REASON_CONTEXT_EXPIRED, "expired");
	expect(&loop, st, &s, TUPLE, REASON_CONTEXT_TUPLE_MISMATCH, "tuple mismatch");
	expect(&loop, st, &s, WRONGKEY, REASON_ANCHOR_UNKNOWN, "wrong instance key");
	expect(&loop, st, &s, ERROR, REASON_FOREIGN_PROCESS, "proc side error");
	s.mode = NEVER;
	r = ask(&loop, st, 300, &b);
	CHECK(r == REASON_IDENTITY_TIMEOUT, "no answer: %s", answer_word(r));
	flow_identity_free(b.id);
	for (int i = 0; i < s.n_held; i++)
		proto_request_fail(s.held[i], REASON_IDENTITY_UNAVAILABLE, "late");
	s.n_held = 0;

	if (bench > 0) {
		s.mode = VALID;
		uint64_t *lat = calloc((size_t)bench, sizeof(*lat));
		size_t n = 0;
		for (int i = 0; i < bench; i++) {
			if (ask(&loop, st, 1000, &b) == REASON_OK)
				lat[n++] = b.latency_ns;
			flow_identity_free(b.id);
		}
		CHECK(n == (size_t)bench, "bench %zu/%d", n, bench);
		printf("BENCH delegated (unix socket, in-process stand-in server): identity p50 %.1f us "
		       "p99 %.1f us (n=%d)\n",
		       (double)pct(lat, n, 0.5) / 1e3, (double)pct(lat, n, 0.99) / 1e3, bench);
		free(lat);
	}

	/* The server goes away with a request in flight: denied, not ready. */
	s.mode = NEVER;
	memset(&b, 0, sizeof(b));
	struct identity_request *req;
	identity_resolve(st, &g_tuple, 3000, box_cb, &b, &req);
	bool never = false;
	run_until(&loop, &never, 100);
	CHECK(s.n_held == 1, "request not in flight (%d)", s.n_held);
	srv_stop(&loop, &s);
	run_until(&loop, &b.done, 2000);
	CHECK(b.done && b.reason == REASON_CONTROL_CHANNEL_LOST, "in flight at loss: %s",
	      b.done ? answer_word(b.reason) : "no answer");
	CHECK(run_until(&loop, &w.lost, 2000) && !st->anchored, "still anchored after loss");
	r = ask(&loop, st, 500, &b);
	CHECK(r != REASON_OK, "allowed without a channel");
	flow_identity_free(b.id);

	/* Restart as a new instance: anchor_changed, accepted; the old
	 * instance's contexts are refused. */
	w.anchored = false;
	CHECK(srv_start(&loop, &s, ep, prov, inst2, now_real_ns()) == 0, "restart");
	s.other = inst1;
	CHECK(run_until(&loop, &w.anchored, 3000), "not re-anchored");
	CHECK(w.changed, "no anchor_changed event");
	expect(&loop, st, &s, VALID, REASON_OK, "after restart");
	expect(&loop, st, &s, OLDKEY, REASON_ANCHOR_UNKNOWN, "old instance's context");
	struct identity_delegated_stats ds;
	identity_delegated_stats(st, &ds);
	CHECK(ds.anchor_changes == 1 && ds.channel_losses == 1, "stats changes %llu losses %llu",
	      (unsigned long long)ds.anchor_changes, (unsigned long long)ds.channel_losses);

	/* An impostor: a certificate by an unknown provisioning key. */
	struct srv imp;
	memset(&imp, 0, sizeof(imp));
	imp.subject = s.subject;
	imp.parent = s.parent;
	imp.anchor = s.anchor;
	imp.other = other;
	struct sign_key *inst3 = NULL;
	sign_key_generate(&inst3);
	CHECK(srv_start(&loop, &imp, ep2, rogue, inst3, now_real_ns()) == 0, "impostor start");
	struct watch w2;
	struct identity_strategy *st2 = make(&loop, ep2, &prov_pub, &w2);
	if (st2) {
		run_until(&loop, &never, 500);
		CHECK(!w2.anchored && !st2->anchored, "impostor anchored");
		imp.mode = VALID;
		r = ask(&loop, st2, 500, &b);
		CHECK(r != REASON_OK, "impostor's context accepted");
		flow_identity_free(b.id);
		CHECK(imp.requests == 0, "a request reached the impostor");
		destroy(&loop, st2);
	}
	srv_stop(&loop, &imp);

	destroy(&loop, st);
	srv_stop(&loop, &s);
	signed_context_clear(&s.saved);
	sign_key_free(prov);
	sign_key_free(rogue);
	sign_key_free(inst1);
	sign_key_free(inst2);
	sign_key_free(inst3);
	sign_key_free(other);
	unlink(p1);
	unlink(p2);
	rmdir(dir);
	uv_run(&loop, UV_RUN_NOWAIT);
	uv_loop_close(&loop);
	printf("%s (%d failure%s)\n", failures ? "FAILED" : "ok", failures, failures == 1 ? "" : "s");
	return failures ? 1 : 0;
}
