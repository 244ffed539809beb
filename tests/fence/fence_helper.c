/* Small network probes for test_fence.sh (run inside test namespaces):
 *   fence_helper http ADDR PORT          serve "200 fence-ok" forever
 *   fence_helper udp-sink ADDR PORT FILE append one line per datagram to FILE
 *   fence_helper udp-send ADDR PORT      send one datagram (exit 0 if sent)
 *   fence_helper tcp ADDR PORT           connect within 2 s (exit 0 if connected)
 *   fence_helper ping ADDR               ICMP echo (datagram socket), 0 if answered in 1 s
 *   fence_helper tcp-refused ADDR PORT   0 if connect is refused (reset or ICMP error) within 1 s;
 *                                        1 connected, 3 no answer (a timeout is not a refusal)
 *   fence_helper udp-echo ADDR PORT      answer every datagram with its payload, forever
 *   fence_helper udp-ask ADDR PORT       connected UDP: 0 answered within 1 s, 4 refused (ICMP
 *                                        error), 3 no answer
 * ADDR may be IPv4 or IPv6. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <netinet/icmp6.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/http_head.h"

static socklen_t addr_of(const char *ip, int port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		return sizeof(*s4);
	}
	if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		return sizeof(*s6);
	}
	fprintf(stderr, "bad address %s\n", ip);
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	struct sockaddr_storage ss;
	const char *mode = argv[1];
	int port = argc > 3 ? atoi(argv[3]) : 0;
	socklen_t sl = addr_of(argv[2], port, &ss);
	if (!strcmp(mode, "http")) {
		int fd = socket(ss.ss_family, SOCK_STREAM, 0), one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 64) < 0) {
			perror("http");
			return 1;
		}
		for (;;) {
			int c = accept(fd, NULL, NULL);
			if (c < 0)
				continue;
			char buf[4096];
			read_http_head(c, buf, sizeof(buf));
			static const char r[] = "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nfence-ok\n";
			(void)!write(c, r, sizeof(r) - 1);
			close(c);
		}
	}
	if (!strcmp(mode, "udp-sink")) {
		int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
		if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
			perror("udp-sink");
			return 1;
		}
		for (;;) {
			char buf[2048];
			if (recv(fd, buf, sizeof(buf), 0) >= 0) {
				FILE *f = fopen(argv[4], "a");
				if (f) {
					fputs("datagram\n", f);
					fclose(f);
				}
			}
		}
	}
	if (!strcmp(mode, "udp-send")) {
		int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
		return sendto(fd, "x", 1, 0, (struct sockaddr *)&ss, sl) == 1 ? 0 : 1;
	}
	if (!strcmp(mode, "tcp")) {
		int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (connect(fd, (struct sockaddr *)&ss, sl) == 0)
			return 0;
		if (errno != EINPROGRESS)
			return 1;
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		if (poll(&p, 1, 2000) != 1)
			return 1;
		int err = 0;
		socklen_t el = sizeof(err);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
		return err == 0 ? 0 : 1;
	}
	if (!strcmp(mode, "tcp-refused")) {
		int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (connect(fd, (struct sockaddr *)&ss, sl) == 0)
			return 1;
		if (errno != EINPROGRESS)
			return 0; /* refused at once (EACCES, ENETUNREACH, ...) */
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		if (poll(&p, 1, 1000) != 1)
			return 3;
		int err = 0;
		socklen_t el = sizeof(err);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
		return err == 0 ? 1 : 0;
	}
	if (!strcmp(mode, "udp-echo")) {
		int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
		if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
			perror("udp-echo");
			return 1;
		}
		for (;;) {
			char buf[2048];
			struct sockaddr_storage from;
			socklen_t fl = sizeof(from);
			ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fl);
			if (n >= 0)
				(void)!sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, fl);
		}
	}
	if (!strcmp(mode, "udp-ask")) {
		int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
		if (connect(fd, (struct sockaddr *)&ss, sl) < 0)
			return 4;
		if (send(fd, "ask", 3, 0) != 3)
			return 4;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 1000) != 1)
			return 3;
		char in[64];
		return recv(fd, in, sizeof(in), 0) == 3 ? 0 : 4;
	}
	if (!strcmp(mode, "ping")) {
		int v6 = ss.ss_family == AF_INET6;
		int fd = socket(ss.ss_family, SOCK_DGRAM, v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP);
		if (fd < 0) {
			perror("ping socket");
			return 3;
		}
		unsigned char pkt[16] = { v6 ? ICMP6_ECHO_REQUEST : ICMP_ECHO, 0 };
		if (sendto(fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&ss, sl) < 0)
			return 1;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 1000) != 1)
			return 1;
		unsigned char in[256];
		ssize_t n = recv(fd, in, sizeof(in), 0);
		return n > 0 && in[0] == (v6 ? ICMP6_ECHO_REPLY : ICMP_ECHOREPLY) ? 0 : 1;
	}
	return 2;
}
