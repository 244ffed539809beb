/* Doing one thing inside another network namespace without moving the
 * caller: a short helper thread setns()es, runs the function (typically
 * creating a socket, which stays bound to the namespace it was made in) and
 * exits. The caller's threads never change namespace, so a failure
 * half-way cannot leave a daemon in the wrong netns. ns_fd -1 everywhere
 * means "the calling thread's current netns".
 *
 * Used by the net-supervisor (attribution inside the workload's netns) and
 * by the launcher's netlink plumbing (launcher/netns.h). */
#pragma once

/* Run fn(arg) on a helper thread inside ns_fd's netns; returns fn's result
 * (or -errno when entering the namespace failed). */
int netns_run(int ns_fd, int (*fn)(void *arg), void *arg);
/* setns() the calling thread into ns_fd: for a forked child before exec. */
int netns_enter(int ns_fd);
/* socket(domain, type, protocol) created inside ns_fd; returns the fd. */
int netns_socket(int ns_fd, int domain, int type, int protocol);
