/* Network namespaces, veth pairs, addresses and routes through libnl-route.
 *
 * A namespace is held by an nsfs fd; a *named* one is also bind-mounted on
 * /run/netns/NAME (the `ip netns` convention, so `ip netns exec NAME ...`
 * works while debugging), an anonymous one lives exactly as long as its fd
 * (and its processes).
 *
 * Every netlink operation runs on a socket opened *inside* the target
 * namespace through netns_run() (common/netns.h): the caller's threads
 * never change namespace. ns_fd -1 everywhere means "the calling thread's
 * current netns".
 *
 * Each step fails with -errno and, when err is given, a message naming the
 * step: "cannot create veth tether0: File exists". */
#pragma once

#include <limits.h>
#include <stdbool.h>

#include "common/netns.h" /* netns_run, netns_enter, netns_socket */
#include "topology/error.h"

struct nl_sock;

#define NETNS_RUN_DIR "/run/netns"
#define NETNS_NAME_MAX 64

struct netns {
	int fd;                      /* nsfs fd, owned, O_CLOEXEC; -1 when closed */
	bool named;
	char name[NETNS_NAME_MAX];   /* "" when anonymous */
	char path[PATH_MAX];         /* NETNS_RUN_DIR/NAME when named */
};
#define NETNS_INIT { .fd = -1 }

/* A new netns with lo up. name NULL = anonymous (held by out->fd only);
 * otherwise [A-Za-z0-9._-]{1,63} and -EEXIST when /run/netns/NAME exists. */
int netns_create(const char *name, struct netns *out, struct topology_error *err);
/* Open an existing named netns (made by us or by `ip netns add`). */
int netns_open(const char *name, struct netns *out, struct topology_error *err);
/* The calling thread's netns as an anonymous handle. */
int netns_open_current(struct netns *out);
/* Named: detach the bind mount and remove the file; always closes the fd.
 * The namespace itself dies when its last fd/process/mount is gone. -ENOENT
 * when the name was already gone (the fd is still closed). */
int netns_delete(struct netns *ns, struct topology_error *err);
/* Close the fd only; a named namespace stays mounted. */
void netns_close(struct netns *ns);
/* Remove /run/netns/NAME by name (crash cleanup has no struct netns). */
int netns_delete_name(const char *name, struct topology_error *err);

/* A connected libnl socket (NETLINK_ROUTE, NETLINK_SOCK_DIAG, ...) inside
 * ns_fd; free with nl_socket_free(). */
int netns_nl_socket(int ns_fd, int protocol, struct nl_sock **out, struct topology_error *err);

/* veth pair: `name` in ns_fd's netns, `peer_name` moved into peer_ns_fd
 * (-1 = stays next to `name`). Both ends start down. */
int netns_veth_create(int ns_fd, const char *name, int peer_ns_fd, const char *peer_name,
		      struct topology_error *err);
int netns_link_up(int ns_fd, const char *ifname, struct topology_error *err);
/* Deleting either end of a veth removes both. */
int netns_link_delete(int ns_fd, const char *ifname, struct topology_error *err);
/* 1 exists, 0 does not, -errno. */
int netns_link_exists(int ns_fd, const char *ifname);
/* ifindex (> 0) inside ns_fd, -ENODEV when absent. */
int netns_link_ifindex(int ns_fd, const char *ifname);

/* "198.51.100.1/24" or "2001:db8::1/64" (no prefix = host address). IPv6
 * addresses are added with IFA_F_NODAD so they are usable at once. */
int netns_addr_add(int ns_fd, const char *ifname, const char *cidr, struct topology_error *err);
/* dst: "default" (IPv4), "::/0", or a CIDR; gateway may be NULL (on-link
 * route, then ifname is required); ifname may be NULL when gateway is set. */
int netns_route_add(int ns_fd, const char *dst, const char *gateway, const char *ifname,
		    struct topology_error *err);

/* libnl's NLE_* (positive or negative) → -errno. */
int netns_nlerr_to_errno(int nlerr);
