#include "net-supervisor/relay.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net-supervisor/audit_line.h"

struct wreq {
	uv_write_t w;
	struct side *dst;
	char *buf;
	enum bufown own; /* BUF_BIG: the source side's bulk buffer, returned to it */
	size_t held;     /* bytes of buffer it keeps allocated, in ns->sh->relay_held */
};

/* ---------- the relay memory budget ----------
 *
 * Data a destination cannot take yet waits in user space, in the buffer it
 * was read into. Per direction that is bounded by high_water (plus one
 * read), but a workload can open hundreds of tunnels whose client never
 * reads while the upstream sends as fast as it can: 200 of them held 414
 * MB before this budget. So the buffers held by queued writes are counted
 * (ns->sh->relay_held) against --relay-memory. While less than half of it is
 * in use every direction gets high_water and bulk reads; past half, each
 * gets a fair share (the budget over the relaying directions, 64 KiB at
 * least), reads are cut to what the share has room for, no bulk buffer is
 * used, and a queued remainder is copied out of its large read buffer so
 * the buffer goes back at once. */
#define RELAY_MIN_SHARE (64 * 1024)
#define RELAY_MIN_READ (16 * 1024)

static bool relay_under_pressure(const struct netsup *ns)
{
	return ns->sh->relay_held > ns->cfg.relay_memory / 2;
}

/* How much may wait in user space for one destination right now. */
static size_t relay_share(const struct netsup *ns)
{
	size_t hw = ns->cfg.high_water;
	if (!relay_under_pressure(ns))
		return hw;
	size_t dirs = ns->sh->n_relaying ? ns->sh->n_relaying * 2 : 1;
	size_t share = ns->cfg.relay_memory / dirs;
	if (share < RELAY_MIN_SHARE)
		share = RELAY_MIN_SHARE;
	return share < hw ? share : hw;
}

static void buf_release(struct conn *c, char *buf, enum bufown own)
{
	if (own == BUF_POOLED)
		bufpool_put(&c->ns->pool, buf);
	else if (own == BUF_MALLOC)
		free(buf);
	/* BUF_BIG: the side keeps it */
}

static void relay_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void relay_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct side *s = h->data;
	struct netsup *ns = s->c->ns;
	size_t big = ns->pool.size * RELAY_BULK_FACTOR;
	bool pressure = relay_under_pressure(ns);
	if (s->bulk && pressure) {
		/* no bulk buffers while memory is short */
		s->bulk = false;
		free(s->big);
		free(s->spare);
		s->big = s->spare = NULL;
	}
	if (s->bulk && !s->big) {
		s->big = s->spare ? s->spare : malloc(big);
		s->spare = NULL;
	}
	if (s->bulk && s->big) {
		*buf = uv_buf_init(s->big, (unsigned)big);
		return;
	}
	conn_alloc_pooled(h, suggested, buf);
	if (!pressure || !buf->base)
		return;
	/* read no more than the share has room for */
	size_t share = relay_share(ns), queued = s->peer->tcp.write_queue_size;
	size_t room = share > queued ? share - queued : 0;
	if (room < buf->len)
		buf->len = (unsigned)(room > RELAY_MIN_READ ? room : RELAY_MIN_READ);
}

static void side_resume(struct side *src)
{
	if (src->paused && !src->eof && src->c->state == C_RELAY) {
		src->paused = false;
		src->reading = true;
		if (uv_read_start((uv_stream_t *)&src->tcp, relay_alloc_cb, relay_read) < 0)
			conn_close(src->c);
	}
}

static void relay_written(uv_write_t *w, int status)
{
	struct wreq *wr = w->data;
	struct side *dst = wr->dst;
	struct conn *c = dst->c;
	struct side *src = dst->peer;
	c->ns->sh->relay_held -= wr->held;
	if (wr->own == BUF_BIG && !src->spare && src->bulk && c->state != C_CLOSING)
		src->spare = wr->buf; /* reuse: a fresh 1 MiB would be page-faulted in again */
	else if (wr->own == BUF_POOLED)
		bufpool_put(&c->ns->pool, wr->buf);
	else
		free(wr->buf);
	free(wr);
	if (c->state == C_CLOSING)
		return;
	if (status < 0) {
		conn_close(c);
		return;
	}
	if (dst->tcp.write_queue_size <= relay_share(c->ns) / 2)
		side_resume(dst->peer);
}

/* Send len bytes of buf to dst; own says who owns buf. A BUF_BIG buffer
 * that must be queued moves to the write request (the source side then
 * allocates a new one for its next read). */
int relay_send(struct side *dst, char *buf, size_t len, enum bufown own)
{
	struct conn *c = dst->c;
	uv_buf_t b = uv_buf_init(buf, (unsigned)len);
	int n = uv_try_write((uv_stream_t *)&dst->tcp, &b, 1);
	if (n == UV_EAGAIN || n == UV_ENOSYS)
		n = 0;
	if (n < 0) {
		buf_release(c, buf, own);
		return n;
	}
	if ((size_t)n == len) {
		buf_release(c, buf, own);
		return 0;
	}
	struct wreq *wr = malloc(sizeof(*wr));
	if (!wr) {
		buf_release(c, buf, own);
		return -ENOMEM;
	}
	size_t off = (size_t)n, rest = len - off;
	size_t held = own == BUF_BIG ? c->ns->pool.size * RELAY_BULK_FACTOR : own == BUF_POOLED ? c->ns->pool.size : len;
	if (own != BUF_MALLOC && relay_under_pressure(c->ns) && rest < held / 2) {
		/* Short of memory: keep only what waits, give the read buffer back. */
		char *copy = malloc(rest);
		if (copy) {
			memcpy(copy, buf + off, rest);
			if (own == BUF_POOLED)
				bufpool_put(&c->ns->pool, buf);
			/* a BUF_BIG stays with its side */
			buf = copy;
			own = BUF_MALLOC;
			off = 0;
			held = rest;
		}
	}
	if (own == BUF_BIG)
		dst->peer->big = NULL; /* the request holds it until written */
	wr->dst = dst;
	wr->buf = buf;
	wr->own = own;
	wr->held = held;
	wr->w.data = wr;
	c->ns->sh->relay_held += held;
	b = uv_buf_init(buf + off, (unsigned)rest);
	int r = uv_write(&wr->w, (uv_stream_t *)&dst->tcp, &b, 1, relay_written);
	if (r < 0) {
		c->ns->sh->relay_held -= held;
		free(wr);
		if (own == BUF_BIG)
			free(buf);
		else
			buf_release(c, buf, own);
		return r;
	}
	return 0;
}

static void relay_shut(uv_shutdown_t *sh, int status)
{
	struct side *dst = sh->data;
	struct conn *c = dst->c;
	if (c->state == C_CLOSING)
		return;
	dst->shut_done = true;
	if (status < 0 || (c->client.eof && c->up.eof && c->client.shut_done && c->up.shut_done))
		conn_close(c);
}

static void relay_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct side *src = st->data;
	struct conn *c = src->c;
	struct side *dst = src->peer;
	bool is_big = buf->base && buf->base == src->big;
	if (nread > 0) {
		c->last_activity = uv_now(c->ns->loop);
		if (src == &c->client)
			c->ns->sh->metrics.bytes_up += (uint64_t)nread;
		else
			c->ns->sh->metrics.bytes_down += (uint64_t)nread;
		/* A full relay_buffer read: bulk from the next read on; a read
		 * far below it: back to pooled reads. */
		bool was_bulk = src->bulk;
		if ((size_t)nread >= c->ns->pool.size)
			src->bulk = true;
		else if ((size_t)nread < c->ns->pool.size / 8)
			src->bulk = false;
		if (relay_send(dst, buf->base, (size_t)nread, is_big ? BUF_BIG : BUF_POOLED) < 0) {
			conn_close(c);
			return;
		}
		if (was_bulk && !src->bulk) {
			free(src->big);
			free(src->spare);
			src->big = src->spare = NULL;
		}
		/* Backpressure: the other side is not keeping up. */
		if (dst->tcp.write_queue_size > relay_share(c->ns)) {
			uv_read_stop(st);
			src->reading = false;
			src->paused = true;
		}
		return;
	}
	if (buf->base && !is_big)
		bufpool_put(&c->ns->pool, buf->base);
	if (nread == 0)
		return;
	if (nread == UV_EOF) {
		/* Half-close: pass the FIN on once queued data is written. */
		src->eof = true;
		uv_read_stop(st);
		src->reading = false;
		dst->shut.data = dst;
		if (uv_shutdown(&dst->shut, (uv_stream_t *)&dst->tcp, relay_shut) < 0)
			conn_close(c);
		return;
	}
	conn_close(c);
}

void relay_idle_check(uv_timer_t *t)
{
	struct conn *c = t->data;
	uint64_t now = uv_now(c->ns->loop), idle = c->ns->cfg.idle_timeout_ms;
	if (now - c->last_activity >= idle) {
		audit_line_error(c, REASON_IDLE_TIMEOUT, 0);
		conn_close(c);
		return;
	}
	uv_timer_start(t, relay_idle_check, idle - (now - c->last_activity) + 1, 0);
}

void relay_start(struct conn *c)
{
	if (relay_splice_start(c))
		return;
	c->state = C_RELAY;
	c->counted_in |= CONN_IN_RELAYING;
	c->ns->sh->n_relaying++;
	c->last_activity = uv_now(c->ns->loop);
	uv_timer_start(&c->timer, relay_idle_check, c->ns->cfg.idle_timeout_ms, 0);
	c->client.reading = c->up.reading = true;
	if (uv_read_start((uv_stream_t *)&c->client.tcp, relay_alloc_cb, relay_read) < 0 ||
	    uv_read_start((uv_stream_t *)&c->up.tcp, relay_alloc_cb, relay_read) < 0)
		conn_close(c);
}
