#include "net-supervisor/relay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---------- splice fast path ----------
 *
 * With --splice, once the tunnel is set up (and nothing is queued in
 * libuv), bytes move socket → pipe → socket with splice(2): the proxy never
 * copies them through user space. Measured on loopback it uses less proxy
 * CPU than the buffer relay, but the endpoints' CPU per byte rises by about
 * half (the receiver copies out of the spliced page fragments) and the
 * tunnel's throughput was lower (docs/performance.md), so it is off by
 * default. Each socket is dup()ed and watched with its own uv_poll (the
 * uv_tcp handles stay idle until close); a full pipe simply stops reading
 * (backpressure), EOF is passed on with shutdown(SHUT_WR) once the pipe is
 * empty. Any setup failure falls back to the libuv relay above. */

#define SPLICE_PIPE_SIZE (1 << 20)

struct splice_side {
	uv_poll_t poll;
	struct conn *c;
	int fd;         /* dup of the socket */
	int pipe[2];    /* bytes read from THIS socket, waiting for the other */
	size_t queued;  /* bytes in pipe */
	size_t cap;
	bool eof;       /* read EOF from this socket */
	bool shut;      /* the other socket got our FIN */
	bool polling;
	int events;
};

static void splice_closed(uv_handle_t *h)
{
	struct splice_side *sp = h->data;
	struct conn *c = sp->c;
	close(sp->fd);
	close(sp->pipe[0]);
	close(sp->pipe[1]);
	free(sp);
	c->open_handles--;
	conn_maybe_free(c);
}

void relay_splice_close(struct conn *c)
{
	for (int i = 0; i < 2; i++)
		if (c->sp[i]) {
			uv_close((uv_handle_t *)&c->sp[i]->poll, splice_closed);
			c->sp[i] = NULL;
		}
}

/* Move what we can for the direction from->to. -1 on a fatal error. */
static int splice_pump(struct conn *c, struct splice_side *from, struct splice_side *to)
{
	for (;;) {
		bool progress = false;
		if (from->queued > 0) {
			ssize_t n = splice(from->pipe[0], NULL, to->fd, NULL, from->queued,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n > 0) {
				from->queued -= (size_t)n;
				if (from == c->sp[0])
					c->ns->sh->metrics.bytes_up += (uint64_t)n;
				else
					c->ns->sh->metrics.bytes_down += (uint64_t)n;
				progress = true;
			} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
				return -1;
			}
		}
		if (!from->eof && from->queued < from->cap) {
			ssize_t n = splice(from->fd, NULL, from->pipe[1], NULL, from->cap - from->queued,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n > 0) {
				from->queued += (size_t)n;
				progress = true;
			} else if (n == 0) {
				from->eof = true;
				progress = true;
			} else if (errno != EAGAIN && errno != EINTR) {
				return -1;
			}
		}
		if (from->eof && from->queued == 0 && !from->shut) {
			/* Half-close: pass the FIN on; the other direction stays open. */
			from->shut = true;
			if (shutdown(to->fd, SHUT_WR) < 0 && errno != ENOTCONN)
				return -1;
		}
		if (progress)
			c->last_activity = uv_now(c->ns->loop);
		else
			return 0;
	}
}

static void splice_cb(uv_poll_t *h, int status, int events);

static int splice_rearm(struct conn *c)
{
	struct splice_side *a = c->sp[0], *b = c->sp[1];
	if (a->shut && b->shut) {
		conn_close(c);
		return 1;
	}
	for (int i = 0; i < 2; i++) {
		struct splice_side *me = c->sp[i], *other = c->sp[1 - i];
		int ev = 0;
		if (!me->eof && me->queued < me->cap)
			ev |= UV_READABLE;
		if (other->queued > 0)
			ev |= UV_WRITABLE;
		if (ev != me->events || !me->polling) {
			me->events = ev;
			if (ev) {
				me->polling = true;
				uv_poll_start(&me->poll, ev, splice_cb);
			} else if (me->polling) {
				me->polling = false;
				uv_poll_stop(&me->poll);
			}
		}
	}
	return 0;
}

static void splice_cb(uv_poll_t *h, int status, int events)
{
	struct splice_side *sp = h->data;
	struct conn *c = sp->c;
	if (c->state != C_RELAY)
		return;
	if (status < 0 || splice_pump(c, c->sp[0], c->sp[1]) < 0 ||
	    splice_pump(c, c->sp[1], c->sp[0]) < 0) {
		conn_close(c);
		return;
	}
	splice_rearm(c);
}

static struct splice_side *splice_side_new(struct conn *c, uv_tcp_t *tcp)
{
	uv_os_fd_t fd;
	if (uv_fileno((uv_handle_t *)tcp, &fd) < 0)
		return NULL;
	struct splice_side *sp = calloc(1, sizeof(*sp));
	if (!sp)
		return NULL;
	sp->c = c;
	sp->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (sp->fd < 0) {
		free(sp);
		return NULL;
	}
	if (pipe2(sp->pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		close(sp->fd);
		free(sp);
		return NULL;
	}
	int sz = fcntl(sp->pipe[1], F_SETPIPE_SZ, SPLICE_PIPE_SIZE);
	if (sz <= 0)
		sz = fcntl(sp->pipe[1], F_GETPIPE_SZ);
	sp->cap = sz > 0 ? (size_t)sz : 65536;
	if (uv_poll_init(c->ns->loop, &sp->poll, sp->fd) < 0) {
		close(sp->fd);
		close(sp->pipe[0]);
		close(sp->pipe[1]);
		free(sp);
		return NULL;
	}
	sp->poll.data = sp;
	c->open_handles++;
	return sp;
}

/* True when the connection now relays by splice. */
bool relay_splice_start(struct conn *c)
{
	if (!c->ns->cfg.splice || c->client.tcp.write_queue_size || c->up.tcp.write_queue_size)
		return false;
	c->sp[0] = splice_side_new(c, &c->client.tcp);
	if (c->sp[0])
		c->sp[1] = splice_side_new(c, &c->up.tcp);
	if (!c->sp[0] || !c->sp[1]) {
		relay_splice_close(c);
		return false;
	}
	c->state = C_RELAY;
	c->last_activity = uv_now(c->ns->loop);
	uv_timer_start(&c->timer, relay_idle_check, c->ns->cfg.idle_timeout_ms, 0);
	/* Data may already sit in the socket buffers: pump once. */
	if (splice_pump(c, c->sp[0], c->sp[1]) < 0 || splice_pump(c, c->sp[1], c->sp[0]) < 0) {
		conn_close(c);
		return true;
	}
	splice_rearm(c);
	return true;
}
