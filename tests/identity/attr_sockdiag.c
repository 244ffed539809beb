/* sock_diag lookups on loopback: the answer is the socket we made (inode
 * from fstat, cookie from SO_COOKIE, uid), listeners and unknown tuples
 * are not, UDP is matched by port and address. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "identity/sockdiag.h"

struct pair {
	int listener, client, server;
	struct flow_tuple t; /* from the client's side */
};

static socklen_t sa_len(int family)
{
	return family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

static void loopback(int family, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *s = (void *)ss;
		s->sin_family = AF_INET;
		s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	} else {
		struct sockaddr_in6 *s = (void *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_addr = in6addr_loopback;
	}
}

static void tuple_of(int fd, int proto, struct flow_tuple *t)
{
	struct sockaddr_storage a, b;
	socklen_t la = sizeof(a), lb = sizeof(b);
	assert_int_equal(getsockname(fd, (void *)&a, &la), 0);
	assert_int_equal(getpeername(fd, (void *)&b, &lb), 0);
	assert_int_equal(flow_tuple_from_sockaddr(t, proto, (void *)&a, (void *)&b), 0);
}

static void make_tcp(int family, struct pair *p)
{
	struct sockaddr_storage ss;
	socklen_t l = sa_len(family);
	loopback(family, &ss);
	p->listener = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(p->listener >= 0);
	assert_int_equal(bind(p->listener, (void *)&ss, l), 0);
	assert_int_equal(listen(p->listener, 8), 0);
	assert_int_equal(getsockname(p->listener, (void *)&ss, &l), 0);
	p->client = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(p->client >= 0);
	assert_int_equal(connect(p->client, (void *)&ss, l), 0);
	p->server = accept4(p->listener, NULL, NULL, SOCK_CLOEXEC);
	assert_true(p->server >= 0);
	tuple_of(p->client, IPPROTO_TCP, &p->t);
}

static void close_pair(struct pair *p)
{
	close(p->listener);
	close(p->client);
	close(p->server);
}

static void expect_is(struct sockdiag *sd, const struct flow_tuple *t, int fd)
{
	struct sockdiag_result res;
	struct stat st;
	uint64_t cookie = 0;
	socklen_t cl = sizeof(cookie);

	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &cl), 0);
	assert_int_equal(sockdiag_lookup(sd, t, &res), 0);
	assert_int_equal(res.inode, (uint32_t)st.st_ino);
	assert_true(res.cookie == cookie);
	assert_int_equal(res.uid, getuid());
}

static void tcp_case(int family)
{
	struct sockdiag *sd = sockdiag_open();
	struct pair p;
	struct sockdiag_result res;

	assert_non_null(sd);
	make_tcp(family, &p);
	expect_is(sd, &p.t, p.client);
	assert_int_equal(sockdiag_lookup(sd, &p.t, &res), 0);
	assert_int_equal(res.state, TCP_ESTABLISHED);

	/* The reversed tuple is the accepted socket, not the client. */
	struct flow_tuple rev = p.t;
	rev.src = p.t.dst;
	rev.sport = p.t.dport;
	rev.dst = p.t.src;
	rev.dport = p.t.sport;
	expect_is(sd, &rev, p.server);

	/* A tuple with a wrong peer port must not fall back to the listener
	 * (the kernel's 4-tuple lookup would). */
	struct flow_tuple to_listener = rev;
	to_listener.dport = (uint16_t)(p.t.sport == 65535 ? 1 : p.t.sport + 1);
	assert_int_equal(sockdiag_lookup(sd, &to_listener, &res), -ENOENT);

	/* Wrong local port: nothing. */
	struct flow_tuple none = p.t;
	none.sport = (uint16_t)(none.sport == 65535 ? 1 : none.sport + 1);
	assert_int_equal(sockdiag_lookup(sd, &none, &res), -ENOENT);

	/* The handle is reusable. */
	for (int i = 0; i < 100; i++)
		assert_int_equal(sockdiag_lookup(sd, &p.t, &res), 0);

	close_pair(&p);
	/* Closed: the client goes to FIN_WAIT/TIME_WAIT with no inode, and is
	 * no longer found. */
	assert_int_equal(sockdiag_lookup(sd, &p.t, &res), -ENOENT);
	sockdiag_close(sd);
}

static void test_tcp4(void **state)
{
	tcp_case(AF_INET);
}

static void test_tcp6(void **state)
{
	tcp_case(AF_INET6);
}

static void udp_case(int family)
{
	struct sockdiag *sd = sockdiag_open();
	struct sockaddr_storage ss;
	socklen_t l = sa_len(family);
	struct sockdiag_result res;
	assert_non_null(sd);

	loopback(family, &ss);
	int srv = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(srv >= 0);
	assert_int_equal(bind(srv, (void *)&ss, l), 0);
	assert_int_equal(getsockname(srv, (void *)&ss, &l), 0);

	int cli = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(cli >= 0);
	assert_int_equal(connect(cli, (void *)&ss, l), 0);
	struct flow_tuple t;
	tuple_of(cli, IPPROTO_UDP, &t);
	expect_is(sd, &t, cli);
	assert_int_equal(sockdiag_lookup(sd, &t, &res), 0);
	assert_int_equal(res.state, TCP_ESTABLISHED);

	/* The unconnected server socket answers for flows to its port. */
	struct flow_tuple rev = t;
	rev.src = t.dst;
	rev.sport = t.dport;
	rev.dst = t.src;
	rev.dport = t.sport;
	expect_is(sd, &rev, srv);

	/* A connected socket does not answer for another peer. */
	struct flow_tuple other = t;
	other.dport = (uint16_t)(t.dport == 65535 ? 1 : t.dport + 1);
	assert_int_equal(sockdiag_lookup(sd, &other, &res), -ENOENT);

	close(cli);
	assert_int_equal(sockdiag_lookup(sd, &t, &res), -ENOENT);
	close(srv);
	sockdiag_close(sd);
}

static void test_udp4(void **state)
{
	udp_case(AF_INET);
}

static void test_udp6(void **state)
{
	udp_case(AF_INET6);
}

static void test_udp_reuseport_ambiguous(void **state)
{
	struct sockdiag *sd = sockdiag_open();
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int one = 1;
	struct sockdiag_result res;
	assert_non_null(sd);

	int s1 = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_int_equal(setsockopt(s1, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
	assert_int_equal(bind(s1, (void *)&a, l), 0);
	assert_int_equal(getsockname(s1, (void *)&a, &l), 0);
	int s2 = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_int_equal(setsockopt(s2, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
	assert_int_equal(bind(s2, (void *)&a, l), 0);

	struct flow_tuple t = { .proto = IPPROTO_UDP, .family = AF_INET };
	t.src.v4 = a.sin_addr;
	t.sport = ntohs(a.sin_port);
	t.dst.v4.s_addr = htonl(INADDR_LOOPBACK);
	t.dport = 9;
	/* Two sockets answer equally well: refuse to pick one. */
	assert_int_equal(sockdiag_lookup(sd, &t, &res), -ENOTUNIQ);
	close(s1);
	close(s2);
	sockdiag_close(sd);
}

/* A dump larger than any one netlink message (the kernel caps a dump skb
 * at 32 KiB): 900 sockets on one port, about 90 KiB of answers over
 * several receives, each whole in the handle's buffer. */
static void test_udp_large_dump(void **state)
{
	(void)state;
	enum { N = 900 };
	static int fds[N];
	struct sockdiag *sd = sockdiag_open();
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int one = 1;
	assert_non_null(sd);
	for (int i = 0; i < N; i++) {
		fds[i] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		assert_true(fds[i] >= 0);
		assert_int_equal(setsockopt(fds[i], SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
		assert_int_equal(bind(fds[i], (void *)&a, l), 0);
		if (i == 0)
			assert_int_equal(getsockname(fds[0], (void *)&a, &l), 0);
	}
	struct flow_tuple t = { .proto = IPPROTO_UDP, .family = AF_INET };
	t.src.v4 = a.sin_addr;
	t.sport = ntohs(a.sin_port);
	t.dst.v4.s_addr = htonl(INADDR_LOOPBACK);
	t.dport = 9;
	struct sockdiag_result res;
	assert_int_equal(sockdiag_lookup(sd, &t, &res), -ENOTUNIQ);
	/* and the handle still answers an exact query afterwards */
	for (int i = 1; i < N; i++)
		close(fds[i]);
	assert_int_equal(sockdiag_lookup(sd, &t, &res), 0);
	close(fds[0]);
	sockdiag_close(sd);
}

/* A dual-stack AF_INET6 socket talking to an IPv4 peer: the peer sees a
 * plain IPv4 flow, the kernel reports v4-mapped addresses. */
static void dual_stack_case(int type, int proto)
{
	struct sockdiag *sd = sockdiag_open();
	struct sockaddr_in srv_a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(srv_a);
	assert_non_null(sd);

	int srv = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	assert_true(srv >= 0);
	assert_int_equal(bind(srv, (void *)&srv_a, l), 0);
	if (proto == IPPROTO_TCP)
		assert_int_equal(listen(srv, 4), 0);
	assert_int_equal(getsockname(srv, (void *)&srv_a, &l), 0);

	int cli = socket(AF_INET6, type | SOCK_CLOEXEC, 0);
	int off = 0;
	assert_true(cli >= 0);
	assert_int_equal(setsockopt(cli, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)), 0);
	struct sockaddr_in6 mapped = { .sin6_family = AF_INET6, .sin6_port = srv_a.sin_port };
	assert_int_equal(inet_pton(AF_INET6, "::ffff:127.0.0.1", &mapped.sin6_addr), 1);
	assert_int_equal(connect(cli, (void *)&mapped, sizeof(mapped)), 0);
	struct sockaddr_in6 me;
	socklen_t ml = sizeof(me);
	assert_int_equal(getsockname(cli, (void *)&me, &ml), 0);

	/* The tuple as the IPv4 side sees it. */
	struct flow_tuple t = { .proto = proto, .family = AF_INET };
	t.src.v4.s_addr = htonl(INADDR_LOOPBACK);
	t.sport = ntohs(me.sin6_port);
	t.dst.v4 = srv_a.sin_addr;
	t.dport = ntohs(srv_a.sin_port);
	expect_is(sd, &t, cli);

	close(cli);
	close(srv);
	sockdiag_close(sd);
}

static void test_dual_stack_tcp(void **state)
{
	dual_stack_case(SOCK_STREAM, IPPROTO_TCP);
}

static void test_dual_stack_udp(void **state)
{
	dual_stack_case(SOCK_DGRAM, IPPROTO_UDP);
}

static void test_bad_tuples(void **state)
{
	struct sockdiag *sd = sockdiag_open();
	struct sockdiag_result res;
	struct flow_tuple t = { .proto = IPPROTO_TCP, .family = AF_INET, .sport = 1, .dport = 1 };
	assert_non_null(sd);

	assert_int_equal(sockdiag_lookup(sd, NULL, &res), -EINVAL);
	t.proto = IPPROTO_ICMP;
	assert_int_equal(sockdiag_lookup(sd, &t, &res), -EINVAL);
	t.proto = IPPROTO_TCP;
	t.family = AF_UNIX;
	assert_int_equal(sockdiag_lookup(sd, &t, &res), -EINVAL);
	t.family = AF_INET;
	t.sport = 0;
	assert_int_equal(sockdiag_lookup(sd, &t, &res), -EINVAL);

	struct sockaddr_in s4 = { .sin_family = AF_INET };
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };
	assert_int_equal(flow_tuple_from_sockaddr(&t, IPPROTO_TCP, (void *)&s4, (void *)&s6), -EINVAL);

	char buf[128];
	struct flow_tuple f = { .proto = IPPROTO_TCP, .family = AF_INET6, .sport = 5, .dport = 6 };
	f.src.v6 = in6addr_loopback;
	f.dst.v6 = in6addr_loopback;
	assert_int_equal(flow_tuple_format(&f, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "tcp [::1]:5->[::1]:6");
	assert_int_equal(flow_tuple_format(&f, buf, 8), -ENAMETOOLONG);
	sockdiag_close(sd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcp4),
		cmocka_unit_test(test_tcp6),
		cmocka_unit_test(test_udp4),
		cmocka_unit_test(test_udp6),
		cmocka_unit_test(test_udp_reuseport_ambiguous),
		cmocka_unit_test(test_udp_large_dump),
		cmocka_unit_test(test_dual_stack_tcp),
		cmocka_unit_test(test_dual_stack_udp),
		cmocka_unit_test(test_bad_tuples),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
