#include "proto/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "proto/conn.h"

struct server_conn {
	struct proto_server *server; /* NULL once the conn is closed */
	struct proto_conn *conn;
	struct server_conn *next, *prev;
	int refs; /* 1 while the conn lives + 1 per outstanding request */
	size_t inflight;
	bool hello_done;
	bool mac;                             /* 1.2: a MAC key was agreed at the Hello */
	uint8_t mac_key[PROTO_MAC_KEY_LEN];
	bool push;                            /* 1.3: the Hello asked for pushes (and a MAC key was agreed) */
	uint8_t push_seed[PROTO_PUSH_SEED_LEN];
	uint64_t last_active; /* uv_hrtime() at accept, at each frame read or answered */
};

struct proto_server {
	uv_loop_t *loop;
	uv_pipe_t listener;
	struct proto_server_opts opts;
	struct signed_cert cert;
	struct server_conn *conns;
	size_t n_conns;
	uint64_t evictions;
	uint64_t next_push;
	bool stopping;
	bool listener_closed;
	void (*done)(void *);
	void *done_ud;
	struct log_ratelimit peer_log; /* see peer_log() */
};

/* Every line about a peer — refused, dropped for a protocol violation or
 * a missed deadline, closed with an error — is one a hostile peer can
 * cause at will, once per connection. stderr is often a pipe: once its
 * reader falls behind, a line per connection blocked the loop in write(2)
 * and with it the whole identity service (test_proto_hostile_procsup
 * case 6: stuck after ~70 garbage connections with a 4 KiB pipe). So at
 * most one such line per 10 s, with the count held back. */
#define peer_log(s, level, fmt, ...)                                                              \
	do {                                                                                       \
		uint64_t held_;                                                                    \
		if (log_ratelimit_ok(&(s)->peer_log, uv_now((s)->loop), 10000, &held_))            \
			level(fmt " (%llu such lines held back)", ##__VA_ARGS__, (unsigned long long)held_); \
	} while (0)

static void sconn_unref(struct server_conn *sc)
{
	if (--sc->refs == 0) {
		sodium_memzero(sc->mac_key, sizeof(sc->mac_key));
		sodium_memzero(sc->push_seed, sizeof(sc->push_seed));
		free(sc);
	}
}

static void maybe_finish(struct proto_server *s)
{
	if (!s->stopping || !s->listener_closed || s->n_conns > 0)
		return;
	void (*done)(void *) = s->done;
	void *ud = s->done_ud;
	signed_cert_clear(&s->cert);
	free(s);
	if (done)
		done(ud);
}

static void on_conn_close(struct proto_conn *c, int err, void *ud)
{
	struct server_conn *sc = ud;
	struct proto_server *s = sc->server;
	if (err && err != -ECANCELED)
		peer_log(s, log_info, "control connection closed: %s", strerror(-err > 0 && -err < 4096 ? -err : EIO));
	if (sc->prev)
		sc->prev->next = sc->next;
	else
		s->conns = sc->next;
	if (sc->next)
		sc->next->prev = sc->prev;
	s->n_conns--;
	sc->server = NULL;
	sc->conn = NULL;
	sconn_unref(sc);
	maybe_finish(s);
}

static void on_conn_msg(struct proto_conn *c, struct ctl_msg *m, void *ud)
{
	struct server_conn *sc = ud;
	struct proto_server *s = sc->server;
	sc->last_active = uv_hrtime();
	if (!sc->hello_done) {
		if (m->kind != CTL_HELLO) {
			peer_log(s, log_warn, "control peer sent %s before Hello: closing", ctl_kind_name(m->kind));
			proto_conn_close(c, -EPROTO);
			return;
		}
		sc->hello_done = true;
		struct ctl_msg ack = { .kind = CTL_HELLO_ACK };
		ack.u.hello_ack.cert = s->cert;
		if (m->u.hello.has_clock_nonce && s->opts.instance) {
			clock_sample_sign(s->opts.instance, m->u.hello.clock_nonce, 0, &ack.u.hello_ack.clock);
			ack.u.hello_ack.has_clock = true;
		}
		/* 1.2: a per-channel MAC key, vouched for by the instance key. */
		ack.version_minor = s->opts.version_minor;
		if (m->u.hello.has_kx && s->opts.instance && !s->opts.no_mac &&
		    (!s->opts.version_minor || s->opts.version_minor >= 2)) {
			struct mac_kx kx;
			if (mac_kx_generate(&kx) == 0 && mac_key_proc(&kx, m->u.hello.kx_public, sc->mac_key) == 0) {
				memcpy(ack.u.hello_ack.kx_public, kx.pk, PROTO_KX_PUBLIC_LEN);
				mac_kx_sign(s->opts.instance, m->u.hello.kx_public, kx.pk, ack.u.hello_ack.kx_signature);
				ack.u.hello_ack.has_kx = true;
				sc->mac = true;
			}
			mac_kx_clear(&kx);
		}
		/* 1.3: pushes only on a MAC channel, and only when asked. */
		if (sc->mac && m->u.hello.has_push_seed && !s->opts.no_push &&
		    (!s->opts.version_minor || s->opts.version_minor >= 3)) {
			memcpy(sc->push_seed, m->u.hello.push_seed, PROTO_PUSH_SEED_LEN);
			sc->push = true;
			ack.u.hello_ack.push = true;
		}
		proto_conn_send(c, &ack);
		return;
	}
	if (m->kind == CTL_CLOCK_REQUEST && s->opts.instance) {
		struct ctl_msg a = { .kind = CTL_CLOCK_RESPONSE };
		clock_sample_sign(s->opts.instance, m->u.clock_request.nonce, 0, &a.u.clock_response.clock);
		proto_conn_send(c, &a);
		return;
	}
	if (m->kind != CTL_IDENTITY_REQUEST) {
		peer_log(s, log_warn, "control peer sent unexpected %s: closing", ctl_kind_name(m->kind));
		proto_conn_close(c, -EPROTO);
		return;
	}
	if (sc->inflight >= s->opts.max_inflight) {
		peer_log(s, log_warn, "control peer exceeded %zu outstanding requests: closing", s->opts.max_inflight);
		proto_conn_close(c, -ENOBUFS);
		return;
	}
	struct proto_request *req = calloc(1, sizeof(*req));
	if (!req) {
		proto_conn_close(c, -ENOMEM);
		return;
	}
	req->request_id = m->u.identity_request.request_id;
	memcpy(req->nonce, m->u.identity_request.nonce, PROTO_NONCE_LEN);
	req->tuple = m->u.identity_request.tuple;
	req->socket_cookie = m->u.identity_request.socket_cookie;
	req->conn = sc;
	sc->refs++;
	sc->inflight++;
	if (s->opts.on_identity)
		s->opts.on_identity(s, req, s->opts.userdata);
	else
		proto_request_fail(req, REASON_IDENTITY_UNAVAILABLE, "no identity service");
}

static bool peer_allowed(struct proto_server *s, int fd)
{
	struct proto_peer p;
	int r = proto_peer_get(fd, s->opts.caps, &p);
	if (r < 0) {
		peer_log(s, log_warn, "control peer credentials unavailable: %s", strerror(-r));
		return false;
	}
	bool ok = true;
	if (p.is_unix) {
		if (s->opts.check_uid && p.uid != s->opts.peer_uid) {
			peer_log(s, log_warn, "control peer pid %d uid %u refused (want uid %u)", (int)p.pid,
				 (unsigned)p.uid, (unsigned)s->opts.peer_uid);
			ok = false;
		} else if (s->opts.check_gid && p.gid != s->opts.peer_gid) {
			peer_log(s, log_warn, "control peer pid %d gid %u refused (want gid %u)", (int)p.pid,
				 (unsigned)p.gid, (unsigned)s->opts.peer_gid);
			ok = false;
		}
	}
	if (ok && s->opts.peer_check && !s->opts.peer_check(&p, s->opts.userdata)) {
		char who[INET6_ADDRSTRLEN + 16] = "";
		const struct sockaddr_storage *a = &p.addr;
		if (a->ss_family == AF_INET)
			inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, who, sizeof(who));
		else if (a->ss_family == AF_INET6)
			inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a)->sin6_addr, who, sizeof(who));
		else
			snprintf(who, sizeof(who), "pid %d", (int)p.pid);
		peer_log(s, log_warn, "control peer %s refused by peer check", who);
		ok = false;
	}
	if (p.pidfd >= 0)
		close(p.pidfd);
	return ok;
}

/* At the connection limit a new (allowed) peer takes the slot of one that
 * has nothing outstanding: one that has not said Hello yet, else the one
 * idle longest. Without it, 64 peers that say Hello and then wait held every
 * slot for as long as they liked, and the real net-supervisor, closed at
 * accept, could not anchor (test_proto_hostile_procsup case 1). A peer that
 * keeps a request outstanding on every connection is not displaced. */
static bool evict_one(struct proto_server *s, const struct server_conn *newcomer)
{
	struct server_conn *victim = NULL;
	for (struct server_conn *sc = s->conns; sc; sc = sc->next) {
		if (sc == newcomer || sc->inflight > 0 || !sc->conn || proto_conn_is_closing(sc->conn))
			continue;
		/* (the list is newest first: on a tie the older one) */
		if (!victim || (victim->hello_done && !sc->hello_done) ||
		    (victim->hello_done == sc->hello_done && sc->last_active <= victim->last_active))
			victim = sc;
	}
	if (!victim)
		return false;
	s->evictions++;
	peer_log(s, log_warn, "control connections at %zu: closing one %s for %llu ms to make room (%llu so far)",
		 s->opts.max_conns, victim->hello_done ? "idle" : "silent",
		 (unsigned long long)((uv_hrtime() - victim->last_active) / 1000000), (unsigned long long)s->evictions);
	proto_conn_close(victim->conn, -ECONNRESET);
	return true;
}

/* Connections that hold a slot: not closing (a refused, evicted or
 * finished one stays listed until its close callback, which may come only
 * after the whole accept batch), other than the newcomer. */
static size_t live_conns(const struct proto_server *s, const struct server_conn *newcomer)
{
	size_t n = 0;
	for (const struct server_conn *sc = s->conns; sc; sc = sc->next)
		if (sc != newcomer && sc->conn && !proto_conn_is_closing(sc->conn))
			n++;
	return n;
}

static void on_connection(uv_stream_t *listener, int status)
{
	struct proto_server *s = listener->data;
	if (status < 0 || s->stopping)
		return;
	struct server_conn *sc = calloc(1, sizeof(*sc));
	if (!sc)
		return;
	struct proto_conn_opts co = { .max_frame = s->opts.max_frame,
				      .read_deadline_ms = s->opts.read_deadline_ms };
	struct proto_conn_cbs cbs = { .on_msg = on_conn_msg, .on_close = on_conn_close };
	struct proto_conn *c;
	if (proto_conn_accept(listener, &co, &cbs, sc, &c) < 0) {
		free(sc);
		return;
	}
	sc->server = s;
	sc->conn = c;
	sc->refs = 1;
	sc->last_active = uv_hrtime();
	sc->next = s->conns;
	if (s->conns)
		s->conns->prev = sc;
	s->conns = sc;
	s->n_conns++;
	/* The peer check first: a refused peer must not displace anyone. */
	if (!peer_allowed(s, proto_conn_fd(c))) {
		proto_conn_close(c, -EPERM);
		return;
	}
	if (live_conns(s, sc) >= s->opts.max_conns && !evict_one(s, sc)) {
		peer_log(s, log_warn, "control connections at %zu, each with a request outstanding: refusing one",
			 s->opts.max_conns);
		proto_conn_close(c, -EMFILE);
		return;
	}
	proto_conn_expect(c); /* Hello within the deadline */
}

int proto_server_start(uv_loop_t *loop, const struct proto_server_opts *opts,
		       struct proto_server **out)
{
	if (!opts || !opts->endpoint || !opts->cert || !opts->cert->cert)
		return -EINVAL;
	struct endpoint ep;
	int r = endpoint_parse(opts->endpoint, &ep);
	if (r < 0)
		return r;
	struct proto_server *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->loop = loop;
	s->opts = *opts;
	if (!s->opts.max_conns)
		s->opts.max_conns = 64;
	if (!s->opts.max_inflight)
		s->opts.max_inflight = 4096;
	if (signed_cert_copy(&s->cert, opts->cert) < 0) {
		free(s);
		return -ENOMEM;
	}
	int fd = endpoint_listen(&ep, 64, opts->socket_mode ? opts->socket_mode : 0600);
	/* A unix path socket that one uid alone may use belongs to that uid
	 * (mode 0600 then lets it, and nobody else but root, connect). */
	const struct sockaddr_un *un = (const struct sockaddr_un *)&ep.addr;
	if (fd >= 0 && opts->check_uid && ep.kind == ENDPOINT_UNIX && un->sun_path[0] != '\0' &&
	    chown(un->sun_path, opts->peer_uid, (gid_t)-1) < 0) {
		int e = -errno;
		close(fd);
		fd = e;
	}
	if (fd < 0) {
		signed_cert_clear(&s->cert);
		free(s);
		return fd;
	}
	uv_pipe_init(loop, &s->listener, 0);
	s->listener.data = s;
	r = uv_pipe_open(&s->listener, fd);
	if (r < 0)
		close(fd); /* not owned by the handle */
	else
		r = uv_listen((uv_stream_t *)&s->listener, 64, on_connection);
	if (r < 0) {
		proto_server_stop(s, NULL, NULL); /* freed from the loop */
		return r;
	}
	*out = s;
	return 0;
}

static void listener_closed(uv_handle_t *h)
{
	struct proto_server *s = h->data;
	s->listener_closed = true;
	maybe_finish(s);
}

void proto_server_stop(struct proto_server *s, void (*done)(void *), void *ud)
{
	s->stopping = true;
	s->done = done;
	s->done_ud = ud;
	for (struct server_conn *sc = s->conns; sc; sc = sc->next)
		proto_conn_close(sc->conn, -ECANCELED);
	if (!uv_is_closing((uv_handle_t *)&s->listener))
		uv_close((uv_handle_t *)&s->listener, listener_closed);
}

size_t proto_server_conn_count(const struct proto_server *s) { return s->n_conns; }

uint64_t proto_server_evictions(const struct proto_server *s) { return s->evictions; }

int proto_server_set_cert(struct proto_server *s, const struct signed_cert *cert)
{
	struct signed_cert copy;
	if (!cert || !cert->cert || signed_cert_copy(&copy, cert) < 0)
		return -ENOMEM;
	signed_cert_clear(&s->cert);
	s->cert = copy;
	int n = 0;
	struct ctl_msg ack = { .kind = CTL_HELLO_ACK };
	ack.u.hello_ack.cert = s->cert;
	for (struct server_conn *sc = s->conns; sc; sc = sc->next)
		if (sc->hello_done && sc->conn && !proto_conn_is_closing(sc->conn) &&
		    proto_conn_send(sc->conn, &ack) == 0)
			n++;
	return n;
}

static int answer(struct proto_request *req, const struct ctl_msg *m)
{
	struct server_conn *sc = req->conn;
	int r = -ENOTCONN;
	if (sc->conn && !proto_conn_is_closing(sc->conn)) {
		r = proto_conn_send(sc->conn, m);
		sc->last_active = uv_hrtime();
	}
	sc->inflight--;
	sconn_unref(sc);
	free(req);
	return r;
}

int proto_request_reply(struct proto_request *req, const struct signed_context *sc)
{
	struct ctl_msg m = { .kind = CTL_IDENTITY_RESPONSE };
	m.u.identity_response.request_id = req->request_id;
	m.u.identity_response.ok = true;
	m.u.identity_response.context = *sc;
	return answer(req, &m);
}

bool proto_request_wants_mac(const struct proto_request *req) { return req->conn->mac; }

int proto_request_reply_mac(struct proto_request *req, const uint8_t *context, size_t len,
			    const uint8_t key_id[PROTO_KEY_ID_LEN])
{
	struct server_conn *sc = req->conn;
	if (!sc->mac || !context || !len || req->mac_answered)
		return -EINVAL;
	struct ctl_msg m = { .kind = CTL_IDENTITY_RESPONSE };
	m.u.identity_response.request_id = req->request_id;
	m.u.identity_response.ok = true;
	m.u.identity_response.mac = true;
	struct mac_context *mc = &m.u.identity_response.mac_context;
	mc->context = (uint8_t *)context;
	mc->context_len = len;
	memcpy(mc->key_id, key_id, PROTO_KEY_ID_LEN);
	context_mac(sc->mac_key, context, len, mc->mac);
	int r = -ENOTCONN;
	if (sc->conn && !proto_conn_is_closing(sc->conn)) {
		r = proto_conn_send(sc->conn, &m);
		sc->last_active = uv_hrtime();
	}
	req->mac_answered = true;
	sc->inflight--; /* the answer is out; the signature is not a request */
	return r;
}

int proto_request_signature(struct proto_request *req, const struct signed_context *signed_ctx)
{
	struct server_conn *sc = req->conn;
	int r = -ENOTCONN;
	if (signed_ctx && sc->conn && !proto_conn_is_closing(sc->conn)) {
		struct ctl_msg m = { .kind = CTL_CONTEXT_SIGNATURE };
		m.u.context_signature.request_id = req->request_id;
		m.u.context_signature.context = *signed_ctx;
		r = proto_conn_send(sc->conn, &m);
	}
	if (!req->mac_answered)
		sc->inflight--;
	sconn_unref(sc);
	free(req);
	return r;
}

int proto_request_fail(struct proto_request *req, enum reason reason, const char *message)
{
	struct ctl_msg m = { .kind = CTL_IDENTITY_RESPONSE };
	m.u.identity_response.request_id = req->request_id;
	m.u.identity_response.reason = reason == REASON_OK ? REASON_INTERNAL_ERROR : reason;
	if (message)
		strscpy(m.u.identity_response.message, message, sizeof(m.u.identity_response.message));
	return answer(req, &m);
}

size_t proto_server_push_targets(struct proto_server *s, struct proto_push_target *out, size_t max)
{
	size_t n = 0;
	for (struct server_conn *sc = s->conns; sc && n < max; sc = sc->next) {
		if (!sc->push || !sc->conn || proto_conn_is_closing(sc->conn))
			continue;
		struct proto_push_target *t = &out[n++];
		t->conn = sc;
		sc->refs++;
		t->push_id = PROTO_PUSH_ID_BIT | ++s->next_push;
		memcpy(t->seed, sc->push_seed, PROTO_PUSH_SEED_LEN);
		memcpy(t->mac_key, sc->mac_key, PROTO_MAC_KEY_LEN);
	}
	return n;
}

bool proto_server_push_wanted(const struct proto_server *s)
{
	for (const struct server_conn *sc = s->conns; sc; sc = sc->next)
		if (sc->push && sc->conn && !proto_conn_is_closing(sc->conn))
			return true;
	return false;
}

int proto_push_send(struct proto_push_target *t, const uint8_t *context, size_t len, const uint8_t mac[PROTO_MAC_LEN],
		    const uint8_t key_id[PROTO_KEY_ID_LEN])
{
	struct server_conn *sc = t->conn;
	if (!sc || !sc->conn || proto_conn_is_closing(sc->conn))
		return -ENOTCONN;
	struct ctl_msg m = { .kind = CTL_IDENTITY_PUSH };
	m.u.identity_push.push_id = t->push_id;
	struct mac_context *mc = &m.u.identity_push.mac_context;
	mc->context = (uint8_t *)context;
	mc->context_len = len;
	memcpy(mc->mac, mac, PROTO_MAC_LEN);
	memcpy(mc->key_id, key_id, PROTO_KEY_ID_LEN);
	sc->last_active = uv_hrtime();
	return proto_conn_send(sc->conn, &m);
}

int proto_push_signature(struct proto_push_target *t, const struct signed_context *signed_ctx)
{
	struct server_conn *sc = t->conn;
	if (!sc || !signed_ctx || !sc->conn || proto_conn_is_closing(sc->conn))
		return -ENOTCONN;
	struct ctl_msg m = { .kind = CTL_CONTEXT_SIGNATURE };
	m.u.context_signature.request_id = t->push_id;
	m.u.context_signature.context = *signed_ctx;
	return proto_conn_send(sc->conn, &m);
}

void proto_push_target_release(struct proto_push_target *t)
{
	if (t->conn)
		sconn_unref(t->conn);
	t->conn = NULL;
	sodium_memzero(t->mac_key, sizeof(t->mac_key));
	sodium_memzero(t->seed, sizeof(t->seed));
}
