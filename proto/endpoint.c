#include "proto/endpoint.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/kernel.h"
#include "common/util.h"

static int parse_u32(const char *s, uint32_t max, uint32_t *out)
{
	if (!*s || strlen(s) > 10)
		return -EINVAL;
	uint64_t v = 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (v > max)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int endpoint_parse(const char *s, struct endpoint *out)
{
	memset(out, 0, sizeof(*out));
	if (!s || strscpy(out->text, s, sizeof(out->text)) < 0)
		return s ? -ENAMETOOLONG : -EINVAL;

	if (strncmp(s, "unix:", 5) == 0) {
		const char *path = s + 5;
		struct sockaddr_un *un = (struct sockaddr_un *)&out->addr;
		size_t n = strlen(path);
		if (n == 0 || (path[0] == '@' && n == 1))
			return -EINVAL;
		if (n >= sizeof(un->sun_path))
			return -ENAMETOOLONG;
		un->sun_family = AF_UNIX;
		memcpy(un->sun_path, path, n);
		if (path[0] == '@')
			un->sun_path[0] = '\0'; /* abstract namespace */
		out->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '@' ? 0 : 1));
		out->kind = ENDPOINT_UNIX;
		return 0;
	}

	if (strncmp(s, "tcp:", 4) == 0) {
		char host[64];
		const char *h = s + 4, *colon;
		if (*h == '[') {
			const char *end = strchr(h, ']');
			if (!end || end[1] != ':' || (size_t)(end - h - 1) >= sizeof(host))
				return -EINVAL;
			memcpy(host, h + 1, (size_t)(end - h - 1));
			host[end - h - 1] = '\0';
			colon = end + 1;
		} else {
			colon = strrchr(h, ':');
			if (!colon || (size_t)(colon - h) >= sizeof(host) || colon == h)
				return -EINVAL;
			memcpy(host, h, (size_t)(colon - h));
			host[colon - h] = '\0';
		}
		uint32_t port;
		if (parse_u32(colon + 1, 65535, &port) < 0 || port == 0)
			return -EINVAL;
		struct sockaddr_in *in4 = (struct sockaddr_in *)&out->addr;
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&out->addr;
		if (strcmp(host, "localhost") == 0)
			strcpy(host, "127.0.0.1");
		if (*h != '[' && inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
			in4->sin_family = AF_INET;
			in4->sin_port = htons((uint16_t)port);
			out->addr_len = sizeof(*in4);
		} else if (*h == '[' && inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
			in6->sin6_family = AF_INET6;
			in6->sin6_port = htons((uint16_t)port);
			out->addr_len = sizeof(*in6);
		} else {
			return -EINVAL;
		}
		out->kind = ENDPOINT_TCP;
		return 0;
	}

	if (strncmp(s, "vsock:", 6) == 0) {
		char cidbuf[16];
		const char *c = s + 6, *colon = strchr(c, ':');
		if (!colon || colon == c || (size_t)(colon - c) >= sizeof(cidbuf))
			return -EINVAL;
		memcpy(cidbuf, c, (size_t)(colon - c));
		cidbuf[colon - c] = '\0';
		uint32_t cid, port;
		if (strcmp(cidbuf, "any") == 0)
			cid = VMADDR_CID_ANY;
		else if (strcmp(cidbuf, "local") == 0)
			cid = 1; /* VMADDR_CID_LOCAL */
		else if (strcmp(cidbuf, "host") == 0)
			cid = VMADDR_CID_HOST;
		else if (parse_u32(cidbuf, UINT32_MAX, &cid) < 0)
			return -EINVAL;
		if (parse_u32(colon + 1, UINT32_MAX, &port) < 0)
			return -EINVAL;
		struct sockaddr_vm *vm = (struct sockaddr_vm *)&out->addr;
		vm->svm_family = AF_VSOCK;
		vm->svm_cid = cid;
		vm->svm_port = port;
		out->addr_len = sizeof(*vm);
		out->kind = ENDPOINT_VSOCK;
		return 0;
	}
	return -EINVAL;
}

static int new_socket(const struct endpoint *e)
{
	int fd = socket(e->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (e->kind == ENDPOINT_TCP) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	return fd;
}

int endpoint_listen(const struct endpoint *e, int backlog, unsigned mode)
{
	_cleanup_close_ int fd = new_socket(e);
	if (fd < 0)
		return fd;
	const struct sockaddr_un *un = (const struct sockaddr_un *)&e->addr;
	bool path_sock = e->kind == ENDPOINT_UNIX && un->sun_path[0] != '\0';
	if (path_sock) {
		struct stat st;
		if (lstat(un->sun_path, &st) == 0) {
			if (!S_ISSOCK(st.st_mode))
				return -EEXIST;
			unlink(un->sun_path); /* a stale socket of an earlier run */
		}
	}
	if (e->kind == ENDPOINT_TCP) {
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	}
	if (bind(fd, (const struct sockaddr *)&e->addr, e->addr_len) < 0)
		return -errno;
	if (path_sock && mode && chmod(un->sun_path, mode) < 0)
		return -errno;
	if (listen(fd, backlog > 0 ? backlog : 64) < 0)
		return -errno;
	return fd_steal(&fd);
}

int endpoint_connect(const struct endpoint *e, bool *in_progress)
{
	_cleanup_close_ int fd = new_socket(e);
	if (fd < 0)
		return fd;
	*in_progress = false;
	if (connect(fd, (const struct sockaddr *)&e->addr, e->addr_len) < 0) {
		if (errno == EINPROGRESS)
			*in_progress = true;
		else
			return -errno;
	}
	return fd_steal(&fd);
}

int proto_peer_get(int fd, const struct kernel_caps *caps, struct proto_peer *out)
{
	memset(out, 0, sizeof(*out));
	out->pidfd = -1;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		return -errno;
	if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
		socklen_t al = sizeof(out->addr);
		if (getpeername(fd, (struct sockaddr *)&out->addr, &al) < 0)
			return -errno;
		return 0;
	}
	if (ss.ss_family != AF_UNIX)
		return 0;
	out->is_unix = true;
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0)
		return -errno;
	out->pid = cred.pid;
	out->uid = cred.uid;
	out->gid = cred.gid;
	if (caps && caps->peer_pidfd) {
		int pfd = -1;
		socklen_t pl = sizeof(pfd);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pfd, &pl) < 0)
			return -errno;
		out->pidfd = pfd;
	}
	return 0;
}
