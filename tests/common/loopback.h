/* TCP on 127.0.0.1 for the tests and their probes: a listener on a port the
 * kernel picks, and one connect that reports the socket's cookie (the key
 * the connect notifier and sock_diag attribute by). Header only, no
 * dependencies, so the probes (built without sanitizers) can use it too. */
#pragma once

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

/* Listen on 127.0.0.1:0 with the given backlog; *port is the port chosen.
 * Returns the listening fd (close-on-exec) or -1. */
static inline int loopback_listen(int backlog, int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t l = sizeof(a);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, backlog) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &l) < 0) {
		int e = errno;
		close(fd);
		errno = e; /* for the caller's perror */
		return -1;
	}
	*port = ntohs(a.sin_port);
	return fd;
}

/* How a probe opens its connection: connect(2), or TCP Fast Open, where
 * the connect happens inside a send with MSG_FASTOPEN (one byte, 'x'). */
enum loopback_how { LOOPBACK_CONNECT, LOOPBACK_SENDTO_FASTOPEN, LOOPBACK_SENDMSG_FASTOPEN, LOOPBACK_SENDMMSG_FASTOPEN };

/* Open a connection to 127.0.0.1:port the given way, read the socket's
 * cookie into *cookie, close. Returns 0 or -errno (of socket, connect or
 * the send). */
static inline int loopback_connect_how(int port, enum loopback_how how, uint64_t *cookie)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	char byte = 'x';
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr mh = { .msg_name = &a, .msg_namelen = sizeof(a), .msg_iov = &iov, .msg_iovlen = 1 };
	struct mmsghdr mm = { .msg_hdr = mh };
	long r;
	switch (how) {
	case LOOPBACK_SENDTO_FASTOPEN:
		r = sendto(fd, &byte, 1, MSG_FASTOPEN, (struct sockaddr *)&a, sizeof(a));
		break;
	case LOOPBACK_SENDMSG_FASTOPEN:
		r = sendmsg(fd, &mh, MSG_FASTOPEN);
		break;
	case LOOPBACK_SENDMMSG_FASTOPEN:
		r = sendmmsg(fd, &mm, 1, MSG_FASTOPEN);
		break;
	default:
		r = connect(fd, (struct sockaddr *)&a, sizeof(a));
		break;
	}
	if (r < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	socklen_t l = sizeof(*cookie);
	getsockopt(fd, SOL_SOCKET, SO_COOKIE, cookie, &l);
	close(fd);
	return 0;
}

/* Connect to 127.0.0.1:port, read the socket's cookie into *cookie, close.
 * Returns 0 or -errno (of socket or connect). */
static inline int loopback_connect(int port, uint64_t *cookie)
{
	return loopback_connect_how(port, LOOPBACK_CONNECT, cookie);
}
