/* idservice: see idservice.h. */
#include "proc-supervisor/idservice.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "identity/ancestry.h"
#include "identity/attribute.h"
#include "identity/exe.h"
#include "identity/procref.h"
#include "proto/server.h"
#include "proto/signer.h"

struct actx_pool_item {
	struct attribute_ctx *ctx;
	struct actx_pool_item *next;
};

struct idservice {
	uv_loop_t *loop;
	struct idservice_opts o;
	struct sign_key *instance;
	struct procref anchor; /* recorded, hashed */
	struct signed_cert cert;
	struct proto_server *server;
	struct exe_hash_cache *hashes;
	pthread_mutex_t pool_lock;
	struct actx_pool_item *pool;
	size_t inflight;
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
	struct signed_context sc;
	struct procref subject; /* recorded copy for the audit */
	bool have_subject;
	enum attribution_source source;
};

static struct attribute_ctx *pool_get(struct idservice *s)
{
	pthread_mutex_lock(&s->pool_lock);
	struct actx_pool_item *it = s->pool;
	if (it)
		s->pool = it->next;
	pthread_mutex_unlock(&s->pool_lock);
	if (it) {
		struct attribute_ctx *c = it->ctx;
		free(it);
		return c;
	}
	struct attribute_ctx *c = attribute_ctx_new(s->o.caps, s->o.cookies);
	if (c)
		attribute_ctx_set_registry_holder_check(c, s->o.strict_socket_owner);
	return c;
}

static void pool_put(struct idservice *s, struct attribute_ctx *c)
{
	struct actx_pool_item *it = malloc(sizeof(*it));
	if (!it) {
		attribute_ctx_free(c);
		return;
	}
	it->ctx = c;
	pthread_mutex_lock(&s->pool_lock);
	it->next = s->pool;
	s->pool = it;
	pthread_mutex_unlock(&s->pool_lock);
}

/* Hash the subject's running image; a registry hit is a recorded ref, so
 * the live process is re-opened and must be the same one — and then stays
 * open as the subject, so the walk starts from the live process instead
 * of opening it once more. */
static void hash_subject(struct idservice *s, struct attribution *a)
{
	if (a->subject.pidfd >= 0) {
		/* The tuple was just read from the live holder (the walk and
		 * its final liveness check follow). */
		(void)procref_hash_exe_read(&a->subject, s->hashes);
		return;
	}
	if (!a->subject_alive)
		return;
	struct procref live;
	if (procref_open(s->o.caps, a->subject.pid, &live) < 0)
		return;
	if (!strcmp(live.key, a->subject.key) && procref_hash_exe_read(&live, s->hashes) == 0 &&
	    live.exe.dev == a->subject.exe.dev && live.exe.ino == a->subject.exe.ino) {
		a->subject.exe.hashed = true;
		memcpy(a->subject.exe.sha256, live.exe.sha256, sizeof(live.exe.sha256));
		a->subject.pidfd = live.pidfd; /* released with the attribution */
		live.pidfd = -1;
	}
	procref_close(&live);
}

static void job_work(uv_work_t *w)
{
	struct id_job *j = w->data;
	struct idservice *s = j->s;
	j->reason = REASON_IDENTITY_UNAVAILABLE;
	struct attribute_ctx *ctx = pool_get(s);
	if (!ctx) {
		snprintf(j->message, sizeof(j->message), "attribution context: %s", strerror(errno));
		return;
	}
	size_t cap = 256;
	pid_t *pids = NULL;
	size_t n;
	for (;;) {
		pid_t *np = realloc(pids, cap * sizeof(*pids));
		if (!np) {
			free(pids);
			pool_put(s, ctx);
			snprintf(j->message, sizeof(j->message), "out of memory");
			return;
		}
		pids = np;
		n = members_live_pids(s->o.members, pids, cap);
		if (n <= cap)
			break;
		cap = n + 64;
	}
	/* The wire tuple is the workload socket's (local = src, peer = dst). */
	struct flow_tuple ft = { .proto = j->tuple.proto, .family = j->tuple.family,
				 .sport = j->tuple.sport, .dport = j->tuple.dport };
	memcpy(ft.src.raw, j->tuple.src, 16);
	memcpy(ft.dst.raw, j->tuple.dst, 16);
	struct attribution a;
	int r = attribute_flow(ctx, &ft, pids, n, &a);
	free(pids);
	pool_put(s, ctx);
	j->source = a.source;
	if (r < 0) {
		j->reason = a.reason != REASON_OK ? a.reason : REASON_IDENTITY_UNAVAILABLE;
		snprintf(j->message, sizeof(j->message), "%s",
			 r == -ENOENT   ? "no socket for this flow"
			 : r == -ESRCH  ? "no process of the tree holds the socket"
			 : r == -ENOTUNIQ ? "the socket is held by different binaries"
					  : strerror(-r));
		attribution_release(&a);
		return;
	}
	hash_subject(s, &a);
	procref_copy_recorded(&j->subject, &a.subject);
	j->have_subject = true;

	struct ancestry_result anc;
	/* we are the anchor: alive while we answer, no need to re-open */
	struct ancestry_opts ao = { .anchor_is_self = true };
	r = ancestry_walk(s->o.caps, s->o.members, &a.subject, &ao, &anc);
	if (r < 0 || !anc.anchored || anc.n == 0) {
		j->reason = anc.reason != REASON_OK ? anc.reason : REASON_ANCESTRY_NOT_ANCHORED;
		snprintf(j->message, sizeof(j->message), "%s", anc.detail[0] ? anc.detail : "not anchored");
		ancestry_result_free(&anc);
		attribution_release(&a);
		return;
	}
	/* hops [0..n-2] are the ancestors below the anchor (parent first). */
	size_t na = anc.n - 1;
	struct procref *ancestors = na ? calloc(na, sizeof(*ancestors)) : NULL;
	if (na && !ancestors) {
		ancestry_result_free(&anc);
		attribution_release(&a);
		snprintf(j->message, sizeof(j->message), "out of memory");
		return;
	}
	for (size_t i = 0; i < na; i++)
		ancestors[i] = anc.hops[i].ref;
	struct context_input in = {
		.topology = s->o.topology,
		.source = IDENTITY_SOURCE_DELEGATED,
		.subject = &j->subject,
		.ancestors = ancestors,
		.n_ancestors = na,
		.anchor = &s->anchor,
		.tuple = &j->tuple,
		.socket_cookie = a.socket_found ? a.sock.cookie : j->cookie,
		.nonce = j->nonce,
		.request_id = j->request_id,
		.policy_generation = s->o.policy_generation,
		.lifetime_ns = s->o.context_lifetime_ns,
	};
	r = context_sign(s->instance, &in, &j->sc);
	free(ancestors);
	ancestry_result_free(&anc);
	attribution_release(&a);
	if (r < 0) {
		j->reason = REASON_INTERNAL_ERROR;
		snprintf(j->message, sizeof(j->message), "signing: %s", strerror(-r));
		return;
	}
	j->ok = true;
	j->reason = REASON_OK;
}

static void service_maybe_done(struct idservice *s);

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
		(void)proto_request_reply(j->req, &j->sc);
	} else {
		s->stats.refused++;
		(void)proto_request_fail(j->req, j->reason, j->message);
	}
	if (s->o.audit) {
		json_t *ev = json_pack("{s:I, s:s, s:s, s:s}", "request_id", (json_int_t)j->request_id, "reason",
				       j->ok ? "ok" : reason_word(j->reason), "identity_source", "delegated",
				       "attribution", attribution_source_word(j->source));
		char tb[160];
		proto_tuple_format(&j->tuple, tb, sizeof(tb));
		json_object_set_new(ev, "flow", json_string(tb));
		if (!j->ok)
			json_object_set_new(ev, "message", json_string(j->message));
		if (j->have_subject) {
			json_object_set_new(ev, "pid", json_integer(j->subject.pid));
			json_object_set_new(ev, "process_key", json_string(j->subject.key));
			json_t *bin = json_pack("{s:s}", "path", j->subject.exe.path);
			if (j->subject.exe.hashed) {
				char hex[65];
				for (int i = 0; i < 32; i++)
					snprintf(hex + 2 * i, 3, "%02x", j->subject.exe.sha256[i]);
				json_object_set_new(bin, "sha256", json_string(hex));
			}
			json_object_set_new(ev, "binary", bin);
		}
		if (j->ok) {
			uint8_t *packed = NULL;
			size_t plen;
			char *b64 = NULL;
			if (signed_context_pack(&j->sc, &packed, &plen) == 0 &&
			    signed_base64_encode(packed, plen, &b64) == 0)
				json_object_set_new(ev, "signed_context", json_string(b64));
			free(packed);
			free(b64);
		}
		audit_emit(s->o.audit, "identity_issued", ev);
		json_decref(ev);
	}
	if (j->ok)
		signed_context_clear(&j->sc);
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
	j->work.data = j;
	if (uv_queue_work(s->loop, &j->work, job_work, job_after) < 0) {
		free(j);
		(void)proto_request_fail(req, REASON_INTERNAL_ERROR, "thread pool");
		return;
	}
	s->inflight++;
}

static void audit_anchor(struct idservice *s)
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
	audit_emit(s->o.audit, "anchor_established", ev);
	json_decref(ev);
}

static void service_free(struct idservice *s)
{
	while (s->pool) {
		struct actx_pool_item *it = s->pool;
		s->pool = it->next;
		attribute_ctx_free(it->ctx);
		free(it);
	}
	pthread_mutex_destroy(&s->pool_lock);
	if (s->hashes)
		exe_hash_cache_free(s->hashes);
	signed_cert_clear(&s->cert);
	sign_key_free(s->instance);
	free((char *)s->o.endpoint);
	free(s);
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
	if (!s->o.topology)
		s->o.topology = PROTO_TOPOLOGY_SPLIT;
	pthread_mutex_init(&s->pool_lock, NULL);
	s->hashes = exe_hash_cache_new(1024);
	if (!s->o.endpoint || !s->hashes) {
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
	struct procref table_anchor;
	members_anchor(opts->members, &table_anchor);
	if (strcmp(table_anchor.key, s->anchor.key)) {
		log_error("identity service: the member table's anchor is not this process");
		service_free(s);
		return -EINVAL;
	}
	struct pub_key ipub;
	sign_key_public(s->instance, &ipub);
	struct cert_input ci = { .instance = &ipub, .anchor = &s->anchor, .topology = s->o.topology };
	if ((r = pidns_id_of_pid(getpid(), &ci.pidns)) < 0 || (r = cert_issue(opts->provisioning, &ci, &s->cert)) < 0) {
		log_error("identity service: issuing the anchor certificate: %s", strerror(-r));
		service_free(s);
		return r;
	}
	struct proto_server_opts so = {
		.endpoint = s->o.endpoint,
		.socket_mode = opts->socket_mode ? opts->socket_mode : 0600,
		.caps = opts->caps,
		.check_uid = opts->check_uid,
		.peer_uid = opts->peer_uid,
		.cert = &s->cert,
		.on_identity = on_identity,
		.userdata = s,
	};
	if ((r = proto_server_start(loop, &so, &s->server)) < 0) {
		log_error("identity service: listening on %s: %s", s->o.endpoint, strerror(-r));
		service_free(s);
		return r;
	}
	s->o.provisioning = NULL; /* not kept */
	audit_anchor(s);
	*out = s;
	return 0;
}

static void service_maybe_done(struct idservice *s)
{
	if (!s->stopping || !s->server_stopped || s->inflight)
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

void idservice_stop(struct idservice *s, void (*done)(void *userdata), void *userdata)
{
	if (!s || s->stopping)
		return;
	s->stopping = true;
	s->done = done;
	s->done_ud = userdata;
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
