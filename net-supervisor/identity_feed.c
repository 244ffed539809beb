/* identity_feed: see identity_feed.h. */
#include "net-supervisor/identity_feed.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "identity/idfeed.h"
#include "identity/procref.h"

#define HBITS 15
#define HSIZE (1u << HBITS) /* >= 2 * IDFEED_TABLE */
#define RX_MAX IDFEED_LINE_MAX
#define RETRY_MS 500

/* Counters are read from other threads (metrics, a worker's exit log). */
#define ST_ADD(f) __atomic_fetch_add(&(f), 1, __ATOMIC_RELAXED)
#define ST_GET(f) __atomic_load_n(&(f), __ATOMIC_RELAXED)

enum { E_EMPTY = 0, E_DUE, E_ID, E_NO };

struct entry {
	uint64_t cookie;
	int state;
	struct flow_identity *id;
};

struct waiter {
	struct idfeed_client *c;
	uint64_t cookie;
	idfeed_wait_cb cb;
	void *arg;
	bool linked;      /* in c->waiters (feed lock) */
	bool ready;       /* its record changed (feed lock): re-check on c's loop */
	uint64_t gen;     /* the connection it waits on */
	uint64_t started_ms;
	uv_timer_t timer; /* c's loop only */
	struct waiter *next, **pprev;
};

/* What the owner and its views share (one per net-supervisor): the
 * connection's state, the table, every client's waiters. `lock` guards
 * every field below it and every client's waiters/anchor fields. */
struct feed_shared {
	pthread_mutex_t lock;
	unsigned refs;
	bool connected;
	char anchor_key[PROCREF_KEY_MAX]; /* the connection's peer */
	uint64_t gen;                     /* bumped at every disconnect */
	struct entry *ring;
	size_t ring_next;
	uint32_t *index; /* ring slot + 1; 0: empty */
	/* A wait for a cookie the feed never mentioned ran out: the feed is
	 * behind (its worker starved on a busy machine) or the socket is not
	 * one it saw. Such cookies fall back at once until then. Both in
	 * uv_hrtime() ms (the clients' loops differ). */
	uint64_t nowait_until_ms;
	uint64_t last_msg_ms; /* when the last line was read */
	struct idfeed_client *clients;
	uint64_t connects, rejected, records, refusals, dues, malformed; /* ST_ADD */
};

struct idfeed_client {
	uv_loop_t *loop;
	struct feed_shared *sh;
	bool owner;        /* reads the feed (the main worker's) */
	bool disabled;
	uint64_t wait_ms, due_ms;
	/* the anchor this client's strategy verified (feed lock) */
	char anchor_key[PROCREF_KEY_MAX];
	bool have_anchor;
	struct waiter *waiters;         /* feed lock */
	struct idfeed_client *next_cl;  /* sh->clients (feed lock) */
	uv_async_t async;               /* views: a waiter is ready */
	/* owner only: the connection */
	const struct kernel_caps *caps;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	uv_timer_t retry;
	uv_pipe_t pipe;
	bool pipe_open;
	char *rx;
	size_t rx_used;
	unsigned handles;
	bool closing;
	void (*done)(void *);
	void *done_arg;
	uint64_t hits, waited_hits, fallbacks, wait_timeouts, wakeups; /* ST_ADD */
};

static uint64_t mono_ms(void)
{
	return uv_hrtime() / 1000000u;
}

/* ---------- the table (feed lock held) ---------- */

static uint32_t slot_of(uint64_t cookie)
{
	return (uint32_t)((cookie * 0x9E3779B97F4A7C15ull) >> (64 - HBITS));
}

static struct entry *find(struct feed_shared *c, uint64_t cookie, uint32_t *hpos)
{
	for (uint32_t i = slot_of(cookie), n = 0; n < HSIZE; i = (i + 1) & (HSIZE - 1), n++) {
		uint32_t v = c->index[i];
		if (!v)
			return NULL;
		if (c->ring[v - 1].cookie == cookie) {
			if (hpos)
				*hpos = i;
			return &c->ring[v - 1];
		}
	}
	return NULL;
}

/* Backward-shift deletion (linear probing). */
static void index_delete(struct feed_shared *c, uint32_t i)
{
	c->index[i] = 0;
	for (uint32_t j = (i + 1) & (HSIZE - 1); c->index[j]; j = (j + 1) & (HSIZE - 1)) {
		uint32_t home = slot_of(c->ring[c->index[j] - 1].cookie);
		/* Move j into the hole at i when its home is not in (i, j]. */
		bool between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (!between) {
			c->index[i] = c->index[j];
			c->index[j] = 0;
			i = j;
		}
	}
}

static struct entry *insert(struct feed_shared *c, uint64_t cookie)
{
	struct entry *e = find(c, cookie, NULL);
	if (e)
		return e;
	size_t s = c->ring_next;
	c->ring_next = (c->ring_next + 1) % IDFEED_TABLE;
	e = &c->ring[s];
	if (e->state != E_EMPTY) {
		uint32_t h;
		if (find(c, e->cookie, &h) == e)
			index_delete(c, h);
		flow_identity_free(e->id);
	}
	memset(e, 0, sizeof(*e));
	e->cookie = cookie;
	uint32_t i = slot_of(cookie);
	while (c->index[i])
		i = (i + 1) & (HSIZE - 1);
	c->index[i] = (uint32_t)s + 1;
	return e;
}

static void table_clear(struct feed_shared *c)
{
	for (size_t i = 0; i < IDFEED_TABLE; i++) {
		flow_identity_free(c->ring[i].id);
		memset(&c->ring[i], 0, sizeof(c->ring[i]));
	}
	memset(c->index, 0, HSIZE * sizeof(*c->index));
	c->ring_next = 0;
}

static void shared_release(struct feed_shared *sh)
{
	pthread_mutex_lock(&sh->lock);
	bool last = --sh->refs == 0;
	pthread_mutex_unlock(&sh->lock);
	if (!last)
		return;
	table_clear(sh);
	free(sh->ring);
	free(sh->index);
	pthread_mutex_destroy(&sh->lock);
	free(sh);
}

/* c may use the table: the feed is connected to the anchor c's own
 * strategy verified (a worker whose anchor differs falls back). */
static bool usable_locked(const struct idfeed_client *c)
{
	return c->sh->connected && c->have_anchor && !strcmp(c->anchor_key, c->sh->anchor_key);
}

/* ---------- waiters ---------- */

static void maybe_done(struct idfeed_client *c)
{
	if (!c->closing || c->handles > 0)
		return;
	free(c->rx);
	struct feed_shared *sh = c->sh;
	void (*done)(void *) = c->done;
	void *arg = c->done_arg;
	free(c);
	shared_release(sh);
	if (done)
		done(arg);
}

static void waiter_closed(uv_handle_t *h)
{
	struct waiter *w = h->data;
	struct idfeed_client *c = w->c;
	free(w);
	c->handles--;
	maybe_done(c);
}

static void unlink_locked(struct waiter *w)
{
	w->linked = false;
	*w->pprev = w->next;
	if (w->next)
		w->next->pprev = w->pprev;
}

/* Answer w, already unlinked (id owned by the callee, NULL: fall back).
 * On c's loop, without the lock. */
static void waiter_finish(struct waiter *w, struct flow_identity *id)
{
	struct idfeed_client *c = w->c;
	uv_timer_stop(&w->timer);
	uv_close((uv_handle_t *)&w->timer, waiter_closed);
	if (id)
		ST_ADD(c->waited_hits);
	else
		ST_ADD(c->fallbacks);
	w->cb(w->arg, id);
}

static void waiter_timeout(uv_timer_t *t)
{
	struct waiter *w = t->data;
	struct idfeed_client *c = w->c;
	struct feed_shared *sh = c->sh;
	ST_ADD(c->wait_timeouts);
	pthread_mutex_lock(&sh->lock);
	if (!w->linked) { /* cannot happen: unlinking stops the timer */
		pthread_mutex_unlock(&sh->lock);
		return;
	}
	unlink_locked(w);
	/* Nothing at all arrived while we waited: the feed is stalled (its
	 * worker starved); stop waiting for it for a while. */
	if (sh->last_msg_ms < w->started_ms)
		sh->nowait_until_ms = mono_ms() + 100;
	pthread_mutex_unlock(&sh->lock);
	waiter_finish(w, NULL);
}

/* Answer every waiter of c NULL (its anchor went, it closes). On c's loop. */
static void waiters_fail_all(struct idfeed_client *c)
{
	for (;;) {
		pthread_mutex_lock(&c->sh->lock);
		struct waiter *w = c->waiters;
		if (w)
			unlink_locked(w);
		pthread_mutex_unlock(&c->sh->lock);
		if (!w)
			return;
		waiter_finish(w, NULL);
	}
}

/* On c's loop: answer the waiters whose record arrived (or whose
 * connection went); a "due" record restarts its wait at due_ms. */
static void waiters_run(struct idfeed_client *c)
{
	struct feed_shared *sh = c->sh;
	pthread_mutex_lock(&sh->lock);
	for (struct waiter *w = c->waiters; w;) {
		if (!w->ready) {
			w = w->next;
			continue;
		}
		w->ready = false;
		struct flow_identity *id = NULL;
		if (sh->gen == w->gen && usable_locked(c)) {
			struct entry *e = find(sh, w->cookie, NULL);
			if (!e) { /* not ours any more (overwritten): wait on */
				w = w->next;
				continue;
			}
			if (e->state == E_DUE) {
				uv_timer_start(&w->timer, waiter_timeout, c->due_ms, 0);
				w = w->next;
				continue;
			}
			if (e->state == E_ID)
				id = flow_identity_dup(e->id);
		}
		unlink_locked(w);
		pthread_mutex_unlock(&sh->lock);
		waiter_finish(w, id); /* the callback may change the list */
		pthread_mutex_lock(&sh->lock);
		w = c->waiters;
	}
	pthread_mutex_unlock(&sh->lock);
}

static void on_async(uv_async_t *a)
{
	struct idfeed_client *c = a->data;
	ST_ADD(c->wakeups);
	waiters_run(c);
}

/* Feed lock held, on the owner's loop: mark the waiters for cookie (all
 * when cookie is 0 and all is set) ready and wake their clients' loops;
 * only a client with such a waiter is woken. Returns whether the owner
 * itself has one (the caller runs it after unlocking). */
static bool mark_ready_locked(struct feed_shared *sh, const struct idfeed_client *owner, uint64_t cookie, bool all)
{
	bool own = false;
	for (struct idfeed_client *c = sh->clients; c; c = c->next_cl) {
		bool any = false;
		for (struct waiter *w = c->waiters; w; w = w->next)
			if (all || w->cookie == cookie)
				w->ready = any = true;
		if (!any)
			continue;
		if (c == owner)
			own = true;
		else
			uv_async_send(&c->async);
	}
	return own;
}

/* ---------- the connection (owner only) ---------- */

static void pipe_closed(uv_handle_t *h)
{
	struct idfeed_client *c = h->data;
	c->handles--;
	maybe_done(c);
}

static void try_connect(uv_timer_t *t);

static void schedule_retry(struct idfeed_client *c)
{
	if (!c->closing && c->have_anchor && !c->pipe_open)
		uv_timer_start(&c->retry, try_connect, RETRY_MS, 0);
}

static void disconnect(struct idfeed_client *c, bool retry);

static void handle_line(struct idfeed_client *c, const char *line, size_t len)
{
	struct feed_shared *sh = c->sh;
	struct idfeed_msg m;
	uint64_t now = mono_ms();
	if (idfeed_decode(line, len, &m) < 0) {
		ST_ADD(sh->malformed);
		log_warn("identity feed: malformed line; closing the feed");
		disconnect(c, true);
		return;
	}
	pthread_mutex_lock(&sh->lock);
	sh->last_msg_ms = now;
	struct entry *e = insert(sh, m.cookie);
	switch (m.kind) {
	case IDFEED_DUE:
		ST_ADD(sh->dues);
		if (e->state == E_EMPTY)
			e->state = E_DUE;
		break;
	case IDFEED_ID:
		ST_ADD(sh->records);
		flow_identity_free(e->id);
		e->id = m.id;
		m.id = NULL;
		e->state = E_ID;
		break;
	case IDFEED_NO:
		ST_ADD(sh->refusals);
		flow_identity_free(e->id);
		e->id = NULL;
		e->state = E_NO;
		break;
	}
	bool own = mark_ready_locked(sh, c, m.cookie, false);
	pthread_mutex_unlock(&sh->lock);
	idfeed_msg_release(&m);
	if (own)
		waiters_run(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	struct idfeed_client *c = h->data;
	*buf = uv_buf_init(c->rx + c->rx_used, (unsigned)(RX_MAX - c->rx_used));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
	(void)buf;
	struct idfeed_client *c = st->data;
	if (n < 0) {
		log_info("identity feed: %s; falling back to the holder search until it is back",
			 n == UV_EOF ? "the anchor closed the feed" : uv_strerror((int)n));
		disconnect(c, true);
		return;
	}
	c->rx_used += (size_t)n;
	size_t start = 0;
	for (size_t i = 0; i < c->rx_used && c->pipe_open; i++) {
		if (c->rx[i] != '\n')
			continue;
		handle_line(c, c->rx + start, i - start);
		start = i + 1;
	}
	if (!c->pipe_open)
		return;
	memmove(c->rx, c->rx + start, c->rx_used - start);
	c->rx_used -= start;
	if (c->rx_used == RX_MAX) {
		ST_ADD(c->sh->malformed);
		disconnect(c, true);
	}
}

/* Close the connection, forget every record, answer every waiter of every
 * client NULL (each on its own loop). */
static void disconnect(struct idfeed_client *c, bool retry)
{
	struct feed_shared *sh = c->sh;
	if (c->pipe_open) {
		c->pipe_open = false;
		uv_read_stop((uv_stream_t *)&c->pipe);
		uv_close((uv_handle_t *)&c->pipe, pipe_closed);
	}
	c->rx_used = 0;
	pthread_mutex_lock(&sh->lock);
	sh->connected = false;
	sh->gen++;
	table_clear(sh);
	bool own = mark_ready_locked(sh, c, 0, true);
	pthread_mutex_unlock(&sh->lock);
	if (own)
		waiters_run(c);
	if (retry)
		schedule_retry(c);
}

/* Connect, and keep the connection only when its peer is the anchor. */
static void try_connect(uv_timer_t *t)
{
	struct idfeed_client *c = t->data;
	if (c->closing || !c->have_anchor || c->pipe_open)
		return;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strscpy(sa.sun_path, c->path, sizeof(sa.sun_path));
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (fd >= 0)
			close(fd);
		uv_timer_start(&c->retry, try_connect, RETRY_MS, 0);
		return;
	}
	int pfd = -1;
	socklen_t l = sizeof(pfd);
	struct procref peer;
	peer.pidfd = -1;
	bool ok = c->caps->peer_pidfd && getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pfd, &l) == 0 && pfd >= 0 &&
		  procref_from_pidfd(c->caps, pfd, &peer) == 0 && strcmp(peer.key, c->anchor_key) == 0;
	if (pfd >= 0)
		close(pfd);
	procref_close(&peer);
	if (!ok) {
		ST_ADD(c->sh->rejected);
		log_warn("identity feed: the process at %s is not the anchor (%s); not used", c->path,
			 c->caps->peer_pidfd ? "another process" : "no SO_PEERPIDFD to prove it");
		close(fd);
		if (c->caps->peer_pidfd)
			uv_timer_start(&c->retry, try_connect, RETRY_MS * 4, 0);
		return;
	}
	if (uv_pipe_init(c->loop, &c->pipe, 0) < 0) {
		close(fd);
		return;
	}
	c->pipe.data = c;
	c->handles++;
	if (uv_pipe_open(&c->pipe, fd) < 0 || uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) < 0) {
		uv_close((uv_handle_t *)&c->pipe, pipe_closed);
		uv_timer_start(&c->retry, try_connect, RETRY_MS, 0);
		return;
	}
	c->pipe_open = true;
	pthread_mutex_lock(&c->sh->lock);
	c->sh->connected = true;
	strscpy(c->sh->anchor_key, c->anchor_key, sizeof(c->sh->anchor_key));
	pthread_mutex_unlock(&c->sh->lock);
	ST_ADD(c->sh->connects);
	log_info("identity feed: reading connect-time identities from the anchor at %s", c->path);
}

/* ---------- API ---------- */

static void handle_closed(uv_handle_t *h)
{
	struct idfeed_client *c = h->data;
	c->handles--;
	maybe_done(c);
}

static struct idfeed_client *client_alloc(uv_loop_t *loop, struct feed_shared *sh, uint64_t wait_ms,
					  uint64_t due_ms, bool disabled)
{
	struct idfeed_client *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->loop = loop;
	c->sh = sh;
	c->wait_ms = wait_ms ? wait_ms : 3;
	c->due_ms = due_ms ? due_ms : 200;
	if (c->due_ms < c->wait_ms)
		c->due_ms = c->wait_ms;
	c->disabled = disabled;
	return c;
}

static void client_link(struct idfeed_client *c)
{
	pthread_mutex_lock(&c->sh->lock);
	c->sh->refs++;
	c->next_cl = c->sh->clients;
	c->sh->clients = c;
	pthread_mutex_unlock(&c->sh->lock);
}

int idfeed_client_new(uv_loop_t *loop, const struct kernel_caps *caps, const char *path, uint64_t wait_ms,
		      uint64_t due_ms, struct idfeed_client **out)
{
	if (!loop || !caps || !path)
		return -EINVAL;
	if (!strncmp(path, "unix:", 5))
		path += 5;
	if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path) || !*path)
		return -ENAMETOOLONG;
	struct feed_shared *sh = calloc(1, sizeof(*sh));
	struct idfeed_client *c = sh ? client_alloc(loop, sh, wait_ms, due_ms, caps->no_idfeed) : NULL;
	if (sh) {
		sh->ring = calloc(IDFEED_TABLE, sizeof(*sh->ring));
		sh->index = calloc(HSIZE, sizeof(*sh->index));
	}
	if (c)
		c->rx = malloc(RX_MAX);
	if (!sh || !c || !sh->ring || !sh->index || !c->rx) {
		if (sh) {
			free(sh->ring);
			free(sh->index);
		}
		if (c)
			free(c->rx);
		free(c);
		free(sh);
		return -ENOMEM;
	}
	pthread_mutex_init(&sh->lock, NULL);
	strscpy(c->path, path, sizeof(c->path));
	c->caps = caps;
	c->owner = true;
	uv_timer_init(loop, &c->retry);
	c->retry.data = c;
	c->handles = 1;
	client_link(c);
	if (c->disabled)
		log_info("identity feed: off (TETHER_FORCE_FALLBACK)");
	*out = c;
	return 0;
}

int idfeed_client_new_view(struct idfeed_client *owner, uv_loop_t *loop, struct idfeed_client **out)
{
	if (!owner || !loop || !owner->owner)
		return -EINVAL;
	struct idfeed_client *c = client_alloc(loop, owner->sh, owner->wait_ms, owner->due_ms, owner->disabled);
	if (!c)
		return -ENOMEM;
	int r = uv_async_init(loop, &c->async, on_async);
	if (r < 0) {
		free(c);
		return r;
	}
	c->async.data = c;
	c->handles = 1;
	client_link(c);
	*out = c;
	return 0;
}

void idfeed_client_set_anchor(struct idfeed_client *c, const char *anchor_key)
{
	if (!c || c->closing || c->disabled)
		return;
	pthread_mutex_lock(&c->sh->lock);
	bool same = anchor_key && c->have_anchor && !strcmp(anchor_key, c->anchor_key);
	if (!same) {
		c->have_anchor = anchor_key != NULL;
		strscpy(c->anchor_key, anchor_key ? anchor_key : "", sizeof(c->anchor_key));
	}
	pthread_mutex_unlock(&c->sh->lock);
	if (same)
		return;
	if (!c->owner) { /* its flows stop using the feed until the anchors agree */
		waiters_fail_all(c);
		return;
	}
	disconnect(c, false);
	uv_timer_stop(&c->retry);
	if (anchor_key)
		try_connect(&c->retry);
}

int idfeed_client_lookup(struct idfeed_client *c, uint64_t cookie, struct flow_identity **out)
{
	if (!c)
		return 0;
	struct feed_shared *sh = c->sh;
	int r = -EINPROGRESS;
	pthread_mutex_lock(&sh->lock);
	bool usable = usable_locked(c);
	struct entry *e = usable ? find(sh, cookie, NULL) : NULL;
	if (!usable)
		r = 0;
	else if (e && e->state == E_ID)
		r = (*out = flow_identity_dup(e->id)) ? 1 : 0;
	else if (e && e->state == E_NO)
		r = 0;
	else if (!e && mono_ms() < sh->nowait_until_ms)
		r = 0;
	pthread_mutex_unlock(&sh->lock);
	if (r == 1)
		ST_ADD(c->hits);
	else if (r == 0)
		ST_ADD(c->fallbacks);
	return r;
}

static void free_waiter(uv_handle_t *h)
{
	free(h->data);
}

int idfeed_client_wait(struct idfeed_client *c, uint64_t cookie, idfeed_wait_cb cb, void *arg)
{
	struct feed_shared *sh = c->sh;
	struct waiter *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->c = c;
	w->cookie = cookie;
	w->cb = cb;
	w->arg = arg;
	w->started_ms = mono_ms();
	uv_timer_init(c->loop, &w->timer);
	w->timer.data = w;
	pthread_mutex_lock(&sh->lock);
	if (!usable_locked(c)) {
		pthread_mutex_unlock(&sh->lock);
		uv_close((uv_handle_t *)&w->timer, free_waiter);
		return -ENOTCONN;
	}
	c->handles++;
	w->gen = sh->gen;
	struct entry *e = find(sh, cookie, NULL);
	/* A view: a record that arrived since its lookup (the owner's loop
	 * reads the feed meanwhile) is answered on its loop's next turn. The
	 * owner's own table cannot have changed since its lookup. */
	w->ready = !c->owner && e && e->state != E_DUE;
	uv_timer_start(&w->timer, waiter_timeout, e && e->state == E_DUE ? c->due_ms : c->wait_ms, 0);
	w->next = c->waiters;
	if (w->next)
		w->next->pprev = &w->next;
	w->pprev = &c->waiters;
	c->waiters = w;
	w->linked = true;
	bool ready = w->ready;
	pthread_mutex_unlock(&sh->lock);
	if (ready)
		uv_async_send(&c->async);
	return 0;
}

bool idfeed_client_active(const struct idfeed_client *c)
{
	if (!c)
		return false;
	pthread_mutex_lock(&c->sh->lock);
	bool r = usable_locked(c);
	pthread_mutex_unlock(&c->sh->lock);
	return r;
}

void idfeed_client_stats(const struct idfeed_client *c, struct idfeed_client_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!c)
		return;
	const struct feed_shared *sh = c->sh;
	out->connects = ST_GET(sh->connects);
	out->rejected = ST_GET(sh->rejected);
	out->records = ST_GET(sh->records);
	out->refusals = ST_GET(sh->refusals);
	out->dues = ST_GET(sh->dues);
	out->malformed = ST_GET(sh->malformed);
	out->hits = ST_GET(c->hits);
	out->waited_hits = ST_GET(c->waited_hits);
	out->fallbacks = ST_GET(c->fallbacks);
	out->wait_timeouts = ST_GET(c->wait_timeouts);
	out->wakeups = ST_GET(c->wakeups);
}

void idfeed_client_close(struct idfeed_client *c, void (*done)(void *arg), void *arg)
{
	if (!c)
		return;
	struct feed_shared *sh = c->sh;
	c->done = done;
	c->done_arg = arg;
	if (c->owner) {
		c->have_anchor = false;
		disconnect(c, false);
	}
	pthread_mutex_lock(&sh->lock);
	c->have_anchor = false;
	for (struct idfeed_client **p = &sh->clients; *p; p = &(*p)->next_cl)
		if (*p == c) {
			*p = c->next_cl;
			break;
		}
	pthread_mutex_unlock(&sh->lock);
	waiters_fail_all(c);
	c->closing = true;
	if (c->owner) {
		uv_timer_stop(&c->retry);
		uv_close((uv_handle_t *)&c->retry, handle_closed);
	} else {
		uv_close((uv_handle_t *)&c->async, handle_closed);
	}
}
