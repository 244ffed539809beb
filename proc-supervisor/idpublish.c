/* idpublish: see idpublish.h. */
#include "proc-supervisor/idpublish.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "identity/idfeed.h"
#include "identity/verify.h"
#include "proc-supervisor/peercheck.h"
#include "proto/endpoint.h"

#define MAX_SUBS 8
#define BATCH 256
#define POLL_US 100
#define IDLE_MS 50

struct idpublish {
	uv_loop_t *loop;
	struct idpublish_opts o;
	char *path;
	struct peer_allow allow;
	int listen_fd;
	uv_poll_t poll;
	bool poll_open;
	struct flow_verifier *verifier;
	struct procref anchor;
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* under lock */
	uint64_t queue[IDPUBLISH_QUEUE];
	size_t q_head, q_len;
	bool stopping;
	bool sleeping; /* the worker waits on cond: the next note signals it */
	bool poll_mode; /* TETHER_IDFEED_WAKE=poll[:POLL_US:IDLE_US] */
	unsigned poll_us, idle_us;
	int subs[MAX_SUBS]; /* -1: free */
	atomic_int n_subs;
	struct idpublish_stats st;
	/* Published identities by process (key, image), for CACHE_MS: a
	 * note for a connect of the same process with the same image (as the
	 * notifier recorded it at this connect) is published from the loop at
	 * once, without waking the worker. Own lock (the loop and the worker). */
	pthread_mutex_t cache_lock;
	struct feed_cache_entry *cache; /* CACHE entries; NULL: off */
};

#define CACHE 512
#define CACHE_MS 1000

struct feed_cache_entry {
	bool used;
	uint64_t expires; /* now_mono_ns() */
	char key[PROCREF_KEY_MAX];
	struct exe_tuple exe; /* as verified (its image hashed) */
	char *rest;           /* the "id" line after `{"id":COOKIE,` */
	size_t rest_len;
};

static size_t cache_slot(const char *key)
{
	uint64_t h = 1469598103934665603ull;
	for (const char *c = key; *c; c++)
		h = (h ^ (uint8_t)*c) * 1099511628211ull;
	return (size_t)(h % CACHE);
}

static bool same_image(const struct exe_tuple *a, const struct exe_tuple *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns &&
	       a->ctime_ns == b->ctime_ns && a->deleted == b->deleted && a->memfd == b->memfd &&
	       !a->maps_mismatch && !b->maps_mismatch;
}

/* The worker verified subject's process: keep its line's body. */
static void cache_put(struct idpublish *p, const struct procref *subject, const struct flow_identity *id)
{
	if (!p->cache)
		return;
	char *line = NULL;
	size_t len = 0;
	static const char prefix[] = "{\"id\":0,";
	if (idfeed_encode_id(0, id, &line, &len) < 0)
		return;
	if (len <= sizeof(prefix) - 1 || memcmp(line, prefix, sizeof(prefix) - 1) != 0) {
		free(line); /* not the shape we splice into: no cache */
		return;
	}
	size_t rl = len - (sizeof(prefix) - 1);
	char *rest = malloc(rl);
	if (!rest) {
		free(line);
		return;
	}
	memcpy(rest, line + sizeof(prefix) - 1, rl);
	free(line);
	pthread_mutex_lock(&p->cache_lock);
	struct feed_cache_entry *e = &p->cache[cache_slot(subject->key)];
	free(e->rest);
	e->used = true;
	e->expires = now_mono_ns() + CACHE_MS * 1000000ull;
	strscpy(e->key, subject->key, sizeof(e->key));
	e->exe = subject->exe;
	e->rest = rest;
	e->rest_len = rl;
	pthread_mutex_unlock(&p->cache_lock);
}

/* The whole line for cookie from the cache, or NULL. */
static char *cache_line(struct idpublish *p, uint64_t cookie, const struct procref *rec, size_t *len)
{
	char *line = NULL;
	pthread_mutex_lock(&p->cache_lock);
	struct feed_cache_entry *e = &p->cache[cache_slot(rec->key)];
	if (e->used && e->expires > now_mono_ns() && strcmp(e->key, rec->key) == 0 && same_image(&e->exe, &rec->exe)) {
		char head[40];
		int hl = snprintf(head, sizeof(head), "{\"id\":%llu,", (unsigned long long)cookie);
		if ((line = malloc((size_t)hl + e->rest_len))) {
			memcpy(line, head, (size_t)hl);
			memcpy(line + hl, e->rest, e->rest_len);
			*len = (size_t)hl + e->rest_len;
		}
	}
	pthread_mutex_unlock(&p->cache_lock);
	return line;
}

/* ---------- the worker ---------- */

static struct flow_identity *identity_of(const struct verified_flow *vf)
{
	struct flow_identity *id = flow_identity_new();
	if (!id)
		return NULL;
	id->source = FLOW_SOURCE_LOCAL_PROCFS;
	id->pid = vf->subject.pid;
	if (!(id->binary_path = strdup(vf->subject.exe.path)) || !(id->process_key = strdup(vf->subject.key)))
		goto fail;
	if (!vf->subject.exe.hashed)
		goto fail; /* REASON_OK always has the subject's image hashed */
	hex_encode(vf->subject.exe.sha256, 32, id->sha256);
	for (size_t i = 0; i < vf->n_ancestors; i++) {
		const struct procref *a = &vf->ancestors[i];
		char h[65] = "";
		if (a->exe.hashed)
			hex_encode(a->exe.sha256, 32, h);
		if (flow_identity_add_ancestor(id, a->exe.path[0] ? a->exe.path : a->comm, a->pid, h) < 0)
			goto fail;
	}
	return id;
fail:
	flow_identity_free(id);
	return NULL;
}

/* Write buf to every subscriber; one that cannot take it whole is dropped
 * (a partial line would corrupt its stream). Under lock. */
static void broadcast(struct idpublish *p, const struct iovec *iov, int n_iov)
{
	size_t total = 0;
	for (int i = 0; i < n_iov; i++)
		total += iov[i].iov_len;
	for (int s = 0; s < MAX_SUBS; s++) {
		if (p->subs[s] < 0)
			continue;
		struct msghdr mh = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n_iov };
		ssize_t w = sendmsg(p->subs[s], &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0 || (size_t)w != total) {
			log_info("identity feed: dropping a subscriber (%s)",
				 w < 0 ? strerror(errno) : "it does not keep up");
			close(p->subs[s]);
			p->subs[s] = -1;
			atomic_fetch_sub(&p->n_subs, 1);
			p->st.subscriber_drops++;
		}
	}
}

static void *worker(void *arg)
{
	struct idpublish *p = arg;
	uint64_t batch[BATCH];
	struct verified_flow vf;
	memset(&vf, 0, sizeof(vf));
	struct verify_ctx *w = NULL;
	/* SCHED_BATCH: a woken worker does not preempt the notifier's loop
	 * or a workload thread. Measured with bench/spawn_connect
	 * (back-to-back connects, two CPUs): SCHED_OTHER about the same,
	 * SCHED_IDLE no better and starved on a busy machine.
	 * TETHER_IDFEED_SCHED=idle|other|nice19 for measurements. */
	const char *sp = getenv("TETHER_IDFEED_SCHED");
	int pol = sp && !strcmp(sp, "idle") ? SCHED_IDLE : sp && !strcmp(sp, "other") ? SCHED_OTHER : SCHED_BATCH;
	struct sched_param prm = { 0 };
	if (sp && !strcmp(sp, "nice19")) {
		pol = SCHED_OTHER;
		(void)setpriority(PRIO_PROCESS, (id_t)gettid(), 19);
	}
	(void)pthread_setschedparam(pthread_self(), pol, &prm);
	pthread_mutex_lock(&p->lock);
	for (;;) {
		/* By default the worker sleeps on the condition variable and
		 * each note that finds it asleep wakes it: the record is made at
		 * once, but the wakeup is paid on the notifier's loop after
		 * CONTINUE. TETHER_IDFEED_WAKE=poll[:POLL_US:IDLE_US]: while connects keep coming
		 * the worker polls the queue every POLL_US instead (the note then
		 * costs a mutex, never a cross-CPU wakeup), and sleeps after
		 * IDLE_MS without work; measured, records then arrive later than
		 * the proxy needs them at one client (docs/performance.md). */
		uint64_t idle_from = now_mono_ns();
		while (!p->stopping && p->q_len == 0) {
			if (!p->poll_mode || now_mono_ns() - idle_from > p->idle_us * 1000ull) {
				p->sleeping = true;
				while (!p->stopping && p->q_len == 0)
					pthread_cond_wait(&p->cond, &p->lock);
				p->sleeping = false;
				break;
			}
			pthread_mutex_unlock(&p->lock);
			struct timespec ts = { 0, (long)p->poll_us * 1000 };
			nanosleep(&ts, NULL);
			pthread_mutex_lock(&p->lock);
		}
		if (p->stopping)
			break;
		size_t n = 0;
		while (p->q_len && n < BATCH) {
			batch[n++] = p->queue[p->q_head];
			p->q_head = (p->q_head + 1) % IDPUBLISH_QUEUE;
			p->q_len--;
		}
		/* Announce the batch first: a reader that sees the flow before
		 * its record knows one is coming. */
		struct iovec iov[BATCH];
		char *lines[BATCH];
		int k = 0;
		for (size_t i = 0; i < n; i++) {
			size_t len;
			if (idfeed_encode_due(batch[i], &lines[k], &len) == 0)
				iov[k] = (struct iovec){ lines[k], len }, k++;
		}
		if (k)
			broadcast(p, iov, k);
		for (int i = 0; i < k; i++)
			free(lines[i]);
		pthread_mutex_unlock(&p->lock);

		for (size_t i = 0; i < n; i++) {
			uint64_t t0 = now_mono_ns();
			if (!w)
				w = flow_verifier_ctx_take(p->verifier, false);
			char *line = NULL;
			size_t len = 0;
			bool ok = false;
			if (w) {
				(void)flow_verifier_verify_cookie(p->verifier, w, batch[i], &vf);
				if (vf.reason == REASON_OK) {
					/* ancestors carry their hash as on the proxy's own
					 * path (a policy may pin one); one that cannot be
					 * hashed goes without, and a pin on it is unmet */
					for (size_t j = 0; j < vf.n_ancestors; j++)
						(void)flow_verifier_hash_hop(p->verifier, &vf.ancestors[j]);
					struct flow_identity *id = identity_of(&vf);
					ok = id && idfeed_encode_id(batch[i], id, &line, &len) == 0;
					if (ok)
						cache_put(p, &vf.subject, id);
					flow_identity_free(id);
				}
			}
			if (!ok) {
				free(line);
				line = NULL;
				(void)idfeed_encode_no(batch[i], w && vf.reason != REASON_OK ? vf.reason : REASON_IDENTITY_UNAVAILABLE,
						       &line, &len);
			}
			verified_flow_release(&vf);
			uint64_t dt = now_mono_ns() - t0;
			pthread_mutex_lock(&p->lock);
			p->st.verify_ns += dt;
			if (ok)
				p->st.published++;
			else
				p->st.refused++;
			if (line) {
				struct iovec one = { line, len };
				broadcast(p, &one, 1);
			}
			pthread_mutex_unlock(&p->lock);
			free(line);
		}
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	if (w)
		flow_verifier_ctx_put(p->verifier, w);
	return NULL;
}

/* ---------- the loop side ---------- */

void idpublish_note(struct idpublish *p, uint64_t cookie)
{
	if (!p || atomic_load_explicit(&p->n_subs, memory_order_relaxed) == 0)
		return;
	if (p->cache) {
		/* The same process with the same image as a published identity
		 * of the last CACHE_MS: its line, written from here. */
		struct procref rec;
		char *line = NULL;
		size_t len = 0;
		if (cookie_registry_get(p->o.cookies, cookie, &rec) == 0) {
			line = cache_line(p, cookie, &rec, &len);
			procref_close(&rec);
		}
		if (line) {
			struct iovec one = { line, len };
			pthread_mutex_lock(&p->lock);
			p->st.noted++;
			p->st.published++;
			p->st.cached++;
			broadcast(p, &one, 1);
			pthread_mutex_unlock(&p->lock);
			free(line);
			return;
		}
	}
	pthread_mutex_lock(&p->lock);
	if (p->q_len == IDPUBLISH_QUEUE) {
		p->st.dropped++;
	} else {
		p->queue[(p->q_head + p->q_len) % IDPUBLISH_QUEUE] = cookie;
		p->q_len++;
		p->st.noted++;
		if (p->sleeping) {
			p->sleeping = false;
			pthread_cond_signal(&p->cond);
		}
	}
	pthread_mutex_unlock(&p->lock);
}

static void on_readable(uv_poll_t *h, int status, int events)
{
	(void)events;
	struct idpublish *p = h->data;
	if (status < 0)
		return;
	for (int i = 0; i < 8; i++) {
		int fd = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		struct ucred uc;
		socklen_t l = sizeof(uc);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) < 0 ||
		    !peer_allow_check(&p->allow, uc.uid, uc.gid)) {
			log_info("identity feed: refused uid %u", (unsigned)uc.uid);
			close(fd);
			continue;
		}
		int sndbuf = 4 << 20;
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
		(void)shutdown(fd, SHUT_RD);
		pthread_mutex_lock(&p->lock);
		int slot = -1;
		for (int s = 0; s < MAX_SUBS; s++)
			if (p->subs[s] < 0) {
				slot = s;
				break;
			}
		if (slot >= 0) {
			p->subs[slot] = fd;
			atomic_fetch_add(&p->n_subs, 1);
			p->st.subscribers++;
		}
		pthread_mutex_unlock(&p->lock);
		if (slot < 0) {
			log_warn("identity feed: %d subscribers already; refusing another", MAX_SUBS);
			close(fd);
		}
	}
}

int idpublish_start(uv_loop_t *loop, const struct idpublish_opts *opts, struct idpublish **out)
{
	if (!loop || !opts || !opts->path || !opts->caps || !opts->members || !opts->cookies || !opts->anchor)
		return -EINVAL;
	struct idpublish *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->o = *opts;
	p->listen_fd = -1;
	const char *wake = getenv("TETHER_IDFEED_WAKE");
	p->poll_mode = wake && !strncmp(wake, "poll", 4);
	p->poll_us = POLL_US;
	p->idle_us = IDLE_MS * 1000;
	if (p->poll_mode && wake[4] == ':') {
		unsigned a, b;
		if (sscanf(wake + 5, "%u:%u", &a, &b) == 2 && a >= 1 && a <= 100000 && b <= 10000000)
			p->poll_us = a, p->idle_us = b;
	}
	for (int s = 0; s < MAX_SUBS; s++)
		p->subs[s] = -1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	pthread_mutex_init(&p->cache_lock, NULL);
	if (!getenv("TETHER_IDFEED_NO_CACHE"))
		p->cache = calloc(CACHE, sizeof(*p->cache));
	procref_copy_recorded(&p->anchor, opts->anchor);
	p->path = strdup(opts->path);
	int r = -ENOMEM;
	if (!p->path)
		goto fail;
	if ((r = peer_allow_init(&p->allow, opts->allow_uids, opts->n_allow_uids, opts->allow_gids,
				 opts->n_allow_gids)) < 0)
		goto fail;
	struct flow_verifier_config vc = {
		.caps = opts->caps,
		.candidates = FLOW_CANDIDATES_MEMBERS,
		.cookies = opts->cookies,
	};
	if ((r = flow_verifier_new(&vc, &p->verifier)) < 0)
		goto fail;
	flow_verifier_set_anchor(p->verifier, &p->anchor, -1, opts->members);
	char spec[4200];
	snprintf(spec, sizeof(spec), "unix:%s", opts->path);
	struct endpoint ep;
	if ((r = endpoint_parse(spec, &ep)) < 0)
		goto fail;
	if ((r = endpoint_listen(&ep, 16, opts->socket_mode ? opts->socket_mode : 0600)) < 0)
		goto fail;
	p->listen_fd = r;
	if ((r = -pthread_create(&p->thread, NULL, worker, p)) < 0)
		goto fail;
	p->thread_started = true;
	if ((r = uv_poll_init(loop, &p->poll, p->listen_fd)) < 0)
		goto fail;
	p->poll.data = p;
	p->poll_open = true;
	uv_poll_start(&p->poll, UV_READABLE, on_readable);
	*out = p;
	return 0;
fail:
	idpublish_stop(p);
	return r;
}

void idpublish_get_stats(struct idpublish *p, struct idpublish_stats *out)
{
	pthread_mutex_lock(&p->lock);
	*out = p->st;
	pthread_mutex_unlock(&p->lock);
}

static void poll_closed(uv_handle_t *h)
{
	struct idpublish *p = h->data;
	if (p->listen_fd >= 0)
		close(p->listen_fd);
	flow_verifier_free(p->verifier);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	if (p->cache)
		for (size_t i = 0; i < CACHE; i++)
			free(p->cache[i].rest);
	free(p->cache);
	pthread_mutex_destroy(&p->cache_lock);
	free(p->path);
	peer_allow_free(&p->allow);
	free(p);
}

void idpublish_stop(struct idpublish *p)
{
	if (!p)
		return;
	if (p->thread_started) {
		pthread_mutex_lock(&p->lock);
		p->stopping = true;
		pthread_cond_signal(&p->cond);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
		p->thread_started = false;
		if (p->st.noted)
			log_debug("identity feed: %llu connects noted, %llu identities published (%llu from the "
				 "per-process cache), %llu refused, %llu dropped",
				 (unsigned long long)p->st.noted, (unsigned long long)p->st.published,
				 (unsigned long long)p->st.cached, (unsigned long long)p->st.refused,
				 (unsigned long long)p->st.dropped);
	}
	for (int s = 0; s < MAX_SUBS; s++)
		if (p->subs[s] >= 0) {
			close(p->subs[s]);
			p->subs[s] = -1;
		}
	if (p->listen_fd >= 0 && p->path)
		unlink(p->path);
	if (p->poll_open) {
		p->poll_open = false;
		uv_close((uv_handle_t *)&p->poll, poll_closed);
		return;
	}
	p->poll.data = p;
	poll_closed((uv_handle_t *)&p->poll);
}
