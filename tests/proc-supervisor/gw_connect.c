/* gw_connect HOST PORT [SECONDS]: connect over TCP, print "<pid> <local
 * port>", keep the socket SECONDS (default 20). A workload for the identity
 * tests; plain libc, so it runs under the workload seccomp profile even in
 * sanitizer builds (LeakSanitizer needs ptrace, which the profile denies). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: gw_connect HOST PORT [SECONDS]\n");
		return 2;
	}
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2])) };
	if (fd < 0 || inet_pton(AF_INET, argv[1], &a.sin_addr) != 1 ||
	    connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("gw_connect");
		return 1;
	}
	struct sockaddr_in l;
	socklen_t ll = sizeof(l);
	getsockname(fd, (struct sockaddr *)&l, &ll);
	printf("%d %d\n", (int)getpid(), ntohs(l.sin_port));
	fflush(stdout);
	sleep(argc > 3 ? (unsigned)atoi(argv[3]) : 20);
	return 0;
}
