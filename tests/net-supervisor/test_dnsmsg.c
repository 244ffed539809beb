/* dnsmsg: the workload resolver's DNS parser and builders.
 *
 * Asserts: well-formed queries and answers decode (names lower case,
 * compression followed); every hostile shape is refused with -EBADMSG and
 * never read out of bounds — truncation at every length, pointer loops
 * (self, mutual, forward), pointers into the header, names over 255 bytes,
 * extended label types, bytes outside LDH/underscore, trailing bytes,
 * wrong section counts, bad A/AAAA lengths, CNAME rdata that does not fill
 * its record; builders never exceed their limit and truncate with TC. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "net-supervisor/dnsmsg.h"

struct msg {
	uint8_t b[4096];
	size_t n;
};

static void put(struct msg *m, const void *p, size_t n)
{
	assert_true(m->n + n <= sizeof(m->b));
	memcpy(m->b + m->n, p, n);
	m->n += n;
}
static void put16(struct msg *m, uint16_t v)
{
	uint8_t b[2] = { (uint8_t)(v >> 8), (uint8_t)v };
	put(m, b, 2);
}
static void put32(struct msg *m, uint32_t v)
{
	put16(m, (uint16_t)(v >> 16));
	put16(m, (uint16_t)v);
}
static void header(struct msg *m, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns, uint16_t ar)
{
	m->n = 0;
	put16(m, id);
	put16(m, flags);
	put16(m, qd);
	put16(m, an);
	put16(m, ns);
	put16(m, ar);
}
static void name(struct msg *m, const char *text)
{
	while (*text) {
		size_t l = strcspn(text, ".");
		uint8_t lb = (uint8_t)l;
		put(m, &lb, 1);
		put(m, text, l);
		text += l;
		if (*text == '.')
			text++;
	}
	uint8_t z = 0;
	put(m, &z, 1);
}
static void question(struct msg *m, const char *n, uint16_t type)
{
	name(m, n);
	put16(m, type);
	put16(m, DNS_CLASS_IN);
}
static void rr_head(struct msg *m, uint16_t type, uint32_t ttl, uint16_t rdlen)
{
	put16(m, type);
	put16(m, DNS_CLASS_IN);
	put32(m, ttl);
	put16(m, rdlen);
}

static void test_query_ok(void **state)
{
	(void)state;
	struct msg m;
	header(&m, 0x1234, DNS_FLAG_RD, 1, 0, 0, 0);
	question(&m, "WWW.Example.test", DNS_TYPE_A);
	struct dns_query q;
	assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), 0);
	assert_int_equal(q.id, 0x1234);
	assert_string_equal(q.q.name, "www.example.test");
	assert_int_equal(q.q.qtype, DNS_TYPE_A);
	assert_false(q.edns);
	assert_int_equal(q.udp_size, 512);
	/* the question is kept as sent (case too) for the echo */
	assert_int_equal(q.q.wire_len, m.n - 12);
	assert_memory_equal(q.q.wire, m.b + 12, q.q.wire_len);
	/* with EDNS */
	uint8_t opt[] = { 0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0 };
	m.b[11] = 1;
	put(&m, opt, sizeof(opt));
	assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), 0);
	assert_true(q.edns);
	assert_int_equal(q.udp_size, 4096);
	/* an answer is not a query */
	m.b[2] |= 0x80;
	assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), -EPROTO);
}

static void test_query_hostile(void **state)
{
	(void)state;
	struct dns_query q;
	struct msg m;
	/* every truncation of a good query */
	header(&m, 1, 0, 1, 0, 0, 0);
	question(&m, "a.example.test", DNS_TYPE_AAAA);
	for (size_t n = 0; n < m.n; n++) {
		uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan sees any overread */
		memcpy(copy, m.b, n);
		assert_int_equal(dnsmsg_parse_query(copy, n, &q), -EBADMSG);
		free(copy);
	}
	/* trailing bytes */
	put16(&m, 0);
	assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), -EBADMSG);
	/* counts */
	header(&m, 1, 0, 2, 0, 0, 0);
	question(&m, "a.test", 1);
	question(&m, "b.test", 1);
	assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), -EBADMSG);
	header(&m, 1, 0, 0, 0, 0, 0);
	assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), -EBADMSG);
	header(&m, 1, 0, 1, 1, 0, 0);
	question(&m, "a.test", 1);
	assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), -EBADMSG);
	/* a pointer in the question: to itself, into the header, forward */
	static const uint16_t ptrs[] = { 0xc00c, 0xc000, 0xc005, 0xc0ff };
	for (size_t i = 0; i < 4; i++) {
		header(&m, 1, 0, 1, 0, 0, 0);
		put16(&m, ptrs[i]);
		put16(&m, 1);
		put16(&m, 1);
		assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), -EBADMSG);
	}
	/* a compressed question (backwards, valid as compression) is still refused */
	header(&m, 1, 0, 1, 0, 0, 0);
	uint8_t lab[] = { 1, 'a', 0xc0, 12 };
	put(&m, lab, sizeof(lab));
	put16(&m, 1);
	put16(&m, 1);
	assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), -EBADMSG);
	/* extended label types 0x40 and 0x80 */
	for (uint8_t t = 0x40; t; t = t == 0x40 ? 0x80 : 0) {
		header(&m, 1, 0, 1, 0, 0, 0);
		uint8_t x[] = { t, 0 };
		put(&m, x, 2);
		put16(&m, 1);
		put16(&m, 1);
		assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), -EBADMSG);
	}
	/* a name over 255 wire bytes: 5 labels of 63 */
	header(&m, 1, 0, 1, 0, 0, 0);
	for (int i = 0; i < 5; i++) {
		uint8_t l = 63;
		put(&m, &l, 1);
		char x[63];
		memset(x, 'a', 63);
		put(&m, x, 63);
	}
	uint8_t z = 0;
	put(&m, &z, 1);
	put16(&m, 1);
	put16(&m, 1);
	assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), -EBADMSG);
	/* bytes a host name cannot hold: '.', NUL, space, 0xff, '/' */
	static const char bad[] = { '.', 0, ' ', (char)0xff, '/' };
	for (size_t i = 0; i < sizeof(bad); i++) {
		header(&m, 1, 0, 1, 0, 0, 0);
		uint8_t l[] = { 3, 'a', (uint8_t)bad[i], 'b', 0 };
		put(&m, l, sizeof(l));
		put16(&m, 1);
		put16(&m, 1);
		assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), -EBADMSG);
	}
	/* the additional record must be an OPT at the root */
	header(&m, 1, 0, 1, 0, 0, 1);
	question(&m, "a.test", 1);
	name(&m, "x.test");
	rr_head(&m, DNS_TYPE_OPT, 0, 0);
	assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), -EBADMSG);
	/* underscores and digits are fine */
	header(&m, 1, 0, 1, 0, 0, 0);
	question(&m, "_sip._tcp.x-1.test", DNS_TYPE_SRV);
	assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), 0);
	assert_string_equal(q.q.name, "_sip._tcp.x-1.test");
}

/* An answer for name.test A: a CNAME to c.test (compressed), its A. */
static void good_answer(struct msg *m)
{
	header(m, 7, DNS_FLAG_QR | DNS_FLAG_RD | DNS_FLAG_RA, 1, 3, 0, 0);
	question(m, "name.test", DNS_TYPE_A); /* name at 12, "test" at 17 */
	put16(m, 0xc00c);
	rr_head(m, DNS_TYPE_CNAME, 60, 4);
	uint8_t t[] = { 1, 'c', 0xc0, 17 }; /* c.test: "c" then a pointer to "test" */
	put(m, t, sizeof(t));
	size_t c_at = m->n - 4;
	put16(m, (uint16_t)(0xc000 | c_at));
	rr_head(m, DNS_TYPE_A, 0x80000000u, 4);
	uint8_t a[] = { 203, 0, 113, 5 };
	put(m, a, 4);
	put16(m, (uint16_t)(0xc000 | c_at));
	rr_head(m, DNS_TYPE_TXT, 60, 2);
	uint8_t txt[] = { 1, 'x' };
	put(m, txt, 2);
}

static void test_answer_ok(void **state)
{
	(void)state;
	struct msg m;
	good_answer(&m);
	struct dns_answer *a = malloc(sizeof(*a));
	assert_int_equal(dnsmsg_parse_answer(m.b, m.n, a), 0);
	assert_int_equal(a->id, 7);
	assert_int_equal(a->n_an, 2);
	assert_int_equal(a->n_other, 1);
	assert_string_equal(a->an[0].name, "name.test");
	assert_int_equal(a->an[0].type, DNS_TYPE_CNAME);
	assert_string_equal(a->an[0].target, "c.test");
	assert_string_equal(a->an[1].name, "c.test");
	assert_int_equal(a->an[1].addr.family, AF_INET);
	assert_int_equal(a->an[1].ttl, 0); /* top bit set: 0 */
	/* every truncation fails cleanly */
	for (size_t n = 0; n < m.n; n++) {
		uint8_t *copy = malloc(n ? n : 1);
		memcpy(copy, m.b, n);
		assert_int_not_equal(dnsmsg_parse_answer(copy, n, a), 0);
		free(copy);
	}
	free(a);
}

static void test_answer_hostile(void **state)
{
	(void)state;
	struct dns_answer *a = malloc(sizeof(*a));
	struct msg m;
	/* a pointer to itself as the owner name */
	header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
	question(&m, "a.test", 1);
	size_t here = m.n;
	put16(&m, (uint16_t)(0xc000 | here));
	rr_head(&m, DNS_TYPE_A, 1, 4);
	put32(&m, 0x01020304);
	assert_int_equal(dnsmsg_parse_answer(m.b, m.n, a), -EBADMSG);
	/* a loop: a label, then a pointer back to that label (the jump lands
	 * on the name's own start: not strictly before it) */
	header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
	question(&m, "a.test", 1);
	here = m.n;
	uint8_t loop[] = { 1, 'x', (uint8_t)(0xc0 | (here >> 8)), (uint8_t)here };
	put(&m, loop, sizeof(loop));
	rr_head(&m, DNS_TYPE_A, 1, 4);
	put32(&m, 0x01020304);
	assert_int_equal(dnsmsg_parse_answer(m.b, m.n, a), -EBADMSG);
	/* two names pointing at each other */
	header(&m, 1, DNS_FLAG_QR, 1, 2, 0, 0);
	question(&m, "a.test", 1);
	size_t first = m.n;
	put16(&m, (uint16_t)(0xc000 | (first + 16)));
	rr_head(&m, DNS_TYPE_A, 1, 4);
	put32(&m, 0x01020304);
	assert_int_equal(m.n, first + 16);
	put16(&m, (uint16_t)(0xc000 | first));
	rr_head(&m, DNS_TYPE_A, 1, 4);
	put32(&m, 0x01020304);
	assert_int_equal(dnsmsg_parse_answer(m.b, m.n, a), -EBADMSG);
	/* a chain of backward pointers that adds up past 255 bytes: six
	 * 60-byte labels, each followed by a pointer to the one before, kept in
	 * a TXT record's rdata; the next record's owner points at the last */
	header(&m, 1, DNS_FLAG_QR, 1, 2, 0, 0);
	question(&m, "a.test", 1);
	put16(&m, 0xc00c);
	rr_head(&m, DNS_TYPE_TXT, 1, 62 + 5 * 63); /* the first block ends in a 0, the rest in a pointer */
	size_t prev = 0, last = 0;
	for (int i = 0; i < 6; i++) {
		size_t at = m.n;
		uint8_t l = 60;
		put(&m, &l, 1);
		char x[60];
		memset(x, 'a' + i, 60);
		put(&m, x, 60);
		if (prev)
			put16(&m, (uint16_t)(0xc000 | prev));
		else
			put(&m, "\0", 1);
		prev = last = at;
	}
	put16(&m, (uint16_t)(0xc000 | last));
	rr_head(&m, DNS_TYPE_A, 1, 4);
	put32(&m, 0x01020304);
	assert_int_equal(dnsmsg_parse_answer(m.b, m.n, a), -EBADMSG);
	/* A with 5 bytes, AAAA with 4 */
	header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
	question(&m, "a.test", 1);
	put16(&m, 0xc00c);
	rr_head(&m, DNS_TYPE_A, 1, 5);
	put(&m, "\1\2\3\4\5", 5);
	assert_int_equal(dnsmsg_parse_answer(m.b, m.n, a), -EBADMSG);
	header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
	question(&m, "a.test", 28);
	put16(&m, 0xc00c);
	rr_head(&m, DNS_TYPE_AAAA, 1, 4);
	put32(&m, 1);
	assert_int_equal(dnsmsg_parse_answer(m.b, m.n, a), -EBADMSG);
	/* CNAME rdata longer than its name */
	header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
	question(&m, "a.test", 1);
	put16(&m, 0xc00c);
	rr_head(&m, DNS_TYPE_CNAME, 1, 4);
	put16(&m, 0xc00c);
	put16(&m, 0);
	assert_int_equal(dnsmsg_parse_answer(m.b, m.n, a), -EBADMSG);
	/* rdlength past the end */
	header(&m, 1, DNS_FLAG_QR, 1, 1, 0, 0);
	question(&m, "a.test", 1);
	put16(&m, 0xc00c);
	rr_head(&m, DNS_TYPE_TXT, 1, 200);
	assert_int_equal(dnsmsg_parse_answer(m.b, m.n, a), -EBADMSG);
	/* more records than we look at */
	header(&m, 1, DNS_FLAG_QR, 1, DNSMSG_MAX_RR + 1, 0, 0);
	question(&m, "a.test", 1);
	assert_int_equal(dnsmsg_parse_answer(m.b, m.n, a), -E2BIG);
	/* authority records are bounds-checked too */
	header(&m, 1, DNS_FLAG_QR, 1, 0, 1, 0);
	question(&m, "a.test", 1);
	put16(&m, 0xc00c);
	rr_head(&m, DNS_TYPE_SOA, 1, 100);
	assert_int_equal(dnsmsg_parse_answer(m.b, m.n, a), -EBADMSG);
	/* not an answer */
	header(&m, 1, 0, 1, 0, 0, 0);
	question(&m, "a.test", 1);
	assert_int_equal(dnsmsg_parse_answer(m.b, m.n, a), -EBADMSG);
	free(a);
}

static void test_build(void **state)
{
	(void)state;
	struct msg m;
	header(&m, 0x4242, DNS_FLAG_RD, 1, 0, 0, 0);
	question(&m, "Name.Test", DNS_TYPE_A);
	struct dns_query q;
	assert_int_equal(dnsmsg_parse_query(m.b, m.n, &q), 0);
	/* the upstream query: our id, RD, the question, an OPT */
	uint8_t up[512];
	int n = dnsmsg_build_query(up, sizeof(up), 0x9999, &q.q);
	assert_int_equal(n, 12 + (int)q.q.wire_len + 11);
	assert_int_equal(up[0], 0x99);
	assert_int_equal(up[11], 1);
	/* our answer parses back; owner == question compresses to offset 12 */
	struct dns_rr rr[40];
	memset(rr, 0, sizeof(rr));
	for (int i = 0; i < 40; i++) {
		strcpy(rr[i].name, "name.test");
		rr[i].type = DNS_TYPE_A;
		rr[i].ttl = 30;
		rr[i].addr.family = AF_INET;
		rr[i].addr.a[0] = 198;
		rr[i].addr.a[3] = (uint8_t)i;
	}
	strcpy(rr[0].target, "x.test");
	rr[0].type = DNS_TYPE_CNAME;
	strcpy(rr[1].name, "x.test");
	uint8_t out[4096];
	n = dnsmsg_build_answer(out, sizeof(out), sizeof(out), &q, DNS_RCODE_NOERROR, rr, 3);
	assert_true(n > 0);
	struct dns_answer *a = malloc(sizeof(*a));
	assert_int_equal(dnsmsg_parse_answer(out, (size_t)n, a), 0);
	assert_int_equal(a->id, 0x4242);
	assert_int_equal(a->n_an, 3);
	assert_string_equal(a->an[0].target, "x.test");
	assert_string_equal(a->an[1].name, "x.test");
	assert_memory_equal(out + 12, m.b + 12, q.q.wire_len); /* echoed as sent */
	/* 40 A records do not fit in 512: TC, no records, within the limit */
	n = dnsmsg_build_answer(out, sizeof(out), 512, &q, DNS_RCODE_NOERROR, rr + 2, 38);
	assert_true(n > 0 && n <= 512);
	assert_true(out[2] & 0x02);
	assert_int_equal(out[7], 0);
	/* they do fit in 1232 */
	n = dnsmsg_build_answer(out, sizeof(out), 1232, &q, DNS_RCODE_NOERROR, rr + 2, 38);
	assert_false(out[2] & 0x02);
	assert_int_equal(out[7], 38);
	/* NXDOMAIN, nothing else */
	n = dnsmsg_build_answer(out, sizeof(out), 512, &q, DNS_RCODE_NXDOMAIN, NULL, 0);
	assert_int_equal(out[3] & 0xf, DNS_RCODE_NXDOMAIN);
	assert_int_equal(n, 12 + (int)q.q.wire_len);
	/* a limit too small even for the question */
	assert_int_equal(dnsmsg_build_answer(out, sizeof(out), 14, &q, 0, NULL, 0), -ENOSPC);
	free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_query_ok),
		cmocka_unit_test(test_query_hostile),
		cmocka_unit_test(test_answer_ok),
		cmocka_unit_test(test_answer_hostile),
		cmocka_unit_test(test_build),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
