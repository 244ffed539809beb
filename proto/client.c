#include "proto/client.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "proto/conn.h"
#include "proto/endpoint.h"

enum client_state { ST_BACKOFF, ST_CONNECTING, ST_HANDSHAKE, ST_READY, ST_STOPPED };

struct request {
	struct request *next, *prev;
	uint64_t id;
	uint8_t nonce[PROTO_NONCE_LEN];
	struct proto_tuple tuple;
	uint64_t cookie;
	uint64_t deadline; /* uv_now() ms */
	bool sent;
	enum reason fail; /* REASON_OK, or a failure to deliver when the timer fires */
	proto_identity_cb cb;
	void *ud;
};

/* A MAC'd answer whose signature is still to come (1.2). */
struct sigwait {
	struct sigwait *next;
	uint64_t id;
	uint64_t deadline; /* uv_now() ms */
	uint8_t hash[crypto_generichash_BYTES]; /* of the MAC'd context bytes */
};

#define SIGWAIT_MS 10000

struct proto_client {
	uv_loop_t *loop;
	struct proto_client_opts opts;
	struct endpoint ep;
	enum client_state state;
	uv_timer_t state_timer; /* backoff wait, or connect+handshake timeout */
	uv_timer_t req_timer;   /* earliest request deadline */
	uv_timer_t clock_timer; /* the next ClockRequest */
	uv_poll_t poll;         /* a non-blocking connect in progress */
	bool poll_open;
	int connect_fd;
	struct proto_conn *conn;
	uint64_t channel;
	uint8_t channel_key[PROTO_KEY_ID_LEN];
	uint64_t backoff_ms;
	uint64_t ready_at_ns; /* uv_hrtime() at READY */
	/* Clock samples: the nonce of the Hello or of the ClockRequest in
	 * flight, and our CLOCK_REALTIME when it went out. */
	uint8_t clock_nonce[PROTO_CLOCK_NONCE_LEN];
	uint64_t clock_sent_ns;
	bool peer_clock;    /* the peer answered the Hello's nonce (1.1) */
	bool probe_pending; /* a ClockRequest is unanswered */
	/* 1.2: the Hello's ephemeral kx key and the channel's MAC key. */
	struct mac_kx kx;
	bool sent_kx, mac;
	uint8_t mac_key[PROTO_MAC_KEY_LEN];
	/* 1.3: the Hello's push seed; push: the proc side agreed to push. */
	bool sent_push, push;
	uint8_t push_seed[PROTO_PUSH_SEED_LEN];
	struct sigwait *sig_head, *sig_tail;
	size_t n_sig;
	struct request *head, *tail;
	size_t n_reqs;
	uint64_t next_id;
	int open_handles;
	void (*done)(void *);
	void *done_ud;
};

static void connect_now(struct proto_client *c);

static void req_unlink(struct proto_client *c, struct request *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		c->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		c->tail = r->prev;
	r->next = r->prev = NULL;
	c->n_reqs--;
}

static void req_append(struct proto_client *c, struct request *r)
{
	r->prev = c->tail;
	r->next = NULL;
	if (c->tail)
		c->tail->next = r;
	else
		c->head = r;
	c->tail = r;
	c->n_reqs++;
}

/* Unlinked request -> callback -> free. */
static void req_finish_mac(struct proto_client *c, struct request *r, enum reason reason,
			   const struct identity_context *ctx, const struct signed_context *sc, bool by_mac,
			   const char *message)
{
	struct proto_identity_result res = {
		.request_id = r->id,
		.reason = reason,
		.ctx = ctx,
		.signed_context = sc,
		.by_mac = by_mac,
		.anchor_cert = c->state == ST_READY ? verifier_cert_for_key(c->opts.verifier, c->channel_key) : NULL,
		.message = message ? message : reason_word(reason),
	};
	if (r->cb)
		r->cb(&res, r->ud);
	free(r);
}

static void req_finish(struct proto_client *c, struct request *r, enum reason reason,
		       const struct identity_context *ctx, const struct signed_context *sc,
		       const char *message)
{
	req_finish_mac(c, r, reason, ctx, sc, false, message);
}

/* Signatures that will not come: tell the owner (why), oldest first. */
static void sig_drop(struct proto_client *c, bool all, enum reason why)
{
	uint64_t now = uv_now(c->loop);
	while (c->sig_head && (all || c->sig_head->deadline <= now || c->n_sig > c->opts.max_inflight)) {
		struct sigwait *w = c->sig_head;
		c->sig_head = w->next;
		if (!c->sig_head)
			c->sig_tail = NULL;
		c->n_sig--;
		uint64_t id = w->id;
		free(w);
		if (c->opts.on_signature && c->state != ST_STOPPED)
			c->opts.on_signature(c, id, all ? why : REASON_IDENTITY_TIMEOUT, NULL, NULL, c->opts.userdata);
	}
}

static void sig_expect(struct proto_client *c, uint64_t id, const uint8_t *context, size_t len)
{
	struct sigwait *w = calloc(1, sizeof(*w));
	if (w) {
		w->id = id;
		w->deadline = uv_now(c->loop) + SIGWAIT_MS;
		crypto_generichash(w->hash, sizeof(w->hash), context, len, NULL, 0);
		if (c->sig_tail)
			c->sig_tail->next = w;
		else
			c->sig_head = w;
		c->sig_tail = w;
		c->n_sig++;
	} else if (c->opts.on_signature) {
		c->opts.on_signature(c, id, REASON_INTERNAL_ERROR, NULL, NULL, c->opts.userdata);
	}
	sig_drop(c, false, REASON_IDENTITY_TIMEOUT);
}

/* A ContextSignature: the Ed25519 signature over the bytes a MAC'd answer
 * carried, for the audit. It must be over exactly those bytes by the
 * channel's instance key id (and, with check_signatures, verify); anything
 * else closes the channel. */
static void handle_signature(struct proto_client *c, struct proto_conn *conn, struct ctl_msg *m)
{
	const struct signed_context *sc = &m->u.context_signature.context;
	struct sigwait **pp = &c->sig_head, *prev = NULL;
	while (*pp && (*pp)->id != m->u.context_signature.request_id) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	struct sigwait *w = *pp;
	if (!w)
		return; /* waited too long for it, already reported */
	*pp = w->next;
	if (c->sig_tail == w)
		c->sig_tail = prev;
	c->n_sig--;
	uint8_t h[crypto_generichash_BYTES];
	crypto_generichash(h, sizeof(h), sc->context, sc->context_len, NULL, 0);
	enum reason why = REASON_OK;
	struct identity_context *ctx = NULL;
	if (sodium_memcmp(h, w->hash, sizeof(h)) != 0 || memcmp(sc->key_id, c->channel_key, PROTO_KEY_ID_LEN) != 0) {
		why = REASON_CONTEXT_SIGNATURE_INVALID;
	} else if (c->opts.check_signatures) {
		struct verify_expect ex = { .instance_key_id = c->channel_key, .offline = true };
		why = verifier_check_context(c->opts.verifier, sc, &ex, &ctx);
		context_free(ctx);
	}
	uint64_t id = w->id;
	free(w);
	if (c->opts.on_signature)
		c->opts.on_signature(c, id, why, why == REASON_OK ? sc : NULL,
				     verifier_cert_for_key(c->opts.verifier, c->channel_key), c->opts.userdata);
	if (why != REASON_OK) {
		log_warn("%s: the signature after MAC'd answer %llu is not good (%s): closing", c->ep.text,
			 (unsigned long long)id, reason_word(why));
		proto_conn_close(conn, -EPROTO);
	}
}

/* Fail a set of requests; callbacks may add or cancel others meanwhile. */
static void fail_where(struct proto_client *c, bool (*pred)(const struct request *, uint64_t), uint64_t arg)
{
	struct request *done = NULL;
	for (struct request *r = c->head, *n; r; r = n) {
		n = r->next;
		if (!pred(r, arg))
			continue;
		req_unlink(c, r);
		r->next = done;
		done = r;
	}
	/* oldest first */
	struct request *rev = NULL;
	while (done) {
		struct request *n = done->next;
		done->next = rev;
		rev = done;
		done = n;
	}
	while (rev) {
		struct request *n = rev->next;
		enum reason why = rev->fail != REASON_OK ? rev->fail
			: (arg == UINT64_MAX ? REASON_IDENTITY_UNAVAILABLE : REASON_IDENTITY_TIMEOUT);
		const char *msg = why == REASON_IDENTITY_TIMEOUT ? "no answer from the proc side in time"
			: "identity channel unavailable";
		req_finish(c, rev, why, NULL, NULL, msg);
		rev = n;
	}
}

static bool pred_all(const struct request *r, uint64_t arg) { return true; }
static bool pred_due(const struct request *r, uint64_t now) { return r->deadline <= now; }

static void arm_req_timer(struct proto_client *c);

static void req_timer_cb(uv_timer_t *t)
{
	struct proto_client *c = t->data;
	fail_where(c, pred_due, uv_now(c->loop));
	arm_req_timer(c);
}

static void arm_req_timer(struct proto_client *c)
{
	if (c->state == ST_STOPPED)
		return;
	if (!c->head) {
		uv_timer_stop(&c->req_timer);
		return;
	}
	uint64_t min = UINT64_MAX;
	for (struct request *r = c->head; r; r = r->next)
		if (r->deadline < min)
			min = r->deadline;
	uint64_t now = uv_now(c->loop);
	uv_timer_start(&c->req_timer, req_timer_cb, min > now ? min - now : 0, 0);
}

static void fail_all(struct proto_client *c)
{
	fail_where(c, pred_all, UINT64_MAX);
	arm_req_timer(c);
}

static void set_state_down(struct proto_client *c, enum reason why)
{
	bool was_ready = c->state == ST_READY;
	sig_drop(c, true, REASON_CONTROL_CHANNEL_LOST);
	c->mac = c->sent_kx = false;
	sodium_memzero(c->mac_key, sizeof(c->mac_key));
	mac_kx_clear(&c->kx);
	c->peer_clock = false;
	c->probe_pending = false;
	if (c->state != ST_STOPPED)
		uv_timer_stop(&c->clock_timer);
	if (c->channel) {
		verifier_channel_closed(c->opts.verifier, c->channel);
		c->channel = 0;
	}
	if (c->state == ST_STOPPED)
		return;
	c->state = ST_BACKOFF;
	fail_all(c);
	if (was_ready && c->opts.on_state)
		c->opts.on_state(c, false, why, c->opts.userdata);
}

static void backoff_cb(uv_timer_t *t)
{
	struct proto_client *c = t->data;
	if (c->state == ST_BACKOFF)
		connect_now(c);
}

static void schedule_reconnect(struct proto_client *c)
{
	if (c->state == ST_STOPPED)
		return;
	uint64_t wait = c->backoff_ms;
	wait += randombytes_uniform((uint32_t)(wait / 4 + 1));
	c->backoff_ms *= 2;
	if (c->backoff_ms > c->opts.backoff_max_ms)
		c->backoff_ms = c->opts.backoff_max_ms;
	uv_timer_start(&c->state_timer, backoff_cb, wait, 0);
}

static void send_request(struct proto_client *c, struct request *r)
{
	struct ctl_msg m = { .kind = CTL_IDENTITY_REQUEST };
	m.u.identity_request.request_id = r->id;
	memcpy(m.u.identity_request.nonce, r->nonce, PROTO_NONCE_LEN);
	m.u.identity_request.tuple = r->tuple;
	m.u.identity_request.socket_cookie = r->cookie;
	if (proto_conn_send(c->conn, &m) == 0)
		r->sent = true;
	/* A failed send closed the conn; on_close fails the request. */
}

static void send_clock_request(struct proto_client *c)
{
	if (c->state != ST_READY || !c->peer_clock || c->probe_pending || !c->conn ||
	    proto_conn_is_closing(c->conn))
		return;
	struct ctl_msg m = { .kind = CTL_CLOCK_REQUEST };
	randombytes_buf(c->clock_nonce, sizeof(c->clock_nonce));
	memcpy(m.u.clock_request.nonce, c->clock_nonce, PROTO_CLOCK_NONCE_LEN);
	c->clock_sent_ns = now_real_ns();
	if (proto_conn_send(c->conn, &m) == 0)
		c->probe_pending = true;
}

static void clock_timer_cb(uv_timer_t *t)
{
	struct proto_client *c = t->data;
	/* Also report signatures overdue on an idle channel (else only the
	 * next MAC'd answer or the channel's end would). */
	sig_drop(c, false, REASON_IDENTITY_TIMEOUT);
	send_clock_request(c);
}

static void handle_clock_response(struct proto_client *c, struct proto_conn *conn, struct ctl_msg *m)
{
	if (!c->probe_pending) {
		log_warn("%s: unsolicited ClockResponse from the proc side: closing", c->ep.text);
		proto_conn_close(conn, -EPROTO);
		return;
	}
	c->probe_pending = false;
	struct verifier_clock_in clk = { .sample = &m->u.clock_response.clock, .nonce = c->clock_nonce,
					 .sent_ns = c->clock_sent_ns, .recv_ns = now_real_ns() };
	enum reason why = verifier_clock_update(c->opts.verifier, c->channel, &clk);
	if (why == REASON_OK)
		return;
	if (why == REASON_CLOCK_SKEW) {
		struct verifier_clock_state st;
		verifier_clock(c->opts.verifier, &st);
		log_warn("%s: the proc side's clock is %+.3f s from ours, past the bound of %.0f s: clock_skew, closing",
			 c->ep.text, (double)st.skew_ns / 1e9, (double)st.max_skew_ns / 1e9);
		if (c->opts.on_refused)
			c->opts.on_refused(c, why, c->opts.userdata);
	} else {
		log_warn("%s: clock sample refused: %s: closing", c->ep.text, reason_word(why));
	}
	proto_conn_close(conn, -EACCES);
}

static void handle_response(struct proto_client *c, struct ctl_msg *m)
{
	struct request *r = c->head;
	while (r && !(r->sent && r->id == m->u.identity_response.request_id))
		r = r->next;
	if (!r)
		return; /* cancelled or timed out meanwhile */
	req_unlink(c, r);
	if (!m->u.identity_response.ok) {
		enum reason why = m->u.identity_response.reason;
		/* The proc side cannot allow anything by answering an error. */
		if (why == REASON_OK || why == REASON_ALLOWED || why == REASON_AUDIT_ONLY)
			why = REASON_PROTOCOL_ERROR;
		req_finish(c, r, why, NULL, NULL, m->u.identity_response.message);
		return;
	}
	struct verify_expect ex = { .nonce = r->nonce, .tuple = &r->tuple, .instance_key_id = c->channel_key };
	struct identity_context *ctx = NULL;
	enum reason why;
	if (m->u.identity_response.mac) {
		/* 1.2: authenticated by the channel's MAC key; the signature follows. */
		const struct mac_context *mc = &m->u.identity_response.mac_context;
		why = c->mac ? verifier_check_context_mac(c->opts.verifier, mc, c->mac_key, &ex, &ctx)
			     : REASON_PROTOCOL_ERROR;
		if (why == REASON_OK)
			sig_expect(c, r->id, mc->context, mc->context_len);
		req_finish_mac(c, r, why, ctx, NULL, true,
			       c->mac ? NULL : "a MAC'd answer on a channel without a MAC key");
	} else {
		why = verifier_check_context(c->opts.verifier, &m->u.identity_response.context, &ex, &ctx);
		req_finish(c, r, why, ctx, &m->u.identity_response.context, NULL);
	}
	context_free(ctx);
	/* A context outside its time window on a fresh nonce: the clocks may
	 * have moved since the last sample; measure again now. */
	if (why == REASON_CONTEXT_EXPIRED)
		send_clock_request(c);
}

/* 1.3: a pushed identity. Every check of a MAC'd answer, the nonce being
 * the one this channel's push seed gives this push id; the tuple is not
 * checked here: the owner keys the context by its tuple and only a flow
 * with exactly that tuple takes it. Refused pushes are only counted: the
 * flow then asks as before (never allowed on a push that did not verify). */
static void handle_push(struct proto_client *c, struct ctl_msg *m)
{
	uint8_t nonce[PROTO_NONCE_LEN];
	push_nonce(c->push_seed, m->u.identity_push.push_id, nonce);
	struct verify_expect ex = { .nonce = nonce, .instance_key_id = c->channel_key };
	struct identity_context *ctx = NULL;
	const struct mac_context *mc = &m->u.identity_push.mac_context;
	enum reason why = verifier_check_context_mac(c->opts.verifier, mc, c->mac_key, &ex, &ctx);
	if (why == REASON_OK && ctx->request_id != m->u.identity_push.push_id)
		why = REASON_CONTEXT_REPLAYED;
	if (why == REASON_OK)
		sig_expect(c, m->u.identity_push.push_id, mc->context, mc->context_len);
	struct proto_identity_result res = {
		.request_id = m->u.identity_push.push_id,
		.reason = why,
		.ctx = why == REASON_OK ? ctx : NULL,
		.by_mac = true,
		.anchor_cert = verifier_cert_for_key(c->opts.verifier, c->channel_key),
		.message = reason_word(why),
	};
	c->opts.on_push(c, &res, c->opts.userdata);
	context_free(ctx);
}

static void on_msg(struct proto_conn *conn, struct ctl_msg *m, void *ud)
{
	struct proto_client *c = ud;
	if (c->state == ST_HANDSHAKE && m->kind == CTL_HELLO_ACK) {
		struct anchor_event ev;
		struct verifier_clock_in clk = { .sample = m->u.hello_ack.has_clock ? &m->u.hello_ack.clock : NULL,
						 .nonce = c->clock_nonce, .sent_ns = c->clock_sent_ns,
						 .recv_ns = now_real_ns() };
		enum reason why = verifier_install_cert_clocked(c->opts.verifier, &m->u.hello_ack.cert, c->channel, 0,
								&clk, &ev);
		if (why == REASON_CLOCK_SKEW) {
			struct verifier_clock_state st;
			verifier_clock(c->opts.verifier, &st);
			log_warn("%s: the proc side's clock is %+.3f s from ours, past the bound of %.0f s: "
				 "clock_skew, not anchoring", c->ep.text, (double)st.skew_ns / 1e9,
				 (double)st.max_skew_ns / 1e9);
		}
		if (why != REASON_OK) {
			if (why != REASON_CLOCK_SKEW)
				log_warn("%s: anchor certificate refused: %s", c->ep.text, reason_word(why));
			if (c->opts.on_refused)
				c->opts.on_refused(c, why, c->opts.userdata);
			proto_conn_close(conn, -EACCES);
			return;
		}
		/* 1.2: the MAC key. A peer of 1.2 or later that holds its instance
		 * key (it signed the clock sample) and answers our kx key with none
		 * is a downgrade (something on the way stripped it): refused, as is
		 * a transcript the instance key did not sign. (A HelloAck stripped
		 * of both costs speed only: every answer must then be signed.) */
		c->mac = false;
		if (c->sent_kx && m->u.hello_ack.has_kx) {
			if (!mac_kx_verify(&ev.cert->instance, c->kx.pk, m->u.hello_ack.kx_public,
					   m->u.hello_ack.kx_signature) ||
			    mac_key_net(&c->kx, m->u.hello_ack.kx_public, c->mac_key) < 0) {
				log_warn("%s: MAC key agreement not signed by the anchor's instance key: protocol_error",
					 c->ep.text);
				why = REASON_PROTOCOL_ERROR;
			} else {
				c->mac = true;
			}
		} else if (c->sent_kx && m->version_minor >= 2 && m->u.hello_ack.has_clock) {
			log_warn("%s: protocol 1.%u peer answered without a MAC key: downgrade refused (protocol_error)",
				 c->ep.text, (unsigned)m->version_minor);
			why = REASON_PROTOCOL_ERROR;
		}
		mac_kx_clear(&c->kx);
		/* 1.3: pushes only with a MAC key and only when we asked. */
		c->push = c->mac && c->sent_push && m->u.hello_ack.push;
		if (why != REASON_OK) {
			if (c->opts.on_refused)
				c->opts.on_refused(c, why, c->opts.userdata);
			proto_conn_close(conn, -EACCES);
			return;
		}
		memcpy(c->channel_key, ev.cert->instance.id, PROTO_KEY_ID_LEN);
		uv_timer_stop(&c->state_timer);
		c->state = ST_READY;
		c->ready_at_ns = uv_hrtime();
		c->peer_clock = m->u.hello_ack.has_clock;
		if (c->peer_clock)
			uv_timer_start(&c->clock_timer, clock_timer_cb, c->opts.clock_probe_ms, c->opts.clock_probe_ms);
		if (c->opts.on_anchor)
			c->opts.on_anchor(c, &ev, c->opts.userdata);
		if (c->opts.on_state && c->state == ST_READY)
			c->opts.on_state(c, true, REASON_OK, c->opts.userdata);
		for (struct request *r = c->head; r && c->state == ST_READY && !proto_conn_is_closing(conn); r = r->next)
			if (!r->sent && r->fail == REASON_OK)
				send_request(c, r);
		return;
	}
	if (c->state == ST_READY && m->kind == CTL_IDENTITY_RESPONSE) {
		handle_response(c, m);
		return;
	}
	if (c->state == ST_READY && m->kind == CTL_IDENTITY_PUSH && c->push) {
		handle_push(c, m);
		return;
	}
	if (c->state == ST_READY && m->kind == CTL_CONTEXT_SIGNATURE && c->mac) {
		handle_signature(c, conn, m);
		return;
	}
	if (c->state == ST_READY && m->kind == CTL_CLOCK_RESPONSE) {
		handle_clock_response(c, conn, m);
		return;
	}
	if (c->state == ST_READY && m->kind == CTL_HELLO_ACK) {
		/* A renewed certificate for the same instance (docs/protocol.md). */
		struct anchor_event ev;
		enum reason why = verifier_renew_cert(c->opts.verifier, &m->u.hello_ack.cert, c->channel, 0, &ev);
		if (why != REASON_OK) {
			log_warn("%s: renewed anchor certificate refused: %s: closing", c->ep.text, reason_word(why));
			proto_conn_close(conn, -EACCES);
			return;
		}
		log_info("%s: anchor certificate renewed, valid until %llu (unix s)", c->ep.text,
			 (unsigned long long)(ev.cert->not_after_ns / 1000000000ull));
		if (c->opts.on_anchor)
			c->opts.on_anchor(c, &ev, c->opts.userdata);
		return;
	}
	log_warn("%s: unexpected %s from the proc side: closing", c->ep.text, ctl_kind_name(m->kind));
	proto_conn_close(conn, -EPROTO);
}

static void maybe_done(struct proto_client *c)
{
	if (c->state != ST_STOPPED || c->open_handles > 0 || c->conn)
		return;
	void (*done)(void *) = c->done;
	void *ud = c->done_ud;
	free(c);
	if (done)
		done(ud);
}

static void on_close(struct proto_conn *conn, int err, void *ud)
{
	struct proto_client *c = ud;
	c->conn = NULL;
	if (c->state == ST_STOPPED) {
		maybe_done(c);
		return;
	}
	if (err)
		log_info("%s: identity channel closed: %s", c->ep.text, strerror(-err));
	bool stable = c->state == ST_READY && uv_hrtime() - c->ready_at_ns >= PROTO_CLIENT_STABLE_MS * 1000000ull;
	set_state_down(c, REASON_CONTROL_CHANNEL_LOST);
	/* A channel that stayed up a while is tried again at once (the proc
	 * side may have closed it to make room, see proto_server_opts.max_conns),
	 * and the backoff starts over. One that closes soon after READY counts
	 * as a failed attempt: an endpoint that acks Hello and drops the
	 * channel would otherwise be redialled in a tight loop, with an
	 * anchor_established and an anchor_lost audited each time. */
	if (stable && c->state != ST_STOPPED) {
		c->backoff_ms = c->opts.backoff_min_ms;
		uv_timer_start(&c->state_timer, backoff_cb, 0, 0);
	} else {
		schedule_reconnect(c);
	}
}

static void poll_closed(uv_handle_t *h);

static void handshake_timeout_cb(uv_timer_t *t)
{
	struct proto_client *c = t->data;
	if (c->state == ST_HANDSHAKE && c->conn) {
		proto_conn_close(c->conn, -ETIMEDOUT);
	} else if (c->state == ST_CONNECTING && c->poll_open &&
		   !uv_is_closing((uv_handle_t *)&c->poll)) {
		uv_poll_stop(&c->poll);
		close(c->connect_fd);
		c->connect_fd = -1;
		uv_close((uv_handle_t *)&c->poll, poll_closed); /* reconnects */
	}
}

static void start_conn(struct proto_client *c, int fd)
{
	struct proto_conn_opts co = { .max_frame = c->opts.max_frame,
				      .read_deadline_ms = c->opts.read_deadline_ms };
	struct proto_conn_cbs cbs = { .on_msg = on_msg, .on_close = on_close };
	int r = proto_conn_open(c->loop, fd, &co, &cbs, c, &c->conn);
	if (r < 0) {
		c->conn = NULL;
		set_state_down(c, REASON_CONTROL_CHANNEL_LOST);
		schedule_reconnect(c);
		return;
	}
	c->state = ST_HANDSHAKE;
	c->channel = verifier_channel_open(c->opts.verifier);
	struct ctl_msg hello = { .kind = CTL_HELLO };
	strscpy(hello.u.hello.role, c->opts.role, sizeof(hello.u.hello.role));
	strscpy(hello.u.hello.software, "tether", sizeof(hello.u.hello.software));
	randombytes_buf(c->clock_nonce, sizeof(c->clock_nonce));
	memcpy(hello.u.hello.clock_nonce, c->clock_nonce, PROTO_CLOCK_NONCE_LEN);
	hello.u.hello.has_clock_nonce = true;
	c->sent_kx = false;
	if (!c->opts.no_mac && mac_kx_generate(&c->kx) == 0) {
		memcpy(hello.u.hello.kx_public, c->kx.pk, PROTO_KX_PUBLIC_LEN);
		hello.u.hello.has_kx = true;
		c->sent_kx = true;
		c->sent_push = false;
		if (c->opts.on_push) {
			randombytes_buf(c->push_seed, sizeof(c->push_seed));
			memcpy(hello.u.hello.push_seed, c->push_seed, PROTO_PUSH_SEED_LEN);
			hello.u.hello.has_push_seed = true;
			c->sent_push = true;
		}
	}
	c->clock_sent_ns = now_real_ns();
	proto_conn_send(c->conn, &hello);
	/* connect + handshake share one timeout; it keeps running */
}

static void poll_closed(uv_handle_t *h)
{
	struct proto_client *c = h->data;
	c->poll_open = false;
	c->open_handles--;
	int fd = c->connect_fd;
	c->connect_fd = -1;
	if (c->state == ST_STOPPED) {
		if (fd >= 0)
			close(fd);
		maybe_done(c);
		return;
	}
	if (fd < 0) { /* connect failed or timed out */
		set_state_down(c, REASON_CONTROL_CHANNEL_LOST);
		schedule_reconnect(c);
		return;
	}
	start_conn(c, fd);
}

static void poll_cb(uv_poll_t *p, int status, int events)
{
	struct proto_client *c = p->data;
	int err = 0;
	socklen_t l = sizeof(err);
	if (status < 0 || getsockopt(c->connect_fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0 || err) {
		close(c->connect_fd);
		c->connect_fd = -1;
	}
	uv_poll_stop(p);
	uv_close((uv_handle_t *)p, poll_closed);
}

static void connect_now(struct proto_client *c)
{
	c->state = ST_CONNECTING;
	uv_timer_start(&c->state_timer, handshake_timeout_cb, c->opts.connect_timeout_ms, 0);
	bool in_progress;
	int fd = endpoint_connect(&c->ep, &in_progress);
	if (fd < 0) {
		uv_timer_stop(&c->state_timer);
		set_state_down(c, REASON_CONTROL_CHANNEL_LOST);
		schedule_reconnect(c);
		return;
	}
	if (!in_progress) {
		start_conn(c, fd);
		return;
	}
	c->connect_fd = fd;
	if (uv_poll_init_socket(c->loop, &c->poll, fd) < 0) {
		close(fd);
		c->connect_fd = -1;
		uv_timer_stop(&c->state_timer);
		set_state_down(c, REASON_CONTROL_CHANNEL_LOST);
		schedule_reconnect(c);
		return;
	}
	c->poll.data = c;
	c->poll_open = true;
	c->open_handles++;
	uv_poll_start(&c->poll, UV_WRITABLE, poll_cb);
}

int proto_client_start(uv_loop_t *loop, const struct proto_client_opts *opts,
		       struct proto_client **out)
{
	if (!opts || !opts->endpoint || !opts->verifier)
		return -EINVAL;
	if (proto_crypto_init() < 0)
		return -EIO;
	struct proto_client *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	int r = endpoint_parse(opts->endpoint, &c->ep);
	if (r < 0) {
		free(c);
		return r;
	}
	c->loop = loop;
	c->opts = *opts;
	if (!c->opts.role)
		c->opts.role = "net-supervisor";
	if (!c->opts.request_timeout_ms)
		c->opts.request_timeout_ms = 2000;
	if (!c->opts.connect_timeout_ms)
		c->opts.connect_timeout_ms = 2000;
	if (!c->opts.backoff_min_ms)
		c->opts.backoff_min_ms = 100;
	if (!c->opts.backoff_max_ms)
		c->opts.backoff_max_ms = 5000;
	if (c->opts.backoff_max_ms < c->opts.backoff_min_ms)
		c->opts.backoff_max_ms = c->opts.backoff_min_ms;
	if (!c->opts.max_inflight)
		c->opts.max_inflight = 4096;
	if (!c->opts.clock_probe_ms)
		c->opts.clock_probe_ms = 10000;
	c->backoff_ms = c->opts.backoff_min_ms;
	c->connect_fd = -1;
	c->next_id = 1;
	uv_timer_init(loop, &c->state_timer);
	uv_timer_init(loop, &c->req_timer);
	uv_timer_init(loop, &c->clock_timer);
	c->state_timer.data = c->req_timer.data = c->clock_timer.data = c;
	c->open_handles = 3;
	connect_now(c);
	*out = c;
	return 0;
}

bool proto_client_ready(const struct proto_client *c) { return c->state == ST_READY; }

bool proto_client_push_active(const struct proto_client *c) { return c->state == ST_READY && c->push; }

int proto_client_request(struct proto_client *c, const struct proto_tuple *tuple,
			 uint64_t socket_cookie, proto_identity_cb cb, void *userdata,
			 uint64_t *request_id_out)
{
	if (!tuple || !cb || c->state == ST_STOPPED)
		return -EINVAL;
	struct request *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->id = c->next_id++;
	randombytes_buf(r->nonce, sizeof(r->nonce));
	r->tuple = *tuple;
	r->cookie = socket_cookie;
	r->cb = cb;
	r->ud = userdata;
	uint64_t now = uv_now(c->loop);
	r->deadline = now + c->opts.request_timeout_ms;
	if (c->state == ST_BACKOFF || c->n_reqs >= c->opts.max_inflight) {
		/* Fail from the loop, not from inside this call. */
		r->fail = REASON_IDENTITY_UNAVAILABLE;
		r->deadline = now;
	}
	req_append(c, r);
	if (request_id_out)
		*request_id_out = r->id;
	if (r->fail == REASON_OK && c->state == ST_READY)
		send_request(c, r);
	if (!uv_is_active((uv_handle_t *)&c->req_timer) ||
	    uv_timer_get_due_in(&c->req_timer) > r->deadline - now)
		uv_timer_start(&c->req_timer, req_timer_cb, r->deadline - now, 0);
	return 0;
}

void proto_client_cancel(struct proto_client *c, uint64_t request_id)
{
	for (struct request *r = c->head; r; r = r->next)
		if (r->id == request_id) {
			req_unlink(c, r);
			free(r);
			return;
		}
}

static void timer_closed(uv_handle_t *h)
{
	struct proto_client *c = h->data;
	c->open_handles--;
	maybe_done(c);
}

void proto_client_stop(struct proto_client *c, void (*done)(void *), void *userdata)
{
	if (c->state == ST_STOPPED)
		return;
	c->done = done;
	c->done_ud = userdata;
	fail_where(c, pred_all, UINT64_MAX);
	sig_drop(c, true, REASON_CONTROL_CHANNEL_LOST);
	sodium_memzero(c->mac_key, sizeof(c->mac_key));
	mac_kx_clear(&c->kx);
	if (c->channel) {
		verifier_channel_closed(c->opts.verifier, c->channel);
		c->channel = 0;
	}
	c->state = ST_STOPPED;
	uv_timer_stop(&c->state_timer);
	uv_timer_stop(&c->req_timer);
	uv_timer_stop(&c->clock_timer);
	uv_close((uv_handle_t *)&c->state_timer, timer_closed);
	uv_close((uv_handle_t *)&c->req_timer, timer_closed);
	uv_close((uv_handle_t *)&c->clock_timer, timer_closed);
	if (c->poll_open && !uv_is_closing((uv_handle_t *)&c->poll)) {
		uv_poll_stop(&c->poll);
		uv_close((uv_handle_t *)&c->poll, poll_closed);
	}
	if (c->conn)
		proto_conn_close(c->conn, -ECANCELED);
}
