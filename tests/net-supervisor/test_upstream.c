/* upstream: the corporate upstream proxy's parsing and matching.
 *
 * Asserts: the proxy URL takes http://HOST:PORT only (no credentials, no
 * path, no other scheme, a port required); the no-upstream list takes
 * names, .suffix / *.suffix, addresses and CIDRs and matches names
 * exactly or below a suffix (case and trailing dot ignored) and the
 * checked address against the address entries; the auth file is refused
 * missing, group/other-accessible, or without USER:; it becomes a Basic
 * header; the CONNECT names the checked address by default and the host
 * with `name`; the reply parser and the status → reason mapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net-supervisor/upstream.h"

static char err[512];

static void test_url(void **state)
{
	(void)state;
	char host[256];
	uint16_t port;
	assert_int_equal(upstream_parse_url("http://proxy.corp.example:3128", host, sizeof(host), &port, err,
					    sizeof(err)), 0);
	assert_string_equal(host, "proxy.corp.example");
	assert_int_equal(port, 3128);
	assert_int_equal(upstream_parse_url("HTTP://203.0.113.5:8080/", host, sizeof(host), &port, err,
					    sizeof(err)), 0);
	assert_string_equal(host, "203.0.113.5");
	assert_int_equal(port, 8080);
	assert_int_equal(upstream_parse_url("http://[2001:db8::5]:3128", host, sizeof(host), &port, err,
					    sizeof(err)), 0);
	assert_string_equal(host, "2001:db8::5");
	static const char *const bad[] = {
		"https://p:3128", "p:3128", "http://p", "http://p:0", "http://p:65536", "http://p:x",
		"http://u:pw@p:3128", "http://p:3128/path", "http://:3128", "http://[2001:db8::5:3128",
		"http://[nothex]:3128", "http://p q:3128", "http://p:3128?x",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		assert_int_equal(upstream_parse_url(bad[i], host, sizeof(host), &port, err, sizeof(err)), -EINVAL);
		assert_true(err[0] != 0);
	}
	upstream_parse_url("http://u:pw@p:3128", host, sizeof(host), &port, err, sizeof(err));
	assert_non_null(strstr(err, "--upstream-proxy-auth-file"));
}

static void test_bypass(void **state)
{
	(void)state;
	struct upstream_proxy *up = calloc(1, sizeof(*up));
	assert_non_null(up);
	assert_int_equal(upstream_parse_bypass(up, "git.corp.example, .internal.example *.svc.example", err,
					       sizeof(err)), 0);
	assert_int_equal(upstream_parse_bypass(up, "10.0.0.0/8,203.0.113.7,2001:db8:1::/48,[2001:db8:2::1]", err,
					       sizeof(err)), 0);
	assert_int_equal(up->n_bypass, 7);
	struct netaddr a, none = { 0 };
	assert_int_equal(netaddr_parse("198.51.100.10", &none), 0);
	assert_true(upstream_bypassed(up, "git.corp.example", &none));
	assert_true(upstream_bypassed(up, "GIT.Corp.Example.", &none));
	assert_false(upstream_bypassed(up, "x.git.corp.example", &none)); /* a host entry is that name only */
	assert_false(upstream_bypassed(up, "corp.example", &none));
	assert_true(upstream_bypassed(up, "a.internal.example", &none));
	assert_true(upstream_bypassed(up, "b.a.internal.example", &none));
	assert_false(upstream_bypassed(up, "internal.example", &none)); /* below the suffix only */
	assert_false(upstream_bypassed(up, "xinternal.example", &none));
	assert_true(upstream_bypassed(up, "api.svc.example", &none));
	assert_false(upstream_bypassed(up, "example.com", &none));
	assert_int_equal(netaddr_parse("10.1.2.3", &a), 0);
	assert_true(upstream_bypassed(up, "anything.example", &a)); /* by the checked address */
	assert_int_equal(netaddr_parse("::ffff:10.1.2.3", &a), 0);
	assert_true(upstream_bypassed(up, NULL, &a));
	assert_int_equal(netaddr_parse("203.0.113.7", &a), 0);
	assert_true(upstream_bypassed(up, "203.0.113.7", &a));
	assert_int_equal(netaddr_parse("203.0.113.8", &a), 0);
	assert_false(upstream_bypassed(up, "203.0.113.8", &a));
	assert_int_equal(netaddr_parse("2001:db8:1::99", &a), 0);
	assert_true(upstream_bypassed(up, NULL, &a));
	assert_int_equal(netaddr_parse("2001:db8:2::1", &a), 0);
	assert_true(upstream_bypassed(up, NULL, &a));
	assert_false(upstream_bypassed(up, NULL, NULL));
	static const char *const bad[] = { "10.0.0.1/8", "bad!name", "a/b", "..", "*.", "[2001:db8::1",
					   "a..b", "a.b..", ".", "*..a" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct upstream_proxy *u2 = calloc(1, sizeof(*u2));
		assert_int_equal(upstream_parse_bypass(u2, bad[i], err, sizeof(err)), -EINVAL);
		free(u2);
	}
	free(up);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static void test_auth_file(void **state)
{
	(void)state;
	char dir[] = "/tmp/test_upstream.XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[128];
	snprintf(path, sizeof(path), "%s/auth", dir);
	char *h = NULL;
	assert_true(upstream_read_auth_file(path, &h, err, sizeof(err)) < 0); /* missing */
	assert_null(h);
	write_file(path, "corp:s3cret\n", 0600);
	assert_int_equal(upstream_read_auth_file(path, &h, err, sizeof(err)), 0);
	assert_string_equal(h, "Proxy-Authorization: Basic Y29ycDpzM2NyZXQ=\r\n");
	free(h);
	write_file(path, "corp:pw:with:colons", 0400);
	assert_int_equal(upstream_read_auth_file(path, &h, err, sizeof(err)), 0);
	free(h);
	write_file(path, "corp:s3cret\n", 0640);
	assert_int_equal(upstream_read_auth_file(path, &h, err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "chmod 600"));
	write_file(path, "corp:s3cret\n", 0604);
	assert_int_equal(upstream_read_auth_file(path, &h, err, sizeof(err)), -EPERM);
	write_file(path, "nocolon\n", 0600);
	assert_int_equal(upstream_read_auth_file(path, &h, err, sizeof(err)), -EINVAL);
	write_file(path, ":emptyuser\n", 0600);
	assert_int_equal(upstream_read_auth_file(path, &h, err, sizeof(err)), -EINVAL);
	write_file(path, "a:b\nc:d\n", 0600);
	assert_int_equal(upstream_read_auth_file(path, &h, err, sizeof(err)), -EINVAL);
	assert_int_equal(upstream_read_auth_file(dir, &h, err, sizeof(err)), -EINVAL); /* a directory */
	char link[160];
	snprintf(link, sizeof(link), "%s/link", dir);
	write_file(path, "corp:s3cret\n", 0600);
	assert_int_equal(symlink(path, link), 0);
	assert_true(upstream_read_auth_file(link, &h, err, sizeof(err)) < 0); /* no symlinks */
	unlink(link);
	unlink(path);
	rmdir(dir);
}

static void test_connect_request(void **state)
{
	(void)state;
	struct upstream_proxy *up = calloc(1, sizeof(*up));
	struct netaddr a, a6;
	assert_int_equal(netaddr_parse("198.51.100.10", &a), 0);
	assert_int_equal(netaddr_parse("2001:db8::10", &a6), 0);
	size_t len;
	char *r = upstream_connect_request(up, "example.com", &a, 443, &len);
	assert_string_equal(r, "CONNECT 198.51.100.10:443 HTTP/1.1\r\nHost: 198.51.100.10:443\r\n\r\n");
	assert_int_equal(len, strlen(r));
	free(r);
	r = upstream_connect_request(up, "example.com", &a6, 443, &len);
	assert_string_equal(r, "CONNECT [2001:db8::10]:443 HTTP/1.1\r\nHost: [2001:db8::10]:443\r\n\r\n");
	free(r);
	up->by = UPSTREAM_BY_NAME;
	up->auth_header = strdup("Proxy-Authorization: Basic eDp5\r\n");
	r = upstream_connect_request(up, "example.com", &a, 443, &len);
	assert_string_equal(r, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n"
			       "Proxy-Authorization: Basic eDp5\r\n\r\n");
	free(r);
	r = upstream_connect_request(up, "2001:db8::10", &a6, 80, &len);
	assert_string_equal(r, "CONNECT [2001:db8::10]:80 HTTP/1.1\r\nHost: [2001:db8::10]:80\r\n"
			       "Proxy-Authorization: Basic eDp5\r\n\r\n");
	free(r);
	assert_null(upstream_connect_request(up, "evil\r\nX: y", &a, 443, &len));
	upstream_free(up);
}

static void test_reply(void **state)
{
	(void)state;
	int status = 0;
	size_t head = 0;
	const char *ok = "HTTP/1.1 200 Connection established\r\nProxy-Agent: x\r\n\r\nSSH-2.0-banner";
	assert_int_equal(upstream_parse_reply(ok, 10, &status, &head), 0);
	assert_int_equal(upstream_parse_reply(ok, strlen(ok), &status, &head), 1);
	assert_int_equal(status, 200);
	assert_string_equal(ok + head, "SSH-2.0-banner");
	assert_int_equal(upstream_parse_reply("HTTP/1.0 407 Proxy Authentication Required\r\n\r\n", 46, &status,
					      &head), 1);
	assert_int_equal(status, 407);
	assert_int_equal(upstream_parse_reply("SSH-2.0-x\r\n", 11, &status, &head), -EPROTO);
	assert_int_equal(upstream_parse_reply("HTTP/2 200\r\n\r\n", 14, &status, &head), -EPROTO);
	assert_int_equal(upstream_parse_reply("HTTP/1.1 000 x\r\n\r\n", 18, &status, &head), -EPROTO);
	assert_int_equal(upstream_parse_reply("HTTP/1.1 2000 x\r\n\r\n", 19, &status, &head), -EPROTO);
	assert_int_equal(upstream_parse_reply("HTTP/1.1 200\r\n\r\n", 16, &status, &head), 1);
	char *big = malloc(UPSTREAM_REPLY_MAX);
	memset(big, 'a', UPSTREAM_REPLY_MAX);
	memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
	assert_int_equal(upstream_parse_reply(big, UPSTREAM_REPLY_MAX, &status, &head), -EPROTO);
	free(big);
	int ours = 0;
	assert_int_equal(upstream_reason_for_status(407, &ours), REASON_UPSTREAM_PROXY_AUTH_REQUIRED);
	assert_int_equal(ours, 502);
	assert_int_equal(upstream_reason_for_status(401, &ours), REASON_UPSTREAM_PROXY_AUTH_REQUIRED);
	assert_int_equal(upstream_reason_for_status(403, &ours), REASON_UPSTREAM_PROXY_REFUSED);
	assert_int_equal(ours, 403);
	assert_int_equal(upstream_reason_for_status(503, &ours), REASON_UPSTREAM_PROXY_REFUSED);
	assert_int_equal(ours, 502);
	assert_string_equal(reason_word(REASON_UPSTREAM_PROXY_UNREACHABLE), "upstream_proxy_unreachable");
	assert_string_equal(reason_word(REASON_UPSTREAM_PROXY_REFUSED), "upstream_proxy_refused");
	assert_string_equal(reason_word(REASON_UPSTREAM_PROXY_AUTH_REQUIRED), "upstream_proxy_auth_required");
}

static void test_load(void **state)
{
	(void)state;
	struct upstream_proxy *up = NULL;
	const char *lists[] = { "localhost,.corp.example" };
	assert_int_equal(upstream_load("http://127.0.0.1:3128", NULL, lists, 1, NULL, &up), 0);
	assert_int_equal(up->by, UPSTREAM_BY_ADDRESS);
	assert_int_equal(up->n_bypass, 2);
	assert_null(up->auth_header);
	upstream_free(up);
	assert_int_equal(upstream_load("http://127.0.0.1:3128", NULL, NULL, 0, "name", &up), 0);
	assert_int_equal(up->by, UPSTREAM_BY_NAME);
	upstream_free(up);
	assert_int_equal(upstream_load("http://127.0.0.1:3128", NULL, NULL, 0, "ip", &up), -EINVAL);
	assert_null(up);
	assert_true(upstream_load("http://127.0.0.1:3128", "/nonexistent/auth", NULL, 0, NULL, &up) < 0);
	assert_null(up);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_url),
		cmocka_unit_test(test_bypass),
		cmocka_unit_test(test_auth_file),
		cmocka_unit_test(test_connect_request),
		cmocka_unit_test(test_reply),
		cmocka_unit_test(test_load),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
