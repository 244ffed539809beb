/* dnsrec: the name → address table of the workload's lookups.
 *
 * Asserts: a pair is found until its TTL runs out and not after; a repeat
 * refreshes it; names by address come most recent first and only live
 * ones; IPv4-mapped IPv6 equals IPv4, ports are ignored; the table never
 * holds more than its bound and evicts the least recently added. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "net-supervisor/dnsrec.h"

static struct sockaddr_storage sa(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	if (strchr(ip, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		assert_int_equal(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		assert_int_equal(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
	}
	return ss;
}

static void test_ttl_and_lookup(void **state)
{
	(void)state;
	struct dnsrec *r = dnsrec_new(16);
	assert_non_null(r);
	struct sockaddr_storage a = sa("203.0.113.5", 0), b = sa("2001:db8::5", 0);
	struct sockaddr_storage a443 = sa("203.0.113.5", 443), mapped = sa("::ffff:203.0.113.5", 8080);
	dnsrec_set_now(r, 1000);
	assert_int_equal(dnsrec_add(r, "api.example.test", (struct sockaddr *)&a, 60), 0);
	assert_int_equal(dnsrec_add(r, "www.example.test", (struct sockaddr *)&b, 10), 0);
	assert_true(dnsrec_has(r, "api.example.test", (struct sockaddr *)&a443)); /* port ignored */
	assert_true(dnsrec_has(r, "api.example.test", (struct sockaddr *)&mapped)); /* mapped = IPv4 */
	assert_false(dnsrec_has(r, "api.example.test", (struct sockaddr *)&b));
	assert_false(dnsrec_has(r, "other.example.test", (struct sockaddr *)&a));
	assert_int_equal(dnsrec_count(r), 2);
	/* 10 s later the AAAA pair is gone, the A pair not */
	dnsrec_set_now(r, 11000);
	assert_false(dnsrec_has(r, "www.example.test", (struct sockaddr *)&b));
	assert_true(dnsrec_has(r, "api.example.test", (struct sockaddr *)&a));
	/* a repeat refreshes */
	dnsrec_set_now(r, 60000);
	assert_int_equal(dnsrec_add(r, "api.example.test", (struct sockaddr *)&a, 60), 0);
	dnsrec_set_now(r, 100000);
	assert_true(dnsrec_has(r, "api.example.test", (struct sockaddr *)&a));
	assert_int_equal(dnsrec_count(r), 1);
	dnsrec_set_now(r, 120000);
	assert_false(dnsrec_has(r, "api.example.test", (struct sockaddr *)&a));
	/* bad input */
	assert_int_equal(dnsrec_add(r, "", (struct sockaddr *)&a, 1), -EINVAL);
	assert_int_equal(dnsrec_add(r, NULL, (struct sockaddr *)&a, 1), -EINVAL);
	struct sockaddr bad = { .sa_family = AF_UNIX };
	assert_int_equal(dnsrec_add(r, "x.test", &bad, 1), -EINVAL);
	char longname[300];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	assert_int_equal(dnsrec_add(r, longname, (struct sockaddr *)&a, 1), -EINVAL);
	assert_false(dnsrec_has(r, "x.test", &bad));
	dnsrec_free(r);
}

static void test_names_most_recent_first(void **state)
{
	(void)state;
	struct dnsrec *r = dnsrec_new(16);
	struct sockaddr_storage a = sa("198.51.100.7", 0), other = sa("198.51.100.8", 0);
	dnsrec_set_now(r, 0);
	dnsrec_add(r, "one.test", (struct sockaddr *)&a, 100);
	dnsrec_add(r, "two.test", (struct sockaddr *)&a, 5);
	dnsrec_add(r, "elsewhere.test", (struct sockaddr *)&other, 100);
	dnsrec_add(r, "three.test", (struct sockaddr *)&a, 100);
	const char *out[8];
	size_t n = dnsrec_names(r, (struct sockaddr *)&a, out, 8);
	assert_int_equal(n, 3);
	assert_string_equal(out[0], "three.test");
	assert_string_equal(out[1], "two.test");
	assert_string_equal(out[2], "one.test");
	/* a bounded answer keeps the most recent */
	n = dnsrec_names(r, (struct sockaddr *)&a, out, 2);
	assert_int_equal(n, 2);
	assert_string_equal(out[0], "three.test");
	assert_string_equal(out[1], "two.test");
	/* refreshing one.test makes it the most recent; two.test expires */
	dnsrec_set_now(r, 6000);
	dnsrec_add(r, "one.test", (struct sockaddr *)&a, 100);
	n = dnsrec_names(r, (struct sockaddr *)&a, out, 8);
	assert_int_equal(n, 2);
	assert_string_equal(out[0], "one.test");
	assert_string_equal(out[1], "three.test");
	assert_int_equal(dnsrec_names(r, (struct sockaddr *)&a, out, 0), 0);
	dnsrec_free(r);
}

static void test_bound_and_lru(void **state)
{
	(void)state;
	struct dnsrec *r = dnsrec_new(8);
	struct sockaddr_storage a = sa("203.0.113.1", 0);
	dnsrec_set_now(r, 0);
	char name[32];
	for (int i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "n%d.test", i);
		assert_int_equal(dnsrec_add(r, name, (struct sockaddr *)&a, 3600), 0);
		assert_true(dnsrec_count(r) <= 8);
	}
	assert_int_equal(dnsrec_count(r), 8);
	/* the last eight survive, the older ones were evicted */
	assert_true(dnsrec_has(r, "n99.test", (struct sockaddr *)&a));
	assert_true(dnsrec_has(r, "n92.test", (struct sockaddr *)&a));
	assert_false(dnsrec_has(r, "n91.test", (struct sockaddr *)&a));
	/* refresh n92, add one more: n93 (now the oldest) goes, n92 stays */
	dnsrec_add(r, "n92.test", (struct sockaddr *)&a, 3600);
	dnsrec_add(r, "n100.test", (struct sockaddr *)&a, 3600);
	assert_true(dnsrec_has(r, "n92.test", (struct sockaddr *)&a));
	assert_false(dnsrec_has(r, "n93.test", (struct sockaddr *)&a));
	/* expired slots are reused before live ones are evicted: short.test
	 * (evicting n94, the oldest) expires, new.test takes its slot and
	 * n95, now the oldest, stays */
	dnsrec_add(r, "short.test", (struct sockaddr *)&a, 1);
	assert_false(dnsrec_has(r, "n94.test", (struct sockaddr *)&a));
	dnsrec_set_now(r, 2000);
	assert_int_equal(dnsrec_count(r), 7);
	dnsrec_add(r, "new.test", (struct sockaddr *)&a, 3600);
	assert_true(dnsrec_has(r, "n95.test", (struct sockaddr *)&a));
	assert_true(dnsrec_has(r, "new.test", (struct sockaddr *)&a));
	assert_int_equal(dnsrec_count(r), 8);
	assert_null(dnsrec_new(0));
	dnsrec_free(r);
	dnsrec_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ttl_and_lookup),
		cmocka_unit_test(test_names_most_recent_first),
		cmocka_unit_test(test_bound_and_lru),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
