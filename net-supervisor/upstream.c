#include "net-supervisor/upstream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "net-supervisor/conn.h"
#include "net-supervisor/context.h"
#include "net-supervisor/relay.h"

struct upstream_hop {
	upstream_done_cb done;
	size_t len;        /* bytes in buf */
	size_t head_len;   /* the reply head, once complete */
	char buf[UPSTREAM_REPLY_MAX];
};

void upstream_hop_free(struct conn *c)
{
	free(c->hop);
	c->hop = NULL;
}

static void hop_finish(struct conn *c, enum reason r, int status)
{
	if (c->up.reading) {
		uv_read_stop((uv_stream_t *)&c->up.tcp);
		c->up.reading = false;
	}
	c->hop->done(c, r, status);
}

static void hop_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct side *s = st->data;
	struct conn *c = s->c;
	struct upstream_hop *h = c->hop;
	if (nread > 0 && h && c->state == C_CONNECTING) {
		size_t room = sizeof(h->buf) - h->len;
		size_t n = (size_t)nread < room ? (size_t)nread : room;
		memcpy(h->buf + h->len, buf->base, n);
		h->len += n;
	}
	if (buf->base)
		bufpool_put(&c->ns->pool, buf->base);
	if (!h || c->state != C_CONNECTING)
		return;
	if (nread < 0) {
		log_debug("upstream proxy closed before its reply: %s", uv_strerror((int)nread));
		hop_finish(c, REASON_UPSTREAM_PROXY_REFUSED, 502);
		return;
	}
	int status = 0;
	int r = upstream_parse_reply(h->buf, h->len, &status, &h->head_len);
	if (r == 0)
		return;
	if (r < 0) {
		hop_finish(c, REASON_UPSTREAM_PROXY_REFUSED, 502);
		return;
	}
	if (status / 100 != 2) {
		int ours;
		enum reason why = upstream_reason_for_status(status, &ours);
		log_debug("upstream proxy answered %d", status);
		hop_finish(c, why, ours);
		return;
	}
	hop_finish(c, REASON_OK, 0);
}

int upstream_hop_start(struct conn *c, upstream_done_cb done)
{
	const struct upstream_proxy *up = c->ns->upstream;
	struct upstream_hop *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->done = done;
	c->hop = h;
	size_t len;
	char *req = upstream_connect_request(up, c->host, c->have_chosen ? &c->chosen : NULL, c->port, &len);
	if (!req)
		return -EINVAL;
	int r = relay_send(&c->up, req, len, BUF_MALLOC);
	if (r < 0)
		return r;
	c->up.reading = true;
	r = uv_read_start((uv_stream_t *)&c->up.tcp, conn_alloc_pooled, hop_read);
	if (r < 0) {
		c->up.reading = false;
		return r;
	}
	return 0;
}

int upstream_hop_send_leftover(struct conn *c)
{
	struct upstream_hop *h = c->hop;
	if (!h || h->len <= h->head_len)
		return 0;
	size_t n = h->len - h->head_len;
	char *b = malloc(n);
	if (!b)
		return -ENOMEM;
	memcpy(b, h->buf + h->head_len, n);
	h->len = h->head_len;
	return relay_send(&c->client, b, n, BUF_MALLOC);
}
