#include "nschild.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/kernel.h"

static void park(void)
{
	for (int i = 0; i < 600; i++)
		usleep(100000);
	_exit(0);
}

int nschild_start(struct nschild *c, int flags, void (*fn)(int wfd, void *arg), void *arg)
{
	*c = (struct nschild){ .pid = -1, .direct = -1, .pidfd = -1, .result = -1 };
	int ready[2], res[2];
	if (pipe2(ready, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(res, O_CLOEXEC) < 0) {
		close(ready[0]);
		close(ready[1]);
		return -errno;
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		close(ready[0]);
		close(res[0]);
		if (unshare(flags & ~CLONE_NEWPID) < 0)
			_exit(2);
		pid_t me = getpid();
		if (flags & CLONE_NEWPID) {
			if (unshare(CLONE_NEWPID) < 0)
				_exit(3);
			pid_t g = fork();
			if (g < 0)
				_exit(4);
			if (g == 0) {
				prctl(PR_SET_PDEATHSIG, SIGKILL);
				close(ready[1]);
				if (fn)
					fn(res[1], arg);
				park(); /* stay until stopped: the parent wants a pidfd */
			}
			me = g;
			if (write(ready[1], &me, sizeof(me)) != sizeof(me))
				_exit(5);
			int st;
			while (waitpid(g, &st, 0) < 0 && errno == EINTR)
				;
			_exit(0);
		}
		if (write(ready[1], &me, sizeof(me)) != sizeof(me))
			_exit(5);
		close(ready[1]);
		if (fn)
			fn(res[1], arg);
		park();
	}
	close(ready[1]);
	close(res[1]);
	c->direct = pid;
	c->result = res[0];
	pid_t target = -1;
	struct pollfd p = { .fd = ready[0], .events = POLLIN };
	int r = -ETIMEDOUT;
	if (poll(&p, 1, 5000) == 1 && read(ready[0], &target, sizeof(target)) == sizeof(target))
		r = 0;
	close(ready[0]);
	if (r < 0) {
		nschild_stop(c);
		return r;
	}
	c->pid = target;
	c->pidfd = sys_pidfd_open(target, 0);
	if (c->pidfd < 0) {
		r = -errno;
		nschild_stop(c);
		return r;
	}
	return 0;
}

void nschild_stop(struct nschild *c)
{
	if (c->pidfd >= 0) {
		sys_pidfd_send_signal(c->pidfd, SIGKILL, NULL, 0);
		close(c->pidfd);
		c->pidfd = -1;
	}
	if (c->direct > 0) {
		kill(c->direct, SIGKILL);
		int st;
		while (waitpid(c->direct, &st, 0) < 0 && errno == EINTR)
			;
		c->direct = -1;
	}
	if (c->result >= 0) {
		close(c->result);
		c->result = -1;
	}
}

int nschild_read(struct nschild *c, void *buf, size_t n, int timeout_ms)
{
	size_t off = 0;
	while (off < n) {
		struct pollfd p = { .fd = c->result, .events = POLLIN };
		int k = poll(&p, 1, timeout_ms);
		if (k == 0)
			return -ETIMEDOUT;
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		ssize_t got = read(c->result, (char *)buf + off, n - off);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (got == 0)
			return -EPIPE;
		off += (size_t)got;
	}
	return 0;
}

void tt_name(char *buf, size_t size, const char *tag)
{
	snprintf(buf, size, "tt-test-%d-%s", (int)getpid(), tag);
}

bool tt_is_root(void)
{
	return geteuid() == 0;
}
