/* status: see status.h. */
#include "proc-supervisor/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "proc-supervisor/peercheck.h"
#include "proto/endpoint.h"

struct status_client {
	struct status_srv *srv;
	struct status_client *next;
	uv_pipe_t pipe;
	uv_write_t wr;
	uv_buf_t buf;
	char *text;
};

struct status_srv {
	uv_loop_t *loop;
	struct status_opts o;
	char *path;
	struct peer_allow allow;
	int listen_fd;
	uv_poll_t poll;
	bool poll_open;
	struct status_client *clients;
	bool stopping;
	void (*done)(void *);
	void *done_ud;
};

static void srv_maybe_done(struct status_srv *s)
{
	if (!s->stopping || s->poll_open || s->clients)
		return;
	void (*done)(void *) = s->done;
	void *ud = s->done_ud;
	free(s->path);
	peer_allow_free(&s->allow);
	free(s);
	if (done)
		done(ud);
}

static void on_client_closed(uv_handle_t *h)
{
	struct status_client *c = h->data;
	struct status_srv *s = c->srv;
	for (struct status_client **pp = &s->clients; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	free(c->text);
	free(c);
	srv_maybe_done(s);
}

static void on_written(uv_write_t *w, int status)
{
	struct status_client *c = w->data;
	if (!uv_is_closing((uv_handle_t *)&c->pipe))
		uv_close((uv_handle_t *)&c->pipe, on_client_closed);
}

static void serve(struct status_srv *s, int fd)
{
	struct proto_peer peer;
	if (proto_peer_get(fd, s->o.caps, &peer) < 0) {
		close(fd);
		return;
	}
	if (peer.pidfd >= 0)
		close(peer.pidfd);
	if (!peer_allow_check(&s->allow, peer.uid, peer.gid) ||
	    (s->o.caps->peer_pidfd && peer.pidfd < 0)) {
		log_info("status socket: refused uid %u", (unsigned)peer.uid);
		close(fd);
		return;
	}
	struct status_client *c = calloc(1, sizeof(*c));
	json_t *j = s->o.snapshot ? s->o.snapshot(s->o.userdata) : NULL;
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!c || !text || asprintf(&c->text, "%s\n", text) < 0) {
		free(text);
		free(c);
		close(fd);
		return;
	}
	free(text);
	c->srv = s;
	if (uv_pipe_init(s->loop, &c->pipe, 0) < 0 || uv_pipe_open(&c->pipe, fd) < 0) {
		free(c->text);
		free(c);
		close(fd);
		return;
	}
	c->pipe.data = c;
	c->next = s->clients;
	s->clients = c;
	c->buf = uv_buf_init(c->text, (unsigned)strlen(c->text));
	c->wr.data = c;
	if (uv_write(&c->wr, (uv_stream_t *)&c->pipe, &c->buf, 1, on_written) < 0)
		uv_close((uv_handle_t *)&c->pipe, on_client_closed);
}

static void on_readable(uv_poll_t *p, int status, int events)
{
	struct status_srv *s = p->data;
	if (status < 0)
		return;
	for (int i = 0; i < 16; i++) {
		int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		serve(s, fd);
	}
}

int status_start(uv_loop_t *loop, const struct status_opts *opts, struct status_srv **out)
{
	if (!loop || !opts || !opts->path || !opts->caps || !opts->snapshot)
		return -EINVAL;
	struct status_srv *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->loop = loop;
	s->o = *opts;
	s->listen_fd = -1;
	s->path = strdup(opts->path);
	int r = -ENOMEM;
	if (!s->path)
		goto fail;
	if ((r = peer_allow_init(&s->allow, opts->allow_uids, opts->n_allow_uids, opts->allow_gids,
				 opts->n_allow_gids)) < 0)
		goto fail;
	char spec[4200];
	snprintf(spec, sizeof(spec), "unix:%s", opts->path);
	struct endpoint ep;
	if ((r = endpoint_parse(spec, &ep)) < 0)
		goto fail;
	if ((r = endpoint_listen(&ep, 16, opts->socket_mode ? opts->socket_mode : 0600)) < 0)
		goto fail;
	s->listen_fd = r;
	if ((r = uv_poll_init(loop, &s->poll, s->listen_fd)) < 0)
		goto fail;
	s->poll.data = s;
	s->poll_open = true;
	uv_poll_start(&s->poll, UV_READABLE, on_readable);
	*out = s;
	return 0;
fail:
	if (s->listen_fd >= 0) {
		close(s->listen_fd);
		unlink(s->path);
	}
	free(s->path);
	peer_allow_free(&s->allow);
	free(s);
	return r;
}

static void on_poll_closed(uv_handle_t *h)
{
	struct status_srv *s = h->data;
	s->poll_open = false;
	close(s->listen_fd);
	s->listen_fd = -1;
	srv_maybe_done(s);
}

void status_stop(struct status_srv *s, void (*done)(void *userdata), void *userdata)
{
	if (!s || s->stopping)
		return;
	s->stopping = true;
	s->done = done;
	s->done_ud = userdata;
	unlink(s->path);
	uv_close((uv_handle_t *)&s->poll, on_poll_closed);
	for (struct status_client *c = s->clients; c; c = c->next)
		if (!uv_is_closing((uv_handle_t *)&c->pipe))
			uv_close((uv_handle_t *)&c->pipe, on_client_closed);
}
