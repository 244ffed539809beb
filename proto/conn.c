#include "proto/conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/frame.h"

#define READ_BUF (64 * 1024)

struct proto_conn {
	uv_pipe_t pipe; /* any stream socket: unix, tcp, vsock */
	uv_timer_t timer;
	int open_handles;
	struct frame_decoder dec;
	struct proto_conn_cbs cbs;
	void *userdata;
	uint64_t deadline_ms;
	size_t max_write_queue;
	bool closing, expecting, reading;
	int close_err;
	unsigned frames_in_feed;
	/* Frames queued while a write is in flight go out together in the next
	 * write: one syscall for a burst of answers instead of one each. */
	unsigned writes_inflight;
	uint8_t *pend;
	size_t pend_len, pend_cap;
	uint8_t rbuf[READ_BUF];
};

struct write_req {
	uv_write_t req;
	uint8_t *buf;
};

static void handle_closed(uv_handle_t *h)
{
	struct proto_conn *c = h->data;
	if (--c->open_handles > 0)
		return;
	if (c->cbs.on_close)
		c->cbs.on_close(c, c->close_err, c->userdata);
	frame_decoder_free(&c->dec);
	free(c->pend);
	free(c);
}

void proto_conn_close(struct proto_conn *c, int err)
{
	if (c->closing)
		return;
	c->closing = true;
	c->close_err = err;
	/* Best effort for frames still coalescing: what was sent before a
	 * close goes out if the socket takes it now (as a plain uv_write would
	 * have); uv_close cancels whatever is still queued. */
	if (c->pend_len && uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) == 0) {
		uv_buf_t b = uv_buf_init((char *)c->pend, (unsigned)c->pend_len);
		(void)uv_try_write((uv_stream_t *)&c->pipe, &b, 1);
	}
	uv_timer_stop(&c->timer);
	uv_close((uv_handle_t *)&c->timer, handle_closed);
	uv_close((uv_handle_t *)&c->pipe, handle_closed);
}

bool proto_conn_is_closing(const struct proto_conn *c) { return c->closing; }

int proto_conn_fd(const struct proto_conn *c)
{
	uv_os_fd_t fd;
	return uv_fileno((const uv_handle_t *)&c->pipe, &fd) == 0 ? fd : -EBADF;
}

void *proto_conn_userdata(const struct proto_conn *c) { return c->userdata; }
void proto_conn_set_userdata(struct proto_conn *c, void *userdata) { c->userdata = userdata; }

static void deadline_cb(uv_timer_t *t)
{
	proto_conn_close(t->data, -ETIMEDOUT);
}

static void rearm(struct proto_conn *c, bool progress)
{
	if (c->closing)
		return;
	bool want = frame_decoder_pending(&c->dec) || c->expecting;
	if (!want) {
		uv_timer_stop(&c->timer);
		return;
	}
	/* A new frame started (or is awaited) since the last arm: its own clock. */
	if (progress || !uv_is_active((uv_handle_t *)&c->timer))
		uv_timer_start(&c->timer, deadline_cb, c->deadline_ms, 0);
}

void proto_conn_expect(struct proto_conn *c)
{
	c->expecting = true;
	if (!c->closing)
		uv_timer_start(&c->timer, deadline_cb, c->deadline_ms, 0);
}

static int on_frame(const uint8_t *payload, size_t len, void *ud)
{
	struct proto_conn *c = ud;
	if (c->closing)
		return -ECANCELED;
	struct ctl_msg m;
	int r = ctl_decode(payload, len, &m);
	if (r < 0)
		return r;
	c->frames_in_feed++;
	c->expecting = false;
	if (c->cbs.on_msg)
		c->cbs.on_msg(c, &m, c->userdata);
	ctl_msg_clear(&m);
	return c->closing ? -ECANCELED : 0;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct proto_conn *c = h->data;
	buf->base = (char *)c->rbuf;
	buf->len = sizeof(c->rbuf);
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct proto_conn *c = s->data;
	if (c->closing)
		return;
	if (n < 0) {
		proto_conn_close(c, n == UV_EOF ? 0 : (int)n);
		return;
	}
	if (n == 0)
		return;
	c->frames_in_feed = 0;
	int r = frame_decoder_feed(&c->dec, (const uint8_t *)buf->base, (size_t)n, on_frame, c);
	if (r < 0 && r != -ECANCELED) {
		proto_conn_close(c, r);
		return;
	}
	rearm(c, c->frames_in_feed > 0);
}

static struct proto_conn *conn_alloc(uv_loop_t *loop, const struct proto_conn_opts *opts,
				     const struct proto_conn_cbs *cbs, void *userdata)
{
	struct proto_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	frame_decoder_init(&c->dec, opts ? opts->max_frame : 0);
	c->deadline_ms = opts && opts->read_deadline_ms ? opts->read_deadline_ms : 5000;
	c->max_write_queue = opts && opts->max_write_queue ? opts->max_write_queue : 4u << 20;
	c->cbs = *cbs;
	c->userdata = userdata;
	uv_pipe_init(loop, &c->pipe, 0);
	uv_timer_init(loop, &c->timer);
	c->pipe.data = c;
	c->timer.data = c;
	c->open_handles = 2;
	return c;
}

/* Start reading; on failure close quietly (no on_close for a conn the
 * caller never got). */
static int conn_start(struct proto_conn *c, struct proto_conn **out)
{
	int r = uv_read_start((uv_stream_t *)&c->pipe, alloc_cb, read_cb);
	if (r < 0) {
		c->cbs.on_close = NULL;
		proto_conn_close(c, r);
		return r;
	}
	*out = c;
	return 0;
}

int proto_conn_open(uv_loop_t *loop, int fd, const struct proto_conn_opts *opts,
		    const struct proto_conn_cbs *cbs, void *userdata, struct proto_conn **out)
{
	struct proto_conn *c = conn_alloc(loop, opts, cbs, userdata);
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	int r = uv_pipe_open(&c->pipe, fd);
	if (r < 0) {
		close(fd);
		c->cbs.on_close = NULL;
		proto_conn_close(c, r);
		return r;
	}
	return conn_start(c, out);
}

int proto_conn_accept(uv_stream_t *server, const struct proto_conn_opts *opts,
		      const struct proto_conn_cbs *cbs, void *userdata, struct proto_conn **out)
{
	struct proto_conn *c = conn_alloc(server->loop, opts, cbs, userdata);
	if (!c)
		return -ENOMEM;
	int r = uv_accept(server, (uv_stream_t *)&c->pipe);
	if (r < 0) {
		c->cbs.on_close = NULL;
		proto_conn_close(c, r);
		return r;
	}
	return conn_start(c, out);
}

static int submit(struct proto_conn *c, uint8_t *buf, size_t len);

static void write_cb(uv_write_t *req, int status)
{
	struct write_req *w = (struct write_req *)req;
	struct proto_conn *c = req->handle->data;
	free(w->buf);
	free(w);
	c->writes_inflight--;
	if (status < 0) {
		if (status != UV_ECANCELED && !c->closing)
			proto_conn_close(c, status);
		return;
	}
	if (!c->closing && c->writes_inflight == 0 && c->pend_len) {
		uint8_t *buf = c->pend;
		size_t len = c->pend_len;
		c->pend = NULL;
		c->pend_len = c->pend_cap = 0;
		submit(c, buf, len);
	}
}

/* Write buf (owned) now. */
static int submit(struct proto_conn *c, uint8_t *buf, size_t len)
{
	struct write_req *w = calloc(1, sizeof(*w));
	if (!w) {
		free(buf);
		proto_conn_close(c, -ENOMEM);
		return -ENOMEM;
	}
	w->buf = buf;
	uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
	int r = uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, write_cb);
	if (r < 0) {
		free(buf);
		free(w);
		proto_conn_close(c, r);
		return r;
	}
	c->writes_inflight++;
	return 0;
}

int proto_conn_send(struct proto_conn *c, const struct ctl_msg *m)
{
	if (c->closing)
		return -ENOTCONN;
	if (uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) + c->pend_len > c->max_write_queue) {
		proto_conn_close(c, -ENOBUFS);
		return -ENOBUFS;
	}
	uint8_t *buf;
	size_t len;
	int r = ctl_encode(m, &buf, &len);
	if (r < 0)
		return r;
	if (c->writes_inflight == 0)
		return submit(c, buf, len);
	if (c->pend_len + len > c->pend_cap) {
		size_t ncap = c->pend_cap ? c->pend_cap : 4096;
		while (ncap < c->pend_len + len)
			ncap *= 2;
		uint8_t *n = realloc(c->pend, ncap);
		if (!n) {
			free(buf);
			proto_conn_close(c, -ENOMEM);
			return -ENOMEM;
		}
		c->pend = n;
		c->pend_cap = ncap;
	}
	memcpy(c->pend + c->pend_len, buf, len);
	c->pend_len += len;
	free(buf);
	return 0;
}
