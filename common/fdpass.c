#include "common/fdpass.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

union fd_cmsg {
	char buf[CMSG_SPACE(sizeof(int))];
	struct cmsghdr align;
};

ssize_t fdpass_send_fds(int sock, const void *buf, size_t len, const int *fds, size_t n_fds, int flags)
{
	if (n_fds > FDPASS_MAX_FDS)
		return -E2BIG;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	union {
		char buf[CMSG_SPACE(sizeof(int) * FDPASS_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (n_fds) {
		memset(u.buf, 0, CMSG_SPACE(sizeof(int) * n_fds));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
	}
	ssize_t n = sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
	return n < 0 ? -errno : n;
}

ssize_t fdpass_send(int sock, const void *buf, size_t len, int fd, int flags)
{
	return fdpass_send_fds(sock, buf, len, &fd, fd >= 0 ? 1 : 0, flags);
}

ssize_t fdpass_recv(int sock, void *buf, size_t len, int *fd, int flags)
{
	*fd = -1;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	union fd_cmsg u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	ssize_t n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	/* CMSG_SPACE(sizeof(int)) is aligned up and holds two descriptors:
	 * the first one received is the answer, any other is closed (never
	 * left open in this process unseen). */
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
			continue;
		size_t cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < cnt; i++) {
			int got;
			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*fd < 0)
				*fd = got;
			else
				close(got);
		}
	}
	return n;
}
