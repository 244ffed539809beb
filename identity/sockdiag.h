/* sockdiag: find the kernel socket behind a flow tuple with sock_diag.
 *
 * A flow tuple names a socket from ITS OWN side: src is the socket's local
 * address and port (the workload end), dst its peer. TCP is an exact
 * INET_DIAG query by the 4-tuple (connected states only; listeners and
 * TIME_WAIT are never returned); UDP is a dump filtered in the kernel by
 * source port and matched here by source address (and destination when the
 * socket is connected). The answer is the socket's inode, owner uid,
 * cookie (SO_COOKIE; never reused by the kernel) and state.
 *
 * A handle is one netlink socket and answers for the network namespace it
 * was opened in (the caller's at sockdiag_open time). It is NOT
 * thread-safe: use one handle per thread. */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

union flow_addr {
	struct in_addr v4;
	struct in6_addr v6;
	uint8_t raw[16];
};

struct flow_tuple {
	int proto;  /* IPPROTO_TCP or IPPROTO_UDP */
	int family; /* AF_INET or AF_INET6 */
	union flow_addr src; /* the socket's local side */
	uint16_t sport;      /* host byte order */
	union flow_addr dst; /* the socket's peer */
	uint16_t dport;      /* host byte order */
};

struct sockdiag_result {
	uint32_t inode; /* the socket inode: "socket:[inode]" in fd tables */
	uid_t uid;      /* owner (creator's fsuid, in the handle's user ns) */
	uint64_t cookie; /* idiag_cookie[0] | idiag_cookie[1] << 32 == SO_COOKIE */
	uint8_t state;  /* TCP_ESTABLISHED etc.; UDP: TCP_ESTABLISHED (connected) or TCP_CLOSE */
	uint8_t family; /* family of the socket found (AF_INET6 for a dual-stack socket) */
};

struct sockdiag;

/* One netlink (NETLINK_SOCK_DIAG) socket in the caller's netns. NULL with
 * errno set on failure. */
struct sockdiag *sockdiag_open(void);
void sockdiag_close(struct sockdiag *sd);

/* 0 and *out; -ENOENT when no such socket (or it is not connected / is a
 * listener); -ENOTUNIQ when a UDP tuple matches several sockets equally
 * well; -EINVAL for a bad tuple; other -errno on netlink failure. */
int sockdiag_lookup(struct sockdiag *sd, const struct flow_tuple *t, struct sockdiag_result *out);

/* Build a tuple from the socket's local (src) and peer (dst) sockaddrs,
 * which must be of the same family. -EINVAL otherwise. */
int flow_tuple_from_sockaddr(struct flow_tuple *t, int proto, const struct sockaddr *src,
			     const struct sockaddr *dst);
/* "tcp 127.0.0.1:40000->127.0.0.1:80" / "udp [::1]:5000->[::1]:53". */
int flow_tuple_format(const struct flow_tuple *t, char *buf, size_t size);
