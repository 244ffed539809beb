#include "net-supervisor/identity_delegated.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "proto/client.h"
#include "proto/context.h"
#include "proto/mac.h"
#include "proto/signed.h"

struct deleg_pending {
	struct delegated_strategy *owner;
	struct identity_request *req;
	uint64_t request_id;
	bool sent_while_ready; /* the channel was up when we asked */
	/* waiting for a push (no request sent yet) until wait_deadline */
	bool waiting;
	uint64_t wait_deadline; /* uv_now() ms */
	struct proto_tuple tuple;
	struct deleg_pending *next, *prev;
	struct deleg_pending *wnext, *wprev; /* the waiters, oldest first */
};

/* A verified pushed identity (1.3), kept under its tuple until a flow with
 * that tuple takes it or it expires; once taken, kept (without the
 * identity) until its signature came, for the audit. */
struct push_entry {
	struct push_entry *hnext;        /* hash chain */
	struct push_entry *anext, *aprev; /* all entries, oldest first */
	struct proto_tuple tuple;
	uint64_t push_id;
	uint64_t expires; /* uv_now() ms */
	struct flow_identity *id; /* NULL once taken */
	bool taken;
	bool sig_done;   /* the signature came (or will not): sig_why, sig_b64 */
	enum reason sig_why;
	char *sig_b64;
};

#define PUSH_BUCKETS 4096
#define PUSH_FRESH_MS 250
#define PUSH_STALL_WAITS 8
#define PUSH_STALL_MS 1000

struct delegated_strategy {
	struct identity_strategy base; /* first */
	struct identity_delegated_config cfg;
	struct pub_key *pinned;
	struct verifier *verifier;
	struct proto_client *client;
	struct deleg_pending *pending;
	struct identity_delegated_stats stats;
	bool destroying;
	enum reason last_refusal; /* REASON_OK: nothing refused since the last anchor */
	struct log_ratelimit denial_log; /* the proc side's detail: a line per 10 s */
	/* 1.3 pushes */
	struct push_entry *buckets[PUSH_BUCKETS];
	struct push_entry *ahead, *atail;
	size_t n_push;
	struct deleg_pending *whead, *wtail;
	uv_timer_t wait_timer;
	bool wait_timer_open;
	unsigned wait_misses;     /* waits in a row that ran out */
	uint64_t stalled_until;   /* uv_now() ms: do not wait before this */
	struct log_ratelimit push_log;
};

const char *anchor_event_kind_word(enum anchor_event_kind k)
{
	switch (k) {
	case ANCHOR_ESTABLISHED: return "anchor_established";
	case ANCHOR_RECONNECTED: return "anchor_reconnected";
	case ANCHOR_CHANGED: return "anchor_changed";
	case ANCHOR_RENEWED: return "anchor_renewed";
	}
	return "anchor_unknown";
}

static void pending_unlink(struct delegated_strategy *s, struct deleg_pending *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		s->pending = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->next = p->prev = NULL;
}

/* The proxy's view (client -> proxy) as the wire tuple. In the split
 * shared-netns case the proc side sees exactly this tuple on its side. */
static int tuple_to_proto(const struct proxy_flow *t, struct proto_tuple *out)
{
	memset(out, 0, sizeof(*out));
	out->proto = (uint8_t)PROXY_FLOW_PROTO(t);
	if (t->client.ss_family != t->proxy.ss_family)
		return -EINVAL;
	if (t->client.ss_family == AF_INET) {
		const struct sockaddr_in *c = (const struct sockaddr_in *)&t->client;
		const struct sockaddr_in *p = (const struct sockaddr_in *)&t->proxy;
		out->family = AF_INET;
		memcpy(out->src, &c->sin_addr, 4);
		memcpy(out->dst, &p->sin_addr, 4);
		out->sport = ntohs(c->sin_port);
		out->dport = ntohs(p->sin_port);
		return 0;
	}
	if (t->client.ss_family == AF_INET6) {
		const struct sockaddr_in6 *c = (const struct sockaddr_in6 *)&t->client;
		const struct sockaddr_in6 *p = (const struct sockaddr_in6 *)&t->proxy;
		out->family = AF_INET6;
		memcpy(out->src, &c->sin6_addr, 16);
		memcpy(out->dst, &p->sin6_addr, 16);
		out->sport = ntohs(c->sin6_port);
		out->dport = ntohs(p->sin6_port);
		return 0;
	}
	return -EAFNOSUPPORT;
}

/* A verified context -> flow_identity. The context was validated at the
 * edge (context_decode) and its signature checked; copy, do not judge. */
static struct flow_identity *identity_from_context(const struct identity_context *ctx,
						   const struct signed_context *sc, uint64_t mac_request_id)
{
	struct flow_identity *id = flow_identity_new();
	if (!id)
		return NULL;
	id->source = FLOW_SOURCE_DELEGATED;
	id->pid = ctx->subject.pid;
	if (!(id->binary_path = strdup(ctx->subject.exe.path)) ||
	    !(id->process_key = strdup(ctx->subject.key)))
		goto fail;
	if (ctx->subject.exe.hashed)
		hex_encode(ctx->subject.exe.sha256, 32, id->sha256);
	for (size_t i = 0; i < ctx->n_ancestors; i++) {
		const struct procref *a = &ctx->ancestors[i];
		char h[65] = "";
		if (a->exe.hashed)
			hex_encode(a->exe.sha256, 32, h);
		if (flow_identity_add_ancestor(id, a->exe.path, a->pid, h) < 0)
			goto fail;
	}
	if (sc && signed_context_pack(sc, &id->signed_context, &id->signed_context_len) < 0) {
		/* The audit must be able to re-verify every delegated allow. */
		goto fail;
	}
	if (!sc)
		id->context_request_id = mac_request_id;
	return id;
fail:
	flow_identity_free(id);
	return NULL;
}

/* ---- 1.3 pushes ---- */

static size_t tuple_bucket(const struct proto_tuple *t)
{
	uint64_t h = 1469598103934665603ull;
	const uint8_t *b = (const uint8_t *)t;
	/* the struct is fully initialised (memset) wherever a tuple is made */
	for (size_t i = 0; i < sizeof(*t); i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return (size_t)(h % PUSH_BUCKETS);
}

static void push_emit_signed(struct delegated_strategy *s, struct push_entry *e)
{
	if (s->cfg.on_context_signed && !s->destroying)
		s->cfg.on_context_signed(e->push_id, e->sig_why, e->sig_why == REASON_OK ? e->sig_b64 : NULL, s->cfg.data);
}

/* Into its tuple's bucket and at the tail of the age list. */
static void push_link(struct delegated_strategy *s, struct push_entry *e)
{
	size_t b = tuple_bucket(&e->tuple);
	e->hnext = s->buckets[b];
	s->buckets[b] = e;
	e->aprev = s->atail;
	if (s->atail)
		s->atail->anext = e;
	else
		s->ahead = e;
	s->atail = e;
	s->n_push++;
}

static void push_unlink(struct delegated_strategy *s, struct push_entry *e)
{
	struct push_entry **pp = &s->buckets[tuple_bucket(&e->tuple)];
	while (*pp && *pp != e)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = e->hnext;
	if (e->aprev)
		e->aprev->anext = e->anext;
	else
		s->ahead = e->anext;
	if (e->anext)
		e->anext->aprev = e->aprev;
	else
		s->atail = e->aprev;
	s->n_push--;
}

static void push_free(struct push_entry *e)
{
	flow_identity_free(e->id);
	free(e->sig_b64);
	free(e);
}

/* Drop expired untaken entries (oldest first) and, past the bound, the
 * oldest of all; a taken one whose signature has not come is audited as
 * not come (identity_timeout). */
static void push_sweep(struct delegated_strategy *s, bool all)
{
	uint64_t now = uv_now(s->base.loop);
	struct push_entry *e = s->ahead;
	while (e) {
		struct push_entry *next = e->anext;
		bool over = s->n_push > IDENTITY_PUSH_TABLE;
		if (all || over || (!e->taken && e->expires <= now)) {
			push_unlink(s, e);
			if (!e->taken)
				s->stats.pushes_unused++;
			else if (!e->sig_done) {
				e->sig_why = all ? REASON_CONTROL_CHANNEL_LOST : REASON_IDENTITY_TIMEOUT;
				push_emit_signed(s, e);
			}
			push_free(e);
		} else if (e->taken || e->expires > now) {
			/* entries are in arrival order, lifetimes alike: stop at the
			 * first live one unless over the bound */
			if (!over)
				break;
		}
		e = next;
	}
}

static struct push_entry *push_find(struct delegated_strategy *s, const struct proto_tuple *t)
{
	uint64_t now = uv_now(s->base.loop);
	for (struct push_entry *e = s->buckets[tuple_bucket(t)]; e; e = e->hnext)
		if (!e->taken && e->expires > now && proto_tuple_equal(&e->tuple, t))
			return e;
	return NULL;
}

/* Take the entry's identity for a flow; the entry stays for its signature
 * (emitted now when it already came). */
static struct flow_identity *push_take(struct delegated_strategy *s, struct push_entry *e)
{
	struct flow_identity *id = e->id;
	e->id = NULL;
	e->taken = true;
	if (e->sig_done) {
		push_unlink(s, e);
		push_emit_signed(s, e);
		push_free(e);
	}
	return id;
}

static void waiter_unlink(struct delegated_strategy *s, struct deleg_pending *p)
{
	if (!p->waiting)
		return;
	p->waiting = false;
	if (p->wprev)
		p->wprev->wnext = p->wnext;
	else
		s->whead = p->wnext;
	if (p->wnext)
		p->wnext->wprev = p->wprev;
	else
		s->wtail = p->wprev;
	p->wnext = p->wprev = NULL;
}

static void wait_cb(uv_timer_t *t);

static void arm_wait_timer(struct delegated_strategy *s)
{
	if (!s->wait_timer_open)
		return;
	if (!s->whead) {
		uv_timer_stop(&s->wait_timer);
		return;
	}
	uint64_t now = uv_now(s->base.loop);
	uint64_t d = s->whead->wait_deadline;
	uv_timer_start(&s->wait_timer, wait_cb, d > now ? d - now : 0, 0);
}

static void on_result(const struct proto_identity_result *res, void *userdata)
{
	struct deleg_pending *p = userdata;
	struct delegated_strategy *s = p->owner;
	pending_unlink(s, p);
	enum reason why = res->reason;
	struct flow_identity *id = NULL;
	if (why == REASON_OK) {
		id = identity_from_context(res->ctx, res->signed_context, res->by_mac ? res->request_id : 0);
		if (!id)
			why = REASON_INTERNAL_ERROR;
	} else if (why == REASON_IDENTITY_UNAVAILABLE && p->sent_while_ready &&
		   !proto_client_ready(s->client)) {
		why = REASON_CONTROL_CHANNEL_LOST;
	}
	if (why == REASON_OK) {
		s->stats.verified++;
		s->stats.by_mac += res->by_mac;
	}
	else {
		s->stats.denied++;
		/* Each denial is in the audit log; this line adds the proc side's
		 * detail for the operator, without one line per flow. */
		uint64_t held_back;
		if (log_ratelimit_ok(&s->denial_log, uv_now(s->base.loop), 10000, &held_back))
			log_info("delegated identity: request %llu denied: %s (%s); %llu more denied since the last "
				 "such line", (unsigned long long)res->request_id, reason_word(why), res->message,
				 (unsigned long long)held_back);
	}
	identity_request_set_data(p->req, NULL);
	identity_request_complete(p->req, why, id);
	free(p);
}

/* Ask the proc side (the request path). 0, or -errno (p not linked). */
static int send_request(struct delegated_strategy *s, struct deleg_pending *p)
{
	p->sent_while_ready = proto_client_ready(s->client);
	return proto_client_request(s->client, &p->tuple, 0, on_result, p, &p->request_id);
}

static void pending_link(struct delegated_strategy *s, struct deleg_pending *p)
{
	p->next = s->pending;
	if (s->pending)
		s->pending->prev = p;
	s->pending = p;
}

/* A waiter's push came: complete it from the entry. */
static void complete_from_push(struct delegated_strategy *s, struct deleg_pending *p, struct push_entry *e,
			       bool waited)
{
	struct flow_identity *id = push_take(s, e);
	s->stats.push_hits++;
	s->stats.push_waited_hits += waited;
	s->stats.verified++;
	s->stats.by_mac++;
	s->wait_misses = 0;
	identity_request_set_data(p->req, NULL);
	identity_request_complete(p->req, REASON_OK, id);
	free(p);
}

/* Waits that ran out: ask as before (never allow on a missing push). */
static void wait_cb(uv_timer_t *t)
{
	struct delegated_strategy *s = t->data;
	uint64_t now = uv_now(s->base.loop);
	while (s->whead && s->whead->wait_deadline <= now) {
		struct deleg_pending *p = s->whead;
		waiter_unlink(s, p);
		s->stats.push_wait_timeouts++;
		if (++s->wait_misses >= PUSH_STALL_WAITS) {
			s->stalled_until = now + PUSH_STALL_MS;
			s->wait_misses = 0;
		}
		if (send_request(s, p) < 0) {
			pending_unlink(s, p);
			identity_request_set_data(p->req, NULL);
			identity_request_complete(p->req, REASON_IDENTITY_UNAVAILABLE, NULL);
			free(p);
		}
	}
	arm_wait_timer(s);
}

static int delegated_resolve(struct identity_strategy *base, struct identity_request *req)
{
	struct delegated_strategy *s = (struct delegated_strategy *)base;
	struct proto_tuple pt;
	s->stats.requests++;
	if (tuple_to_proto(identity_request_tuple(req), &pt) < 0) {
		identity_request_complete(req, REASON_IDENTITY_UNAVAILABLE, NULL);
		return 0;
	}
	struct deleg_pending *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->owner = s;
	p->req = req;
	p->tuple = pt;
	if (s->n_push) {
		push_sweep(s, false);
		struct push_entry *e = push_find(s, &pt);
		if (e) {
			/* The binding: the pushed context's tuple is this flow's. */
			complete_from_push(s, p, e, false);
			return 0;
		}
	}
	uint64_t now = uv_now(s->base.loop);
	if (proto_client_push_active(s->client) && now >= s->stalled_until && s->wait_timer_open) {
		p->waiting = true;
		p->wait_deadline = now + s->cfg.push_wait_ms;
		p->wprev = s->wtail;
		if (s->wtail)
			s->wtail->wnext = p;
		else
			s->whead = p;
		s->wtail = p;
		pending_link(s, p);
		identity_request_set_data(req, p);
		if (s->whead == p)
			arm_wait_timer(s);
		return 0;
	}
	int r = send_request(s, p);
	if (r < 0) {
		free(p);
		return r;
	}
	pending_link(s, p);
	identity_request_set_data(req, p);
	return 0;
}

static void delegated_cancel(struct identity_strategy *base, struct identity_request *req)
{
	struct delegated_strategy *s = (struct delegated_strategy *)base;
	struct deleg_pending *p = identity_request_data(req);
	if (!p)
		return;
	if (p->waiting) {
		waiter_unlink(s, p);
		arm_wait_timer(s);
	} else {
		proto_client_cancel(s->client, p->request_id); /* on_result will not run */
	}
	pending_unlink(s, p);
	identity_request_set_data(req, NULL);
	identity_request_complete(req, REASON_IDENTITY_TIMEOUT, NULL);
	free(p);
}

static void maybe_free(struct delegated_strategy *s)
{
	if (s->client || s->wait_timer_open)
		return;
	verifier_free(s->verifier);
	free(s->pinned);
	free(s);
}

static void client_stopped(void *userdata)
{
	struct delegated_strategy *s = userdata;
	s->client = NULL;
	maybe_free(s);
}

static void wait_timer_closed(uv_handle_t *h)
{
	struct delegated_strategy *s = h->data;
	s->wait_timer_open = false;
	maybe_free(s);
}

static void delegated_destroy(struct identity_strategy *base)
{
	struct delegated_strategy *s = (struct delegated_strategy *)base;
	s->destroying = true;
	/* No request is outstanding (the contract of destroy), so no waiter. */
	while (s->whead) {
		struct deleg_pending *p = s->whead;
		waiter_unlink(s, p);
		pending_unlink(s, p);
		identity_request_set_data(p->req, NULL);
		identity_request_complete(p->req, REASON_IDENTITY_UNAVAILABLE, NULL);
		free(p);
	}
	push_sweep(s, true);
	if (s->wait_timer_open)
		uv_close((uv_handle_t *)&s->wait_timer, wait_timer_closed);
	/* Fails whatever is still pending through on_result, then frees. */
	proto_client_stop(s->client, client_stopped, s);
}

static const struct identity_strategy_ops delegated_ops = {
	.name = "delegated",
	.resolve = delegated_resolve,
	.cancel = delegated_cancel,
	.destroy = delegated_destroy,
};

static void on_anchor(struct proto_client *c, const struct anchor_event *ev, void *userdata)
{
	(void)c;
	struct delegated_strategy *s = userdata;
	char kid[PROTO_KEY_ID_HEX];
	key_id_hex(ev->cert->instance.id, kid);
	char desc[sizeof(s->base.anchor_desc)];
	snprintf(desc, sizeof(desc), "delegated %s instance %s anchor pid %d", s->cfg.endpoint, kid,
		 (int)ev->cert->anchor.pid);
	strscpy(s->base.anchor_desc, desc, sizeof(s->base.anchor_desc));
	/* A new instance key moves the anchor epoch (tunnels it vouched for
	 * are revoked, netsup.c); a reconnect or renewal keeps it. */
	identity_strategy_set_instance(&s->base, kid);
	if (ev->kind == ANCHOR_CHANGED) {
		s->stats.anchor_changes++;
		char old[PROTO_KEY_ID_HEX];
		key_id_hex(ev->old_instance.id, old);
		log_warn("delegated identity: anchor changed: instance %s replaced by %s", old, kid);
	}
	if (s->cfg.on_anchor_event)
		s->cfg.on_anchor_event(ev->kind, anchor_event_kind_word(ev->kind), desc, s->cfg.data);
}

/* The signature after a MAC'd answer: to the audit (context_signed). */
static void on_signature(struct proto_client *c, uint64_t request_id, enum reason why,
			 const struct signed_context *sc, const struct signed_cert *anchor_cert, void *userdata)
{
	(void)c;
	(void)anchor_cert;
	struct delegated_strategy *s = userdata;
	if (s->destroying)
		return;
	if (why == REASON_OK)
		s->stats.signatures++;
	else
		s->stats.signatures_missing++;
	struct push_entry *e = NULL;
	if (request_id & PROTO_PUSH_ID_BIT) {
		/* A push's: audited once a flow took it (newest first: it follows
		 * its push closely). A push nobody takes is not audited. */
		for (e = s->atail; e && e->push_id != request_id; e = e->aprev)
			;
		if (!e)
			return;
	}
	if (!s->cfg.on_context_signed && !e)
		return;
	uint8_t *packed = NULL;
	size_t plen = 0;
	char *b64 = NULL;
	if (sc && (signed_context_pack(sc, &packed, &plen) < 0 || signed_base64_encode(packed, plen, &b64) < 0))
		why = REASON_INTERNAL_ERROR;
	free(packed);
	if (e) {
		e->sig_done = true;
		e->sig_why = why;
		e->sig_b64 = why == REASON_OK ? b64 : NULL;
		if (why != REASON_OK)
			free(b64);
		if (e->taken) {
			push_unlink(s, e);
			push_emit_signed(s, e);
			push_free(e);
		}
		return;
	}
	s->cfg.on_context_signed(request_id, why, why == REASON_OK ? b64 : NULL, s->cfg.data);
	free(b64);
}

/* 1.3: a pushed identity (proto_client verified it, or says why not). */
static void on_push(struct proto_client *c, const struct proto_identity_result *res, void *userdata)
{
	(void)c;
	struct delegated_strategy *s = userdata;
	if (s->destroying)
		return;
	if (res->reason != REASON_OK || !res->ctx) {
		s->stats.pushes_refused++;
		uint64_t held_back;
		if (log_ratelimit_ok(&s->push_log, uv_now(s->base.loop), 10000, &held_back))
			log_warn("delegated identity: pushed identity %llu refused: %s; ignored (the flow asks); "
				 "%llu more refused since the last such line",
				 (unsigned long long)res->request_id, reason_word(res->reason),
				 (unsigned long long)held_back);
		return;
	}
	const struct identity_context *ctx = res->ctx;
	struct push_entry *e = calloc(1, sizeof(*e));
	if (!e)
		return;
	if (!(e->id = identity_from_context(ctx, NULL, res->request_id))) {
		free(e);
		return;
	}
	s->stats.pushes++;
	e->tuple = ctx->tuple;
	e->push_id = res->request_id;
	/* Usable for PUSH_FRESH_MS at most (within the context's lifetime):
	 * a push is for a connect the proxy accepts within moments. An older
	 * one is for a connection the proxy never resolved (dropped before
	 * identity); its tuple may be a later socket's by now (port reuse). */
	uint64_t life_ms = (ctx->expires_at_ns - ctx->issued_at_ns) / 1000000ull;
	if (life_ms > PUSH_FRESH_MS)
		life_ms = PUSH_FRESH_MS;
	e->expires = uv_now(s->base.loop) + (life_ms ? life_ms : 1);
	/* A newer push for the same tuple: the socket of the older one is
	 * gone (a tuple names one live socket at a time): drop it. */
	for (struct push_entry *o = s->buckets[tuple_bucket(&e->tuple)], *on; o; o = on) {
		on = o->hnext;
		if (!o->taken && proto_tuple_equal(&o->tuple, &e->tuple)) {
			push_unlink(s, o);
			s->stats.pushes_unused++;
			push_free(o);
		}
	}
	/* linked first so that push_take can unlink it */
	push_link(s, e);
	/* a flow already waiting for it takes it now */
	for (struct deleg_pending *p = s->whead; p; p = p->wnext) {
		if (proto_tuple_equal(&p->tuple, &e->tuple)) {
			waiter_unlink(s, p);
			pending_unlink(s, p);
			arm_wait_timer(s);
			complete_from_push(s, p, e, true);
			return;
		}
	}
	push_sweep(s, false);
}

static void on_refused(struct proto_client *c, enum reason why, void *userdata)
{
	(void)c;
	struct delegated_strategy *s = userdata;
	if (s->destroying || why == s->last_refusal)
		return;
	s->last_refusal = why;
	if (s->cfg.on_anchor_refused) {
		char d[200];
		struct verifier_clock_state cs;
		verifier_clock(s->verifier, &cs);
		if (why == REASON_CLOCK_SKEW)
			snprintf(d, sizeof(d), "the proc side's clock on %s is %+.3f s from ours, past --max-clock-skew %.0f s",
				 s->cfg.endpoint, (double)cs.skew_ns / 1e9, (double)cs.max_skew_ns / 1e9);
		else
			snprintf(d, sizeof(d), "the certificate presented on %s was refused", s->cfg.endpoint);
		s->cfg.on_anchor_refused(why, d, s->cfg.data);
	}
}

static void on_state(struct proto_client *c, bool ready, enum reason why, void *userdata)
{
	(void)c;
	struct delegated_strategy *s = userdata;
	if (s->destroying)
		return;
	if (!ready) {
		/* Pushes came over that channel: none is used past it. */
		push_sweep(s, true);
		s->stats.channel_losses++;
		log_warn("delegated identity: control channel %s lost (%s): not ready", s->cfg.endpoint,
			 reason_word(why));
	}
	if (ready)
		s->last_refusal = REASON_OK; /* a later refusal is news again */
	char desc[sizeof(s->base.anchor_desc)];
	strscpy(desc, ready ? s->base.anchor_desc : "control channel lost", sizeof(desc));
	identity_strategy_set_anchored(&s->base, ready, desc);
}

int identity_delegated_new(uv_loop_t *loop, const struct identity_delegated_config *cfg,
			   struct identity_strategy **out)
{
	if (!cfg || !cfg->endpoint || !cfg->pinned || cfg->n_pinned == 0)
		return -EINVAL;
	if (proto_crypto_init() < 0)
		return -EIO;
	struct delegated_strategy *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->base.ops = &delegated_ops;
	s->base.loop = loop;
	s->cfg = *cfg;
	s->pinned = calloc(cfg->n_pinned, sizeof(*s->pinned));
	if (!s->pinned) {
		free(s);
		return -ENOMEM;
	}
	memcpy(s->pinned, cfg->pinned, cfg->n_pinned * sizeof(*s->pinned));
	s->cfg.pinned = s->pinned;
	const char *ff = getenv("TETHER_FORCE_FALLBACK");
	if (cfg->no_mac || (ff && (strstr(ff, "push") || strcmp(ff, "all") == 0)))
		s->cfg.no_push = true;
	if (!s->cfg.push_wait_ms)
		s->cfg.push_wait_ms = IDENTITY_PUSH_WAIT_MS;
	/* TETHER_PUSH_WAIT_MS (1-60000): tests that need every flow answered
	 * from its push whatever the machine's load */
	const char *pw = getenv("TETHER_PUSH_WAIT_MS");
	if (pw) {
		char *end;
		unsigned long v = strtoul(pw, &end, 10);
		if (*pw && !*end && v >= 1 && v <= 60000)
			s->cfg.push_wait_ms = v;
		else
			log_warn("delegated identity: TETHER_PUSH_WAIT_MS=%s ignored (expected 1-60000)", pw);
	}

	struct verifier_opts vo = { .max_lifetime_ns = cfg->max_lifetime_ns,
				    .max_clock_skew_ns = cfg->max_clock_skew_ns };
	int r = verifier_new(s->pinned, cfg->n_pinned, &vo, &s->verifier);
	if (r < 0) {
		free(s->pinned);
		free(s);
		return r;
	}
	struct proto_client_opts co = {
		.endpoint = cfg->endpoint,
		.verifier = s->verifier,
		.request_timeout_ms = cfg->request_timeout_ms ? cfg->request_timeout_ms
							      : IDENTITY_DEFAULT_TIMEOUT_MS,
		.connect_timeout_ms = cfg->connect_timeout_ms,
		.backoff_min_ms = cfg->backoff_min_ms,
		.backoff_max_ms = cfg->backoff_max_ms ? cfg->backoff_max_ms : 2000,
		.on_anchor = on_anchor,
		.on_state = on_state,
		.on_refused = on_refused,
		.on_signature = on_signature,
		.on_push = s->cfg.no_push ? NULL : on_push,
		.no_mac = cfg->no_mac,
		.userdata = s,
	};
	r = proto_client_start(loop, &co, &s->client);
	if (r < 0) {
		verifier_free(s->verifier);
		free(s->pinned);
		free(s);
		return r;
	}
	uv_timer_init(loop, &s->wait_timer);
	s->wait_timer.data = s;
	s->wait_timer_open = true;
	strscpy(s->base.anchor_desc, "delegated: no channel yet", sizeof(s->base.anchor_desc));
	*out = &s->base;
	return 0;
}

void identity_delegated_stats(const struct identity_strategy *base, struct identity_delegated_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!base || base->ops != &delegated_ops)
		return;
	const struct delegated_strategy *s = (const struct delegated_strategy *)base;
	*out = s->stats;
}

bool identity_delegated_clock(const struct identity_strategy *base, struct verifier_clock_state *out)
{
	memset(out, 0, sizeof(*out));
	if (!base || base->ops != &delegated_ops)
		return false;
	verifier_clock(((const struct delegated_strategy *)base)->verifier, out);
	return true;
}
