/* The libuv channel end to end over a Unix socket: a proc-side server in a
 * thread (its own loop), the net-side client in the test's loop, and raw
 * sockets playing hostile peers. Every wait is bounded. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/util.h"
#include "proto/client.h"
#include "proto/conn.h"
#include "proto/frame.h"
#include "proto/message.h"
#include "proto/server.h"
#include "tests/proto/fixture.h"

enum srv_mode { ANSWER, ANSWER_LATER, NEVER, ERROR, WRONG_TUPLE, BAD_SIG };

struct peer_seen {
	int calls;
	int had_pidfd;
	pid_t pid;
};

struct srv {
	pthread_t th;
	uv_loop_t loop;
	uv_async_t stop;
	uv_async_t renew; /* proto_server_set_cert(renewed) on the server's loop */
	struct signed_cert renewed;
	volatile int renew_sent; /* set on the server's thread, -1 until then */
	uv_timer_t later;
	struct proto_server *s;
	struct proto_server_opts o;
	struct fixture *f;
	struct sign_key *inst;
	struct signed_cert cert;
	enum srv_mode mode;
	int rc;
	sem_t ready;
	char ep[200];
	struct proto_request *held[256];
	int n_held;
	int requests;
	struct peer_seen *seen;
	volatile int refuse_left; /* refuse_some(): peers still to refuse */
};

static char sockdir[64];

static void answer(struct srv *s, struct proto_request *req)
{
	struct proto_tuple t = req->tuple;
	if (s->mode == WRONG_TUPLE)
		t.dport++;
	struct context_input in = {
		.topology = PROTO_TOPOLOGY_SPLIT, .source = IDENTITY_SOURCE_DELEGATED,
		.subject = &s->f->subject, .ancestors = &s->f->parent, .n_ancestors = 1,
		.anchor = &s->f->anchor, .tuple = &t, .socket_cookie = req->socket_cookie,
		.nonce = req->nonce, .request_id = req->request_id,
	};
	struct signed_context sc;
	if (proto_request_wants_mac(req)) {
		/* 1.2: MAC'd answer, then the signature (BAD_SIG: by another key) */
		memset(&sc, 0, sizeof(sc));
		if (context_encode(&in, &sc.context, &sc.context_len) < 0) {
			proto_request_fail(req, REASON_INTERNAL_ERROR, "encode failed");
			return;
		}
		memcpy(sc.key_id, s->inst->id, PROTO_KEY_ID_LEN);
		proto_request_reply_mac(req, sc.context, sc.context_len, sc.key_id);
		sign_detached(s->mode == BAD_SIG ? s->f->prov : s->inst, SIGN_DOMAIN_CONTEXT, sc.context,
			      sc.context_len, sc.signature);
		proto_request_signature(req, &sc);
		signed_context_clear(&sc);
		return;
	}
	if (context_sign(s->inst, &in, &sc) < 0) {
		proto_request_fail(req, REASON_INTERNAL_ERROR, "sign failed");
		return;
	}
	proto_request_reply(req, &sc);
	signed_context_clear(&sc);
}

static void later_cb(uv_timer_t *t)
{
	struct srv *s = t->data;
	for (int i = 0; i < s->n_held; i++)
		answer(s, s->held[i]);
	s->n_held = 0;
}

static void on_identity(struct proto_server *ps, struct proto_request *req, void *ud)
{
	struct srv *s = ud;
	s->requests++;
	switch (s->mode) {
	case ANSWER:
	case WRONG_TUPLE:
	case BAD_SIG:
		answer(s, req);
		return;
	case ERROR:
		proto_request_fail(req, REASON_ANCESTRY_NOT_ANCHORED, "walk reached pid 1");
		return;
	case ANSWER_LATER:
	case NEVER:
		if (s->n_held == (int)ARRAY_SIZE(s->held)) {
			proto_request_fail(req, REASON_INTERNAL_ERROR, "full");
			return;
		}
		s->held[s->n_held++] = req;
		if (s->mode == ANSWER_LATER)
			uv_timer_start(&s->later, later_cb, 20, 0);
		return;
	}
}

static void stop_cb(uv_async_t *a)
{
	struct srv *s = a->data;
	for (int i = 0; i < s->n_held; i++)
		proto_request_fail(s->held[i], REASON_IDENTITY_UNAVAILABLE, "stopping");
	s->n_held = 0;
	proto_server_stop(s->s, NULL, NULL);
	uv_close((uv_handle_t *)&s->stop, NULL);
	uv_close((uv_handle_t *)&s->renew, NULL);
	uv_close((uv_handle_t *)&s->later, NULL);
}

static void renew_cb(uv_async_t *a)
{
	struct srv *s = a->data;
	s->renew_sent = proto_server_set_cert(s->s, &s->renewed);
}

static void *srv_main(void *arg)
{
	struct srv *s = arg;
	uv_loop_init(&s->loop);
	uv_async_init(&s->loop, &s->stop, stop_cb);
	uv_async_init(&s->loop, &s->renew, renew_cb);
	uv_timer_init(&s->loop, &s->later);
	s->stop.data = s->later.data = s->renew.data = s;
	s->o.endpoint = s->ep;
	s->o.cert = &s->cert;
	s->o.on_identity = on_identity;
	s->o.userdata = s;
	if (!s->o.read_deadline_ms)
		s->o.read_deadline_ms = 300;
	s->rc = proto_server_start(&s->loop, &s->o, &s->s);
	sem_post(&s->ready);
	if (s->rc < 0) {
		uv_close((uv_handle_t *)&s->stop, NULL);
		uv_close((uv_handle_t *)&s->renew, NULL);
		uv_close((uv_handle_t *)&s->later, NULL);
	}
	uv_run(&s->loop, UV_RUN_DEFAULT);
	uv_loop_close(&s->loop);
	return NULL;
}

/* Start a server whose instance key is seeded with `seed`, for pidns `ns`. */
static struct srv *srv_start(struct fixture *f, const char *name, uint8_t seed, uint64_t ns,
			     enum srv_mode mode, const struct sign_key *prov)
{
	struct srv *s = calloc(1, sizeof(*s));
	s->f = f;
	s->mode = mode;
	snprintf(s->ep, sizeof(s->ep), "unix:%s/%s", sockdir, name);
	assert_int_equal(fix_seeded_key(seed, &s->inst), 0);
	assert_int_equal(fix_cert(f, prov ? prov : f->prov, s->inst, now_real_ns(), ns, &s->cert), 0);
	sem_init(&s->ready, 0, 0);
	return s;
}

static void srv_run(struct srv *s)
{
	pthread_create(&s->th, NULL, srv_main, s);
	sem_wait(&s->ready);
	assert_int_equal(s->rc, 0);
}

static void srv_stop(struct srv *s)
{
	uv_async_send(&s->stop);
	pthread_join(s->th, NULL);
	sign_key_free(s->inst);
	signed_cert_clear(&s->cert);
	signed_cert_clear(&s->renewed);
	sem_destroy(&s->ready);
	free(s);
}

/* ---- net side ---- */

struct waiter {
	int done;
	enum reason reason;
	char path[PATH_MAX];
	bool had_signed;
	bool had_cert;
	bool by_mac;
	uint64_t id;
};

static void got(const struct proto_identity_result *res, void *ud)
{
	struct waiter *w = ud;
	w->done++;
	w->reason = res->reason;
	if (res->ctx)
		strcpy(w->path, res->ctx->subject.exe.path);
	w->had_signed = res->signed_context != NULL;
	w->had_cert = res->anchor_cert != NULL;
	w->by_mac = res->by_mac;
	w->id = res->request_id;
}

static bool guard_fired;
static void guard_cb(uv_timer_t *t) { guard_fired = true; }

/* Run the loop until *flag becomes true or ms elapse. */
static bool run_until(uv_loop_t *loop, volatile int *flag, int want, uint64_t ms)
{
	uv_timer_t guard;
	uv_timer_init(loop, &guard);
	guard_fired = false;
	uv_timer_start(&guard, guard_cb, ms, 0);
	while (*flag < want && !guard_fired)
		uv_run(loop, UV_RUN_ONCE);
	uv_close((uv_handle_t *)&guard, NULL);
	uv_run(loop, UV_RUN_NOWAIT);
	return *flag >= want;
}

struct net {
	uv_loop_t loop;
	struct verifier *v;
	struct proto_client *c;
	int ready;
	int anchors_changed;
	int anchor_events;
	int stopped;
	int signatures;        /* on_signature calls */
	enum reason sig_reason; /* the last one's */
	uint64_t sig_id;
	bool sig_had_sc;
	int refused;
	enum reason refused_why;
};

static void on_signature(struct proto_client *c, uint64_t id, enum reason why, const struct signed_context *sc,
			 const struct signed_cert *cert, void *ud)
{
	struct net *n = ud;
	n->signatures++;
	n->sig_reason = why;
	n->sig_id = id;
	n->sig_had_sc = sc != NULL;
	if (sc) {
		/* what the audit gets verifies offline against the certificate */
		struct verifier *v;
		struct fixture f;
		assert_int_equal(fix_init(&f), 0);
		assert_int_equal(verifier_new(&f.prov_pub, 1, NULL, &v), 0);
		uint64_t ch = verifier_channel_open(v);
		struct anchor_event ev;
		assert_int_equal(verifier_install_cert(v, cert, ch, 0, &ev), REASON_OK);
		struct verify_expect ex = { .offline = true };
		struct identity_context *ctx = NULL;
		assert_int_equal(verifier_check_context(v, sc, &ex, &ctx), REASON_OK);
		context_free(ctx);
		verifier_free(v);
		fix_free(&f);
	}
}

static void on_refused_cb(struct proto_client *c, enum reason why, void *ud)
{
	struct net *n = ud;
	n->refused++;
	n->refused_why = why;
}

static void on_anchor(struct proto_client *c, const struct anchor_event *ev, void *ud)
{
	struct net *n = ud;
	n->anchor_events++;
	if (ev->kind == ANCHOR_CHANGED)
		n->anchors_changed++;
}

static void on_state(struct proto_client *c, bool ready, enum reason why, void *ud)
{
	struct net *n = ud;
	if (ready)
		n->ready++;
}

static void client_start_mac(struct net *n, const char *ep, uint64_t timeout_ms, bool no_mac)
{
	struct proto_client_opts o = {
		.endpoint = ep, .verifier = n->v, .request_timeout_ms = timeout_ms,
		.backoff_min_ms = 20, .backoff_max_ms = 100, .on_anchor = on_anchor,
		.on_state = on_state, .on_signature = on_signature, .on_refused = on_refused_cb,
		.no_mac = no_mac, .check_signatures = true, .userdata = n,
	};
	assert_int_equal(proto_client_start(&n->loop, &o, &n->c), 0);
}

static void client_start(struct net *n, const char *ep, uint64_t timeout_ms)
{
	client_start_mac(n, ep, timeout_ms, false);
}

static void stopped_cb(void *ud) { ((struct net *)ud)->stopped = 1; }

static void net_init(struct net *n, struct fixture *f)
{
	memset(n, 0, sizeof(*n));
	uv_loop_init(&n->loop);
	assert_int_equal(verifier_new(&f->prov_pub, 1, NULL, &n->v), 0);
}

static void client_stop(struct net *n)
{
	n->stopped = 0;
	proto_client_stop(n->c, stopped_cb, n);
	assert_true(run_until(&n->loop, &n->stopped, 1, 2000));
}

static void net_fini(struct net *n)
{
	uv_run(&n->loop, UV_RUN_NOWAIT);
	assert_int_equal(uv_loop_close(&n->loop), 0);
	verifier_free(n->v);
}

static struct proto_tuple flow(uint16_t sport)
{
	struct proto_tuple t;
	proto_tuple_from_strings(&t, 6, "192.0.2.10", sport, "198.51.100.7", 443);
	return t;
}

static void test_roundtrip(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct srv *s = srv_start(&f, "rt.sock", 0x70, 0x1001, ANSWER, NULL);
	srv_run(s);
	struct net n;
	net_init(&n, &f);
	client_start(&n, s->ep, 2000);
	/* issued before the channel is ready: waits for it */
	struct waiter w[50] = { 0 };
	struct proto_tuple t = flow(40001);
	assert_int_equal(proto_client_request(n.c, &t, 9, got, &w[0], NULL), 0);
	assert_int_equal(w[0].done, 0); /* never synchronous */
	assert_true(run_until(&n.loop, &w[0].done, 1, 3000));
	assert_int_equal(w[0].reason, REASON_OK);
	assert_string_equal(w[0].path, "/usr/bin/curl");
	assert_true(w[0].had_signed);
	assert_true(w[0].had_cert);
	assert_int_equal(n.anchor_events, 1);
	/* many in flight at once */
	static int all;
	all = 0;
	for (int i = 1; i < 50; i++) {
		t = flow((uint16_t)(40001 + i));
		assert_int_equal(proto_client_request(n.c, &t, 9, got, &w[i], NULL), 0);
	}
	for (int i = 1; i < 50; i++) {
		assert_true(run_until(&n.loop, &w[i].done, 1, 3000));
		assert_int_equal(w[i].reason, REASON_OK);
	}
	(void)all;
	client_stop(&n);
	net_fini(&n);
	srv_stop(s);
	fix_free(&f);
}

static void test_errors_and_timeouts(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct srv *s = srv_start(&f, "err.sock", 0x71, 0x1002, ERROR, NULL);
	srv_run(s);
	struct net n;
	net_init(&n, &f);
	client_start(&n, s->ep, 200);
	struct waiter w = { 0 };
	struct proto_tuple t = flow(40100);
	/* the proc side's reason word is passed through */
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_ANCESTRY_NOT_ANCHORED);
	/* no answer: identity_timeout within the request timeout */
	s->mode = NEVER;
	memset(&w, 0, sizeof(w));
	uint64_t t0 = uv_now(&n.loop);
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_IDENTITY_TIMEOUT);
	assert_true(uv_now(&n.loop) - t0 < 1000);
	/* a context for another tuple */
	s->mode = WRONG_TUPLE;
	memset(&w, 0, sizeof(w));
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_CONTEXT_TUPLE_MISMATCH);
	/* a cancelled request's callback never runs */
	s->mode = ANSWER_LATER;
	struct waiter wc = { 0 }, w2 = { 0 };
	uint64_t id;
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &wc, &id), 0);
	proto_client_cancel(n.c, id);
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w2, NULL), 0);
	assert_true(run_until(&n.loop, &w2.done, 1, 3000));
	assert_int_equal(w2.reason, REASON_OK);
	assert_int_equal(wc.done, 0);
	client_stop(&n);
	net_fini(&n);
	srv_stop(s);
	fix_free(&f);
}

static void test_drop_and_reconnect(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct srv *s = srv_start(&f, "drop.sock", 0x72, 0x1003, NEVER, NULL);
	srv_run(s);
	struct net n;
	net_init(&n, &f);
	client_start(&n, s->ep, 5000);
	assert_true(run_until(&n.loop, &n.ready, 1, 3000));
	struct waiter w = { 0 };
	struct proto_tuple t = flow(40200);
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	uv_run(&n.loop, UV_RUN_NOWAIT);
	/* the proc side goes away with the request in flight: fail closed, fast */
	srv_stop(s);
	uint64_t t0 = uv_now(&n.loop);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_IDENTITY_UNAVAILABLE);
	assert_true(uv_now(&n.loop) - t0 < 2000);
	/* while it is down, requests fail at once (not after the timeout) */
	memset(&w, 0, sizeof(w));
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 1000));
	assert_int_equal(w.reason, REASON_IDENTITY_UNAVAILABLE);
	/* the same instance comes back (same key, same certificate): the client
	 * reconnects by itself and it is a reconnection, not a change */
	struct srv *s2 = srv_start(&f, "drop.sock", 0x72, 0x1003, ANSWER, NULL);
	srv_run(s2);
	assert_true(run_until(&n.loop, &n.ready, 2, 3000));
	assert_int_equal(n.anchors_changed, 0);
	memset(&w, 0, sizeof(w));
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_OK);
	client_stop(&n);
	net_fini(&n);
	srv_stop(s2);
	fix_free(&f);
}

static void test_anchor_replaced(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct srv *a = srv_start(&f, "a.sock", 0x73, 0x1004, ANSWER, NULL);
	srv_run(a);
	struct net n;
	net_init(&n, &f);
	client_start(&n, a->ep, 2000);
	assert_true(run_until(&n.loop, &n.ready, 1, 3000));
	/* a second proc-supervisor for the same PID namespace while the first
	 * one's channel lives: its certificate is refused, requests fail */
	struct srv *b = srv_start(&f, "b.sock", 0x74, 0x1004, ANSWER, NULL);
	srv_run(b);
	struct proto_client *cb_client;
	struct proto_client_opts o = { .endpoint = b->ep, .verifier = n.v, .backoff_min_ms = 20,
				       .backoff_max_ms = 50, .on_anchor = on_anchor, .userdata = &n };
	assert_int_equal(proto_client_start(&n.loop, &o, &cb_client), 0);
	struct waiter w = { 0 };
	struct proto_tuple t = flow(40300);
	assert_int_equal(proto_client_request(cb_client, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_IDENTITY_UNAVAILABLE);
	assert_false(proto_client_ready(cb_client));
	/* the first one goes away: the second is accepted as its replacement */
	client_stop(&n);
	srv_stop(a);
	static int ready_b;
	ready_b = 0;
	for (int i = 0; i < 100 && !proto_client_ready(cb_client); i++) {
		uv_timer_t tm;
		uv_timer_init(&n.loop, &tm);
		uv_timer_start(&tm, guard_cb, 20, 0);
		uv_run(&n.loop, UV_RUN_ONCE);
		uv_close((uv_handle_t *)&tm, NULL);
		uv_run(&n.loop, UV_RUN_NOWAIT);
	}
	(void)ready_b;
	assert_true(proto_client_ready(cb_client));
	assert_int_equal(n.anchors_changed, 1);
	memset(&w, 0, sizeof(w));
	assert_int_equal(proto_client_request(cb_client, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_OK);
	n.c = cb_client;
	client_stop(&n);
	net_fini(&n);
	srv_stop(b);
	fix_free(&f);
}

static void test_impostor_certificate(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct sign_key *rogue;
	assert_int_equal(fix_seeded_key(0x99, &rogue), 0);
	struct srv *s = srv_start(&f, "imp.sock", 0x75, 0x1005, ANSWER, rogue);
	srv_run(s);
	struct net n;
	net_init(&n, &f);
	client_start(&n, s->ep, 2000);
	struct waiter w = { 0 };
	struct proto_tuple t = flow(40400);
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_IDENTITY_UNAVAILABLE);
	assert_int_equal(n.ready, 0);
	assert_int_equal(s->requests, 0);
	client_stop(&n);
	net_fini(&n);
	srv_stop(s);
	sign_key_free(rogue);
	fix_free(&f);
}

/* ---- hostile raw peers against the server ---- */

static int raw_connect(const struct srv *s)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	strcpy(un.sun_path, s->ep + 5);
	assert_int_equal(connect(fd, (struct sockaddr *)&un, sizeof(un)), 0);
	return fd;
}

/* Wait (bounded) for the server to close: read returns 0 or an error. */
static bool closed_within(int fd, int ms)
{
	uint64_t end = now_mono_ns() + (uint64_t)ms * 1000000ull;
	char buf[4096];
	while (now_mono_ns() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 50) <= 0)
			continue;
		ssize_t k = read(fd, buf, sizeof(buf));
		if (k <= 0)
			return true;
	}
	return false;
}

/* The server may already have closed (that is what several tests expect):
 * a failed write is reported, not asserted. */
static bool send_frame(int fd, const struct ctl_msg *m)
{
	uint8_t *b;
	size_t n;
	assert_int_equal(ctl_encode(m, &b, &n), 0);
	bool ok = write(fd, b, n) == (ssize_t)n;
	free(b);
	return ok;
}

static int count_frame(const uint8_t *pl, size_t len, void *ud)
{
	struct ctl_msg m;
	int r = ctl_decode(pl, len, &m);
	if (r == 0) {
		(*(int *)ud)++;
		ctl_msg_clear(&m);
	}
	return r;
}

static void test_hostile_peers(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct srv *s = srv_start(&f, "hostile.sock", 0x76, 0x1006, ANSWER, NULL);
	srv_run(s);
	struct ctl_msg hello = { .kind = CTL_HELLO };
	strcpy(hello.u.hello.role, "test");

	/* garbage */
	int fd = raw_connect(s);
	assert_int_equal(write(fd, "\x00\x00\x00\x05garbage!", 12), 12);
	assert_true(closed_within(fd, 2000));
	close(fd);
	/* length prefix above the limit */
	fd = raw_connect(s);
	uint8_t big[4];
	frame_put_prefix(big, PROTO_MAX_FRAME + 1);
	assert_int_equal(write(fd, big, 4), 4);
	assert_true(closed_within(fd, 2000));
	close(fd);
	/* zero length */
	fd = raw_connect(s);
	assert_int_equal(write(fd, "\0\0\0\0", 4), 4);
	assert_true(closed_within(fd, 2000));
	close(fd);
	/* IdentityRequest before Hello */
	fd = raw_connect(s);
	struct ctl_msg q = { .kind = CTL_IDENTITY_REQUEST };
	q.u.identity_request.tuple = flow(1);
	send_frame(fd, &q);
	assert_true(closed_within(fd, 2000));
	close(fd);
	/* a message of the wrong kind after Hello (an exec message) */
	fd = raw_connect(s);
	send_frame(fd, &hello);
	struct ctl_msg sig = { .kind = CTL_EXEC_SIGNAL };
	sig.u.exec_signal.signo = 9;
	send_frame(fd, &sig);
	assert_true(closed_within(fd, 2000));
	close(fd);
	/* silence after connect: dropped at the handshake deadline */
	fd = raw_connect(s);
	assert_true(closed_within(fd, 2000));
	close(fd);
	/* slowloris: one byte a second of a valid frame; deadline 300 ms */
	fd = raw_connect(s);
	uint8_t *hb;
	size_t hn;
	assert_int_equal(ctl_encode(&hello, &hb, &hn), 0);
	bool dropped = false;
	for (size_t i = 0; i < hn && !dropped; i++) {
		if (write(fd, hb + i, 1) != 1) {
			dropped = true;
			break;
		}
		dropped = closed_within(fd, 1000);
	}
	free(hb);
	assert_true(dropped);
	close(fd);
	/* and a well-behaved peer still gets its HelloAck and answers */
	fd = raw_connect(s);
	assert_true(send_frame(fd, &hello));
	q.u.identity_request.request_id = 4;
	assert_true(send_frame(fd, &q));
	struct frame_decoder d;
	frame_decoder_init(&d, 0);
	int frames = 0;
	uint8_t buf[8192];
	uint64_t end = now_mono_ns() + 2000000000ull;
	while (frames < 2 && now_mono_ns() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 50) <= 0)
			continue;
		ssize_t k = read(fd, buf, sizeof(buf));
		assert_true(k > 0);
		assert_int_equal(frame_decoder_feed(&d, buf, (size_t)k, count_frame, &frames), 0);
	}
	assert_int_equal(frames, 2);
	frame_decoder_free(&d);
	close(fd);
	srv_stop(s);
	fix_free(&f);
}

/* Send Hello and wait (bounded) for the HelloAck: the server has then
 * accepted this peer and holds it. */
static bool hello_acked(int fd)
{
	struct ctl_msg hello = { .kind = CTL_HELLO };
	strcpy(hello.u.hello.role, "test");
	if (!send_frame(fd, &hello))
		return false;
	struct frame_decoder d;
	frame_decoder_init(&d, 0);
	int frames = 0;
	uint8_t buf[8192];
	uint64_t end = now_mono_ns() + 2000000000ull;
	while (frames < 1 && now_mono_ns() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 50) <= 0)
			continue;
		ssize_t k = read(fd, buf, sizeof(buf));
		if (k <= 0 || frame_decoder_feed(&d, buf, (size_t)k, count_frame, &frames) < 0)
			break;
	}
	frame_decoder_free(&d);
	return frames == 1;
}

static void send_request(int fd, uint64_t id)
{
	struct ctl_msg q = { .kind = CTL_IDENTITY_REQUEST };
	q.u.identity_request.request_id = id;
	q.u.identity_request.tuple = flow((uint16_t)(41000 + id));
	assert_true(send_frame(fd, &q));
}

/* At max_conns a new peer takes the slot of one with nothing outstanding:
 * a silent one first, else the one idle longest; with a request
 * outstanding everywhere the newcomer is refused. */
static void test_eviction(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct srv *s = srv_start(&f, "evict.sock", 0x79, 0x1009, NEVER, NULL);
	s->o.max_conns = 3;
	s->o.read_deadline_ms = 5000; /* silent peers stay for the test */
	srv_run(s);
	int busy = raw_connect(s);
	assert_true(hello_acked(busy));
	send_request(busy, 1); /* held: busy has a request outstanding */
	int idle = raw_connect(s);
	assert_true(hello_acked(idle));
	int silent = raw_connect(s);
	usleep(100000);
	/* full: the newcomer displaces the silent peer, not the older idle one */
	int a = raw_connect(s);
	assert_true(hello_acked(a));
	assert_true(closed_within(silent, 1000));
	assert_false(closed_within(idle, 200));
	/* full again: now the one idle longest goes, not the busy one */
	int b = raw_connect(s);
	assert_true(hello_acked(b));
	assert_true(closed_within(idle, 1000));
	assert_false(closed_within(a, 200));
	assert_false(closed_within(busy, 200));
	/* a request outstanding on every connection: the newcomer is refused */
	send_request(a, 2);
	send_request(b, 3);
	usleep(100000);
	int c = raw_connect(s);
	assert_false(hello_acked(c));
	assert_true(closed_within(c, 1000));
	assert_false(closed_within(busy, 200));
	assert_false(closed_within(a, 200));
	assert_false(closed_within(b, 200));
	close(c);
	close(b);
	close(a);
	close(busy);
	close(idle);
	close(silent);
	usleep(100000);

	/* A client whose idle channel is displaced reconnects at once, not
	 * after its backoff (1 s here), and displaces the idle intruder. */
	struct net n;
	net_init(&n, &f);
	struct proto_client_opts o = {
		.endpoint = s->ep, .verifier = n.v, .request_timeout_ms = 2000,
		.backoff_min_ms = 1000, .backoff_max_ms = 1000, .on_anchor = on_anchor,
		.on_state = on_state, .userdata = &n,
	};
	assert_int_equal(proto_client_start(&n.loop, &o, &n.c), 0);
	assert_true(run_until(&n.loop, &n.ready, 1, 3000));
	usleep((PROTO_CLIENT_STABLE_MS + 100) * 1000); /* a channel that stayed up */
	int x = raw_connect(s);
	assert_true(hello_acked(x));
	int y = raw_connect(s);
	assert_true(hello_acked(y));
	int z = raw_connect(s);
	assert_true(hello_acked(z)); /* the fourth: displaces the client, idle longest */
	uv_update_time(&n.loop); /* (the loop slept above) */
	uint64_t t0 = uv_now(&n.loop);
	assert_true(run_until(&n.loop, &n.ready, 2, 3000));
	assert_true(uv_now(&n.loop) - t0 < 500);
	assert_true(closed_within(x, 1000)); /* x was then idle longest */
	assert_false(closed_within(y, 200));
	assert_false(closed_within(z, 200));
	/* and it is served */
	s->mode = ANSWER;
	struct waiter w = { 0 };
	struct proto_tuple t = flow(40900);
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_OK);
	close(x);
	close(y);
	close(z);
	client_stop(&n);
	net_fini(&n);
	srv_stop(s);
	fix_free(&f);
}

/* The peer check refuses the first REFUSE_N peers; the first of them
 * blocks the server's loop for 300 ms, so the rest and an allowed
 * newcomer arrive in one accept batch, before any refused one finished
 * closing. */
#define REFUSE_N 10
static bool refuse_some(const struct proto_peer *p, void *ud)
{
	struct srv *s = ud;
	if (s->refuse_left <= 0)
		return true;
	if (s->refuse_left-- == REFUSE_N)
		usleep(300000);
	return false;
}

/* Refused peers do not hold slots: with max_conns 2, one idle peer and an
 * allowed newcomer behind ten refused ones, nobody is displaced and the
 * newcomer is served. (Before, refused connections still closing counted,
 * and the idle peer was evicted.) */
static void test_refused_do_not_count(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct srv *s = srv_start(&f, "refuse.sock", 0x7c, 0x100c, NEVER, NULL);
	s->o.max_conns = 2;
	s->o.read_deadline_ms = 5000;
	s->o.peer_check = refuse_some;
	srv_run(s);
	int idle = raw_connect(s);
	assert_true(hello_acked(idle));
	s->refuse_left = REFUSE_N;
	int refused[REFUSE_N];
	for (int i = 0; i < REFUSE_N; i++)
		refused[i] = raw_connect(s);
	int newcomer = raw_connect(s);
	assert_true(hello_acked(newcomer));
	for (int i = 0; i < REFUSE_N; i++) {
		assert_true(closed_within(refused[i], 1000));
		close(refused[i]);
	}
	assert_false(closed_within(idle, 300));
	assert_int_equal(s->refuse_left, 0);
	close(newcomer);
	close(idle);
	srv_stop(s);
	fix_free(&f);
}

/* The proc side renews its certificate: proto_server_set_cert sends it on
 * the live channel, the client installs it (ANCHOR_RENEWED) without
 * reconnecting, and answers keep verifying. */
static void test_renewal_on_channel(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct srv *s = srv_start(&f, "renew.sock", 0x7a, 0x100a, ANSWER, NULL);
	srv_run(s);
	struct net n;
	net_init(&n, &f);
	client_start(&n, s->ep, 2000);
	assert_true(run_until(&n.loop, &n.ready, 1, 3000));
	assert_int_equal(n.anchor_events, 1);
	usleep(2000);
	assert_int_equal(fix_cert(&f, f.prov, s->inst, now_real_ns(), 0x100a, &s->renewed), 0);
	s->renew_sent = -1;
	uv_async_send(&s->renew);
	assert_true(run_until(&n.loop, &n.anchor_events, 2, 3000));
	/* the client may see the certificate before proto_server_set_cert
	 * has returned on the server's thread */
	for (int i = 0; i < 1000 && s->renew_sent < 0; i++)
		usleep(1000);
	assert_int_equal(s->renew_sent, 1);
	assert_int_equal(n.ready, 1); /* no reconnect */
	struct pub_key ip;
	sign_key_public(s->inst, &ip);
	const struct signed_cert *cur = verifier_cert_for_key(n.v, ip.id);
	assert_non_null(cur);
	assert_int_equal(cur->cert_len, s->renewed.cert_len);
	assert_memory_equal(cur->cert, s->renewed.cert, cur->cert_len);
	struct waiter w = { 0 };
	struct proto_tuple t = flow(40950);
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_OK);
	client_stop(&n);
	net_fini(&n);
	srv_stop(s);
	fix_free(&f);
}

static int refused_skew;
static void on_refused_count(struct proto_client *c, enum reason why, void *ud)
{
	if (why == REASON_CLOCK_SKEW)
		refused_skew++;
}

/* Clock samples over the channel: a server with its instance key answers
 * the Hello's nonce and the ClockRequests (every 50 ms here); the skew on
 * one machine is about 0. A bound of 1 ns (any measurement is past it):
 * the channel is refused clock_skew on every attempt, never ready, and a
 * request fails. A server that signs no samples (a 1.0 peer): skew not
 * measured, the channel works as before. */
static void test_clock_probes(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct srv *s = srv_start(&f, "clock.sock", 0x75, 0x1006, ANSWER, NULL);
	s->o.instance = s->inst;
	srv_run(s);
	struct net n;
	net_init(&n, &f);
	struct proto_client_opts o = {
		.endpoint = s->ep, .verifier = n.v, .request_timeout_ms = 2000, .backoff_min_ms = 20,
		.backoff_max_ms = 100, .on_anchor = on_anchor, .on_state = on_state, .userdata = &n,
		.clock_probe_ms = 50,
	};
	assert_int_equal(proto_client_start(&n.loop, &o, &n.c), 0);
	assert_true(run_until(&n.loop, &n.ready, 1, 3000));
	struct verifier_clock_state st;
	verifier_clock(n.v, &st);
	assert_true(st.measured);
	assert_false(st.exceeded);
	assert_true(st.skew_ns > -50000000 && st.skew_ns < 50000000);
	/* a few probes later: still one channel, measured again (a new
	 * sample: the ns-resolution figures differ) */
	struct verifier_clock_state first = st;
	static int never;
	never = 0;
	run_until(&n.loop, &never, 1, 300);
	assert_int_equal(n.ready, 1);
	assert_int_equal(n.anchor_events, 1);
	verifier_clock(n.v, &st);
	assert_true(st.measured && !st.exceeded);
	assert_true(st.skew_ns != first.skew_ns || st.uncertainty_ns != first.uncertainty_ns);
	struct waiter w = { 0 };
	struct proto_tuple t = flow(40100);
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_OK);
	client_stop(&n);
	net_fini(&n);

	/* past a 1 ns bound: refused clock_skew, never ready */
	memset(&n, 0, sizeof(n));
	uv_loop_init(&n.loop);
	struct verifier_opts vo = { .max_clock_skew_ns = 1 };
	assert_int_equal(verifier_new(&f.prov_pub, 1, &vo, &n.v), 0);
	o.verifier = n.v;
	o.on_refused = on_refused_count;
	refused_skew = 0;
	assert_int_equal(proto_client_start(&n.loop, &o, &n.c), 0);
	assert_true(run_until(&n.loop, &refused_skew, 2, 3000)); /* and again after the backoff */
	assert_int_equal(n.ready, 0);
	verifier_clock(n.v, &st);
	assert_true(st.measured && st.exceeded);
	client_stop(&n);
	net_fini(&n);
	srv_stop(s);

	/* a server that sends no samples */
	s = srv_start(&f, "clock10.sock", 0x76, 0x1007, ANSWER, NULL);
	srv_run(s);
	net_init(&n, &f);
	o.endpoint = s->ep;
	o.verifier = n.v;
	o.on_refused = NULL;
	assert_int_equal(proto_client_start(&n.loop, &o, &n.c), 0);
	assert_true(run_until(&n.loop, &n.ready, 1, 3000));
	verifier_clock(n.v, &st);
	assert_false(st.measured);
	memset(&w, 0, sizeof(w));
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_OK);
	client_stop(&n);
	net_fini(&n);
	srv_stop(s);
	fix_free(&f);
}

static void test_peer_uid_refused(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct srv *s = srv_start(&f, "uid.sock", 0x77, 0x1007, ANSWER, NULL);
	struct kernel_caps caps;
	assert_int_equal(kernel_caps_probe(&caps), 0);
	s->o.caps = &caps;
	s->o.check_uid = true;
	s->o.peer_uid = getuid() + 4242;
	srv_run(s);
	int fd = raw_connect(s);
	struct ctl_msg hello = { .kind = CTL_HELLO };
	send_frame(fd, &hello);
	assert_true(closed_within(fd, 2000));
	close(fd);
	srv_stop(s);
	/* the right uid is accepted (SO_PEERPIDFD used where available) */
	s = srv_start(&f, "uid.sock", 0x77, 0x1007, ANSWER, NULL);
	s->o.caps = &caps;
	s->o.check_uid = true;
	s->o.peer_uid = getuid();
	srv_run(s);
	struct net n;
	net_init(&n, &f);
	client_start(&n, s->ep, 2000);
	assert_true(run_until(&n.loop, &n.ready, 1, 3000));
	client_stop(&n);
	net_fini(&n);
	srv_stop(s);
	fix_free(&f);
}

static bool record_peer(const struct proto_peer *p, void *ud)
{
	struct srv *s = ud;
	struct peer_seen *ps = s->seen;
	if (ps) {
		ps->calls++;
		ps->had_pidfd = p->pidfd >= 0;
		ps->pid = p->pid;
	}
	return true;
}

/* SO_PEERPIDFD is used where the kernel has it and not when the fallback
 * is forced; SO_PEERCRED's pid is reported either way. */
static void test_peer_pidfd_fallback(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct kernel_caps caps;
	assert_int_equal(kernel_caps_probe(&caps), 0);
	for (int forced = 0; forced < 2; forced++) {
		if (forced)
			assert_int_equal(kernel_caps_force_fallback(&caps, "peer_pidfd"), 0);
		struct peer_seen ps = { 0 };
		struct srv *s = srv_start(&f, "pidfd.sock", 0x79, 0x1009, ANSWER, NULL);
		s->o.caps = &caps;
		s->o.peer_check = record_peer;
		s->seen = &ps;
		srv_run(s);
		int fd = raw_connect(s);
		struct ctl_msg hello = { .kind = CTL_HELLO };
		assert_true(send_frame(fd, &hello));
		char buf[1024];
		struct pollfd p = { .fd = fd, .events = POLLIN };
		assert_int_equal(poll(&p, 1, 2000), 1); /* HelloAck */
		assert_true(read(fd, buf, sizeof(buf)) > 0);
		close(fd);
		srv_stop(s);
		assert_int_equal(ps.calls, 1);
		assert_int_equal(ps.pid, getpid());
		assert_int_equal(ps.had_pidfd, !forced && caps.peer_pidfd ? 1 : 0);
		if (!forced)
			print_message("peer_pidfd available: %d\n", ps.had_pidfd);
	}
	fix_free(&f);
}

static void test_endpoints(void **state)
{
	struct endpoint e;
	assert_int_equal(endpoint_parse("unix:/run/tether/proc.sock", &e), 0);
	assert_int_equal(e.kind, ENDPOINT_UNIX);
	assert_int_equal(endpoint_parse("unix:@tether-abstract", &e), 0);
	assert_int_equal(endpoint_parse("tcp:127.0.0.1:7000", &e), 0);
	assert_int_equal(e.kind, ENDPOINT_TCP);
	assert_int_equal(endpoint_parse("tcp:[::1]:7000", &e), 0);
	assert_int_equal(endpoint_parse("tcp:localhost:7000", &e), 0);
	assert_int_equal(endpoint_parse("vsock:2:5000", &e), 0);
	assert_int_equal(e.kind, ENDPOINT_VSOCK);
	assert_int_equal(endpoint_parse("vsock:any:5000", &e), 0);
	assert_int_equal(endpoint_parse("vsock:host:1", &e), 0);
	const char *bad[] = { "", "unix:", "unix:@", "tcp:", "tcp:1.2.3.4", "tcp:1.2.3.4:0",
			      "tcp:1.2.3.4:65536", "tcp:example.com:80", "tcp:[::1:80", "tcp::80",
			      "vsock:", "vsock:2", "vsock:x:1", "vsock:2:", "vsock:2:99999999999",
			      "udp:1.2.3.4:5", "tcp:1.2.3.4:80x" };
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		assert_int_not_equal(endpoint_parse(bad[i], &e), 0);
	char longp[200];
	memset(longp, 'a', sizeof(longp));
	memcpy(longp, "unix:", 5);
	longp[150] = '\0';
	assert_int_equal(endpoint_parse(longp, &e), -ENAMETOOLONG);
}

static void test_tcp_loopback(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct srv *s = srv_start(&f, "unused", 0x78, 0x1008, ANSWER, NULL);
	/* a port the kernel just found free (a small race with other users of
	 * loopback; retried) */
	for (int attempt = 0;; attempt++) {
		int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t al = sizeof(a);
		assert_int_equal(bind(probe, (struct sockaddr *)&a, sizeof(a)), 0);
		assert_int_equal(getsockname(probe, (struct sockaddr *)&a, &al), 0);
		close(probe);
		snprintf(s->ep, sizeof(s->ep), "tcp:127.0.0.1:%u", ntohs(a.sin_port));
		pthread_create(&s->th, NULL, srv_main, s);
		sem_wait(&s->ready);
		if (s->rc == 0)
			break;
		pthread_join(s->th, NULL);
		assert_true(s->rc == -EADDRINUSE && attempt < 5);
	}
	struct net n;
	net_init(&n, &f);
	client_start(&n, s->ep, 2000);
	struct waiter w = { 0 };
	struct proto_tuple t = flow(40500);
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_OK);
	client_stop(&n);
	net_fini(&n);
	srv_stop(s);
	fix_free(&f);
}

/* A proc side that accepts but never answers Hello: requests waiting for
 * the handshake fail at the connect timeout, never hang. */
static void test_silent_server(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	char path[128], ep[140];
	snprintf(path, sizeof(path), "%s/silent.sock", sockdir);
	snprintf(ep, sizeof(ep), "unix:%s", path);
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	strcpy(un.sun_path, path);
	unlink(path);
	assert_int_equal(bind(lfd, (struct sockaddr *)&un, sizeof(un)), 0);
	assert_int_equal(listen(lfd, 8), 0); /* the kernel completes connects; nobody reads */
	struct net n;
	net_init(&n, &f);
	struct proto_client_opts o = { .endpoint = ep, .verifier = n.v, .request_timeout_ms = 5000,
				       .connect_timeout_ms = 300, .backoff_min_ms = 50, .backoff_max_ms = 100,
				       .userdata = &n };
	assert_int_equal(proto_client_start(&n.loop, &o, &n.c), 0);
	struct waiter w = { 0 };
	struct proto_tuple t = flow(40600);
	uint64_t t0 = uv_now(&n.loop);
	assert_int_equal(proto_client_request(n.c, &t, 0, got, &w, NULL), 0);
	assert_true(run_until(&n.loop, &w.done, 1, 3000));
	assert_int_equal(w.reason, REASON_IDENTITY_UNAVAILABLE);
	assert_true(uv_now(&n.loop) - t0 < 2000);
	assert_false(proto_client_ready(n.c));
	client_stop(&n);
	net_fini(&n);
	close(lfd);
	unlink(path);
	fix_free(&f);
}

/* A proc side that acks Hello with a valid certificate and closes at once,
 * again and again: the client backs off (a channel that did not stay up
 * PROTO_CLIENT_STABLE_MS is a failed attempt) instead of redialling in a
 * tight loop. Before, it reconnected ~7000 times in 2 s. */
struct flapper {
	int lfd;
	const struct signed_cert *cert;
	int accepts;
	volatile int stop;
};

static void *flapper_main(void *arg)
{
	struct flapper *fl = arg;
	while (!fl->stop) {
		struct pollfd p = { .fd = fl->lfd, .events = POLLIN };
		if (poll(&p, 1, 50) <= 0)
			continue;
		int fd = accept4(fl->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		fl->accepts++;
		uint8_t buf[4096];
		struct pollfd q = { .fd = fd, .events = POLLIN };
		if (poll(&q, 1, 1000) > 0 && read(fd, buf, sizeof(buf)) > 0) { /* the Hello */
			struct ctl_msg ack = { .kind = CTL_HELLO_ACK };
			ack.u.hello_ack.cert = *fl->cert;
			send_frame(fd, &ack);
		}
		close(fd);
	}
	return NULL;
}

static void test_flapping_server(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	char path[128], ep[140];
	snprintf(path, sizeof(path), "%s/flap.sock", sockdir);
	snprintf(ep, sizeof(ep), "unix:%s", path);
	struct sign_key *inst;
	struct signed_cert cert;
	assert_int_equal(fix_seeded_key(0x7b, &inst), 0);
	assert_int_equal(fix_cert(&f, f.prov, inst, now_real_ns(), 0x100b, &cert), 0);
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	strcpy(un.sun_path, path);
	unlink(path);
	assert_int_equal(bind(lfd, (struct sockaddr *)&un, sizeof(un)), 0);
	assert_int_equal(listen(lfd, 64), 0);
	struct flapper fl = { .lfd = lfd, .cert = &cert };
	pthread_t th;
	pthread_create(&th, NULL, flapper_main, &fl);
	struct net n;
	net_init(&n, &f);
	struct proto_client_opts o = { .endpoint = ep, .verifier = n.v, .request_timeout_ms = 2000,
				       .backoff_min_ms = 50, .backoff_max_ms = 400, .on_anchor = on_anchor,
				       .on_state = on_state, .userdata = &n };
	assert_int_equal(proto_client_start(&n.loop, &o, &n.c), 0);
	int never = 0;
	run_until(&n.loop, &never, 1, 2000);
	/* 50 + 100 + 200 + 400 + 400 ... ms (+25 % jitter): about 6 in 2 s */
	print_message("flapping proc side: %d connections, %d ready in 2 s\n", fl.accepts, n.ready);
	assert_true(n.ready >= 2); /* it did come back */
	assert_true(fl.accepts <= 12);
	client_stop(&n);
	net_fini(&n);
	fl.stop = 1;
	pthread_join(th, NULL);
	close(lfd);
	unlink(path);
	signed_cert_clear(&cert);
	sign_key_free(inst);
	fix_free(&f);
}

static void noop_close(struct proto_conn *c, int err, void *ud) { *(int *)ud = 1; }

/* Frames sent back to back (the later ones coalescing behind the first
 * write) and a close right after: the peer still receives all of them. */
static void test_send_then_close(void **state)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	uv_loop_t loop;
	uv_loop_init(&loop);
	int closed = 0;
	struct proto_conn_cbs cbs = { .on_close = noop_close };
	struct proto_conn *c;
	assert_int_equal(proto_conn_open(&loop, sv[0], NULL, &cbs, &closed, &c), 0);
	for (int i = 1; i <= 3; i++) {
		struct ctl_msg m = { .kind = CTL_EXEC_SIGNAL };
		m.u.exec_signal.signo = i;
		assert_int_equal(proto_conn_send(c, &m), 0);
	}
	proto_conn_close(c, 0);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(closed, 1);
	assert_int_equal(uv_loop_close(&loop), 0);
	struct frame_decoder d;
	frame_decoder_init(&d, 0);
	int frames = 0;
	uint8_t buf[4096];
	ssize_t k;
	while ((k = read(sv[1], buf, sizeof(buf))) > 0)
		assert_int_equal(frame_decoder_feed(&d, buf, (size_t)k, count_frame, &frames), 0);
	assert_int_equal(frames, 3);
	frame_decoder_free(&d);
	close(sv[1]);
}

static int group_setup(void **state)
{
	strcpy(sockdir, "/tmp/tether-proto-XXXXXX");
	return mkdtemp(sockdir) ? 0 : -1;
}

static int group_teardown(void **state)
{
	const char *names[] = { "rt.sock", "err.sock", "drop.sock", "a.sock", "b.sock", "imp.sock",
				"hostile.sock", "uid.sock", "pidfd.sock", "evict.sock", "renew.sock", "flap.sock", "refuse.sock" };
	char p[128];
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		snprintf(p, sizeof(p), "%s/%s", sockdir, names[i]);
		unlink(p);
	}
	rmdir(sockdir);
	return 0;
}

/* Protocol 1.2 end to end: MAC'd answers with the signature after them; a
 * net side that offers no MAC key and a 1.1 proc side get signed answers;
 * a 1.2 proc side holding its key that drops the MAC key is refused; a
 * signature that does not match the MAC'd bytes closes the channel. */
static void mac_case(struct fixture *f, const char *name, enum srv_mode mode, uint32_t srv_minor, bool srv_no_mac,
		     bool cli_no_mac, struct net *n, struct waiter *w)
{
	struct srv *s = srv_start(f, name, 0x71, 0x1002, mode, NULL);
	s->o.instance = s->inst;
	s->o.version_minor = srv_minor;
	s->o.no_mac = srv_no_mac;
	srv_run(s);
	net_init(n, f);
	client_start_mac(n, s->ep, 2000, cli_no_mac);
	struct proto_tuple t = flow(41001);
	assert_int_equal(proto_client_request(n->c, &t, 9, got, w, NULL), 0);
	assert_true(run_until(&n->loop, &w->done, 1, 5000));
	if (w->reason == REASON_OK && w->by_mac)
		assert_true(run_until(&n->loop, &n->signatures, 1, 5000));
	client_stop(n);
	net_fini(n);
	srv_stop(s);
}

static void test_mac_negotiation(void **state)
{
	struct fixture f;
	assert_int_equal(fix_init(&f), 0);
	struct net n;
	struct waiter w = { 0 };
	/* both 1.2: MAC'd, signature follows and verifies offline */
	mac_case(&f, "mac.sock", ANSWER, 0, false, false, &n, &w);
	assert_int_equal(w.reason, REASON_OK);
	assert_string_equal(w.path, "/usr/bin/curl");
	assert_true(w.by_mac);
	assert_false(w.had_signed);
	assert_int_equal(n.signatures, 1);
	assert_int_equal(n.sig_reason, REASON_OK);
	assert_true(n.sig_had_sc);
	assert_int_equal(n.sig_id, w.id);
	/* the net side offers no MAC key: signed */
	memset(&w, 0, sizeof(w));
	mac_case(&f, "nomac.sock", ANSWER, 0, false, true, &n, &w);
	assert_int_equal(w.reason, REASON_OK);
	assert_false(w.by_mac);
	assert_true(w.had_signed);
	assert_int_equal(n.signatures, 0);
	/* a 1.1 proc side: signed, still works */
	memset(&w, 0, sizeof(w));
	mac_case(&f, "old.sock", ANSWER, 1, false, false, &n, &w);
	assert_int_equal(w.reason, REASON_OK);
	assert_false(w.by_mac);
	assert_true(w.had_signed);
	assert_int_equal(n.refused, 0);
	/* a 1.2 proc side with its instance key that answers without a MAC
	 * key: downgrade refused */
	memset(&w, 0, sizeof(w));
	mac_case(&f, "down.sock", ANSWER, 0, true, false, &n, &w);
	assert_int_not_equal(w.reason, REASON_OK);
	assert_true(n.refused >= 1);
	assert_int_equal(n.refused_why, REASON_PROTOCOL_ERROR);
	assert_int_equal(n.ready, 0);
	/* the signature after a MAC'd answer is by another key */
	memset(&w, 0, sizeof(w));
	mac_case(&f, "badsig.sock", BAD_SIG, 0, false, false, &n, &w);
	assert_int_equal(w.reason, REASON_OK);
	assert_true(w.by_mac);
	assert_int_equal(n.signatures, 1);
	assert_int_equal(n.sig_reason, REASON_CONTEXT_SIGNATURE_INVALID);
	assert_false(n.sig_had_sc);
	fix_free(&f);
}

int main(void)
{
	/* libuv writes with write(2): a peer that closed first must give
	 * EPIPE, not kill the process (daemons ignore SIGPIPE too) */
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_endpoints),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_mac_negotiation),
		cmocka_unit_test(test_errors_and_timeouts),
		cmocka_unit_test(test_drop_and_reconnect),
		cmocka_unit_test(test_anchor_replaced),
		cmocka_unit_test(test_impostor_certificate),
		cmocka_unit_test(test_hostile_peers),
		cmocka_unit_test(test_eviction),
		cmocka_unit_test(test_refused_do_not_count),
		cmocka_unit_test(test_renewal_on_channel),
		cmocka_unit_test(test_clock_probes),
		cmocka_unit_test(test_peer_uid_refused),
		cmocka_unit_test(test_peer_pidfd_fallback),
		cmocka_unit_test(test_tcp_loopback),
		cmocka_unit_test(test_silent_server),
		cmocka_unit_test(test_flapping_server),
		cmocka_unit_test(test_send_then_close),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
