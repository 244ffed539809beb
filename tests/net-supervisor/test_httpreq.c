/* The proxy request-head parser on raw bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "net-supervisor/httpreq.h"

struct tc {
	const char *in;
	int rc;          /* final httpreq_feed result */
	const char *reason;
	int status;
	const char *host;
	unsigned port;
};

static const struct tc cases[] = {
	{ "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 1, "ok", 0, "example.com", 443 },
	{ "CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n", 1, "ok", 0, "2001:db8::1", 443 },
	{ "CONNECT 198.51.100.1:8080 HTTP/1.0\r\n\r\n", 1, "ok", 0, "198.51.100.1", 8080 },
	{ "GET http://Example.COM/x?y=1 HTTP/1.1\r\nHost: example.com\r\n\r\n", 1, "ok", 0, "example.com", 80 },
	{ "GET http://example.com:8080/ HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", 1, "ok", 0, "example.com", 8080 },
	{ "POST http://example.com/ HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 1, "ok", 0, "example.com", 80 },
	/* bad */
	{ "CONNECT example.com HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT example.com:0 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT example.com:99999 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT 127.1:80 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT 2130706433:80 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET https://example.com/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://user:pw@example.com/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com/ HTTP/1.1\r\nHost: other.com\r\n\r\n", -1, "host_mismatch", 400, NULL, 0 },
	{ "GET http://example.com/ HTTP/1.1\r\nHost: example.com:81\r\n\r\n", -1, "host_mismatch", 400, NULL, 0 },
	{ "GET http://example.com/ HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com/ HTTP/1.1\nHost: example.com\n\n", -1, "bad_request", 400, NULL, 0 },
	{ "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", -1, "bad_request", 400, NULL, 0 },
	{ "GARBAGE\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "POST http://example.com/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com/ HTTP/2.0\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	/* Header names are RFC 7230 tokens. The library (built without
	 * HTTP_PARSER_STRICT) takes a space as a name character; forwarded, a
	 * lenient upstream reads " Host: x" or "Host : x" as a second Host
	 * header that the host_mismatch check never saw. */
	{ "GET http://example.com/ HTTP/1.1\r\n Host: evil.example\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com/ HTTP/1.1\r\nHost : evil.example\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nHost : evil.example\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding : chunked\r\nContent-Length: 3\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	/* A CR must be followed by LF, the head's last one too (the library
	 * takes any byte after it as the end of the head and drops it). */
	{ "GET http://example.com/ HTTP/1.1\r\nX: 1\r\n\rXGET http://evil.example/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT example.com:443 HTTP/1.1\r\n\r\x16\x03\x01", -1, "bad_request", 400, NULL, 0 },
	/* Userinfo, even empty, is refused. */
	{ "GET http://@evil.example/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://:@evil.example/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com@evil.example/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	/* Authority spellings that must never name another host than the one
	 * decided on (all refused, or normalised to exactly one name). */
	{ "GET http://example.com\\@evil.example/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example%2ecom/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com#@evil.example/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com?@evil.example/ HTTP/1.1\r\nHost: example.com\r\n\r\n", 1, "ok", 0, "example.com", 80 },
	{ "GET http://[fe80::1%25eth0]/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT [fe80::1%eth0]:443 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT ::1:443 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT []:443 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT :443 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT user@example.com:443 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT example.com:443/x HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT http://example.com:443/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT example.com:+443 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT example.com:00443 HTTP/1.1\r\n\r\n", 1, "ok", 0, "example.com", 443 },
	{ "CONNECT EXAMPLE.com.:443 HTTP/1.1\r\n\r\n", 1, "ok", 0, "example.com", 443 },
	{ "CONNECT [::FFFF:127.0.0.1]:443 HTTP/1.1\r\n\r\n", 1, "ok", 0, "::ffff:127.0.0.1", 443 },
	{ "GET http:/// HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://:80/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com:/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com:+80/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com:0/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com:65536/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://example.com:0080/ HTTP/1.1\r\nHost: example.com:80\r\n\r\n", 1, "ok", 0, "example.com", 80 },
	{ "GET http://EXAMPLE.com./ HTTP/1.1\r\nHost: example.COM\r\n\r\n", 1, "ok", 0, "example.com", 80 },
	/* Name lengths: labels up to 63, names up to 253 (+ a trailing dot). */
	{ "CONNECT aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.test:443 HTTP/1.1\r\n\r\n", 1, "ok", 0, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.test", 443 },
	{ "CONNECT aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.test:443 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.:443 HTTP/1.1\r\n\r\n", 1, "ok", 0, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", 443 },
	{ "CONNECT bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb:443 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.test/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	/* Numeric spellings getaddrinfo would read as an address. */
	{ "GET http://0x7f.0.0.1/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://0177.0.0.1/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://0x7F000001/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://127.0.1/ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "GET http://127.0.0.1./ HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT 0x7f.0.0.1:443 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	{ "CONNECT 127.0.0.01:443 HTTP/1.1\r\n\r\n", -1, "bad_request", 400, NULL, 0 },
	/* Whitespace in a Host value is not the URI's host. */
	{ "GET http://example.com/ HTTP/1.1\r\nHost: example.com \r\n\r\n", -1, "host_mismatch", 400, NULL, 0 },
	{ "GET http://example.com/ HTTP/1.1\r\nHost: ex\r\n ample.com\r\n\r\n", -1, "host_mismatch", 400, NULL, 0 },
	{ "GET http://example.com/ HTTP/1.1\r\nHost:\r\n\r\n", -1, "host_mismatch", 400, NULL, 0 },
	/* incomplete: needs more */
	{ "CONNECT example.com:443 HTTP/1.1\r\nHost: exa", 0, "ok", 0, NULL, 0 },
};

static int feed_all(struct httpreq *r, const char *in, size_t len, size_t step, size_t *used_total)
{
	int rc = 0;
	*used_total = 0;
	for (size_t off = 0; off < len;) {
		size_t n = len - off < step ? len - off : step, used;
		rc = httpreq_feed(r, in + off, n, &used);
		*used_total += used;
		if (rc != 0)
			return rc;
		off += n;
	}
	return rc;
}

static void test_cases(void **state)
{
	int bad = 0;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct tc *t = &cases[i];
		/* Whole, and byte by byte: the split must not matter. */
		for (size_t step = 1; step <= 4096; step = step == 1 ? 4096 : 8192) {
			struct httpreq r;
			httpreq_init(&r, NULL);
			size_t used;
			int rc = feed_all(&r, t->in, strlen(t->in), step, &used);
			if (rc != t->rc || strcmp(reason_word(r.error), t->reason) != 0 || r.status != t->status) {
				/* Every wrong case is listed, not just the first. */
				print_error("case %zu step %zu: rc %d reason %s status %d: %.60s\n", i, step, rc,
					    reason_word(r.error), r.status, t->in);
				bad++;
			} else if (t->host) {
				assert_string_equal(r.host, t->host);
				assert_int_equal(r.port, t->port);
			}
			httpreq_done(&r);
		}
	}
	assert_int_equal(bad, 0);
}

/* NUL bytes anywhere in the head: refused, never cut at the NUL. */
static void test_nul_bytes(void **state)
{
	static const char c1[] = "CONNECT example.com\0.evil:443 HTTP/1.1\r\n\r\n";
	static const char c2[] = "GET http://example.com\0.evil/ HTTP/1.1\r\n\r\n";
	static const char c3[] = "GET http://example.com/ HTTP/1.1\r\nHost: example.com\0.evil\r\n\r\n";
	static const char c4[] = "GET http://example.com/ HTTP/1.1\r\nX\0: 1\r\n\r\n";
	const struct { const char *in; size_t len; } in[] = {
		{ c1, sizeof(c1) - 1 }, { c2, sizeof(c2) - 1 }, { c3, sizeof(c3) - 1 }, { c4, sizeof(c4) - 1 },
	};
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		struct httpreq r;
		httpreq_init(&r, NULL);
		size_t used;
		int rc = feed_all(&r, in[i].in, in[i].len, 4096, &used);
		if (rc != -1 || r.error != REASON_BAD_REQUEST || r.status != 400)
			fail_msg("NUL case %zu: rc %d reason %s", i, rc, reason_word(r.error));
		httpreq_done(&r);
	}
}

static void test_body_left_over(void **state)
{
	const char *in = "POST http://example.com/p HTTP/1.1\r\nContent-Length: 3\r\nProxy-Connection: keep-alive\r\n"
			 "Connection: keep-alive, X-Drop\r\nX-Drop: 1\r\nX-Keep: 2\r\n\r\nabc";
	struct httpreq r;
	httpreq_init(&r, NULL);
	size_t used;
	assert_int_equal(httpreq_feed(&r, in, strlen(in), &used), 1);
	assert_string_equal(in + used, "abc");
	size_t hl;
	char *head = httpreq_upstream_head(&r, &hl);
	assert_non_null(head);
	assert_non_null(strstr(head, "POST /p HTTP/1.1\r\n"));
	assert_non_null(strstr(head, "Host: example.com\r\n"));
	assert_non_null(strstr(head, "X-Keep: 2\r\n"));
	assert_null(strstr(head, "X-Drop"));
	assert_null(strstr(head, "Proxy-Connection"));
	assert_non_null(strstr(head, "Connection: close\r\n\r\n"));
	free(head);
	httpreq_done(&r);
}

static void test_limits(void **state)
{
	struct httpreq_limits lim = { .max_header_bytes = 1024, .max_headers = 5 };
	struct httpreq r;
	char big[4096];
	strcpy(big, "CONNECT example.com:443 HTTP/1.1\r\nX-A: ");
	size_t l = strlen(big);
	memset(big + l, 'a', 2000);
	big[l + 2000] = '\0';
	strcat(big, "\r\n\r\n");
	httpreq_init(&r, &lim);
	size_t used;
	assert_int_equal(httpreq_feed(&r, big, strlen(big), &used), -1);
	assert_string_equal(reason_word(r.error), "header_too_large");
	assert_int_equal(r.status, 431);
	httpreq_done(&r);

	/* Never terminated: also too large once the limit is reached. */
	httpreq_init(&r, &lim);
	int rc = 0;
	for (int i = 0; i < 2000 && rc == 0; i++)
		rc = httpreq_feed(&r, "a", 1, &used);
	assert_int_equal(rc, -1);
	httpreq_done(&r);

	char many[1024] = "CONNECT example.com:443 HTTP/1.1\r\n";
	for (int i = 0; i < 6; i++)
		strcat(many, "X-H: 1\r\n");
	strcat(many, "\r\n");
	httpreq_init(&r, &lim);
	assert_int_equal(httpreq_feed(&r, many, strlen(many), &used), -1);
	assert_string_equal(reason_word(r.error), "too_many_headers");
	assert_int_equal(r.status, 431);
	httpreq_done(&r);
}

/* A second request pipelined behind the first is not part of the head:
 * the proxy relays it raw to the upstream it decided on (after the
 * rewritten head, which says "Connection: close"), never parses it as a
 * new destination. */
static void test_pipelined_not_head(void **state)
{
	const char *in = "GET http://example.com/a HTTP/1.1\r\nHost: example.com\r\n\r\n"
			 "GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n";
	size_t first = strlen("GET http://example.com/a HTTP/1.1\r\nHost: example.com\r\n\r\n");
	for (size_t step = 1; step <= 4096; step = step == 1 ? 4096 : 8192) {
		struct httpreq r;
		httpreq_init(&r, NULL);
		size_t used;
		assert_int_equal(feed_all(&r, in, strlen(in), step, &used), 1);
		assert_int_equal(used, first);
		assert_string_equal(r.host, "example.com");
		size_t hl;
		char *head = httpreq_upstream_head(&r, &hl);
		assert_non_null(head);
		assert_null(strstr(head, "evil"));
		assert_non_null(strstr(head, "Connection: close\r\n\r\n"));
		free(head);
		httpreq_done(&r);
	}
}

/* http-parser describes URL fields with 16-bit offsets: a longer target
 * (possible with --max-header-bytes above 64 KiB) would be cut at the
 * wrong places, e.g. a 65542-byte host read as its first 6 bytes. */
static void test_url_longer_than_parser_offsets(void **state)
{
	struct httpreq_limits lim = { .max_header_bytes = 75000 };
	size_t hl = 65536 + 6, cap = 70000;
	char *in = malloc(cap);
	assert_non_null(in);
	strcpy(in, "GET http://a.test");
	size_t o = strlen(in);
	for (size_t i = 6; i < hl; i++)
		in[o++] = i % 60 == 59 ? '.' : 'x';
	in[o] = '\0';
	strcat(in, "/ HTTP/1.1\r\n\r\n");
	struct httpreq r;
	httpreq_init(&r, &lim);
	size_t used;
	assert_int_equal(httpreq_feed(&r, in, strlen(in), &used), -1);
	assert_string_equal(reason_word(r.error), "header_too_large");
	assert_int_equal(r.status, 431);
	httpreq_done(&r);
	/* A long path alone: same answer, not a path cut short. */
	strcpy(in, "GET http://a.test/");
	o = strlen(in);
	memset(in + o, 'p', 65600);
	in[o + 65600] = '\0';
	strcat(in, " HTTP/1.1\r\n\r\n");
	httpreq_init(&r, &lim);
	assert_int_equal(httpreq_feed(&r, in, strlen(in), &used), -1);
	assert_string_equal(reason_word(r.error), "header_too_large");
	httpreq_done(&r);
	free(in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cases),
		cmocka_unit_test(test_nul_bytes),
		cmocka_unit_test(test_body_left_over),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_pipelined_not_head),
		cmocka_unit_test(test_url_longer_than_parser_offsets),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
