/* The proc side of the identity channel.
 *
 * Listens on an endpoint; each connection must start with Hello (within
 * read_deadline_ms), is answered with HelloAck carrying the signed anchor
 * certificate (and, when the Hello carried a clock nonce and `instance` is
 * set, a clock sample signed by the instance key, proto/clock.h), and may
 * then send IdentityRequests and ClockRequests (answered at once). Each request is handed to
 * on_identity, which answers asynchronously — exactly once — with
 * proto_request_reply() (a SignedContext) or proto_request_fail() (a reason
 * word). Any protocol error (bad frame, unknown major version, a message out
 * of order or of the wrong kind, a deadline missed) closes the connection.
 *
 * Unix peers are checked with SO_PEERCRED (and SO_PEERPIDFD where
 * caps->peer_pidfd) against peer_uid/peer_gid and the optional peer_check
 * callback before a byte is read. tcp/vsock peers are not authenticated by
 * the server (the channel only answers questions; what the answers are
 * worth is proven by the signatures the client verifies).
 *
 * Not thread-safe: call everything, proto_request_reply()/_fail() included,
 * on the loop's thread (do slow lookups in the thread pool and answer from
 * the after-work callback). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/kernel.h"
#include "common/reason.h"
#include "proto/context.h"
#include "proto/endpoint.h"
#include "proto/mac.h"
#include "proto/signed.h"

struct proto_server;
struct server_conn;

/* Read-only for the callee, except through the two answer functions. */
struct proto_request {
	uint64_t request_id;
	uint8_t nonce[PROTO_NONCE_LEN];
	struct proto_tuple tuple;
	uint64_t socket_cookie;
	struct server_conn *conn; /* private */
	bool mac_answered;        /* private */
};

struct proto_server_opts {
	const char *endpoint;             /* unix:PATH, tcp:HOST:PORT, vsock:CID:PORT */
	unsigned socket_mode;             /* unix path sockets; 0: 0600 */
	const struct kernel_caps *caps;   /* for SO_PEERPIDFD; may be NULL */
	bool check_uid;
	uid_t peer_uid;
	bool check_gid;
	gid_t peer_gid;
	/* Extra peer check (e.g. the peer's exe hash through peer->pidfd);
	 * return false to refuse. May be NULL. */
	bool (*peer_check)(const struct proto_peer *peer, void *userdata);
	size_t max_frame;                 /* 0: PROTO_MAX_FRAME */
	uint64_t read_deadline_ms;        /* 0: 5000 */
	size_t max_conns;                 /* 0: 64; at the limit a new peer displaces one
	                                   * with nothing outstanding (silent first, then
	                                   * the one idle longest), else it is refused */
	size_t max_inflight;              /* per connection; 0: 4096 */
	const struct signed_cert *cert;   /* sent in every HelloAck (copied) */
	/* Signs clock samples (borrowed, must outlive the server); NULL: none
	 * are sent and a ClockRequest closes the connection. */
	const struct sign_key *instance;
	/* Do not agree MAC keys (answer a 1.2 Hello as 1.1 would: every answer
	 * signed). For tests and measurements. */
	bool no_mac;
	/* Act as a peer of this older minor version in the HelloAck (tests of
	 * compatibility; 1 = protocol 1.1: no MAC key); 0: ours. */
	uint32_t version_minor;
	/* Do not offer identity pushes (answer a 1.3 Hello's push_seed with
	 * HelloAck.push = false). For tests and measurements. */
	bool no_push;
	void (*on_identity)(struct proto_server *s, struct proto_request *req, void *userdata);
	void *userdata;
};

/* -EINVAL bad options/endpoint, -errno from bind/listen. */
int proto_server_start(uv_loop_t *loop, const struct proto_server_opts *opts,
		       struct proto_server **out);
/* Close the listener and every connection; done(userdata) once all handles
 * are closed and the server is freed. Requests still outstanding must be
 * answered or failed as usual (their answers are then dropped). */
void proto_server_stop(struct proto_server *s, void (*done)(void *userdata), void *userdata);
size_t proto_server_conn_count(const struct proto_server *s);
/* Replace the certificate (copied): sent in every later HelloAck, and at
 * once, as a HelloAck, on every connection past its Hello (a renewed
 * certificate, docs/protocol.md). Returns how many connections it was sent
 * on, or -ENOMEM (the old certificate stays). */
int proto_server_set_cert(struct proto_server *s, const struct signed_cert *cert);
/* Connections closed to make room for a new peer at max_conns. */
uint64_t proto_server_evictions(const struct proto_server *s);

/* Answer and free req. -ENOTCONN when the connection is gone meanwhile. */
int proto_request_reply(struct proto_request *req, const struct signed_context *sc);
int proto_request_fail(struct proto_request *req, enum reason reason, const char *message);

/* Protocol 1.2 (proto/mac.h): the request came on a channel with a MAC key
 * (the net side sent a kx key in its Hello and `instance` is set). Then
 * answer with proto_request_reply_mac() — the context bytes (serialized
 * ProcessIdentityContext, not yet signed) MAC'd with the channel's key,
 * req stays alive — and, off the connect path, once the context is signed,
 * with proto_request_signature(), which sends the ContextSignature and
 * frees req. proto_request_signature(req, NULL) only frees it (signing
 * failed or was cancelled; the net side then has no signature for its
 * audit line and says so). */
bool proto_request_wants_mac(const struct proto_request *req);
int proto_request_reply_mac(struct proto_request *req, const uint8_t *context, size_t len,
			    const uint8_t key_id[PROTO_KEY_ID_LEN]);
int proto_request_signature(struct proto_request *req, const struct signed_context *signed_ctx);

/* Protocol 1.3, connect-time identity pushes (docs/protocol.md "Pushed
 * identities"). A target is one connection that asked for pushes, with
 * what a worker thread needs to build the push without touching the
 * server: the push id (PROTO_PUSH_ID_BIT set, unique per server), the
 * connection's push seed (push_nonce) and MAC key (copies, zeroed on
 * release). proto_server_push_targets() fills at most max targets on the
 * loop thread and holds a reference on each connection; every target must
 * be released with proto_push_target_release() on the loop thread, after
 * proto_push_send() (the IdentityPush: the context bytes, their MAC under
 * t->mac_key and the instance key id) and proto_push_signature() (the
 * ContextSignature over the same bytes, request_id = push id). Both return
 * -ENOTCONN when the connection is gone meanwhile (the push is dropped; the
 * net side falls back to asking). */
struct proto_push_target {
	struct server_conn *conn; /* private */
	uint64_t push_id;
	uint8_t seed[PROTO_PUSH_SEED_LEN];
	uint8_t mac_key[PROTO_MAC_KEY_LEN];
};
size_t proto_server_push_targets(struct proto_server *s, struct proto_push_target *out, size_t max);
/* Some connection asked for pushes (cheap; for the caller's fast path). */
bool proto_server_push_wanted(const struct proto_server *s);
int proto_push_send(struct proto_push_target *t, const uint8_t *context, size_t len, const uint8_t mac[PROTO_MAC_LEN],
		    const uint8_t key_id[PROTO_KEY_ID_LEN]);
int proto_push_signature(struct proto_push_target *t, const struct signed_context *signed_ctx);
void proto_push_target_release(struct proto_push_target *t);
