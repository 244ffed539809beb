/* One message with at most one file descriptor over a Unix socket
 * (SCM_RIGHTS): the shape every internal channel here uses (the launcher's
 * report socket, the cleanup guardian). Both calls are async-signal-safe
 * (sendmsg/recvmsg only). */
#pragma once

#include <stddef.h>
#include <sys/types.h>

/* Send len bytes and, when fd >= 0, fd. flags are sendmsg flags
 * (MSG_NOSIGNAL is always added). Returns bytes sent or -errno. */
ssize_t fdpass_send(int sock, const void *buf, size_t len, int fd, int flags);

/* The kernel's limit on descriptors in one SCM_RIGHTS message (SCM_MAX_FD). */
#define FDPASS_MAX_FDS 253

/* The same with n_fds descriptors (0..FDPASS_MAX_FDS, else -E2BIG). A
 * stream socket may take fewer than len bytes: the descriptors went with
 * the first one, so send the rest without them. */
ssize_t fdpass_send_fds(int sock, const void *buf, size_t len, const int *fds, size_t n_fds, int flags);

/* Receive up to len bytes; *fd is the descriptor that came with them
 * (received O_CLOEXEC) or -1. One descriptor is kept: any further one that
 * arrives is closed, or discarded by the kernel (MSG_CTRUNC). Returns bytes received
 * (0 at EOF) or -errno. */
ssize_t fdpass_recv(int sock, void *buf, size_t len, int *fd, int flags);
