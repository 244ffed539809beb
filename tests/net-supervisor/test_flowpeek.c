/* flowpeek: the first bytes of a transparent flow.
 *
 * Asserts: a ClientHello gives its SNI (lower case, trailing dot dropped)
 * and every proper prefix of it asks for more; a hello without SNI or with
 * a malformed one is TLS without a name; the ALPN offer keeps h2 and
 * http/1.1 in the client's order, nothing for no or a malformed list; an HTTP head gives its Host
 * without the port, an address literal gives no name; ssh's banner, a
 * binary protocol and garbage are OTHER at once; a head that never ends is
 * HTTP once FLOWPEEK_MAX bytes are in; no input makes it read past len
 * (each case is also run on an exact-size heap copy under ASan).
 * transparent_name: a peeked name counts only when the sandbox's lookups
 * gave this address for it (sni/http_host); without a peeked name the
 * table's name for the address (dns); otherwise the address (none), with
 * an unconfirmed name kept apart. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "net-supervisor/dnsrec.h"
#include "net-supervisor/flowpeek.h"
#include "net-supervisor/transparent.h"

/* A ClientHello with an optional server_name extension (and one other
 * extension before it), in one record. */
static size_t client_hello_alpn(uint8_t *out, const char *sni, size_t sni_len, const uint8_t *alpn,
				size_t alpn_len)
{
	uint8_t body[1024];
	size_t o = 0;
	body[o++] = 3;
	body[o++] = 3; /* TLS 1.2 */
	memset(body + o, 0xab, 32);
	o += 32;
	body[o++] = 32; /* session id */
	memset(body + o, 0xcd, 32);
	o += 32;
	body[o++] = 0;
	body[o++] = 4; /* two cipher suites */
	body[o++] = 0x13;
	body[o++] = 0x01;
	body[o++] = 0x13;
	body[o++] = 0x02;
	body[o++] = 1; /* compression: null */
	body[o++] = 0;
	size_t ext_len_at = o;
	o += 2;
	/* supported_groups first */
	body[o++] = 0x00;
	body[o++] = 0x0a;
	body[o++] = 0;
	body[o++] = 4;
	body[o++] = 0;
	body[o++] = 2;
	body[o++] = 0x00;
	body[o++] = 0x1d;
	if (sni) {
		body[o++] = 0;
		body[o++] = 0;
		size_t el = 2 + 3 + sni_len;
		body[o++] = (uint8_t)(el >> 8);
		body[o++] = (uint8_t)el;
		body[o++] = (uint8_t)((el - 2) >> 8);
		body[o++] = (uint8_t)(el - 2);
		body[o++] = 0; /* host_name */
		body[o++] = (uint8_t)(sni_len >> 8);
		body[o++] = (uint8_t)sni_len;
		memcpy(body + o, sni, sni_len);
		o += sni_len;
	}
	if (alpn) { /* application_layer_protocol_negotiation: the list as given */
		body[o++] = 0;
		body[o++] = 16;
		body[o++] = (uint8_t)((alpn_len + 2) >> 8);
		body[o++] = (uint8_t)(alpn_len + 2);
		body[o++] = (uint8_t)(alpn_len >> 8);
		body[o++] = (uint8_t)alpn_len;
		memcpy(body + o, alpn, alpn_len);
		o += alpn_len;
	}
	size_t el = o - ext_len_at - 2;
	body[ext_len_at] = (uint8_t)(el >> 8);
	body[ext_len_at + 1] = (uint8_t)el;
	size_t hs = o;
	size_t rec = hs + 4;
	out[0] = 0x16;
	out[1] = 3;
	out[2] = 1;
	out[3] = (uint8_t)(rec >> 8);
	out[4] = (uint8_t)rec;
	out[5] = 1;
	out[6] = 0;
	out[7] = (uint8_t)(hs >> 8);
	out[8] = (uint8_t)hs;
	memcpy(out + 9, body, hs);
	return 9 + hs;
}

static size_t client_hello(uint8_t *out, const char *sni, size_t sni_len)
{
	return client_hello_alpn(out, sni, sni_len, NULL, 0);
}

/* Parse an exact-size heap copy (ASan sees any overread). */
static enum flowpeek_kind parse(const void *buf, size_t len, struct flowpeek *fp)
{
	uint8_t *copy = malloc(len ? len : 1);
	assert_non_null(copy);
	memcpy(copy, buf, len);
	enum flowpeek_kind k = flowpeek_parse(copy, len, fp);
	free(copy);
	return k;
}

/* ALPN: h2 and http/1.1 kept in the client's order (others dropped,
 * duplicates once); no extension, an offer of neither, a malformed list. */
static void test_tls_alpn(void **state)
{
	(void)state;
	uint8_t hello[2048];
	struct flowpeek fp;
	static const uint8_t both[] = { 6, 's', 'p', 'd', 'y', '/', '3', 2, 'h', '2', 8, 'h', 't', 't', 'p',
					'/', '1', '.', '1', 2, 'h', '2' };
	size_t n = client_hello_alpn(hello, "api.example.com", 15, both, sizeof(both));
	assert_int_equal(parse(hello, n, &fp), FLOWPEEK_TLS);
	assert_string_equal(fp.name, "api.example.com");
	assert_true(fp.have_alpn);
	assert_int_equal(fp.alpn_len, 12);
	assert_memory_equal(fp.alpn, "\x02h2\x08http/1.1", 12);
	for (size_t cut = 1; cut < n; cut++)
		assert_int_equal(parse(hello, cut, &fp), FLOWPEEK_NEED_MORE);

	static const uint8_t h1h2[] = { 8, 'h', 't', 't', 'p', '/', '1', '.', '1', 2, 'h', '2' };
	n = client_hello_alpn(hello, NULL, 0, h1h2, sizeof(h1h2));
	assert_int_equal(parse(hello, n, &fp), FLOWPEEK_TLS);
	assert_false(fp.have_name);
	assert_int_equal(fp.alpn_len, 12);
	assert_memory_equal(fp.alpn, "\x08http/1.1\x02h2", 12);

	static const uint8_t other[] = { 8, 'a', 'c', 'm', 'e', '-', 't', 'l', 's' };
	n = client_hello_alpn(hello, "a.example", 9, other, sizeof(other));
	assert_int_equal(parse(hello, n, &fp), FLOWPEEK_TLS);
	assert_true(fp.have_alpn);
	assert_int_equal(fp.alpn_len, 0);

	n = client_hello(hello, "a.example", 9);
	assert_int_equal(parse(hello, n, &fp), FLOWPEEK_TLS);
	assert_false(fp.have_alpn);
	assert_int_equal(fp.alpn_len, 0);

	/* a name length running past the list, an empty name: no offer */
	static const uint8_t bad[] = { 2, 'h', '2', 9, 'h', 't', 't', 'p' };
	n = client_hello_alpn(hello, "a.example", 9, bad, sizeof(bad));
	assert_int_equal(parse(hello, n, &fp), FLOWPEEK_TLS);
	assert_string_equal(fp.name, "a.example");
	assert_false(fp.have_alpn);
	static const uint8_t empty[] = { 2, 'h', '2', 0 };
	n = client_hello_alpn(hello, "a.example", 9, empty, sizeof(empty));
	assert_int_equal(parse(hello, n, &fp), FLOWPEEK_TLS);
	assert_false(fp.have_alpn);

	/* not TLS: no offer */
	assert_int_equal(parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27, &fp), FLOWPEEK_HTTP);
	assert_false(fp.have_alpn);
}

static void test_tls_sni(void **state)
{
	(void)state;
	uint8_t hello[2048];
	struct flowpeek fp;
	size_t n = client_hello(hello, "API.Example.ORG.", 16);
	assert_int_equal(parse(hello, n, &fp), FLOWPEEK_TLS);
	assert_true(fp.have_name);
	assert_string_equal(fp.name, "api.example.org");
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(parse(hello, i, &fp), FLOWPEEK_NEED_MORE);
		assert_false(fp.have_name);
	}
	/* bytes after the hello (early data) change nothing */
	memset(hello + n, 0x17, 100);
	assert_int_equal(parse(hello, n + 100, &fp), FLOWPEEK_TLS);
	assert_string_equal(fp.name, "api.example.org");
}

static void test_tls_without_name(void **state)
{
	(void)state;
	uint8_t hello[2048];
	struct flowpeek fp;
	size_t n = client_hello(hello, NULL, 0);
	assert_int_equal(parse(hello, n, &fp), FLOWPEEK_TLS);
	assert_false(fp.have_name);
	n = client_hello(hello, "bad name.example", 16);
	assert_int_equal(parse(hello, n, &fp), FLOWPEEK_TLS);
	assert_false(fp.have_name);
	n = client_hello(hello, "198.51.100.10", 13);
	assert_int_equal(parse(hello, n, &fp), FLOWPEEK_TLS);
	assert_false(fp.have_name);
	n = client_hello(hello, "a..b", 4);
	assert_int_equal(parse(hello, n, &fp), FLOWPEEK_TLS);
	assert_false(fp.have_name);
	/* an SNI whose length runs past the extension: no name, no overread */
	n = client_hello(hello, "example.org", 11);
	hello[n - 11 - 2] = 0x40;
	assert_int_equal(parse(hello, n, &fp), FLOWPEEK_TLS);
	assert_false(fp.have_name);
	/* a record that is not a handshake, or not a ClientHello */
	uint8_t alert[] = { 0x16, 3, 3, 0, 8, 2, 0, 0, 4, 1, 2, 3, 4 };
	assert_int_equal(parse(alert, sizeof(alert), &fp), FLOWPEEK_OTHER);
	uint8_t badver[] = { 0x16, 9, 3, 0, 8 };
	assert_int_equal(parse(badver, sizeof(badver), &fp), FLOWPEEK_OTHER);
	uint8_t huge[] = { 0x16, 3, 3, 0x7f, 0xff, 1 };
	assert_int_equal(parse(huge, sizeof(huge), &fp), FLOWPEEK_OTHER);
}

static void test_http_host(void **state)
{
	(void)state;
	struct flowpeek fp;
	const char *req = "GET /x HTTP/1.1\r\nUser-Agent: t\r\nhOsT:  Example.COM:8080 \r\nHost: other.org\r\n\r\n";
	assert_int_equal(parse(req, strlen(req), &fp), FLOWPEEK_HTTP);
	assert_true(fp.have_name);
	assert_string_equal(fp.name, "example.com");
	for (size_t i = 0; i < strlen(req); i++)
		assert_int_equal(parse(req, i, &fp), FLOWPEEK_NEED_MORE);
	const char *lit = "POST / HTTP/1.1\r\nHost: 198.51.100.10\r\n\r\n";
	assert_int_equal(parse(lit, strlen(lit), &fp), FLOWPEEK_HTTP);
	assert_false(fp.have_name);
	const char *lit6 = "GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n";
	assert_int_equal(parse(lit6, strlen(lit6), &fp), FLOWPEEK_HTTP);
	assert_false(fp.have_name);
	/* h2c prior knowledge: HTTP without a name */
	const char *h2 = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	assert_int_equal(parse(h2, strlen(h2), &fp), FLOWPEEK_HTTP);
	assert_false(fp.have_name);
	/* found by fuzz_flowpeek: two trailing dots are an empty label, not a name */
	const char *dots = "GET / HTTP/1.1\r\nHost: www..\r\n\r\n";
	assert_int_equal(parse(dots, strlen(dots), &fp), FLOWPEEK_HTTP);
	assert_false(fp.have_name);
	const char *none = "GET / HTTP/1.0\n\n";
	assert_int_equal(parse(none, strlen(none), &fp), FLOWPEEK_HTTP);
	assert_false(fp.have_name);
	/* Host only in the body: not a header */
	const char *body = "GET / HTTP/1.1\r\n\r\nHost: evil.org\r\n";
	assert_int_equal(parse(body, strlen(body), &fp), FLOWPEEK_HTTP);
	assert_false(fp.have_name);
}

static void test_other(void **state)
{
	(void)state;
	struct flowpeek fp;
	const char *ssh = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n";
	assert_int_equal(parse(ssh, strlen(ssh), &fp), FLOWPEEK_OTHER);
	assert_int_equal(parse("G", 1, &fp), FLOWPEEK_NEED_MORE);
	assert_int_equal(parse("GEX", 3, &fp), FLOWPEEK_OTHER);
	assert_int_equal(parse("", 0, &fp), FLOWPEEK_NEED_MORE);
	uint8_t pg[] = { 0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f };
	assert_int_equal(parse(pg, sizeof(pg), &fp), FLOWPEEK_OTHER);
	/* a head that never ends: HTTP (without a name) once the bound is hit */
	size_t big = FLOWPEEK_MAX + 10;
	char *h = malloc(big);
	assert_non_null(h);
	memset(h, 'a', big);
	memcpy(h, "GET / HTTP/1.1\r\nX: ", 19);
	assert_int_equal(parse(h, FLOWPEEK_MAX - 1, &fp), FLOWPEEK_NEED_MORE);
	assert_int_equal(parse(h, big, &fp), FLOWPEEK_HTTP);
	assert_false(fp.have_name);
	free(h);
	assert_string_equal(flowpeek_kind_word(FLOWPEEK_TLS), "tls");
	assert_string_equal(flowpeek_kind_word(FLOWPEEK_NEED_MORE), "incomplete");
}

static struct sockaddr_storage v4(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	struct sockaddr_in *a = (struct sockaddr_in *)&ss;
	a->sin_family = AF_INET;
	a->sin_port = htons(port);
	assert_int_equal(inet_pton(AF_INET, ip, &a->sin_addr), 1);
	return ss;
}

static void test_transparent_name(void **state)
{
	(void)state;
	struct dnsrec *rec = dnsrec_new(16);
	assert_non_null(rec);
	dnsrec_set_now(rec, 1000);
	struct sockaddr_storage web = v4("198.51.100.10", 0), other = v4("198.51.100.11", 443);
	assert_int_equal(dnsrec_add(rec, "web.test", (struct sockaddr *)&web, 60), 0);
	web = v4("198.51.100.10", 443);
	char host[256], peeked[256];
	struct flowpeek fp = { .kind = FLOWPEEK_TLS, .have_name = true };
	strcpy(fp.name, "web.test");
	assert_string_equal(transparent_name(&fp, rec, (struct sockaddr *)&web, host, sizeof(host), peeked,
					     sizeof(peeked)), "sni");
	assert_string_equal(host, "web.test");
	assert_string_equal(peeked, "");
	fp.kind = FLOWPEEK_HTTP;
	assert_string_equal(transparent_name(&fp, rec, (struct sockaddr *)&web, host, sizeof(host), peeked,
					     sizeof(peeked)), "http_host");
	/* the same name to an address its lookups never gave: no name */
	assert_string_equal(transparent_name(&fp, rec, (struct sockaddr *)&other, host, sizeof(host), peeked,
					     sizeof(peeked)), "none");
	assert_string_equal(host, "198.51.100.11");
	assert_string_equal(peeked, "web.test");
	/* an unconfirmed name does not fall back to the table's name */
	strcpy(fp.name, "evil.test");
	assert_string_equal(transparent_name(&fp, rec, (struct sockaddr *)&web, host, sizeof(host), peeked,
					     sizeof(peeked)), "none");
	assert_string_equal(host, "198.51.100.10");
	assert_string_equal(peeked, "evil.test");
	/* no peeked name (ssh): the table's */
	struct flowpeek raw = { .kind = FLOWPEEK_OTHER };
	assert_string_equal(transparent_name(&raw, rec, (struct sockaddr *)&web, host, sizeof(host), peeked,
					     sizeof(peeked)), "dns");
	assert_string_equal(host, "web.test");
	assert_string_equal(transparent_name(&raw, rec, (struct sockaddr *)&other, host, sizeof(host), peeked,
					     sizeof(peeked)), "none");
	/* expired, or no resolver at all */
	dnsrec_set_now(rec, 1000 + 3600 * 1000);
	assert_string_equal(transparent_name(&raw, rec, (struct sockaddr *)&web, host, sizeof(host), peeked,
					     sizeof(peeked)), "none");
	assert_string_equal(transparent_name(&fp, NULL, (struct sockaddr *)&web, host, sizeof(host), peeked,
					     sizeof(peeked)), "none");
	dnsrec_free(rec);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tls_sni),
		cmocka_unit_test(test_tls_alpn),
		cmocka_unit_test(test_tls_without_name),
		cmocka_unit_test(test_http_host),
		cmocka_unit_test(test_other),
		cmocka_unit_test(test_transparent_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
