/* probe_storm: a hostile workload's connect storm against the notifier.
 *   probe_storm SECONDS
 * For SECONDS: threads connect in loops; others close and dup2 over the
 * same fd numbers meanwhile (the socket argument changes under the
 * supervisor's pidfd_getfd); short-lived threads connect and exit at once
 * (gone before or during the record); a thread with its own fd table
 * (unshare(CLONE_FILES)) connects; children start connecting threads and
 * then exec or exit while those are blocked; connect is called on a pipe,
 * on -1, on a huge and a high-bit fd, with NULL and bad pointers.
 * Every connect goes to 127.0.0.1 on a port bound but not listening
 * (refused at once). At the end one ordinary connect; prints
 * "storm connects=N enosys=E cookie=C pid=P" and exits 0 when no connect
 * ever failed with ENOSYS (the listener was never dropped), 1 otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

static struct sockaddr_in A;
static atomic_int stop;
static atomic_long nconn, nosys;

static void one(int s)
{
	if (connect(s, (struct sockaddr *)&A, sizeof(A)) < 0 && errno == ENOSYS)
		nosys++;
	nconn++;
}

/* One connect on a fresh socket. */
static void connect_fresh(void)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	one(s);
	if (s >= 0)
		close(s);
}

static void *worker(void *x)
{
	(void)x;
	while (!stop)
		connect_fresh();
	return NULL;
}

/* Closes and replaces fd numbers the workers use. */
static void *closer(void *x)
{
	unsigned r = (unsigned)(uintptr_t)x;
	while (!stop) {
		r = r * 1103515245u + 12345u;
		int fd = 3 + (int)((r >> 8) % 40);
		if (r & 1) {
			close(fd);
		} else {
			int s = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
			if (s >= 0 && s != fd) {
				dup3(s, fd, O_CLOEXEC);
				close(s);
			}
		}
	}
	return NULL;
}

static void *oneshot(void *x)
{
	(void)x;
	connect_fresh();
	return NULL;
}

static void *weird(void *x)
{
	(void)x;
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return NULL;
	while (!stop) {
		one(p[0]);
		one(-1);
		one(0x7fffffff);
		long r = syscall(SYS_connect, (1L << 32) | 3, &A, sizeof(A));
		if (r < 0 && errno == ENOSYS)
			nosys++;
		syscall(SYS_connect, 3, NULL, 0);
		syscall(SYS_connect, 3, (void *)1, 16);
		nconn += 3;
	}
	return NULL;
}

static void *own_table(void *x)
{
	(void)x;
	if (unshare(CLONE_FILES) < 0)
		return NULL;
	return worker(NULL);
}

int main(int argc, char **argv)
{
	int secs = argc > 1 ? atoi(argv[1]) : 3;
	/* A loopback port nothing listens on (bound, so nobody else gets it). */
	int hold = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	A.sin_family = AF_INET;
	A.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(A);
	if (hold < 0 || bind(hold, (struct sockaddr *)&A, sizeof(A)) < 0 ||
	    getsockname(hold, (struct sockaddr *)&A, &al) < 0)
		return perror("bind"), 2;

	pthread_t t[16];
	int nt = 0;
	for (int i = 0; i < 6; i++)
		pthread_create(&t[nt++], NULL, worker, NULL);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[nt++], NULL, closer, (void *)(uintptr_t)(i + 7));
	pthread_create(&t[nt++], NULL, weird, NULL);
	pthread_create(&t[nt++], NULL, own_table, NULL);

	struct timespec end;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += secs;
	long kids = 0;
	for (;;) {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
			break;
		for (int i = 0; i < 10; i++) {
			pthread_t o;
			if (pthread_create(&o, NULL, oneshot, NULL) == 0)
				pthread_detach(o);
		}
		pid_t p = fork();
		if (p == 0) {
			pthread_t a, b;
			pthread_create(&a, NULL, worker, NULL);
			pthread_create(&b, NULL, worker, NULL);
			usleep(300);
			if (kids & 1) { /* exec while both threads may be blocked in connect */
				char *av[] = { "/bin/true", NULL };
				execv(av[0], av);
			}
			_exit(0);
		}
		if (p > 0)
			kids++;
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		usleep(2000);
	}
	stop = 1;
	for (int i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	while (waitpid(-1, NULL, 0) > 0)
		;

	/* Still attributed after all that? */
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	one(s);
	uint64_t cookie = 0;
	socklen_t cl = sizeof(cookie);
	getsockopt(s, SOL_SOCKET, SO_COOKIE, &cookie, &cl);
	printf("storm connects=%ld enosys=%ld kids=%ld cookie=%llu pid=%d\n", (long)nconn, (long)nosys, kids,
	       (unsigned long long)cookie, (int)getpid());
	fflush(stdout);
	return nosys ? 1 : 0;
}
