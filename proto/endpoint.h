/* Control-channel endpoints: "unix:PATH" (or "unix:@NAME", abstract),
 * "tcp:HOST:PORT" (HOST an IPv4 literal, "[IPv6]" or "localhost"; names are
 * not resolved, so the identity channel never depends on DNS), and
 * "vsock:CID:PORT" (CID a number, or "any", "local", "host").
 *
 * Sockets are non-blocking and close-on-exec. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

enum endpoint_kind { ENDPOINT_UNIX = 1, ENDPOINT_TCP, ENDPOINT_VSOCK };

struct endpoint {
	enum endpoint_kind kind;
	struct sockaddr_storage addr;
	socklen_t addr_len;
	char text[128 + 8]; /* as given, for messages */
};

/* -EINVAL on a malformed string, -ENAMETOOLONG for a too long path. */
int endpoint_parse(const char *s, struct endpoint *out);
/* Bound, listening socket. A unix socket path that exists and is a socket
 * is replaced; mode (e.g. 0600) is applied to it. Returns fd or -errno. */
int endpoint_listen(const struct endpoint *e, int backlog, unsigned mode);
/* Start a non-blocking connect. Returns fd; *in_progress tells whether the
 * caller must wait for writability and check SO_ERROR. */
int endpoint_connect(const struct endpoint *e, bool *in_progress);

/* The peer of a connected unix socket: SO_PEERCRED (credentials at
 * connect time), plus a pidfd from SO_PEERPIDFD when caps->peer_pidfd
 * (valid even after the peer exited, so it cannot name a reused pid).
 * For tcp/vsock sockets is_unix is false and nothing else is known. */
struct kernel_caps;
struct proto_peer {
	bool is_unix;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	int pidfd; /* -1 when unavailable; owned by the caller once filled */
	struct sockaddr_storage addr; /* tcp peers: getpeername(); family AF_UNSPEC otherwise */
};
int proto_peer_get(int fd, const struct kernel_caps *caps, struct proto_peer *out);
