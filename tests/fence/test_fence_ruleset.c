/* The fence ruleset generator (fence/fence.c), without nftables:
 * asserts the rules each kind must carry (and in which order, where order
 * is the meaning), that the veth fence is keyed on its interface and the
 * proxy's addresses, and that invalid configs are refused rather than
 * turned into a wider rule. test_fence.sh runs the rules in namespaces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fence/fence.h"

/* needle occurs in hay, and (when after is given) after it. */
static const char *must(const char *hay, const char *needle, const char *after)
{
	const char *from = after ? strstr(hay, after) : hay;
	assert_non_null(from);
	const char *p = strstr(from, needle);
	if (!p)
		fail_msg("missing \"%s\"%s%s in:\n%s", needle, after ? " after " : "", after ? after : "", hay);
	return p;
}

static void test_pod(void **state)
{
	(void)state;
	struct fence_config fc = { .proxy_uid = 4242, .ports = { 3128 }, .n_ports = 1,
				   .supervisor_ports = { 9090, 9091 }, .n_supervisor_ports = 2,
				   .dns_ports = { 53 }, .n_dns_ports = 1 };
	char *r = fence_ruleset(&fc);
	assert_non_null(r);
	must(r, "add table inet tether_fence\ndelete table inet tether_fence\n", NULL);
	/* the supervisor's answer to a workload flow comes before anything accepts it */
	const char *rst = must(r, "ct direction reply ct mark 0x74657468 meta skuid 4242 tcp flags & (syn | ack) == syn | ack counter tcp flags set rst | ack accept", NULL);
	const char *drop = must(r, "ct direction reply ct mark 0x74657468 meta skuid 4242 counter drop", NULL);
	const char *est = must(r, "ct state established,related accept", NULL);
	const char *uid = must(r, "meta skuid 4242 accept", "related accept");
	assert_true(rst < drop && drop < est && est < uid);
	const char *proxy = must(r, "oifname \"lo\" tcp dport { 3128 } accept", NULL);
	must(r, "oifname \"lo\" meta l4proto { tcp, udp } th dport { 53 } accept", NULL);
	const char *sup = must(r, "oifname \"lo\" tcp dport { 9090, 9091 } counter reject with tcp reset", NULL);
	must(r, "oifname \"lo\" udp dport { 9090, 9091 } counter reject with icmpx type admin-prohibited", NULL);
	const char *mark = must(r, "oifname \"lo\" ct state new ct mark set 0x74657468 accept", NULL);
	assert_true(proxy < mark && sup < mark); /* proxy flows unmarked; supervisor ports refused first */
	const char *last = must(r, "counter reject with icmpx type admin-prohibited\n  }", NULL);
	assert_true(mark < last);
	free(r);

	/* no ports: no empty sets (nft would refuse "{ }") */
	struct fence_config bare = { .proxy_uid = 0 };
	r = fence_ruleset(&bare);
	assert_non_null(r);
	assert_null(strstr(r, "{  }"));
	assert_null(strstr(r, "dport"));
	free(r);
}

static void test_veth(void **state)
{
	(void)state;
	struct fence_config fc = { .kind = FENCE_VETH, .iface = "tt77a", .ports = { 3128 }, .n_ports = 1,
				   .addrs = { "192.0.2.1", "2001:db8:0:1:0::1" }, .n_addrs = 2 };
	char *r = fence_ruleset(&fc);
	assert_non_null(r);
	must(r, "add table inet tether_fence_tt77a\ndelete table inet tether_fence_tt77a\n", NULL);
	must(r, "type filter hook input priority filter - 10; policy accept;", NULL);
	const char *other = must(r, "iifname != \"tt77a\" accept", NULL);
	const char *est = must(r, "ct state established,related accept", NULL);
	const char *v4 = must(r, "ip daddr { 192.0.2.1 } tcp dport { 3128 } accept", NULL);
	const char *v6 = must(r, "ip6 daddr { 2001:db8:0:1::1 } tcp dport { 3128 } accept", NULL); /* normalised */
	const char *rst = must(r, "meta l4proto tcp counter reject with tcp reset", NULL);
	assert_true(other < est && est < v4 && v4 < v6 && v6 < rst);
	must(r, "type filter hook forward priority filter - 10; policy accept;", "chain forward");
	must(r, "iifname \"tt77a\" meta l4proto tcp counter reject with tcp reset", "chain forward");
	must(r, "iifname \"tt77a\" counter reject with icmpx type admin-prohibited", "chain forward");
	must(r, "oifname \"tt77a\" counter drop", "chain forward");
	assert_null(strstr(r, "skuid")); /* the workload's uid is no key: root there is fenced too */
	free(r);

	/* no addresses: the ports on any local address, without a daddr match */
	struct fence_config any = { .kind = FENCE_VETH, .iface = "v-1.x", .ports = { 3128 }, .n_ports = 1 };
	r = fence_ruleset(&any);
	assert_non_null(r);
	must(r, "table inet tether_fence_v_1_x {", NULL);
	must(r, "    tcp dport { 3128 } accept", NULL);
	assert_null(strstr(r, "daddr"));
	free(r);
}

static void test_invalid(void **state)
{
	(void)state;
	struct fence_config noif = { .kind = FENCE_VETH, .ports = { 1 }, .n_ports = 1 };
	assert_null(fence_ruleset(&noif));
	const char *bad_if[] = { "", "a b", "a\"b", "abcdefghijklmnop", "x;y" };
	for (size_t i = 0; i < sizeof(bad_if) / sizeof(bad_if[0]); i++) {
		struct fence_config fc = { .kind = FENCE_VETH, .iface = bad_if[i], .ports = { 1 }, .n_ports = 1 };
		assert_null(fence_ruleset(&fc));
		char t[64];
		assert_int_equal(fence_table_name(FENCE_VETH, bad_if[i], t, sizeof(t)), -EINVAL);
	}
	/* a bad address never becomes "any address" */
	struct fence_config badaddr = { .kind = FENCE_VETH, .iface = "v", .ports = { 1 }, .n_ports = 1,
					.addrs = { "192.0.2.1/30" }, .n_addrs = 1 };
	assert_null(fence_ruleset(&badaddr));
	struct fence_config many = { .ports = { 1 }, .n_ports = FENCE_MAX_PORTS + 1 };
	assert_null(fence_ruleset(&many));
	assert_int_equal(errno, E2BIG);
	char t[64];
	assert_int_equal(fence_table_name(FENCE_POD, NULL, t, sizeof(t)), 0);
	assert_string_equal(t, "tether_fence");
}

/* transparent_port (issue 21): pod: a nat output chain redirects every
 * TCP flow of another uid that does not stay on loopback, and the filter
 * admits the redirected flow before the loopback mark (the proxy's socket
 * answers it); veth: a nat prerouting chain DNATs TCP from the interface
 * to a non-local address onto the proxy's first address per family, and
 * the input chain admits only DNATed flows to the port. No capture
 * without an address to send flows to. */
static void test_transparent(void **state)
{
	(void)state;
	struct fence_config pod = { .proxy_uid = 4242, .ports = { 3128 }, .n_ports = 1, .transparent_port = 3129 };
	char *r = fence_ruleset(&pod);
	assert_non_null(r);
	const char *adm = must(r, "meta l4proto tcp tcp dport 3129 ct status dnat accept", NULL);
	const char *mark = must(r, "ct mark set 0x74657468 accept", NULL);
	assert_true(adm < mark);
	const char *chain = must(r, "type nat hook output priority -100; policy accept;", NULL);
	const char *self = must(r, "meta skuid 4242 return", "hook output priority -100");
	const char *lo = must(r, "oifname \"lo\" return", "hook output priority -100");
	const char *redir = must(r, "meta l4proto tcp counter redirect to :3129", "hook output priority -100");
	assert_true(chain < self && self < lo && lo < redir);
	free(r);

	struct fence_config veth = { .kind = FENCE_VETH, .iface = "tt9a", .ports = { 3128 }, .n_ports = 1,
				     .addrs = { "2001:db8::1", "192.0.2.1", "192.0.2.5" }, .n_addrs = 3,
				     .transparent_port = 3129 };
	r = fence_ruleset(&veth);
	assert_non_null(r);
	must(r, "meta l4proto tcp tcp dport 3129 ct status dnat accept", "hook input");
	const char *pre = must(r, "type nat hook prerouting priority dstnat - 10; policy accept;", NULL);
	const char *other = must(r, "iifname != \"tt9a\" accept", "hook prerouting");
	/* the proxy's own ports stay uncaptured; everything else is captured,
	 * local addresses of the netns included */
	const char *local = must(r, "ip daddr { 192.0.2.1, 192.0.2.5 } tcp dport { 3128 } accept", "hook prerouting");
	must(r, "ip6 daddr { 2001:db8::1 } tcp dport { 3128 } accept", "hook prerouting");
	assert_null(strstr(r, "fib daddr"));
	const char *d4 = must(r, "iifname \"tt9a\" meta nfproto ipv4 meta l4proto tcp counter dnat ip to 192.0.2.1:3129", NULL);
	const char *d6 = must(r, "iifname \"tt9a\" meta nfproto ipv6 meta l4proto tcp counter dnat ip6 to [2001:db8::1]:3129", NULL);
	assert_true(pre < other && other < local && local < d4 && d4 < d6);
	assert_null(strstr(r, "192.0.2.5:3129"));
	free(r);

	/* IPv4 only: IPv6 is not captured (the forward chain refuses it) */
	struct fence_config v4 = { .kind = FENCE_VETH, .iface = "tt9a", .ports = { 3128 }, .n_ports = 1,
				   .addrs = { "192.0.2.1" }, .n_addrs = 1, .transparent_port = 3129 };
	r = fence_ruleset(&v4);
	assert_non_null(r);
	assert_null(strstr(r, "dnat ip6"));
	free(r);

	struct fence_config noaddr = { .kind = FENCE_VETH, .iface = "tt9a", .ports = { 3128 }, .n_ports = 1,
				       .transparent_port = 3129 };
	errno = 0;
	assert_null(fence_ruleset(&noaddr));
	assert_int_equal(errno, EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pod),
		cmocka_unit_test(test_veth),
		cmocka_unit_test(test_invalid),
		cmocka_unit_test(test_transparent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
