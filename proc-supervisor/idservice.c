/* idservice: see idservice.h. */
#include "proc-supervisor/idservice.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "identity/attribute.h"
#include "identity/exe.h"
#include "identity/procref.h"
#include "identity/verify.h"
#include "proto/server.h"
#include "proto/signer.h"
#include "proto/mac.h"

struct idservice {
	uv_loop_t *loop;
	struct idservice_opts o;
	struct sign_key *instance;
	struct procref anchor; /* recorded, hashed */
	struct signed_cert cert;
	struct cert_input cert_in; /* what every certificate of this instance says */
	struct pub_key instance_pub;
	uint64_t cert_issued_ns, cert_not_after_ns;
	unsigned renew_failures;
	uv_timer_t renew_timer;    /* see renew_cb */
	bool renew_timer_open;
	struct proto_server *server;
	struct flow_verifier *verifier; /* members of the tree as candidates; we are the anchor */
	size_t inflight;
	size_t push_inflight;
	struct push_cache *pcache; /* see push_cache_get */
	bool stopping, server_stopped;
	struct idservice_stats stats;
	void (*done)(void *);
	void *done_ud;
};

struct id_job {
	uv_work_t work;
	struct idservice *s;
	struct proto_request *req;
	struct proto_tuple tuple;
	uint8_t nonce[PROTO_NONCE_LEN];
	uint64_t request_id, cookie;
	/* results */
	enum reason reason;
	char message[200];
	bool ok;
	bool mac;    /* 1.2 channel: answer MAC'd, sign after (proto_request_reply_mac) */
	bool signed_; /* sc.signature is set */
	struct signed_context sc;
	struct verified_flow vf; /* subject (recorded copy) for the audit */
};

static void job_work(uv_work_t *uw)
{
	struct id_job *j = uw->data;
	struct idservice *s = j->s;
	j->reason = REASON_IDENTITY_UNAVAILABLE;
	struct verify_ctx *w = flow_verifier_ctx_take(s->verifier, false);
	if (!w) {
		snprintf(j->message, sizeof(j->message), "attribution context: %s", strerror(errno));
		return;
	}
	/* The wire tuple is the workload socket's (local = src, peer = dst). */
	struct flow_tuple ft = { .proto = j->tuple.proto, .family = j->tuple.family,
				 .sport = j->tuple.sport, .dport = j->tuple.dport };
	memcpy(ft.src.raw, j->tuple.src, 16);
	memcpy(ft.dst.raw, j->tuple.dst, 16);
	struct verified_flow *vf = &j->vf;
	(void)flow_verifier_verify(s->verifier, w, &ft, NULL, vf);
	flow_verifier_ctx_put(s->verifier, w);
	if (vf->reason != REASON_OK) {
		j->reason = vf->reason;
		snprintf(j->message, sizeof(j->message), "%s", vf->detail);
		return;
	}
	struct context_input in = {
		.topology = s->o.topology,
		.source = IDENTITY_SOURCE_DELEGATED,
		.subject = &vf->subject,
		.ancestors = vf->ancestors,
		.n_ancestors = vf->n_ancestors,
		.anchor = &s->anchor,
		.tuple = &j->tuple,
		.socket_cookie = vf->socket_found ? vf->socket_cookie : j->cookie,
		.nonce = j->nonce,
		.request_id = j->request_id,
		.policy_generation = s->o.policy_generation,
		.lifetime_ns = s->o.context_lifetime_ns,
	};
	/* On a MAC channel the answer needs only the bytes; the Ed25519
	 * signature is made after the answer went out (sign_work). */
	int r;
	if (j->mac) {
		memset(&j->sc, 0, sizeof(j->sc));
		r = context_encode(&in, &j->sc.context, &j->sc.context_len);
		memcpy(j->sc.key_id, s->instance->id, PROTO_KEY_ID_LEN);
	} else {
		r = context_sign(s->instance, &in, &j->sc);
		j->signed_ = r == 0;
	}
	if (r < 0) {
		j->reason = REASON_INTERNAL_ERROR;
		snprintf(j->message, sizeof(j->message), "signing: %s", strerror(-r));
		return;
	}
	j->ok = true;
	j->reason = REASON_OK;
}

static void service_maybe_done(struct idservice *s);
static void sign_work(uv_work_t *uw);
static void sign_after(uv_work_t *w, int status);
static void job_finish(struct id_job *j);

static void job_after(uv_work_t *w, int status)
{
	struct id_job *j = w->data;
	struct idservice *s = j->s;
	if (status == UV_ECANCELED) {
		j->ok = false;
		j->reason = REASON_IDENTITY_UNAVAILABLE;
		snprintf(j->message, sizeof(j->message), "shutting down");
	}
	if (j->ok) {
		s->stats.issued++;
		s->stats.chain_subject_hits += j->vf.chain == FLOW_CHAIN_SUBJECT_HIT;
		s->stats.chain_parent_hits += j->vf.chain == FLOW_CHAIN_PARENT_HIT;
		if (j->mac) {
			(void)proto_request_reply_mac(j->req, j->sc.context, j->sc.context_len, j->sc.key_id);
			/* The signature for the audit, after the answer is on its way
			 * (on the loop: a second trip through the thread pool cost more
			 * CPU than the ~20 us signature, bench/netsup_bench.sh). */
			sign_work(&j->work);
			sign_after(&j->work, 0);
			return;
		}
		(void)proto_request_reply(j->req, &j->sc);
	} else {
		s->stats.refused++;
		if (j->mac)
			signed_context_clear(&j->sc);
		(void)proto_request_fail(j->req, j->reason, j->message);
	}
	job_finish(j);
}

static void sign_work(uv_work_t *uw)
{
	struct id_job *j = uw->data;
	sign_detached(j->s->instance, SIGN_DOMAIN_CONTEXT, j->sc.context, j->sc.context_len, j->sc.signature);
	j->signed_ = true;
}

static void sign_after(uv_work_t *w, int status)
{
	struct id_job *j = w->data;
	if (status == UV_ECANCELED)
		j->signed_ = false;
	(void)proto_request_signature(j->req, j->signed_ ? &j->sc : NULL);
	job_finish(j);
}

/* identity_issued: an answer (request_id) or a push (push_id, pushed). */
static void audit_issued(struct idservice *s, uint64_t id, bool pushed, bool ok, enum reason reason, const char *message,
			 const struct proto_tuple *tuple, const struct verified_flow *vf, const struct signed_context *sc)
{
	json_t *ev = json_pack("{s:I, s:s, s:s, s:s}", pushed ? "push_id" : "request_id", (json_int_t)id, "reason",
			       ok ? "ok" : reason_word(reason), "identity_source", "delegated",
			       "attribution", attribution_source_word(vf->source));
	char tb[160];
	proto_tuple_format(tuple, tb, sizeof(tb));
	json_object_set_new(ev, "flow", json_string(tb));
	if (!ok)
		json_object_set_new(ev, "message", json_string(message));
	if (vf->have_subject) {
		const struct procref *subject = &vf->subject;
		json_object_set_new(ev, "pid", json_integer(subject->pid));
		json_object_set_new(ev, "process_key", json_string(subject->key));
		json_t *bin = json_pack("{s:s}", "path", subject->exe.path);
		if (subject->exe.hashed) {
			char hex[65];
			for (int i = 0; i < 32; i++)
				snprintf(hex + 2 * i, 3, "%02x", subject->exe.sha256[i]);
			json_object_set_new(bin, "sha256", json_string(hex));
		}
		json_object_set_new(ev, "binary", bin);
	}
	if (ok && sc) {
		uint8_t *packed = NULL;
		size_t plen;
		char *b64 = NULL;
		if (signed_context_pack(sc, &packed, &plen) == 0 && signed_base64_encode(packed, plen, &b64) == 0)
			json_object_set_new(ev, "signed_context", json_string(b64));
		free(packed);
		free(b64);
	}
	audit_emit(s->o.audit, "identity_issued", ev);
	json_decref(ev);
}

/* The audit line (with the signature once there is one) and cleanup. */
static void job_finish(struct id_job *j)
{
	struct idservice *s = j->s;
	if (s->o.audit)
		audit_issued(s, j->request_id, false, j->ok, j->reason, j->message, &j->tuple, &j->vf,
			     j->ok && j->signed_ ? &j->sc : NULL);
	if (j->ok)
		signed_context_clear(&j->sc);
	verified_flow_release(&j->vf);
	free(j);
	s->inflight--;
	service_maybe_done(s);
}

static void on_identity(struct proto_server *srv, struct proto_request *req, void *ud)
{
	struct idservice *s = ud;
	s->stats.requests++;
	struct id_job *j = calloc(1, sizeof(*j));
	if (!j) {
		(void)proto_request_fail(req, REASON_INTERNAL_ERROR, "out of memory");
		return;
	}
	j->s = s;
	j->req = req;
	j->tuple = req->tuple;
	memcpy(j->nonce, req->nonce, sizeof(j->nonce));
	j->request_id = req->request_id;
	j->cookie = req->socket_cookie;
	j->mac = proto_request_wants_mac(req);
	j->work.data = j;
	if (uv_queue_work(s->loop, &j->work, job_work, job_after) < 0) {
		free(j);
		(void)proto_request_fail(req, REASON_INTERNAL_ERROR, "thread pool");
		return;
	}
	s->inflight++;
}

/* ---- connect-time pushes (protocol 1.3) ---- */

#define PUSH_TARGETS 4

struct push_out {
	uint8_t *context; /* encoded with this target's nonce and push id */
	size_t len;
	uint8_t mac[PROTO_MAC_LEN];
	uint8_t signature[PROTO_SIG_LEN];
	bool ok;
	bool sent;
};

struct push_job {
	uv_work_t work;
	struct idservice *s;
	uint64_t cookie;
	int fd;
	size_t n;
	struct proto_push_target t[PUSH_TARGETS];
	struct push_out out[PUSH_TARGETS];
	enum reason reason;
	const char *why; /* detail when not pushed */
	struct proto_tuple tuple;
	bool cached; /* vf from the per-process cache: not verified again */
	struct verified_flow vf;
};

/* Verified identities by process (key and the image's exe tuple as the
 * notifier recorded it at the connect), for IDSERVICE_PUSH_CACHE_MS: the
 * next connect of the same process with the same image is pushed from the
 * loop at once (the context built, MAC'd and sent there: a few us), without
 * the thread pool's round trip and the re-verification. The record itself
 * was made from the live caller, blocked in this very connect (its pidfs
 * key is never reused), so a hit is the same process running the same
 * image; the cache only skips re-proving the chain within that window. A
 * process that exec'd has another exe tuple: a miss. Filled by the workers
 * (mutex), read on the loop. */
#define PUSH_CACHE 256

struct push_cache_entry {
	bool used;
	uint64_t expires; /* now_mono_ns() */
	struct procref subject;   /* recorded, hashed */
	struct procref *ancestors;
	size_t n_ancestors;
};

struct push_cache {
	pthread_mutex_t lock;
	struct push_cache_entry e[PUSH_CACHE];
	uint64_t hits, misses;
};

static size_t push_cache_slot(const char *key)
{
	uint64_t h = 1469598103934665603ull;
	for (const char *c = key; *c; c++)
		h = (h ^ (uint8_t)*c) * 1099511628211ull;
	return (size_t)(h % PUSH_CACHE);
}

static bool same_image(const struct exe_tuple *a, const struct exe_tuple *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns &&
	       a->ctime_ns == b->ctime_ns && a->deleted == b->deleted && a->memfd == b->memfd &&
	       !a->maps_mismatch && !b->maps_mismatch;
}

static void push_cache_entry_clear(struct push_cache_entry *e)
{
	free(e->ancestors);
	memset(e, 0, sizeof(*e));
}

static void push_cache_put(struct push_cache *c, const struct verified_flow *vf, uint64_t ttl_ns)
{
	if (!c || !vf->have_subject || !vf->subject.exe.hashed)
		return;
	struct procref *anc = NULL;
	if (vf->n_ancestors && !(anc = malloc(vf->n_ancestors * sizeof(*anc))))
		return;
	for (size_t i = 0; i < vf->n_ancestors; i++)
		procref_copy_recorded(&anc[i], &vf->ancestors[i]);
	pthread_mutex_lock(&c->lock);
	struct push_cache_entry *e = &c->e[push_cache_slot(vf->subject.key)];
	push_cache_entry_clear(e);
	e->used = true;
	e->expires = now_mono_ns() + ttl_ns;
	procref_copy_recorded(&e->subject, &vf->subject);
	e->ancestors = anc;
	e->n_ancestors = vf->n_ancestors;
	pthread_mutex_unlock(&c->lock);
}

/* A copy of the cached identity of rec's process (same key, same image,
 * not expired) into vf (verified_flow_release frees it); false on a miss. */
static bool push_cache_get(struct push_cache *c, const struct procref *rec, struct verified_flow *vf)
{
	if (!c)
		return false;
	bool hit = false;
	pthread_mutex_lock(&c->lock);
	struct push_cache_entry *e = &c->e[push_cache_slot(rec->key)];
	if (e->used && e->expires > now_mono_ns() && strcmp(e->subject.key, rec->key) == 0 &&
	    same_image(&e->subject.exe, &rec->exe)) {
		memset(vf, 0, sizeof(*vf));
		if (!e->n_ancestors || (vf->ancestors = calloc(e->n_ancestors, sizeof(*vf->ancestors)))) {
			procref_copy_recorded(&vf->subject, &e->subject);
			vf->subject.pidfd = -1;
			for (size_t i = 0; i < e->n_ancestors; i++)
				procref_copy_recorded(&vf->ancestors[i], &e->ancestors[i]);
			vf->n_ancestors = e->n_ancestors;
			vf->have_subject = true;
			vf->reason = REASON_OK;
			vf->source = ATTRIBUTION_SOURCE_REGISTRY;
			vf->chain = FLOW_CHAIN_SUBJECT_HIT;
			hit = true;
		}
	}
	if (hit)
		c->hits++;
	else
		c->misses++;
	pthread_mutex_unlock(&c->lock);
	return hit;
}

static void push_cache_free(struct push_cache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < PUSH_CACHE; i++)
		push_cache_entry_clear(&c->e[i]);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* The socket's tuple once its connect completed: local = src, peer = dst,
 * what the net side sees when it accepts the flow (no address translation
 * between the two; a flow DNATed on its way does not match and is asked
 * for). The caller's connect was CONTINUEd just before the job was queued;
 * it may not have run yet, or be in SYN_SENT. Bounded wait. Nothing here
 * may change what the workload sees of its own socket: no SO_ERROR (reading
 * it clears the error the caller's connect is to report), only
 * getsockname, getpeername, TCP_INFO and poll. */
static int push_tuple(int fd, struct proto_tuple *out)
{
	uint64_t deadline = now_mono_ns() + IDSERVICE_PUSH_TUPLE_WAIT_MS * 1000000ull;
	bool was_connecting = false;
	for (;;) {
		struct tcp_info ti;
		socklen_t tl = sizeof(ti);
		memset(&ti, 0, sizeof(ti));
		if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) < 0)
			return -errno;
		if (ti.tcpi_state == TCP_SYN_SENT) {
			was_connecting = true;
		} else if (ti.tcpi_state == TCP_CLOSE) {
			if (was_connecting)
				return -ECONNREFUSED; /* the connect failed: nothing to push */
		} else if (ti.tcpi_state != TCP_LISTEN) {
			struct sockaddr_storage l, p;
			socklen_t ll = sizeof(l), pl = sizeof(p);
			if (getsockname(fd, (struct sockaddr *)&l, &ll) < 0 || getpeername(fd, (struct sockaddr *)&p, &pl) < 0)
				return -errno;
			if (l.ss_family != p.ss_family)
				return -EAFNOSUPPORT;
			memset(out, 0, sizeof(*out));
			out->proto = IPPROTO_TCP;
			out->family = (uint8_t)l.ss_family;
			if (l.ss_family == AF_INET) {
				const struct sockaddr_in *a = (const struct sockaddr_in *)&l, *b = (const struct sockaddr_in *)&p;
				memcpy(out->src, &a->sin_addr, 4);
				memcpy(out->dst, &b->sin_addr, 4);
				out->sport = ntohs(a->sin_port);
				out->dport = ntohs(b->sin_port);
				return 0;
			}
			if (l.ss_family == AF_INET6) {
				const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&l, *b = (const struct sockaddr_in6 *)&p;
				memcpy(out->src, &a->sin6_addr, 16);
				memcpy(out->dst, &b->sin6_addr, 16);
				out->sport = ntohs(a->sin6_port);
				out->dport = ntohs(b->sin6_port);
				return 0;
			}
			return -EAFNOSUPPORT;
		} else {
			return -EINVAL; /* a listener: no flow */
		}
		if (now_mono_ns() >= deadline)
			return -ETIMEDOUT;
		if (was_connecting) {
			/* POLLOUT when the handshake completes or fails (poll reads
			 * the error without clearing it) */
			struct pollfd pf = { .fd = fd, .events = POLLOUT };
			(void)poll(&pf, 1, 1);
		} else {
			/* the caller's connect has not run yet */
			struct timespec ts = { 0, 50000 };
			nanosleep(&ts, NULL);
		}
	}
}

/* Each target's context (its nonce, its push id, the tuple), MAC'd. */
static void push_build(struct push_job *j)
{
	struct idservice *s = j->s;
	for (size_t i = 0; i < j->n; i++) {
		uint8_t nonce[PROTO_NONCE_LEN];
		push_nonce(j->t[i].seed, j->t[i].push_id, nonce);
		struct context_input in = {
			.topology = s->o.topology,
			.source = IDENTITY_SOURCE_DELEGATED,
			.subject = &j->vf.subject,
			.ancestors = j->vf.ancestors,
			.n_ancestors = j->vf.n_ancestors,
			.anchor = &s->anchor,
			.tuple = &j->tuple,
			.socket_cookie = j->cookie,
			.nonce = nonce,
			.request_id = j->t[i].push_id,
			.policy_generation = s->o.policy_generation,
			.lifetime_ns = s->o.context_lifetime_ns,
		};
		struct push_out *o = &j->out[i];
		if (context_encode(&in, &o->context, &o->len) < 0)
			continue;
		context_mac(j->t[i].mac_key, o->context, o->len, o->mac);
		o->ok = true;
	}
}

static void push_work(uv_work_t *uw)
{
	struct push_job *j = uw->data;
	struct idservice *s = j->s;
	j->reason = REASON_IDENTITY_UNAVAILABLE;
	if (!j->cached) {
		struct verify_ctx *w = flow_verifier_ctx_take(s->verifier, false);
		if (!w) {
			j->why = "attribution context";
			return;
		}
		(void)flow_verifier_verify_cookie(s->verifier, w, j->cookie, &j->vf);
		flow_verifier_ctx_put(s->verifier, w);
		if (j->vf.reason != REASON_OK) {
			j->reason = j->vf.reason;
			j->why = "connector not verified";
			return;
		}
		/* ancestors carry their hash (a policy may pin one), as on the feed */
		for (size_t i = 0; i < j->vf.n_ancestors; i++)
			(void)flow_verifier_hash_hop(s->verifier, &j->vf.ancestors[i]);
		push_cache_put(s->pcache, &j->vf, IDSERVICE_PUSH_CACHE_MS * 1000000ull);
	}
	int r = push_tuple(j->fd, &j->tuple);
	if (r < 0) {
		j->why = r == -ETIMEDOUT ? "connect not complete within the wait" : "no tuple (connect failed)";
		return;
	}
	push_build(j);
	j->reason = REASON_OK;
}

static void push_finish(struct push_job *j)
{
	struct idservice *s = j->s;
	for (size_t i = 0; i < j->n; i++) {
		free(j->out[i].context);
		proto_push_target_release(&j->t[i]);
	}
	verified_flow_release(&j->vf);
	close(j->fd);
	free(j);
	s->push_inflight--;
	s->inflight--;
	service_maybe_done(s);
}

/* The signatures of the pushes sent, for the audit, in the thread pool:
 * the loop is the connect notifier's too, and 20-50 us of Ed25519 and an
 * audit line per connect there delay the next connect's notification. */
static void push_sign_work(uv_work_t *uw)
{
	struct push_job *j = uw->data;
	struct idservice *s = j->s;
	for (size_t i = 0; i < j->n; i++) {
		if (!j->out[i].sent)
			continue;
		struct signed_context sc = { .context = j->out[i].context, .context_len = j->out[i].len };
		sign_detached(s->instance, SIGN_DOMAIN_CONTEXT, sc.context, sc.context_len, j->out[i].signature);
		memcpy(sc.signature, j->out[i].signature, PROTO_SIG_LEN);
		memcpy(sc.key_id, s->instance->id, PROTO_KEY_ID_LEN);
		if (s->o.audit) /* thread-safe */
			audit_issued(s, j->t[i].push_id, true, true, REASON_OK, NULL, &j->tuple, &j->vf, &sc);
	}
}

static void push_sign_after(uv_work_t *uw, int status)
{
	struct push_job *j = uw->data;
	struct idservice *s = j->s;
	for (size_t i = 0; status == 0 && i < j->n; i++) {
		if (!j->out[i].sent)
			continue;
		struct signed_context sc = { .context = j->out[i].context, .context_len = j->out[i].len };
		memcpy(sc.signature, j->out[i].signature, PROTO_SIG_LEN);
		memcpy(sc.key_id, s->instance->id, PROTO_KEY_ID_LEN);
		(void)proto_push_signature(&j->t[i], &sc);
	}
	push_finish(j);
}

/* On the loop: the pushes go out (the net side may be waiting), then the
 * signatures are made in the thread pool and follow. */
static void push_after(uv_work_t *uw, int status)
{
	struct push_job *j = uw->data;
	struct idservice *s = j->s;
	size_t sent = 0;
	if (status == 0 && j->reason == REASON_OK && !s->stopping)
		for (size_t i = 0; i < j->n; i++)
			if (j->out[i].ok &&
			    proto_push_send(&j->t[i], j->out[i].context, j->out[i].len, j->out[i].mac, s->instance->id) == 0)
				j->out[i].sent = true, sent++;
	if (sent) {
		s->stats.pushed += sent;
		if (uv_queue_work(s->loop, &j->work, push_sign_work, push_sign_after) == 0)
			return;
		push_sign_work(&j->work); /* the pool refused: here, then */
		push_sign_after(&j->work, 0);
		return;
	}
	s->stats.push_failed++;
	log_debug("identity push: cookie %llu not pushed: %s (%s)", (unsigned long long)j->cookie,
		  j->why ? j->why : "the channel is gone", reason_word(j->reason));
	push_finish(j);
}

void idservice_note_connect(struct idservice *s, uint64_t cookie, int sockfd)
{
	if (!s || s->stopping || s->o.no_push || !proto_server_push_wanted(s->server))
		return;
	s->stats.push_noted++;
	int type = 0;
	socklen_t tl = sizeof(type);
	if (s->push_inflight >= IDSERVICE_PUSH_MAX || getsockopt(sockfd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 ||
	    type != SOCK_STREAM) {
		s->stats.push_dropped++;
		return;
	}
	struct push_job *j = calloc(1, sizeof(*j));
	if (!j || (j->fd = fcntl(sockfd, F_DUPFD_CLOEXEC, 3)) < 0) {
		free(j);
		s->stats.push_dropped++;
		return;
	}
	j->s = s;
	j->cookie = cookie;
	j->n = proto_server_push_targets(s->server, j->t, PUSH_TARGETS);
	j->work.data = j;
	s->push_inflight++;
	s->inflight++;
	/* The same process again with the same image (cached): no
	 * verification. When its connect already completed (it ran before we
	 * got here), pushed from here at once; otherwise the thread pool only
	 * waits for the tuple. A miss: the thread pool verifies and waits. */
	struct procref rec;
	if (j->n && s->pcache && cookie_registry_get(s->o.cookies, cookie, &rec) == 0) {
		j->cached = push_cache_get(s->pcache, &rec, &j->vf);
		procref_close(&rec);
		if (j->cached) {
			s->stats.push_cached++;
			struct tcp_info ti;
			socklen_t til = sizeof(ti);
			memset(&ti, 0, sizeof(ti));
			if (getsockopt(j->fd, IPPROTO_TCP, TCP_INFO, &ti, &til) == 0 && ti.tcpi_state == TCP_ESTABLISHED &&
			    push_tuple(j->fd, &j->tuple) == 0) {
				push_build(j);
				j->reason = REASON_OK;
				push_after(&j->work, 0);
				return;
			}
		}
	}
	if (!j->n || uv_queue_work(s->loop, &j->work, push_work, push_after) < 0) {
		s->stats.push_dropped++;
		push_finish(j);
	}
}

static void audit_anchor(struct idservice *s, const char *event)
{
	if (!s->o.audit)
		return;
	char id[PROTO_KEY_ID_HEX], hex[65] = "";
	key_id_hex(s->instance->id, id);
	for (int i = 0; s->anchor.exe.hashed && i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", s->anchor.exe.sha256[i]);
	uint8_t *packed = NULL;
	size_t plen;
	char *b64 = NULL;
	json_t *ev = json_pack("{s:i, s:s, s:s, s:{s:s, s:s}, s:s}", "pid", (int)s->anchor.pid, "process_key",
			       s->anchor.key, "instance_key_id", id, "binary", "path", s->anchor.exe.path, "sha256",
			       hex, "endpoint", s->o.endpoint);
	if (signed_cert_pack(&s->cert, &packed, &plen) == 0 && signed_base64_encode(packed, plen, &b64) == 0)
		json_object_set_new(ev, "anchor_certificate", json_string(b64));
	free(packed);
	free(b64);
	json_object_set_new(ev, "not_after", json_integer((json_int_t)(s->cert_not_after_ns / 1000000000ull)));
	audit_emit(s->o.audit, event, ev);
	json_decref(ev);
}

static void push_cache_free(struct push_cache *c);

static void service_free(struct idservice *s)
{
	push_cache_free(s->pcache);
	flow_verifier_free(s->verifier);
	signed_cert_clear(&s->cert);
	sign_key_free(s->instance);
	free((char *)s->o.endpoint);
	free((char *)s->o.provisioning_path);
	free(s);
}

/* --control-allow: a tcp peer must come from one of the listed sources.
 * (Unix peers are checked by uid; vsock peers are not listed here.) */
static bool peer_in_allow_list(const struct proto_peer *peer, void *userdata)
{
	const struct idservice *s = userdata;
	if (peer->is_unix || (peer->addr.ss_family != AF_INET && peer->addr.ss_family != AF_INET6))
		return true;
	struct netaddr a;
	if (netaddr_from_sockaddr((const struct sockaddr *)&peer->addr, &a) < 0)
		return false;
	for (size_t i = 0; i < s->o.n_allow_peers; i++)
		if (netcidr_contains(&s->o.allow_peers[i], &a))
			return true;
	return false;
}

/* Sign a certificate for this instance, valid from now, into s->cert. */
static int issue_cert(struct idservice *s, const struct sign_key *prov)
{
	struct signed_cert nc;
	struct cert_input ci = s->cert_in;
	ci.issued_at_ns = now_real_ns();
	int r = cert_issue(prov, &ci, &nc);
	if (r < 0)
		return r;
	signed_cert_clear(&s->cert);
	s->cert = nc;
	s->cert_issued_ns = ci.issued_at_ns;
	s->cert_not_after_ns = ci.issued_at_ns + (ci.validity_ns ? ci.validity_ns : PROTO_CERT_DEFAULT_VALIDITY_NS);
	return 0;
}

/* Renewal is due two thirds into the certificate's validity; a failed one
 * is tried again every minute (every tenth of what is left, if less)
 * until the certificate runs out, after which the net side denies every
 * flow (anchor_certificate_invalid) until one succeeds. */
static void renew_cb(uv_timer_t *t);

static void arm_renewal(struct idservice *s)
{
	if (!s->o.provisioning_path || !s->renew_timer_open || s->stopping)
		return;
	uint64_t now = now_real_ns(), life = s->cert_not_after_ns - s->cert_issued_ns;
	uint64_t due = s->cert_issued_ns + life / 3 * 2;
	uint64_t wait_ns = due > now ? due - now : 0;
	if (s->renew_failures) {
		uint64_t left = s->cert_not_after_ns > now ? s->cert_not_after_ns - now : 0;
		wait_ns = left / 10 < 60ull * 1000000000ull ? left / 10 : 60ull * 1000000000ull;
		if (wait_ns < 1000000000ull)
			wait_ns = 1000000000ull;
	}
	uv_timer_start(&s->renew_timer, renew_cb, wait_ns / 1000000 + 1, 0);
}

static void renew_cb(uv_timer_t *t)
{
	struct idservice *s = t->data;
	if (s->stopping)
		return;
	uint64_t now = now_real_ns();
	uint64_t due = s->cert_issued_ns + (s->cert_not_after_ns - s->cert_issued_ns) / 3 * 2;
	if (!s->renew_failures && now < due) { /* woke early (the timer is monotonic) */
		arm_renewal(s);
		return;
	}
	struct sign_key *prov = NULL;
	int r = provkey_load_secret(s->o.provisioning_path, &prov);
	if (r == 0) {
		r = issue_cert(s, prov);
		sign_key_free(prov);
	}
	if (r < 0) {
		s->renew_failures++;
		/* retried every second once it ran out: log attempts 1, 2, 4, 8, ... */
		if ((s->renew_failures & (s->renew_failures - 1)) == 0)
			log_error("identity service: renewing the anchor certificate (%s): %s; it %s at %llu (unix s); "
				  "%u failed attempt(s), retrying",
				  s->o.provisioning_path,
				  r == -EPERM ? "readable by group/others or not a regular file" : strerror(-r),
				  now > s->cert_not_after_ns ? "ran out" : "runs out",
				  (unsigned long long)(s->cert_not_after_ns / 1000000000ull), s->renew_failures);
		arm_renewal(s);
		return;
	}
	s->renew_failures = 0;
	s->stats.renewals++;
	int sent = proto_server_set_cert(s->server, &s->cert);
	log_info("identity service: anchor certificate renewed, valid until %llu (unix s); sent on %d connection(s)",
		 (unsigned long long)(s->cert_not_after_ns / 1000000000ull), sent);
	audit_anchor(s, "anchor_renewed");
	arm_renewal(s);
}

int idservice_start(uv_loop_t *loop, const struct idservice_opts *opts, struct idservice **out)
{
	if (!loop || !opts || !opts->endpoint || !opts->caps || !opts->members || !opts->provisioning || !out)
		return -EINVAL;
	int r = proto_crypto_init();
	if (r < 0)
		return r;
	struct idservice *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->loop = loop;
	s->o = *opts;
	s->o.endpoint = strdup(opts->endpoint);
	/* ours from here on: service_free() frees it on every path */
	s->o.provisioning_path = opts->provisioning_path ? strdup(opts->provisioning_path) : NULL;
	if (!s->o.topology)
		s->o.topology = PROTO_TOPOLOGY_SPLIT;
	if (!s->o.endpoint || (opts->provisioning_path && !s->o.provisioning_path)) {
		service_free(s);
		return -ENOMEM;
	}
	if ((r = sign_key_generate(&s->instance)) < 0) {
		service_free(s);
		return r;
	}
	/* The anchor: ourselves, with our own image hashed (once, before we
	 * serve: nothing is waiting on the loop yet). Its key is the member
	 * table's anchor key (same process). */
	struct procref self;
	if ((r = procref_open(opts->caps, getpid(), &self)) == 0 && (r = procref_hash_exe(&self, NULL)) < 0)
		procref_close(&self);
	if (r < 0) {
		log_error("identity service: the anchor's own ref: %s", strerror(-r));
		service_free(s);
		return r;
	}
	procref_copy_recorded(&s->anchor, &self);
	procref_close(&self);
	struct flow_verifier_config vc = {
		.caps = opts->caps,
		.candidates = FLOW_CANDIDATES_MEMBERS,
		.hash_cache_entries = 1024,
		.cookies = opts->cookies,
		.strict_socket_owner = opts->strict_socket_owner,
		.no_chain_cache = opts->no_chain_cache,
	};
	if ((r = flow_verifier_new(&vc, &s->verifier)) < 0) {
		service_free(s);
		return r;
	}
	flow_verifier_set_anchor(s->verifier, &s->anchor, -1, opts->members);
	struct procref table_anchor;
	members_anchor(opts->members, &table_anchor);
	if (strcmp(table_anchor.key, s->anchor.key)) {
		log_error("identity service: the member table's anchor is not this process");
		service_free(s);
		return -EINVAL;
	}
	sign_key_public(s->instance, &s->instance_pub);
	s->cert_in = (struct cert_input){ .instance = &s->instance_pub, .anchor = &s->anchor,
					  .topology = s->o.topology, .validity_ns = s->o.cert_validity_ns };
	if ((r = pidns_id_of_pid(getpid(), &s->cert_in.pidns)) < 0 || (r = issue_cert(s, opts->provisioning)) < 0) {
		log_error("identity service: issuing the anchor certificate: %s", strerror(-r));
		service_free(s);
		return r;
	}
	struct proto_server_opts so = {
		.no_push = opts->no_push,
		.peer_check = s->o.n_allow_peers ? peer_in_allow_list : NULL,
		.endpoint = s->o.endpoint,
		.socket_mode = opts->socket_mode ? opts->socket_mode : 0600,
		.caps = opts->caps,
		.check_uid = opts->check_uid,
		.peer_uid = opts->peer_uid,
		.cert = &s->cert,
		.instance = s->instance, /* clock samples (the net side measures skew) */
		.on_identity = on_identity,
		.userdata = s,
	};
	if ((r = proto_server_start(loop, &so, &s->server)) < 0) {
		log_error("identity service: listening on %s: %s", s->o.endpoint, strerror(-r));
		service_free(s);
		return r;
	}
	s->o.provisioning = NULL; /* not kept */
	if (!s->o.no_push && s->o.cookies && !getenv("TETHER_PUSH_NO_CACHE")) {
		s->pcache = calloc(1, sizeof(*s->pcache));
		if (s->pcache)
			pthread_mutex_init(&s->pcache->lock, NULL);
	}
	uv_timer_init(loop, &s->renew_timer);
	s->renew_timer.data = s;
	s->renew_timer_open = true;
	arm_renewal(s);
	audit_anchor(s, "anchor_established");
	*out = s;
	return 0;
}

static void service_maybe_done(struct idservice *s)
{
	if (!s->stopping || !s->server_stopped || s->inflight || s->renew_timer_open)
		return;
	void (*done)(void *) = s->done;
	void *ud = s->done_ud;
	service_free(s);
	if (done)
		done(ud);
}

static void on_server_stopped(void *ud)
{
	struct idservice *s = ud;
	s->server_stopped = true;
	service_maybe_done(s);
}

static void renew_timer_closed(uv_handle_t *h)
{
	struct idservice *s = h->data;
	s->renew_timer_open = false;
	service_maybe_done(s);
}

void idservice_stop(struct idservice *s, void (*done)(void *userdata), void *userdata)
{
	if (!s || s->stopping)
		return;
	s->stopping = true;
	s->done = done;
	s->done_ud = userdata;
	if (s->stats.push_noted)
		log_debug("identity service: %llu connects noted for pushes, %llu pushed (%llu from the per-process "
			 "cache), %llu not pushed, %llu dropped",
			 (unsigned long long)s->stats.push_noted, (unsigned long long)s->stats.pushed,
			 (unsigned long long)s->stats.push_cached, (unsigned long long)s->stats.push_failed,
			 (unsigned long long)s->stats.push_dropped);
	uv_close((uv_handle_t *)&s->renew_timer, renew_timer_closed);
	proto_server_stop(s->server, on_server_stopped, s);
}

const struct signed_cert *idservice_cert(const struct idservice *s)
{
	return &s->cert;
}

void idservice_instance_key(const struct idservice *s, struct pub_key *out)
{
	sign_key_public(s->instance, out);
}

void idservice_get_stats(const struct idservice *s, struct idservice_stats *out)
{
	*out = s->stats;
}
