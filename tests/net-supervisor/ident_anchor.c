/* Stand-in anchor for test_ident_local: spawns one workload (WORKLOAD_BIN
 * PORT MODE) as its child and, when SOCKPATH is not "-", listens there so
 * the strategy can identify it as the socket's peer. Runs until killed
 * (bounded: exits after 60 s). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: ident_anchor SOCKPATH|- WORKLOAD_BIN PORT MODE [ADDR]\n");
		return 2;
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	int lfd = -1;
	if (strcmp(argv[1], "-") != 0) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", argv[1]);
		unlink(argv[1]);
		lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 16) < 0) {
			perror("anchor listen");
			return 1;
		}
	}
	pid_t w = fork();
	if (w < 0)
		return 1;
	if (w == 0) {
		if (lfd >= 0)
			close(lfd);
		execl(argv[2], argv[2], argv[3], argv[4], argc == 6 ? argv[5] : (char *)NULL, (char *)NULL);
		_exit(127);
	}
	time_t end = time(NULL) + 60;
	while (time(NULL) < end) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		int r = poll(&p, lfd >= 0 ? 1 : 0, 200);
		if (r > 0) {
			int c = accept(lfd, NULL, NULL);
			if (c >= 0)
				close(c);
		}
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
	}
	return 0;
}
