/* probe_connect: loopback helpers for the attribution tests.
 *   serve PORTFILE SECONDS     listen on 127.0.0.1:0, write the port, accept
 *                              and close connections until SECONDS pass
 *   connect PORT [HOW]         connect, print "cookie=N pid=P", exit; HOW is
 *                              connect (default), or sendto, sendmsg or
 *                              sendmmsg with MSG_FASTOPEN (TCP Fast Open)
 *   connect-later PORT OUT MS  wait MS, connect, write "connect=OK|ERRNO" to OUT */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../common/loopback.h"

int main(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "serve")) {
		int port;
		int s = loopback_listen(64, &port);
		if (s < 0)
			return perror("serve"), 1;
		FILE *f = fopen(argv[2], "w");
		if (!f)
			return perror(argv[2]), 1;
		fprintf(f, "%d\n", port);
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
		static const char *const hows[] = { "connect", "sendto", "sendmsg", "sendmmsg" };
		int how = argc >= 4 ? -1 : LOOPBACK_CONNECT;
		for (int i = 0; argc >= 4 && i < 4; i++)
			if (!strcmp(argv[3], hows[i]))
				how = i;
		if (how < 0) {
			fprintf(stderr, "probe_connect: unknown way to connect '%s'\n", argv[3]);
			return 2;
		}
		uint64_t cookie = 0;
		int r = loopback_connect_how(atoi(argv[2]), (enum loopback_how)how, &cookie);
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
		int r = loopback_connect(atoi(argv[2]), &cookie);
		FILE *f = fopen(argv[3], "w");
		if (!f)
			return 1;
		fprintf(f, "connect=%s\n", r < 0 ? strerrorname_np(-r) : "OK");
		fclose(f);
		return 0;
	}
	fprintf(stderr, "usage: probe_connect serve PORTFILE SECONDS | connect PORT [connect|sendto|sendmsg|sendmmsg] | connect-later PORT OUT MS\n");
	return 2;
}
