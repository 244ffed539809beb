/* The request gate of inspected connections (net-supervisor/tls_http.h):
 * pipelined requests decided one at a time and passed on only once
 * allowed, whatever the chunking; bodies (length and chunked) pass with
 * their request; a denial stops everything after it; a WebSocket upgrade
 * turns the rest into opaque bytes; statuses from the answers (interim
 * 100 skipped, HEAD without body) reach the audit record in order; head
 * rewriting (credentials) replaces exactly the head. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net-supervisor/tls_http.h"

struct sink {
	char out[8192];
	size_t out_len;
	char log[2048];
	int decided;
	bool rewrite;
};

static struct netpol_http_decision decide(void *ctx, const char *method, const char *target, bool ws)
{
	struct sink *s = ctx;
	s->decided++;
	if (strstr(target, "deny"))
		return (struct netpol_http_decision){ .reason = REASON_HTTP_RULE_DENY, .rule = "r" };
	if (ws && strcmp(target, "/ws") != 0)
		return (struct netpol_http_decision){ .reason = REASON_WEBSOCKET_NOT_ALLOWED };
	(void)method;
	return (struct netpol_http_decision){ .allow = true, .reason = REASON_ALLOWED };
}

static int forward(void *ctx, const char *buf, size_t len)
{
	struct sink *s = ctx;
	assert_true(s->out_len + len < sizeof(s->out));
	memcpy(s->out + s->out_len, buf, len);
	s->out_len += len;
	s->out[s->out_len] = '\0';
	return 0;
}

static void record(void *ctx, const char *method, const char *target, int status,
		   const struct netpol_http_decision *d)
{
	struct sink *s = ctx;
	size_t l = strlen(s->log);
	snprintf(s->log + l, sizeof(s->log) - l, "%s %s %d %s;", method, target, status, reason_word(d->reason));
}

static int rewrite(void *ctx, const char *head, size_t len, char **out, size_t *out_len,
		   struct netpol_http_decision *d)
{
	struct sink *s = ctx;
	(void)d;
	if (!s->rewrite || !memmem(head, len, "X-Swap: old", 11))
		return 0;
	*out = strdup("GET /swapped HTTP/1.1\r\nX-Swap: new\r\n\r\n");
	*out_len = strlen(*out);
	return 1;
}

static const struct tls_http_ops ops = { .decide = decide, .forward = forward, .record = record, .rewrite = rewrite };

static const char PIPE[] = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
			   "POST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
			   "PUT /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n"
			   "GET /deny HTTP/1.1\r\n\r\n"
			   "GET /after HTTP/1.1\r\n\r\n";

static void test_pipelined_any_chunking(void **state)
{
	(void)state;
	size_t allowed_len = strstr(PIPE, "GET /deny") - PIPE;
	for (size_t chunk = 1; chunk <= sizeof(PIPE); chunk++) {
		struct sink s = { 0 };
		struct tls_http *h = tls_http_new(&ops, &s);
		enum tls_http_verdict v = TLS_HTTP_OK;
		for (size_t off = 0; off < sizeof(PIPE) - 1 && v == TLS_HTTP_OK; off += chunk) {
			size_t k = sizeof(PIPE) - 1 - off < chunk ? sizeof(PIPE) - 1 - off : chunk;
			v = tls_http_client(h, PIPE + off, k);
			/* never a byte of a request before its decision */
			assert_true(s.out_len <= allowed_len);
		}
		assert_int_equal(v, TLS_HTTP_DENIED);
		assert_int_equal(s.out_len, allowed_len);
		assert_memory_equal(s.out, PIPE, allowed_len);
		assert_int_equal(s.decided, 4);
		assert_int_equal(tls_http_denial(h)->reason, REASON_HTTP_RULE_DENY);
		tls_http_free(h); /* the three allowed ones got no answer: status 0 */
		assert_string_equal(s.log, "GET /deny 403 http_rule_deny;GET /a 0 allowed;POST /b 0 allowed;PUT /c 0 allowed;");
	}
}

static void test_statuses(void **state)
{
	(void)state;
	struct sink s = { 0 };
	struct tls_http *h = tls_http_new(&ops, &s);
	const char *req = "HEAD /h HTTP/1.1\r\n\r\nPOST /p HTTP/1.1\r\nContent-Length: 1\r\n\r\nzGET /g HTTP/1.1\r\n\r\n";
	assert_int_equal(tls_http_client(h, req, strlen(req)), TLS_HTTP_OK);
	const char *resp = "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n" /* HEAD: no body follows */
			   "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
			   "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
	tls_http_server(h, resp, strlen(resp));
	assert_string_equal(s.log, "HEAD /h 200 allowed;POST /p 201 allowed;GET /g 404 allowed;");
	tls_http_free(h);
}

static void test_websocket(void **state)
{
	(void)state;
	struct sink s = { 0 };
	struct tls_http *h = tls_http_new(&ops, &s);
	const char *req = "GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x02hi";
	assert_int_equal(tls_http_client(h, req, strlen(req)), TLS_HTTP_OK);
	assert_string_equal(s.out, req); /* the frame after the head passes too */
	assert_int_equal(tls_http_client(h, "GET /deny HTTP/1.1\r\n\r\n", 22), TLS_HTTP_OK); /* opaque now */
	assert_int_equal(s.decided, 1);
	tls_http_free(h);
	struct sink s2 = { 0 };
	h = tls_http_new(&ops, &s2);
	req = "GET /other HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
	assert_int_equal(tls_http_client(h, req, strlen(req)), TLS_HTTP_DENIED);
	assert_int_equal(s2.out_len, 0);
	tls_http_free(h);
	struct sink s3 = { 0 };
	h = tls_http_new(&ops, &s3);
	req = "GET /a HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
	assert_int_equal(tls_http_client(h, req, strlen(req)), TLS_HTTP_DENIED);
	assert_int_equal(tls_http_denial(h)->reason, REASON_WEBSOCKET_NOT_ALLOWED);
	tls_http_free(h);
	struct sink s4 = { 0 };
	h = tls_http_new(&ops, &s4);
	req = "CONNECT a:443 HTTP/1.1\r\n\r\n";
	assert_int_not_equal(tls_http_client(h, req, strlen(req)), TLS_HTTP_OK);
	assert_int_equal(s4.out_len, 0);
	tls_http_free(h);
}

static void test_bad_and_rewrite(void **state)
{
	(void)state;
	struct sink s = { 0 };
	struct tls_http *h = tls_http_new(&ops, &s);
	assert_int_equal(tls_http_client(h, "\x16\x03\x01garbage\r\n\r\n", 14), TLS_HTTP_BAD);
	assert_int_equal(s.out_len, 0);
	tls_http_free(h);
	struct sink r = { .rewrite = true };
	h = tls_http_new(&ops, &r);
	const char *req = "GET /x HTTP/1.1\r\nX-Swap: old\r\nContent-Length: 2\r\n\r\nhiGET /y HTTP/1.1\r\n\r\n";
	assert_int_equal(tls_http_client(h, req, strlen(req)), TLS_HTTP_OK);
	assert_string_equal(r.out, "GET /swapped HTTP/1.1\r\nX-Swap: new\r\n\r\nhiGET /y HTTP/1.1\r\n\r\n");
	tls_http_free(h);
	/* HTTP/2 with prior knowledge (no ALPN): its preface is refused, nothing passes */
	struct sink p2 = { 0 };
	h = tls_http_new(&ops, &p2);
	const char *pre = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	assert_int_not_equal(tls_http_client(h, pre, strlen(pre)), TLS_HTTP_OK);
	assert_int_equal(p2.out_len, 0);
	tls_http_free(h);
	/* a head over 64 KiB */
	struct sink b = { 0 };
	h = tls_http_new(&ops, &b);
	char *big = malloc(70000);
	memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
	memset(big + 19, 'a', 70000 - 19);
	assert_int_not_equal(tls_http_client(h, big, 70000), TLS_HTTP_OK);
	free(big);
	tls_http_free(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pipelined_any_chunking),
		cmocka_unit_test(test_statuses),
		cmocka_unit_test(test_websocket),
		cmocka_unit_test(test_bad_and_rewrite),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
