/* idservice: see idservice.h. */
#include "proc-supervisor/idservice.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "identity/ancestry.h"
#include "identity/attribute.h"
#include "identity/chain.h"
#include "identity/exe.h"
#include "identity/procref.h"
#include "proto/server.h"
#include "proto/signer.h"

/* Pinned chains remembered per worker (identity/chain.h): a subject this
 * worker answered for, its hash, and its chain below the anchor. */
#define ID_CHAIN_ENTRIES 8

struct chain_entry {
	bool used;
	struct procref subj;       /* pinned (pidfd owned); live exe tuple, hashed */
	struct pinned_chain chain; /* hops below the anchor, parent first */
	unsigned stamp;            /* LRU */
};

/* What a thread-pool job borrows: an attribution context and the chains
 * it pinned (no lock is held across procfs I/O). */
struct id_worker {
	struct attribute_ctx *ctx;
	int proc_fd;
	struct chain_entry chains[ID_CHAIN_ENTRIES];
	unsigned clock;
	struct id_worker *next;
};

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
	struct exe_hash_cache *hashes;
	pthread_mutex_t pool_lock;
	struct id_worker *pool;
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
	enum { CHAIN_WALKED, CHAIN_SUBJECT_HIT, CHAIN_PARENT_HIT } chain;
};

static void chain_entry_drop(struct chain_entry *e)
{
	if (!e->used)
		return;
	procref_close(&e->subj);
	chain_release(&e->chain);
	memset(e, 0, sizeof(*e));
}

static void worker_free(struct id_worker *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < ID_CHAIN_ENTRIES; i++)
		chain_entry_drop(&w->chains[i]);
	attribute_ctx_free(w->ctx);
	if (w->proc_fd >= 0)
		close(w->proc_fd);
	free(w);
}

static struct id_worker *pool_get(struct idservice *s)
{
	pthread_mutex_lock(&s->pool_lock);
	struct id_worker *w = s->pool;
	if (w)
		s->pool = w->next;
	pthread_mutex_unlock(&s->pool_lock);
	if (w)
		return w;
	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	w->ctx = attribute_ctx_new(s->o.caps, s->o.cookies);
	if (!w->ctx || w->proc_fd < 0) {
		int e = errno;
		worker_free(w);
		errno = e;
		return NULL;
	}
	attribute_ctx_set_registry_holder_check(w->ctx, s->o.strict_socket_owner);
	/* A registry hit's liveness is proved by hash_subject's re-open or a
	 * pinned chain, not by a separate open of its own. */
	attribute_ctx_set_check_alive(w->ctx, false);
	return w;
}

static void pool_put(struct idservice *s, struct id_worker *w)
{
	pthread_mutex_lock(&s->pool_lock);
	w->next = s->pool;
	s->pool = w;
	pthread_mutex_unlock(&s->pool_lock);
}

/* Hash the subject's running image; a registry hit is a recorded ref, so
 * the live process is re-opened and must be the same one — and then stays
 * open as the subject, so the walk starts from the live process instead
 * of opening it once more. *live_exe is the tuple read from the live
 * process (hashed when the hash is known). */
static void hash_subject(struct idservice *s, struct attribution *a, struct exe_tuple *live_exe)
{
	memset(live_exe, 0, sizeof(*live_exe));
	if (a->subject.pidfd >= 0) {
		/* The tuple was just read from the live holder (the walk and
		 * its final liveness check follow). */
		(void)procref_hash_exe_read(&a->subject, s->hashes);
		*live_exe = a->subject.exe;
		return;
	}
	/* (Not gated on the attribution's liveness check, which the service
	 * turns off: this open is that check.) */
	struct procref live;
	if (procref_open(s->o.caps, a->subject.pid, &live) < 0)
		return;
	if (!strcmp(live.key, a->subject.key) && procref_hash_exe_read(&live, s->hashes) == 0 &&
	    live.exe.dev == a->subject.exe.dev && live.exe.ino == a->subject.exe.ino) {
		a->subject.exe.hashed = true;
		memcpy(a->subject.exe.sha256, live.exe.sha256, sizeof(live.exe.sha256));
		a->subject.pidfd = live.pidfd; /* released with the attribution */
		live.pidfd = -1;
		*live_exe = live.exe;
	}
	procref_close(&live);
}

/* ---------- pinned chains (identity/chain.h) ----------
 *
 * A successful walk whose hops are all live pins the subject and its hops
 * with pidfds in the worker. A later request is answered from that entry
 * only after everything the walk proves is proved again:
 *   - the subject's membership record (not adopted; recorded parent = the
 *     chain's first hop, or the anchor for a chain of none; an unrecorded
 *     child of the anchor is left to the walk), its cgroup when the table
 *     uses one;
 *   - its live ppid names the first pinned hop, every hop runs the same
 *     exe file version and is alive after its child named it, the last
 *     hop's parent is us (the anchor), and the subject is alive at the end.
 * Same subject again (by key): its exe, as recorded by the registry or
 * just read by the holder search, and as it is now, must be the pinned file
 * version, so the pinned hash is its hash. A new subject whose parent is
 * the first hop of a pinned chain reuses that chain with its own freshly
 * read and hashed image. Any failure drops to the full walk. */

static bool plain_exe(const struct exe_tuple *x)
{
	return x->path[0] && !x->deleted && !x->memfd && !x->maps_mismatch;
}

/* c below subj (live), whose live ppid was just read (ppid, pns). */
static int chain_prove(struct idservice *s, struct id_worker *w, const struct procref *subj,
		       const struct pinned_chain *c, pid_t ppid, bool pns)
{
	struct member_entry me;
	if (members_lookup_key(s->o.members, subj->key, &me) == 0) {
		const char *parent = c->n ? c->hops[0].key : s->anchor.key;
		if (me.join == MEMBER_ADOPTED || me.join == MEMBER_ANCHOR || strcmp(me.parent_key, parent) != 0)
			return -ESTALE;
	} else if (c->n == 0) {
		return -ESTALE; /* an unrecorded child of the anchor: the walk decides */
	}
	if (chain_verify(s->o.caps, w->proc_fd, s->o.members, c, subj, ppid, pns, &s->anchor, -1) < 0)
		return -ESTALE;
	return pidfd_is_alive(subj->pidfd) == 0 ? 0 : -ESTALE;
}

/* The same subject again: the entry proved, or NULL (a failed entry is dropped). */
static struct chain_entry *chain_subject_hit(struct idservice *s, struct id_worker *w,
					     const struct attribution *a)
{
	for (size_t i = 0; i < ID_CHAIN_ENTRIES; i++) {
		struct chain_entry *e = &w->chains[i];
		if (!e->used || strcmp(e->subj.key, a->subject.key) != 0)
			continue;
		const struct exe_tuple *x = &a->subject.exe;
		pid_t ppid;
		bool pns;
		if (plain_exe(x) && exe_tuple_same_file(x, &e->subj.exe) && !strcmp(x->path, e->subj.exe.path) &&
		    chain_exe_unchanged(w->proc_fd, e->subj.procfs_pid, &e->subj.exe) == 0 &&
		    chain_live_ppid(s->o.caps, w->proc_fd, &e->subj, &ppid, &pns) == 0 &&
		    chain_prove(s, w, &e->subj, &e->chain, ppid, pns) == 0) {
			e->stamp = ++w->clock;
			return e;
		}
		chain_entry_drop(e);
		return NULL;
	}
	return NULL;
}

/* A new subject (live, hashed) under the first hop of a pinned chain. */
static struct chain_entry *chain_parent_hit(struct idservice *s, struct id_worker *w,
					    const struct procref *subj)
{
	pid_t ppid;
	bool pns;
	if (subj->pidfd < 0 || chain_live_ppid(s->o.caps, w->proc_fd, subj, &ppid, &pns) < 0)
		return NULL;
	for (size_t i = 0; i < ID_CHAIN_ENTRIES; i++) {
		struct chain_entry *e = &w->chains[i];
		if (!e->used || e->chain.n == 0 || !chain_ppid_is(ppid, pns, &e->chain.hops[0]))
			continue;
		if (chain_prove(s, w, subj, &e->chain, ppid, pns) < 0)
			return NULL; /* the subject's or the chain's: the walk decides */
		e->stamp = ++w->clock;
		return e;
	}
	return NULL;
}

/* Remember subj (live, exe as read now and hashed) with chain c (moved in:
 * c is left empty). */
static void chain_store(struct id_worker *w, const struct procref *subj, const struct exe_tuple *exe,
			struct pinned_chain *c, const struct chain_entry *keep)
{
	if (subj->pidfd < 0 || !exe->hashed || !plain_exe(exe)) {
		chain_release(c);
		return;
	}
	struct chain_entry *e = NULL;
	for (size_t i = 0; i < ID_CHAIN_ENTRIES; i++) {
		struct chain_entry *x = &w->chains[i];
		if (x == keep)
			continue;
		if (x->used && !strcmp(x->subj.key, subj->key)) {
			e = x;
			break;
		}
		if (!e || (e->used && (!x->used || x->stamp < e->stamp)))
			e = x;
	}
	if (!e) {
		chain_release(c);
		return;
	}
	chain_entry_drop(e);
	procref_copy_recorded(&e->subj, subj);
	e->subj.exe = *exe;
	e->subj.pidfd = fcntl(subj->pidfd, F_DUPFD_CLOEXEC, 3);
	if (e->subj.pidfd < 0) {
		chain_release(c);
		memset(e, 0, sizeof(*e));
		return;
	}
	e->chain = *c;
	c->n = 0; /* the pidfds moved into the entry */
	e->used = true;
	e->stamp = ++w->clock;
}

static void job_work(uv_work_t *uw)
{
	struct id_job *j = uw->data;
	struct idservice *s = j->s;
	j->reason = REASON_IDENTITY_UNAVAILABLE;
	struct id_worker *w = pool_get(s);
	if (!w) {
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
			pool_put(s, w);
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
	int r = attribute_flow(w->ctx, &ft, pids, n, &a);
	free(pids);
	j->source = a.source;
	struct ancestry_result anc;
	memset(&anc, 0, sizeof(anc));
	struct procref *walked = NULL; /* the walk's ancestors, copied (owned) */
	if (r < 0) {
		j->reason = a.reason != REASON_OK ? a.reason : REASON_IDENTITY_UNAVAILABLE;
		snprintf(j->message, sizeof(j->message), "%s",
			 r == -ENOENT   ? "no socket for this flow"
			 : r == -ESRCH  ? "no process of the tree holds the socket"
			 : r == -ENOTUNIQ ? "the socket is held by different binaries"
					  : strerror(-r));
		goto out;
	}

	const struct pinned_chain *chain = NULL; /* the ancestors, when re-proved */
	struct chain_entry *hit = s->o.no_chain_cache ? NULL : chain_subject_hit(s, w, &a);
	struct exe_tuple live_exe;
	live_exe.hashed = false;
	if (hit) {
		a.subject.exe.hashed = true;
		memcpy(a.subject.exe.sha256, hit->subj.exe.sha256, sizeof(a.subject.exe.sha256));
		chain = &hit->chain;
		j->chain = CHAIN_SUBJECT_HIT;
	} else {
		hash_subject(s, &a, &live_exe);
		hit = s->o.no_chain_cache || !live_exe.hashed ? NULL : chain_parent_hit(s, w, &a.subject);
		if (hit) {
			struct pinned_chain copy;
			if (chain_dup(&hit->chain, &copy) == 0)
				chain_store(w, &a.subject, &live_exe, &copy, hit);
			chain = &hit->chain; /* chain_store never evicts `hit` */
			j->chain = CHAIN_PARENT_HIT;
		}
	}
	procref_copy_recorded(&j->subject, &a.subject);
	j->have_subject = true;

	size_t na;
	const struct procref *ancestors;
	if (chain) {
		na = chain->n;
		ancestors = chain->hops;
	} else {
		/* we are the anchor: alive while we answer, no need to re-open */
		struct ancestry_opts ao = { .anchor_is_self = true };
		r = ancestry_walk(s->o.caps, s->o.members, &a.subject, &ao, &anc);
		if (r < 0 || !anc.anchored || anc.n == 0) {
			j->reason = anc.reason != REASON_OK ? anc.reason : REASON_ANCESTRY_NOT_ANCHORED;
			snprintf(j->message, sizeof(j->message), "%s", anc.detail[0] ? anc.detail : "not anchored");
			goto out;
		}
		/* hops [0..n-2] are the ancestors below the anchor (parent first). */
		na = anc.n - 1;
		walked = na ? calloc(na, sizeof(*walked)) : NULL;
		if (na && !walked) {
			snprintf(j->message, sizeof(j->message), "out of memory");
			goto out;
		}
		for (size_t i = 0; i < na; i++)
			walked[i] = anc.hops[i].ref;
		ancestors = walked;
		if (!s->o.no_chain_cache && live_exe.hashed) {
			struct pinned_chain pc;
			if (chain_pin_walk(s->o.caps, &anc, &pc) == 0)
				chain_store(w, &a.subject, &live_exe, &pc, NULL);
		}
	}
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
	if (r < 0) {
		j->reason = REASON_INTERNAL_ERROR;
		snprintf(j->message, sizeof(j->message), "signing: %s", strerror(-r));
		goto out;
	}
	j->ok = true;
	j->reason = REASON_OK;
out:
	free(walked);
	ancestry_result_free(&anc);
	attribution_release(&a);
	pool_put(s, w);
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
		s->stats.chain_subject_hits += j->chain == CHAIN_SUBJECT_HIT;
		s->stats.chain_parent_hits += j->chain == CHAIN_PARENT_HIT;
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

static void service_free(struct idservice *s)
{
	while (s->pool) {
		struct id_worker *w = s->pool;
		s->pool = w->next;
		worker_free(w);
	}
	pthread_mutex_destroy(&s->pool_lock);
	if (s->hashes)
		exe_hash_cache_free(s->hashes);
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
	pthread_mutex_init(&s->pool_lock, NULL);
	s->hashes = exe_hash_cache_new(1024);
	if (!s->o.endpoint || !s->hashes || (opts->provisioning_path && !s->o.provisioning_path)) {
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
	sign_key_public(s->instance, &s->instance_pub);
	s->cert_in = (struct cert_input){ .instance = &s->instance_pub, .anchor = &s->anchor,
					  .topology = s->o.topology, .validity_ns = s->o.cert_validity_ns };
	if ((r = pidns_id_of_pid(getpid(), &s->cert_in.pidns)) < 0 || (r = issue_cert(s, opts->provisioning)) < 0) {
		log_error("identity service: issuing the anchor certificate: %s", strerror(-r));
		service_free(s);
		return r;
	}
	struct proto_server_opts so = {
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
