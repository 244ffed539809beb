/* One control-channel connection on a libuv loop: a stream socket, the
 * incremental frame decoder, typed messages in and out.
 *
 * Lifecycle (libuv style): proto_conn_open()/proto_conn_accept() -> messages
 * via on_msg -> proto_conn_close() (or EOF, an error, a protocol violation,
 * a missed deadline) -> on_close exactly once, after which the conn is freed.
 * Any malformed frame or message closes the connection: the protocol has no
 * error recovery by design.
 *
 * Deadlines: a frame whose first byte arrived must be complete within
 * read_deadline_ms (a slowloris peer is dropped); proto_conn_expect() also
 * arms it until the next complete message (e.g. Hello after accept).
 * on_close's err: 0 for EOF or a local close without error, -ETIMEDOUT, a
 * decode error (-EBADMSG, -EPROTONOSUPPORT, -EMSGSIZE), -ENOBUFS when the
 * peer does not read, or a negative libuv/errno code.
 *
 * libuv writes with write(2): the process must ignore SIGPIPE, or a peer
 * that closed first kills it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/message.h"

struct proto_conn;

struct proto_conn_cbs {
	/* m is valid during the call; heap fields may be moved out (set them
	 * NULL). The callee may close the conn. */
	void (*on_msg)(struct proto_conn *c, struct ctl_msg *m, void *userdata);
	void (*on_close)(struct proto_conn *c, int err, void *userdata);
};

struct proto_conn_opts {
	size_t max_frame;          /* 0: PROTO_MAX_FRAME */
	uint64_t read_deadline_ms; /* 0: 5000 */
	size_t max_write_queue;    /* bytes; 0: 4 MiB */
};

/* Take ownership of a connected stream socket fd (closed on failure). */
int proto_conn_open(uv_loop_t *loop, int fd, const struct proto_conn_opts *opts,
		    const struct proto_conn_cbs *cbs, void *userdata, struct proto_conn **out);
/* Accept one pending connection of a listening libuv stream. */
int proto_conn_accept(uv_stream_t *server, const struct proto_conn_opts *opts,
		      const struct proto_conn_cbs *cbs, void *userdata, struct proto_conn **out);

/* Queue a message. -ENOTCONN after close, -ENOBUFS (and the conn closes)
 * when the peer lets the write queue grow beyond max_write_queue. */
int proto_conn_send(struct proto_conn *c, const struct ctl_msg *m);
/* Require the next complete message within read_deadline_ms. */
void proto_conn_expect(struct proto_conn *c);
/* Idempotent; on_close follows from the loop. Frames queued but not yet
 * written are sent if the socket accepts them at once, else dropped: to be
 * sure the peer got the last message, wait for it to close (or linger). */
void proto_conn_close(struct proto_conn *c, int err);
bool proto_conn_is_closing(const struct proto_conn *c);
int proto_conn_fd(const struct proto_conn *c);
void *proto_conn_userdata(const struct proto_conn *c);
void proto_conn_set_userdata(struct proto_conn *c, void *userdata);
