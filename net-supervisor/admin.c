#include "net-supervisor/admin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "net-supervisor/hostport.h"

#define ADMIN_MAX_REQ 8192
#define ADMIN_TIMEOUT_MS 5000
/* Admin connections open at once; more are closed at accept. Each holds a
 * descriptor for up to ADMIN_TIMEOUT_MS, out of the daemon's reserve
 * (NETSUP_FD_RESERVE): a flood of idle scrapers must not spend it. */
#define ADMIN_MAX_CONNS 32

struct admin {
	uv_tcp_t tcp;
	struct admin_source src;
	size_t n_conns; /* open /metrics, /healthz, /readyz connections */
	bool closed;    /* the listener is closed: freed with its last connection */
};

struct aconn {
	uv_tcp_t tcp;
	uv_timer_t timer;
	struct admin *ad;
	char buf[ADMIN_MAX_REQ];
	size_t len;
	int open;
	bool answered;
	uv_write_t w;
	char *out;
};

static void aconn_closed(uv_handle_t *h)
{
	struct aconn *a = h->data;
	if (--a->open == 0) {
		struct admin *ad = a->ad;
		if (--ad->n_conns == 0 && ad->closed)
			free(ad);
		free(a->out);
		free(a);
	}
}

static void aconn_close(struct aconn *a)
{
	if (!uv_is_closing((uv_handle_t *)&a->tcp)) {
		uv_close((uv_handle_t *)&a->tcp, aconn_closed);
		uv_close((uv_handle_t *)&a->timer, aconn_closed);
	}
}

static void written(uv_write_t *w, int status) { aconn_close(w->data); }

static void answer(struct aconn *a, int status, const char *ctype, const char *body, size_t blen)
{
	if (a->answered)
		return;
	a->answered = true;
	uv_read_stop((uv_stream_t *)&a->tcp);
	const char *text = status == 200 ? "OK" : status == 404 ? "Not Found" : status == 503 ? "Service Unavailable" : "Bad Request";
	size_t cap = blen + 256;
	a->out = malloc(cap);
	if (!a->out) {
		aconn_close(a);
		return;
	}
	int n = snprintf(a->out, cap, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
			 status, text, ctype, blen);
	memcpy(a->out + n, body, blen);
	uv_buf_t b = uv_buf_init(a->out, (unsigned)(n + blen));
	a->w.data = a;
	if (uv_write(&a->w, (uv_stream_t *)&a->tcp, &b, 1, written) < 0)
		aconn_close(a);
}

static void handle(struct aconn *a)
{
	char method[8], path[256];
	if (sscanf(a->buf, "%7s %255s HTTP/1.", method, path) != 2 || strcmp(method, "GET") != 0) {
		answer(a, 400, "text/plain", "bad request\n", 12);
		return;
	}
	char *q = strchr(path, '?');
	if (q)
		*q = '\0';
	const struct admin_source *src = &a->ad->src;
	if (strcmp(path, "/healthz") == 0) {
		answer(a, 200, "text/plain", "ok\n", 3);
	} else if (strcmp(path, "/readyz") == 0) {
		char why[320] = "";
		if (src->ready(src->data, why, sizeof(why)))
			answer(a, 200, "text/plain", "ready\n", 6);
		else
			answer(a, 503, "text/plain", why, strlen(why));
	} else if (strcmp(path, "/metrics") == 0) {
		size_t len;
		char *m = src->metrics(src->data, &len);
		if (!m) {
			answer(a, 503, "text/plain", "out of memory\n", 14);
			return;
		}
		answer(a, 200, "text/plain; version=0.0.4", m, len);
		free(m);
	} else {
		answer(a, 404, "text/plain", "not found\n", 10);
	}
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct aconn *a = h->data;
	*buf = uv_buf_init(a->buf + a->len, (unsigned)(sizeof(a->buf) - 1 - a->len));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct aconn *a = st->data;
	if (nread < 0) {
		aconn_close(a);
		return;
	}
	a->len += (size_t)nread;
	a->buf[a->len] = '\0';
	if (strstr(a->buf, "\r\n\r\n") || strstr(a->buf, "\n\n"))
		handle(a);
	else if (a->len >= sizeof(a->buf) - 1)
		answer(a, 400, "text/plain", "request too large\n", 18);
}

static void on_timeout(uv_timer_t *t) { aconn_close(t->data); }

static void on_conn(uv_stream_t *server, int status)
{
	struct admin *ad = server->data;
	if (status < 0)
		return;
	struct aconn *a = calloc(1, sizeof(*a));
	if (!a)
		return;
	a->ad = ad;
	uv_tcp_init(server->loop, &a->tcp);
	uv_timer_init(server->loop, &a->timer);
	a->tcp.data = a->timer.data = a;
	a->open = 2;
	ad->n_conns++;
	if (uv_accept(server, (uv_stream_t *)&a->tcp) < 0 || ad->n_conns > ADMIN_MAX_CONNS) {
		aconn_close(a);
		return;
	}
	uv_timer_start(&a->timer, on_timeout, ADMIN_TIMEOUT_MS, 0);
	if (uv_read_start((uv_stream_t *)&a->tcp, on_alloc, on_read) < 0)
		aconn_close(a);
}

int admin_listen(uv_loop_t *loop, const char *addr, const struct admin_source *src, struct admin **out)
{
	struct sockaddr_storage ss;
	int r = netsup_parse_hostport(addr, &ss);
	if (r < 0) {
		log_error("--admin %s: expected ADDR:PORT", addr);
		return r;
	}
	struct admin *ad = calloc(1, sizeof(*ad));
	if (!ad)
		return -ENOMEM;
	ad->src = *src;
	uv_tcp_init(loop, &ad->tcp);
	ad->tcp.data = ad;
	r = uv_tcp_bind(&ad->tcp, (struct sockaddr *)&ss, 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)&ad->tcp, 128, on_conn);
	if (r < 0) {
		log_error("cannot listen on %s (admin): %s", addr, uv_strerror(r));
		uv_close((uv_handle_t *)&ad->tcp, (uv_close_cb)free);
		return r;
	}
	*out = ad;
	return 0;
}

static void admin_closed(uv_handle_t *h)
{
	struct admin *ad = h->data;
	ad->closed = true;
	if (ad->n_conns == 0)
		free(ad);
}

void admin_close(struct admin *a)
{
	if (a)
		uv_close((uv_handle_t *)&a->tcp, admin_closed);
}
