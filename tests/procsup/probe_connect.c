/* probe_connect: loopback helpers for the attribution tests.
 *   serve PORTFILE SECONDS     listen on 127.0.0.1:0, write the port, accept
 *                              and close connections until SECONDS pass
 *   connect PORT               connect, print "cookie=N pid=P", exit
 *   connect-later PORT OUT MS  wait MS, connect, write "connect=OK|ERRNO" to OUT */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

static int do_connect(int port, uint64_t *cookie)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	socklen_t l = sizeof(*cookie);
	getsockopt(fd, SOL_SOCKET, SO_COOKIE, cookie, &l);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "serve")) {
		int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = { .sin_family = AF_INET };
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		socklen_t l = sizeof(a);
		if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 64) < 0 ||
		    getsockname(s, (struct sockaddr *)&a, &l) < 0)
			return perror("serve"), 1;
		FILE *f = fopen(argv[2], "w");
		if (!f)
			return perror(argv[2]), 1;
		fprintf(f, "%d\n", ntohs(a.sin_port));
		fclose(f);
		time_t end = time(NULL) + atoi(argv[3]);
		while (time(NULL) < end) {
			struct pollfd p = { .fd = s, .events = POLLIN };
			if (poll(&p, 1, 200) == 1) {
				int c = accept(s, NULL, NULL);
				if (c >= 0)
					close(c);
			}
		}
		return 0;
	}
	if (argc >= 3 && !strcmp(argv[1], "connect")) {
		uint64_t cookie = 0;
		int r = do_connect(atoi(argv[2]), &cookie);
		if (r < 0) {
			printf("connect=%s\n", strerrorname_np(-r));
			return 1;
		}
		printf("cookie=%llu pid=%d\n", (unsigned long long)cookie, (int)getpid());
		return 0;
	}
	if (argc >= 5 && !strcmp(argv[1], "connect-later")) {
		usleep((useconds_t)atoi(argv[4]) * 1000);
		uint64_t cookie = 0;
		int r = do_connect(atoi(argv[2]), &cookie);
		FILE *f = fopen(argv[3], "w");
		if (!f)
			return 1;
		fprintf(f, "connect=%s\n", r < 0 ? strerrorname_np(-r) : "OK");
		fclose(f);
		return 0;
	}
	fprintf(stderr, "usage: probe_connect serve PORTFILE SECONDS | connect PORT | connect-later PORT OUT MS\n");
	return 2;
}
