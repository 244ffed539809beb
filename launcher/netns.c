#include "launcher/netns.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/rtnetlink.h>
#include <netlink/addr.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>
#include <netlink/socket.h>

#include "common/util.h"

int netns_nlerr_to_errno(int nlerr)
{
	switch (nlerr < 0 ? -nlerr : nlerr) {
	case NLE_SUCCESS: return 0;
	case NLE_INTR: return -EINTR;
	case NLE_BAD_SOCK: return -EBADF;
	case NLE_AGAIN: return -EAGAIN;
	case NLE_NOMEM: return -ENOMEM;
	case NLE_EXIST: return -EEXIST;
	case NLE_INVAL: return -EINVAL;
	case NLE_RANGE: return -ERANGE;
	case NLE_MSGSIZE: return -EMSGSIZE;
	case NLE_OPNOTSUPP: return -EOPNOTSUPP;
	case NLE_AF_NOSUPPORT: return -EAFNOSUPPORT;
	case NLE_OBJ_NOTFOUND: return -ENOENT;
	case NLE_NOADDR: return -EADDRNOTAVAIL;
	case NLE_BUSY: return -EBUSY;
	case NLE_PROTO_MISMATCH: return -EPROTONOSUPPORT;
	case NLE_NOACCESS: return -EACCES;
	case NLE_PERM: return -EPERM;
	case NLE_NODEV: return -ENODEV;
	case NLE_PARSE_ERR: return -EINVAL;
	case NLE_AF_MISMATCH: return -EAFNOSUPPORT;
	default: return -EIO;
	}
}

struct nl_job {
	int protocol;
	struct nl_sock *sk;
};

static int nl_job(void *p)
{
	struct nl_job *j = p;
	struct nl_sock *sk = nl_socket_alloc();
	if (!sk)
		return -ENOMEM;
	int r = nl_connect(sk, j->protocol);
	if (r < 0) {
		nl_socket_free(sk);
		return netns_nlerr_to_errno(r);
	}
	j->sk = sk;
	return 0;
}

int netns_nl_socket(int ns_fd, int protocol, struct nl_sock **out, struct topology_error *err)
{
	struct nl_job j = { .protocol = protocol };
	int r = netns_run(ns_fd, nl_job, &j);
	if (r < 0)
		return topology_error_errno(err, r, "cannot open a netlink socket in the target netns");
	*out = j.sk;
	return 0;
}

static void nl_socket_freep(struct nl_sock **sk)
{
	if (*sk)
		nl_socket_free(*sk);
}
static void rtnl_link_putp(struct rtnl_link **l)
{
	if (*l)
		rtnl_link_put(*l);
}
static void rtnl_addr_putp(struct rtnl_addr **a)
{
	if (*a)
		rtnl_addr_put(*a);
}
static void rtnl_route_putp(struct rtnl_route **r)
{
	if (*r)
		rtnl_route_put(*r);
}
static void nl_addr_putp(struct nl_addr **a)
{
	if (*a)
		nl_addr_put(*a);
}
#define _cleanup_nlsock_ _cleanup_(nl_socket_freep)
#define _cleanup_link_ _cleanup_(rtnl_link_putp)

static int valid_ifname(const char *name)
{
	if (!name || !name[0] || strlen(name) >= IFNAMSIZ || strchr(name, '/') ||
	    strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return 0;
	for (const char *c = name; *c; c++)
		if (*c <= ' ' || *c == ':' || *c > '~')
			return 0;
	return 1;
}

static int route_sock(int ns_fd, struct nl_sock **sk, struct topology_error *err)
{
	return netns_nl_socket(ns_fd, NETLINK_ROUTE, sk, err);
}

static int get_link(struct nl_sock *sk, const char *ifname, struct rtnl_link **out)
{
	int r = rtnl_link_get_kernel(sk, 0, ifname, out);
	if (r < 0) {
		r = netns_nlerr_to_errno(r);
		return r == -ENOENT ? -ENODEV : r;
	}
	return 0;
}

/* ---- namespaces -------------------------------------------------------- */

static int valid_netns_name(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n >= NETNS_NAME_MAX || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return 0;
	for (const char *c = name; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		      *c == '.' || *c == '_' || *c == '-'))
			return 0;
	return 1;
}

static void *unshare_thread(void *p)
{
	int *result = p;
	if (unshare(CLONE_NEWNET) < 0) {
		*result = -errno;
		return NULL;
	}
	int fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	*result = fd < 0 ? -errno : fd;
	return NULL;
}

/* A helper thread unshares, so the caller's thread never moves; the new
 * namespace outlives the thread through the returned fd. */
static int new_anonymous_netns(void)
{
	int result = -EIO;
	pthread_t th;
	int r = pthread_create(&th, NULL, unshare_thread, &result);
	if (r != 0)
		return -r;
	pthread_join(th, NULL);
	return result;
}

static int lo_up(int ns_fd, struct topology_error *err)
{
	int r = netns_link_up(ns_fd, "lo", NULL);
	if (r < 0)
		return topology_error_errno(err, r, "cannot bring up lo in the new netns");
	return 0;
}

/* As `ip netns add` does: make NETNS_RUN_DIR a shared mount point so an
 * unmount in one mount namespace reaches the others and frees the netns. */
static int prepare_run_dir(struct topology_error *err)
{
	if (mkdir(NETNS_RUN_DIR, 0755) < 0 && errno != EEXIST)
		return topology_error_errno(err, -errno, "cannot create %s", NETNS_RUN_DIR);
	bool made_mount = false;
	while (mount("", NETNS_RUN_DIR, "none", MS_SHARED | MS_REC, NULL) < 0) {
		if (errno != EINVAL || made_mount)
			return topology_error_errno(err, -errno, "cannot make %s a shared mount", NETNS_RUN_DIR);
		if (mount(NETNS_RUN_DIR, NETNS_RUN_DIR, "none", MS_BIND | MS_REC, NULL) < 0)
			return topology_error_errno(err, -errno, "cannot bind-mount %s on itself", NETNS_RUN_DIR);
		made_mount = true;
	}
	return 0;
}

int netns_create(const char *name, struct netns *out, struct topology_error *err)
{
	if (!out)
		return -EINVAL;
	*out = (struct netns)NETNS_INIT;
	if (name && !valid_netns_name(name))
		return topology_error_set(err, -EINVAL, "invalid netns name \"%s\" (want [A-Za-z0-9._-], 1-63 chars)",
					  name);

	_cleanup_close_ int fd = new_anonymous_netns();
	if (fd < 0)
		return topology_error_errno(err, fd, "cannot create a network namespace");
	int r = lo_up(fd, err);
	if (r < 0)
		return r;

	if (name) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", NETNS_RUN_DIR, name);
		r = prepare_run_dir(err);
		if (r < 0)
			return r;
		int mfd = open(path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0);
		if (mfd < 0)
			return topology_error_errno(err, -errno, "cannot create netns %s (%s)", name, path);
		close(mfd);
		char src[64];
		snprintf(src, sizeof(src), "/proc/self/fd/%d", fd);
		if (mount(src, path, "none", MS_BIND, NULL) < 0) {
			r = -errno;
			unlink(path);
			return topology_error_errno(err, r, "cannot bind-mount netns %s on %s", name, path);
		}
		out->named = true;
		strscpy(out->name, name, sizeof(out->name));
		strscpy(out->path, path, sizeof(out->path));
	}
	out->fd = fd_steal(&fd);
	return 0;
}

int netns_open(const char *name, struct netns *out, struct topology_error *err)
{
	if (!out || !name)
		return -EINVAL;
	*out = (struct netns)NETNS_INIT;
	if (!valid_netns_name(name))
		return topology_error_set(err, -EINVAL, "invalid netns name \"%s\"", name);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", NETNS_RUN_DIR, name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return topology_error_errno(err, -errno, "cannot open netns %s", name);
	out->fd = fd;
	out->named = true;
	strscpy(out->name, name, sizeof(out->name));
	strscpy(out->path, path, sizeof(out->path));
	return 0;
}

int netns_open_current(struct netns *out)
{
	if (!out)
		return -EINVAL;
	*out = (struct netns)NETNS_INIT;
	int fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	out->fd = fd;
	return 0;
}

void netns_close(struct netns *ns)
{
	if (ns && ns->fd >= 0) {
		close(ns->fd);
		ns->fd = -1;
	}
}

int netns_delete_name(const char *name, struct topology_error *err)
{
	if (!name || !valid_netns_name(name))
		return topology_error_set(err, -EINVAL, "invalid netns name \"%s\"", name ? name : "");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", NETNS_RUN_DIR, name);
	/* EINVAL: not a mount point (half-created); the unlink still cleans up. */
	if (umount2(path, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
		return topology_error_errno(err, -errno, "cannot unmount netns %s", name);
	if (unlink(path) < 0)
		return topology_error_errno(err, -errno, "cannot remove netns %s", name);
	return 0;
}

int netns_delete(struct netns *ns, struct topology_error *err)
{
	if (!ns)
		return -EINVAL;
	int r = 0;
	netns_close(ns);
	if (ns->named) {
		r = netns_delete_name(ns->name, err);
		ns->named = false;
	}
	return r;
}

/* ---- links ------------------------------------------------------------- */

int netns_link_ifindex(int ns_fd, const char *ifname)
{
	if (!valid_ifname(ifname))
		return -EINVAL;
	_cleanup_nlsock_ struct nl_sock *sk = NULL;
	int r = route_sock(ns_fd, &sk, NULL);
	if (r < 0)
		return r;
	_cleanup_link_ struct rtnl_link *link = NULL;
	r = get_link(sk, ifname, &link);
	if (r < 0)
		return r;
	return rtnl_link_get_ifindex(link);
}

int netns_link_exists(int ns_fd, const char *ifname)
{
	int r = netns_link_ifindex(ns_fd, ifname);
	if (r == -ENODEV)
		return 0;
	return r < 0 ? r : 1;
}

int netns_veth_create(int ns_fd, const char *name, int peer_ns_fd, const char *peer_name,
		      struct topology_error *err)
{
	if (!valid_ifname(name))
		return topology_error_set(err, -EINVAL, "cannot create veth: invalid interface name \"%s\"",
					  name ? name : "");
	if (!valid_ifname(peer_name))
		return topology_error_set(err, -EINVAL, "cannot create veth %s: invalid peer name \"%s\"",
					  name, peer_name ? peer_name : "");
	_cleanup_nlsock_ struct nl_sock *sk = NULL;
	int r = route_sock(ns_fd, &sk, err);
	if (r < 0)
		return r;
	_cleanup_link_ struct rtnl_link *link = rtnl_link_veth_alloc();
	if (!link)
		return topology_error_errno(err, -ENOMEM, "cannot create veth %s", name);
	rtnl_link_set_name(link, name);
	struct rtnl_link *peer = rtnl_link_veth_get_peer(link);
	if (!peer)
		return topology_error_errno(err, -ENOMEM, "cannot create veth %s", name);
	rtnl_link_set_name(peer, peer_name);
	if (peer_ns_fd >= 0)
		rtnl_link_set_ns_fd(peer, peer_ns_fd);
	rtnl_link_put(peer);
	r = rtnl_link_add(sk, link, NLM_F_CREATE | NLM_F_EXCL);
	if (r < 0)
		return topology_error_errno(err, netns_nlerr_to_errno(r), "cannot create veth %s", name);
	return 0;
}

int netns_link_up(int ns_fd, const char *ifname, struct topology_error *err)
{
	if (!valid_ifname(ifname))
		return topology_error_set(err, -EINVAL, "cannot bring up link: invalid name \"%s\"",
					  ifname ? ifname : "");
	_cleanup_nlsock_ struct nl_sock *sk = NULL;
	int r = route_sock(ns_fd, &sk, err);
	if (r < 0)
		return r;
	_cleanup_link_ struct rtnl_link *link = NULL;
	r = get_link(sk, ifname, &link);
	if (r < 0)
		return topology_error_errno(err, r, "cannot bring up %s", ifname);
	_cleanup_link_ struct rtnl_link *change = rtnl_link_alloc();
	if (!change)
		return topology_error_errno(err, -ENOMEM, "cannot bring up %s", ifname);
	rtnl_link_set_flags(change, IFF_UP);
	r = rtnl_link_change(sk, link, change, 0);
	if (r < 0)
		return topology_error_errno(err, netns_nlerr_to_errno(r), "cannot bring up %s", ifname);
	return 0;
}

int netns_link_delete(int ns_fd, const char *ifname, struct topology_error *err)
{
	if (!valid_ifname(ifname))
		return topology_error_set(err, -EINVAL, "cannot delete link: invalid name \"%s\"",
					  ifname ? ifname : "");
	_cleanup_nlsock_ struct nl_sock *sk = NULL;
	int r = route_sock(ns_fd, &sk, err);
	if (r < 0)
		return r;
	_cleanup_link_ struct rtnl_link *link = NULL;
	r = get_link(sk, ifname, &link);
	if (r < 0)
		return topology_error_errno(err, r, "cannot delete link %s", ifname);
	r = rtnl_link_delete(sk, link);
	if (r < 0)
		return topology_error_errno(err, netns_nlerr_to_errno(r), "cannot delete link %s", ifname);
	return 0;
}

/* ---- addresses and routes --------------------------------------------- */

static int parse_addr(const char *text, int family, struct nl_addr **out)
{
	if (!text || !text[0])
		return -EINVAL;
	int r = nl_addr_parse(text, family, out);
	if (r < 0)
		return r == -NLE_NOMEM ? -ENOMEM : -EINVAL; /* any other failure is bad text */
	int f = nl_addr_get_family(*out);
	if (f != AF_INET && f != AF_INET6) {
		nl_addr_put(*out);
		*out = NULL;
		return -EAFNOSUPPORT;
	}
	return 0;
}

int netns_addr_add(int ns_fd, const char *ifname, const char *cidr, struct topology_error *err)
{
	if (!valid_ifname(ifname))
		return topology_error_set(err, -EINVAL, "cannot add address: invalid interface name \"%s\"",
					  ifname ? ifname : "");
	_cleanup_(nl_addr_putp) struct nl_addr *local = NULL;
	int r = parse_addr(cidr, AF_UNSPEC, &local);
	if (r < 0)
		return topology_error_errno(err, r, "cannot add address \"%s\" to %s", cidr ? cidr : "", ifname);
	_cleanup_nlsock_ struct nl_sock *sk = NULL;
	r = route_sock(ns_fd, &sk, err);
	if (r < 0)
		return r;
	_cleanup_link_ struct rtnl_link *link = NULL;
	r = get_link(sk, ifname, &link);
	if (r < 0)
		return topology_error_errno(err, r, "cannot add address %s to %s", cidr, ifname);
	_cleanup_(rtnl_addr_putp) struct rtnl_addr *a = rtnl_addr_alloc();
	if (!a)
		return topology_error_errno(err, -ENOMEM, "cannot add address %s to %s", cidr, ifname);
	rtnl_addr_set_ifindex(a, rtnl_link_get_ifindex(link));
	r = rtnl_addr_set_local(a, local);
	if (r >= 0 && nl_addr_get_family(local) == AF_INET6)
		rtnl_addr_set_flags(a, IFA_F_NODAD); /* usable now, not after DAD */
	if (r >= 0)
		r = rtnl_addr_add(sk, a, 0);
	if (r < 0)
		return topology_error_errno(err, netns_nlerr_to_errno(r), "cannot add address %s to %s",
					    cidr, ifname);
	return 0;
}

int netns_route_add(int ns_fd, const char *dst, const char *gateway, const char *ifname,
		    struct topology_error *err)
{
	const char *d = dst ? dst : "";
	if (!gateway && !ifname)
		return topology_error_set(err, -EINVAL, "cannot add route %s: needs a gateway or a device", d);
	if (ifname && !valid_ifname(ifname))
		return topology_error_set(err, -EINVAL, "cannot add route %s: invalid device name \"%s\"", d, ifname);

	_cleanup_(nl_addr_putp) struct nl_addr *gw = NULL;
	int family = AF_INET, r;
	if (gateway) {
		r = parse_addr(gateway, AF_UNSPEC, &gw);
		if (r < 0)
			return topology_error_errno(err, r, "cannot add route %s: bad gateway \"%s\"", d, gateway);
		family = nl_addr_get_family(gw);
	}
	_cleanup_(nl_addr_putp) struct nl_addr *to = NULL;
	bool is_default = dst && strcmp(dst, "default") == 0;
	r = parse_addr(dst, is_default ? family : AF_UNSPEC, &to);
	if (r < 0)
		return topology_error_errno(err, r, "cannot add route \"%s\"", d);
	if (gw && nl_addr_get_family(to) != family)
		return topology_error_set(err, -EAFNOSUPPORT, "cannot add route %s: gateway %s is another address family",
					  d, gateway);
	family = nl_addr_get_family(to);

	_cleanup_nlsock_ struct nl_sock *sk = NULL;
	r = route_sock(ns_fd, &sk, err);
	if (r < 0)
		return r;
	int ifindex = 0;
	if (ifname) {
		_cleanup_link_ struct rtnl_link *link = NULL;
		r = get_link(sk, ifname, &link);
		if (r < 0)
			return topology_error_errno(err, r, "cannot add route %s via %s", d, ifname);
		ifindex = rtnl_link_get_ifindex(link);
	}
	_cleanup_(rtnl_route_putp) struct rtnl_route *rt = rtnl_route_alloc();
	struct rtnl_nexthop *nh = rtnl_route_nh_alloc();
	if (!rt || !nh) {
		if (nh)
			rtnl_route_nh_free(nh);
		return topology_error_errno(err, -ENOMEM, "cannot add route %s", d);
	}
	rtnl_route_set_family(rt, (uint8_t)family);
	rtnl_route_set_table(rt, RT_TABLE_MAIN);
	rtnl_route_set_protocol(rt, RTPROT_STATIC);
	rtnl_route_set_type(rt, RTN_UNICAST);
	rtnl_route_set_scope(rt, gw ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK);
	r = rtnl_route_set_dst(rt, to);
	if (ifindex)
		rtnl_route_nh_set_ifindex(nh, ifindex);
	if (gw)
		rtnl_route_nh_set_gateway(nh, gw);
	rtnl_route_add_nexthop(rt, nh); /* the route owns nh now */
	if (r >= 0)
		r = rtnl_route_add(sk, rt, NLM_F_CREATE | NLM_F_EXCL);
	if (r < 0)
		return topology_error_errno(err, netns_nlerr_to_errno(r), "cannot add route %s", d);
	return 0;
}
