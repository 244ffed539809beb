/* Workload for test_ident_local: forks a child that connects to
 * 127.0.0.1:PORT (or ADDR:PORT, third argument). MODE "hold": the child keeps the socket until EOF (or
 * 20 s); "exit": the child closes and exits at once. The parent waits for
 * the child, so the chain is anchor -> workload -> workload. "hold:N": the
 * child opens N connections and holds them all (benchmarks).
 * "connect:HOST:PORT": the child asks the proxy at ADDR:PORT for
 * CONNECT HOST:PORT and prints the status line it gets. "self": no child,
 * this process connects and holds (a process that exec'd it connects anew).
 * "tunnel:HOST:PORT": as connect:, then holds the tunnel until the proxy
 * closes it ("workload: tunnel closed"); this child survives the anchor. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 4)
		return 2;
	const char *addr = argc == 4 ? argv[3] : "127.0.0.1";
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (strcmp(argv[2], "self") == 0) { /* this process connects and holds (no child) */
		alarm(20);
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])) };
		inet_pton(AF_INET, addr, &sa.sin_addr);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			return 1;
		char b;
		while (read(fd, &b, 1) > 0)
			;
		return 0;
	}
	pid_t c = fork();
	if (c < 0)
		return 1;
	if (c == 0) {
		/* "tunnel:HOST:PORT" outlives the anchor on purpose: it is the
		 * surviving process whose tunnel the proxy must revoke. */
		if (strncmp(argv[2], "tunnel:", 7) != 0)
			prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(20);
		/* Scripts start the workload before the proxy is ready. */
		const char *wf = getenv("IDENT_WAIT_FILE");
		for (int i = 0; wf && i < 200 && access(wf, F_OK) != 0; i++)
			usleep(50 * 1000);
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])) };
		inet_pton(AF_INET, addr, &sa.sin_addr);
		int many = strncmp(argv[2], "hold:", 5) == 0 ? atoi(argv[2] + 5) : 1;
		int fd = -1;
		for (int i = 0; i < (many > 0 ? many : 1); i++) {
			fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
				_exit(1);
		}
		if (strcmp(argv[2], "exit") == 0)
			_exit(0);
		bool tunnel = strncmp(argv[2], "tunnel:", 7) == 0;
		if (strncmp(argv[2], "connect:", 8) == 0 || tunnel) {
			const char *dest = argv[2] + (tunnel ? 7 : 8);
			char req[512];
			int n = snprintf(req, sizeof(req), "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n",
					 dest, dest);
			if (write(fd, req, (size_t)n) != n)
				_exit(1);
			char resp[256];
			ssize_t r = read(fd, resp, sizeof(resp) - 1);
			if (r <= 0)
				_exit(1);
			resp[r] = '\0';
			char *eol = strstr(resp, "\r\n");
			if (eol)
				*eol = '\0';
			printf("workload: %s\n", resp);
			fflush(stdout);
			if (tunnel && strstr(resp, " 200")) {
				/* hold the tunnel until the proxy ends it */
				char b;
				while (read(fd, &b, 1) > 0)
					;
				printf("workload: tunnel closed\n");
				fflush(stdout);
			}
			_exit(strstr(resp, " 200") ? 0 : 3);
		}
		char b;
		while (read(fd, &b, 1) > 0)
			;
		_exit(0);
	}
	int st;
	waitpid(c, &st, 0);
	return 0;
}
