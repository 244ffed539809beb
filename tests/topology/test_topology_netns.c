/* Named/anonymous netns, veth, addresses, routes and deletion, checked by
 * real TCP connections across the veth (TEST-NET addresses only; the IPv6
 * case uses the documentation prefix 2001:db8::/32 inside our own pair). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/util.h"
#include "nschild.h"
#include "launcher/cleanup.h"
#include "launcher/netns.h"
#include "topology/detect.h"

struct fixture {
	struct netns a, b;
	char name_a[NETNS_NAME_MAX];
	struct topology_ns_id start;
	struct cleanup_guardian guard; /* removes name_a even if we are killed */
};

static int setup(void **state)
{
	if (!tt_is_root())
		return 0;
	struct fixture *f = calloc(1, sizeof(*f));
	f->a = (struct netns)NETNS_INIT;
	f->b = (struct netns)NETNS_INIT;
	tt_name(f->name_a, sizeof(f->name_a), "a");
	if (topology_ns_self(TOPOLOGY_NS_NET, &f->start) < 0)
		return -1;
	struct topology_error err = { 0 };
	if (cleanup_guardian_start(&f->guard, &err) < 0) {
		fprintf(stderr, "setup: %s\n", err.msg);
		return -1;
	}
	if (netns_create(f->name_a, &f->a, &err) < 0 ||
	    cleanup_guardian_add(&f->guard, CLEANUP_NETNS, f->name_a, -1, NULL) < 0 ||
	    netns_create(NULL, &f->b, &err) < 0) {
		fprintf(stderr, "setup: %s\n", err.msg);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	if (!f)
		return 0;
	netns_delete(&f->a, NULL);
	netns_delete(&f->b, NULL);
	/* even if the test failed before netns_delete: the guardian, by name */
	struct topology_error err = { 0 };
	if (cleanup_guardian_finish(&f->guard, 5000, &err) < 0)
		fprintf(stderr, "teardown: %s\n", err.msg);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "/run/netns/%s", f->name_a);
	struct stat st;
	bool left = stat(path, &st) == 0;
	free(f);
	if (left) {
		fprintf(stderr, "teardown: %s was left behind\n", path);
		return -1;
	}
	return 0;
}

static void set_nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Listener in ns `srv` on addr, client from ns `cli`: 0 when the TCP
 * handshake completes and accept() returns, -errno of connect otherwise. */
static int tcp_across(int srv, int cli, int family, const char *addr)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	if (family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, addr, &in->sin_addr), 1);
		len = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, addr, &in6->sin6_addr), 1);
		len = sizeof(*in6);
	}
	_cleanup_close_ int l = netns_socket(srv, family, SOCK_STREAM, 0);
	assert_true(l >= 0);
	if (bind(l, (struct sockaddr *)&ss, len) < 0)
		return -errno; /* e.g. the address's link is down */
	assert_int_equal(listen(l, 4), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&ss, &len), 0);

	_cleanup_close_ int c = netns_socket(cli, family, SOCK_STREAM, 0);
	assert_true(c >= 0);
	set_nonblock(c);
	if (connect(c, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS)
		return -errno;
	struct pollfd p = { .fd = c, .events = POLLOUT };
	if (poll(&p, 1, 2000) != 1)
		return -ETIMEDOUT;
	int soerr = 0;
	socklen_t sl = sizeof(soerr);
	getsockopt(c, SOL_SOCKET, SO_ERROR, &soerr, &sl);
	if (soerr)
		return -soerr;
	struct pollfd pl = { .fd = l, .events = POLLIN };
	assert_int_equal(poll(&pl, 1, 2000), 1);
	int a = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	assert_true(a >= 0);
	close(a);
	return 0;
}

static void test_named_and_anonymous(void **state)
{
	struct fixture *f = *state;
	if (!f)
		skip();
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "/run/netns/%s", f->name_a);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_true(f->a.named);
	assert_string_equal(f->a.path, path);
	assert_false(f->b.named);
	/* the ip-netns convention holds: `ip netns exec` enters it */
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "ip netns exec %s ip -o link show lo | grep -q UP", f->name_a);
	assert_int_equal(system(cmd), 0);
	/* lo is up in both: a loopback connection works */
	assert_int_equal(tcp_across(f->a.fd, f->a.fd, AF_INET, "127.0.0.1"), 0);
	assert_int_equal(tcp_across(f->b.fd, f->b.fd, AF_INET, "127.0.0.1"), 0);
	/* opening by name yields the same namespace */
	struct netns again;
	assert_int_equal(netns_open(f->name_a, &again, NULL), 0);
	struct stat s1, s2;
	assert_int_equal(fstat(again.fd, &s1), 0);
	assert_int_equal(fstat(f->a.fd, &s2), 0);
	assert_true(s1.st_ino == s2.st_ino && s1.st_dev == s2.st_dev);
	netns_close(&again);

	struct topology_error err = { 0 };
	struct netns dup = NETNS_INIT;
	assert_int_equal(netns_create(f->name_a, &dup, &err), -EEXIST);
	assert_non_null(strstr(err.msg, "File exists"));
	assert_int_equal(dup.fd, -1);
	assert_int_equal(netns_create("../etc", &dup, &err), -EINVAL);
	assert_int_equal(netns_create("", &dup, &err), -EINVAL);
	assert_int_equal(netns_open("tt-test-no-such-netns", &dup, &err), -ENOENT);
}

static void test_veth_addresses_routes(void **state)
{
	struct fixture *f = *state;
	if (!f)
		skip();
	struct topology_error err = { 0 };
	int A = f->a.fd, B = f->b.fd;
	assert_int_equal(netns_veth_create(A, "tt0", B, "tt1", &err), 0);
	assert_int_equal(netns_link_exists(A, "tt0"), 1);
	assert_int_equal(netns_link_exists(B, "tt1"), 1);
	assert_int_equal(netns_link_exists(A, "tt1"), 0); /* the peer really moved */
	assert_int_equal(netns_link_exists(B, "tt0"), 0);

	/* errors name the step */
	assert_int_equal(netns_veth_create(A, "tt0", B, "tt9", &err), -EEXIST);
	assert_string_equal(err.msg, "cannot create veth tt0: File exists");
	assert_int_equal(netns_veth_create(A, "this-name-is-too-long", B, "x", &err), -EINVAL);
	assert_non_null(strstr(err.msg, "invalid interface name"));
	assert_int_equal(netns_addr_add(A, "nope0", "198.51.100.9/24", &err), -ENODEV);
	assert_string_equal(err.msg, "cannot add address 198.51.100.9/24 to nope0: No such device");
	assert_int_equal(netns_addr_add(A, "tt0", "198.51.100.300/24", &err), -EINVAL);
	assert_int_equal(netns_addr_add(A, "tt0", "not-an-address", &err), -EINVAL);
	assert_int_equal(netns_link_up(A, "nope0", &err), -ENODEV);
	assert_int_equal(netns_route_add(B, "default", NULL, NULL, &err), -EINVAL);
	assert_int_equal(netns_route_add(B, "default", "198.51.100.1", "nope0", &err), -ENODEV);

	assert_int_equal(netns_addr_add(A, "tt0", "198.51.100.1/24", &err), 0);
	assert_int_equal(netns_addr_add(B, "tt1", "198.51.100.2/24", &err), 0);
	assert_int_equal(netns_addr_add(A, "tt0", "198.51.100.1/24", &err), -EEXIST);
	assert_int_equal(netns_addr_add(A, "tt0", "2001:db8:51::1/64", &err), 0);
	assert_int_equal(netns_addr_add(B, "tt1", "2001:db8:51::2/64", &err), 0);
	/* down links carry nothing */
	assert_int_equal(tcp_across(A, B, AF_INET, "198.51.100.1"), -ENETUNREACH);
	assert_int_equal(netns_link_up(A, "tt0", &err), 0);
	assert_int_equal(netns_link_up(B, "tt1", &err), 0);
	assert_int_equal(tcp_across(A, B, AF_INET, "198.51.100.1"), 0);
	assert_int_equal(tcp_across(B, A, AF_INET, "198.51.100.2"), 0);
	assert_int_equal(tcp_across(A, B, AF_INET6, "2001:db8:51::1"), 0);

	/* a default route: 203.0.113.1 lives on A's lo, reachable from B only via the route */
	assert_int_equal(netns_addr_add(A, "lo", "203.0.113.1/32", &err), 0);
	assert_int_equal(tcp_across(A, B, AF_INET, "203.0.113.1"), -ENETUNREACH);
	assert_int_equal(netns_route_add(B, "default", "198.51.100.1", "tt1", &err), 0);
	assert_int_equal(tcp_across(A, B, AF_INET, "203.0.113.1"), 0);
	assert_int_equal(netns_route_add(B, "default", "198.51.100.1", "tt1", &err), -EEXIST);
	assert_non_null(strstr(err.msg, "cannot add route default"));
	/* an on-link specific route with no gateway */
	assert_int_equal(netns_addr_add(A, "lo", "192.0.2.1/32", &err), 0);
	assert_int_equal(netns_route_add(B, "192.0.2.0/24", NULL, "tt1", &err), 0);
	assert_int_equal(tcp_across(A, B, AF_INET, "192.0.2.1"), 0);
	/* IPv6 default route */
	assert_int_equal(netns_addr_add(A, "lo", "2001:db8:ff::1/128", &err), 0);
	assert_int_equal(tcp_across(A, B, AF_INET6, "2001:db8:ff::1"), -ENETUNREACH);
	assert_int_equal(netns_route_add(B, "::/0", "2001:db8:51::1", "tt1", &err), 0);
	assert_int_equal(tcp_across(A, B, AF_INET6, "2001:db8:ff::1"), 0);
	/* a gateway-only route (the kernel finds the device) */
	assert_int_equal(netns_route_add(A, "198.51.100.128/25", "198.51.100.2", NULL, &err), 0);
	assert_int_equal(netns_route_add(A, "198.51.100.0/25", "2001:db8:51::2", NULL, &err), -EAFNOSUPPORT);

	/* deleting one end removes both */
	assert_int_equal(netns_link_delete(B, "tt1", &err), 0);
	assert_int_equal(netns_link_exists(B, "tt1"), 0);
	assert_int_equal(netns_link_exists(A, "tt0"), 0);
	assert_int_equal(netns_link_delete(B, "tt1", &err), -ENODEV);
	assert_int_not_equal(tcp_across(A, B, AF_INET, "198.51.100.1"), 0);

	/* the caller's thread never left its netns */
	struct topology_ns_id now;
	assert_int_equal(topology_ns_self(TOPOLOGY_NS_NET, &now), 0);
	assert_true(now.dev == f->start.dev && now.ino == f->start.ino);
}

static void test_delete(void **state)
{
	struct fixture *f = *state;
	if (!f)
		skip();
	struct topology_error err = { 0 };
	/* a veth whose peer sits in the named netns dies with that netns */
	assert_int_equal(netns_veth_create(f->b.fd, "tt2", f->a.fd, "tt3", &err), 0);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s", f->a.path);
	assert_int_equal(netns_delete(&f->a, &err), 0);
	struct stat st;
	assert_int_equal(stat(path, &st), -1);
	assert_int_equal(errno, ENOENT);
	assert_int_equal(f->a.fd, -1);
	/* the namespace is freed asynchronously; its veth goes with it */
	int gone = 0;
	for (int i = 0; i < 200 && !gone; i++) {
		gone = netns_link_exists(f->b.fd, "tt2") == 0;
		if (!gone)
			usleep(10000);
	}
	assert_true(gone);
	assert_int_equal(netns_delete_name(f->name_a, &err), -ENOENT);
	assert_int_equal(netns_delete(&f->b, &err), 0);
	assert_int_equal(f->b.fd, -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_named_and_anonymous, setup, teardown),
		cmocka_unit_test_setup_teardown(test_veth_addresses_routes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
