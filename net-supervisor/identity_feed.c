/* identity_feed: see identity_feed.h. */
#include "net-supervisor/identity_feed.h"

#include <errno.h>
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
	bool done;
	uint64_t started_ms;
	uv_timer_t timer;
	struct waiter *next, **pprev;
};

struct idfeed_client {
	uv_loop_t *loop;
	const struct kernel_caps *caps;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	uint64_t wait_ms, due_ms;
	bool disabled;
	char anchor_key[PROCREF_KEY_MAX];
	bool have_anchor;
	uv_timer_t retry;
	uv_pipe_t pipe;
	bool connected; /* pipe open (and the peer proven) */
	char *rx;
	size_t rx_used;
	struct entry *ring;
	size_t ring_next;
	uint32_t *index; /* ring slot + 1; 0: empty */
	struct waiter *waiters;
	/* A wait for a cookie the feed never mentioned ran out: the feed is
	 * behind (its worker starved on a busy machine) or the socket is not
	 * one it saw. Such cookies fall back at once until then. */
	uint64_t nowait_until_ms;
	uint64_t last_msg_ms; /* loop time of the last line read */
	unsigned handles;
	bool closing;
	void (*done)(void *);
	void *done_arg;
	struct idfeed_client_stats st;
};

/* ---------- the table ---------- */

static uint32_t slot_of(uint64_t cookie)
{
	return (uint32_t)((cookie * 0x9E3779B97F4A7C15ull) >> (64 - HBITS));
}

static struct entry *find(struct idfeed_client *c, uint64_t cookie, uint32_t *hpos)
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
static void index_delete(struct idfeed_client *c, uint32_t i)
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

static struct entry *insert(struct idfeed_client *c, uint64_t cookie)
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

static void table_clear(struct idfeed_client *c)
{
	for (size_t i = 0; i < IDFEED_TABLE; i++) {
		flow_identity_free(c->ring[i].id);
		memset(&c->ring[i], 0, sizeof(c->ring[i]));
	}
	memset(c->index, 0, HSIZE * sizeof(*c->index));
	c->ring_next = 0;
}

/* ---------- waiters ---------- */

static void maybe_done(struct idfeed_client *c)
{
	if (!c->closing || c->handles > 0)
		return;
	table_clear(c);
	free(c->ring);
	free(c->index);
	free(c->rx);
	void (*done)(void *) = c->done;
	void *arg = c->done_arg;
	free(c);
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

/* Answer w (id owned by the callee, NULL: fall back) and drop it. */
static void waiter_finish(struct waiter *w, struct flow_identity *id)
{
	if (w->done)
		return;
	w->done = true;
	*w->pprev = w->next;
	if (w->next)
		w->next->pprev = w->pprev;
	uv_timer_stop(&w->timer);
	uv_close((uv_handle_t *)&w->timer, waiter_closed);
	if (id)
		w->c->st.waited_hits++;
	else
		w->c->st.fallbacks++;
	w->cb(w->arg, id);
}

static void waiter_timeout(uv_timer_t *t)
{
	struct waiter *w = t->data;
	w->c->st.wait_timeouts++;
	/* Nothing at all arrived while we waited: the feed is stalled (its
	 * worker starved); stop waiting for it for a while. */
	if (w->c->last_msg_ms < w->started_ms)
		w->c->nowait_until_ms = uv_now(w->c->loop) + 100;
	waiter_finish(w, NULL);
}

static void waiters_fail_all(struct idfeed_client *c)
{
	while (c->waiters)
		waiter_finish(c->waiters, NULL);
}

/* A record for cookie arrived: answer its waiters. */
static void waiters_wake(struct idfeed_client *c, uint64_t cookie, const struct entry *e)
{
	struct waiter *w = c->waiters, *next;
	for (; w; w = next) {
		next = w->next;
		if (w->cookie != cookie)
			continue;
		if (e->state == E_DUE) {
			uv_timer_start(&w->timer, waiter_timeout, c->due_ms, 0);
			continue;
		}
		struct flow_identity *id = e->state == E_ID ? flow_identity_dup(e->id) : NULL;
		waiter_finish(w, id);
		next = c->waiters; /* the callback may have changed the list */
	}
}

/* ---------- the connection ---------- */

static void pipe_closed(uv_handle_t *h)
{
	struct idfeed_client *c = h->data;
	c->handles--;
	maybe_done(c);
}

static void try_connect(uv_timer_t *t);

static void schedule_retry(struct idfeed_client *c)
{
	if (!c->closing && c->have_anchor && !c->connected)
		uv_timer_start(&c->retry, try_connect, RETRY_MS, 0);
}

static void disconnect(struct idfeed_client *c, bool retry);

static void handle_line(struct idfeed_client *c, const char *line, size_t len)
{
	struct idfeed_msg m;
	c->last_msg_ms = uv_now(c->loop);
	if (idfeed_decode(line, len, &m) < 0) {
		c->st.malformed++;
		log_warn("identity feed: malformed line; closing the feed");
		disconnect(c, true);
		return;
	}
	struct entry *e = insert(c, m.cookie);
	switch (m.kind) {
	case IDFEED_DUE:
		c->st.dues++;
		if (e->state == E_EMPTY)
			e->state = E_DUE;
		break;
	case IDFEED_ID:
		c->st.records++;
		flow_identity_free(e->id);
		e->id = m.id;
		m.id = NULL;
		e->state = E_ID;
		break;
	case IDFEED_NO:
		c->st.refusals++;
		flow_identity_free(e->id);
		e->id = NULL;
		e->state = E_NO;
		break;
	}
	idfeed_msg_release(&m);
	waiters_wake(c, e->cookie, e);
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
	for (size_t i = 0; i < c->rx_used && c->connected; i++) {
		if (c->rx[i] != '\n')
			continue;
		handle_line(c, c->rx + start, i - start);
		start = i + 1;
	}
	if (!c->connected)
		return;
	memmove(c->rx, c->rx + start, c->rx_used - start);
	c->rx_used -= start;
	if (c->rx_used == RX_MAX) {
		c->st.malformed++;
		disconnect(c, true);
	}
}

static void disconnect(struct idfeed_client *c, bool retry)
{
	if (c->connected) {
		c->connected = false;
		uv_read_stop((uv_stream_t *)&c->pipe);
		uv_close((uv_handle_t *)&c->pipe, pipe_closed);
	}
	c->rx_used = 0;
	table_clear(c);
	waiters_fail_all(c);
	if (retry)
		schedule_retry(c);
}

/* Connect, and keep the connection only when its peer is the anchor. */
static void try_connect(uv_timer_t *t)
{
	struct idfeed_client *c = t->data;
	if (c->closing || !c->have_anchor || c->connected)
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
		c->st.rejected++;
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
	c->connected = true;
	c->st.connects++;
	log_info("identity feed: reading connect-time identities from the anchor at %s", c->path);
}

/* ---------- API ---------- */

static void retry_closed(uv_handle_t *h)
{
	struct idfeed_client *c = h->data;
	c->handles--;
	maybe_done(c);
}

int idfeed_client_new(uv_loop_t *loop, const struct kernel_caps *caps, const char *path, uint64_t wait_ms,
		      uint64_t due_ms, struct idfeed_client **out)
{
	if (!loop || !caps || !path)
		return -EINVAL;
	if (!strncmp(path, "unix:", 5))
		path += 5;
	struct idfeed_client *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	if (strlen(path) >= sizeof(c->path) || !*path) {
		free(c);
		return -ENAMETOOLONG;
	}
	strscpy(c->path, path, sizeof(c->path));
	c->loop = loop;
	c->caps = caps;
	c->wait_ms = wait_ms ? wait_ms : 3;
	c->due_ms = due_ms ? due_ms : 200;
	if (c->due_ms < c->wait_ms)
		c->due_ms = c->wait_ms;
	c->disabled = caps->no_idfeed;
	c->ring = calloc(IDFEED_TABLE, sizeof(*c->ring));
	c->index = calloc(HSIZE, sizeof(*c->index));
	c->rx = malloc(RX_MAX);
	if (!c->ring || !c->index || !c->rx) {
		free(c->ring);
		free(c->index);
		free(c->rx);
		free(c);
		return -ENOMEM;
	}
	uv_timer_init(loop, &c->retry);
	c->retry.data = c;
	c->handles = 1;
	if (c->disabled)
		log_info("identity feed: off (TETHER_FORCE_FALLBACK)");
	*out = c;
	return 0;
}

void idfeed_client_set_anchor(struct idfeed_client *c, const char *anchor_key)
{
	if (!c || c->closing || c->disabled)
		return;
	if (anchor_key && c->have_anchor && !strcmp(anchor_key, c->anchor_key))
		return;
	disconnect(c, false);
	uv_timer_stop(&c->retry);
	c->have_anchor = anchor_key != NULL;
	if (!anchor_key)
		return;
	strscpy(c->anchor_key, anchor_key, sizeof(c->anchor_key));
	try_connect(&c->retry);
}

int idfeed_client_lookup(struct idfeed_client *c, uint64_t cookie, struct flow_identity **out)
{
	if (!c || !c->connected) {
		if (c)
			c->st.fallbacks++;
		return 0;
	}
	struct entry *e = find(c, cookie, NULL);
	if (e && e->state == E_ID) {
		if (!(*out = flow_identity_dup(e->id))) {
			c->st.fallbacks++;
			return 0;
		}
		c->st.hits++;
		return 1;
	}
	if (e && e->state == E_NO) {
		c->st.fallbacks++;
		return 0;
	}
	if (!e && uv_now(c->loop) < c->nowait_until_ms) {
		c->st.fallbacks++;
		return 0;
	}
	return -EINPROGRESS;
}

int idfeed_client_wait(struct idfeed_client *c, uint64_t cookie, idfeed_wait_cb cb, void *arg)
{
	if (!c->connected)
		return -ENOTCONN;
	struct waiter *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->c = c;
	w->cookie = cookie;
	w->cb = cb;
	w->arg = arg;
	w->started_ms = uv_now(c->loop);
	uv_timer_init(c->loop, &w->timer);
	w->timer.data = w;
	c->handles++;
	struct entry *e = find(c, cookie, NULL);
	uv_timer_start(&w->timer, waiter_timeout, e && e->state == E_DUE ? c->due_ms : c->wait_ms, 0);
	w->next = c->waiters;
	if (w->next)
		w->next->pprev = &w->next;
	w->pprev = &c->waiters;
	c->waiters = w;
	return 0;
}

bool idfeed_client_active(const struct idfeed_client *c)
{
	return c && c->connected;
}

void idfeed_client_stats(const struct idfeed_client *c, struct idfeed_client_stats *out)
{
	if (c)
		*out = c->st;
	else
		memset(out, 0, sizeof(*out));
}

void idfeed_client_close(struct idfeed_client *c, void (*done)(void *arg), void *arg)
{
	if (!c)
		return;
	c->done = done;
	c->done_arg = arg;
	c->have_anchor = false;
	disconnect(c, false);
	c->closing = true;
	uv_timer_stop(&c->retry);
	uv_close((uv_handle_t *)&c->retry, retry_closed);
}
