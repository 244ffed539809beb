/* dnsmsg: the DNS messages the workload's resolver (dns.h) reads and
 * writes: a strict, bounded parser and the few builders it needs.
 *
 * Parsing never trusts a length: every read is checked against the
 * message, a name is at most 255 wire bytes and 127 labels, a compression
 * pointer must point strictly before the name it continues (so a chain of
 * pointers always ends) and never into the header, and at most
 * DNSMSG_MAX_RR answer records are looked at. Names come out as text,
 * lower case, without the trailing dot; a label with a byte outside
 * letters, digits, '-' and '_' makes the message malformed (-EBADMSG),
 * so a name is always something the policy's host matching can read.
 *
 * Building never compresses except the answer owner that equals the
 * question (a pointer to offset 12), and never writes past `cap`. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/netaddr.h"

#define DNS_TYPE_A 1
#define DNS_TYPE_NS 2
#define DNS_TYPE_CNAME 5
#define DNS_TYPE_SOA 6
#define DNS_TYPE_PTR 12
#define DNS_TYPE_MX 15
#define DNS_TYPE_TXT 16
#define DNS_TYPE_AAAA 28
#define DNS_TYPE_SRV 33
#define DNS_TYPE_OPT 41
#define DNS_TYPE_SVCB 64
#define DNS_TYPE_HTTPS 65
#define DNS_TYPE_ANY 255
#define DNS_CLASS_IN 1

#define DNS_RCODE_NOERROR 0
#define DNS_RCODE_FORMERR 1
#define DNS_RCODE_SERVFAIL 2
#define DNS_RCODE_NXDOMAIN 3
#define DNS_RCODE_NOTIMP 4
#define DNS_RCODE_REFUSED 5

#define DNS_FLAG_QR 0x8000
#define DNS_FLAG_AA 0x0400
#define DNS_FLAG_TC 0x0200
#define DNS_FLAG_RD 0x0100
#define DNS_FLAG_RA 0x0080
#define DNS_OPCODE(f) (((f) >> 11) & 0xf)
#define DNS_RCODE(f) ((f) & 0xf)

#define DNS_HEADER_LEN 12
#define DNS_NAME_MAX 255      /* wire bytes */
#define DNS_NAME_TEXT_MAX 254 /* text incl. NUL: at most 253 characters */
#define DNSMSG_MAX_RR 64      /* answer records looked at; more: -E2BIG */
/* The largest answer we send over UDP to an EDNS client, and the payload
 * size we offer upstream (the DNS flag day 2020 value). */
#define DNS_EDNS_UDP_SIZE 1232

struct dns_question {
	char name[DNS_NAME_TEXT_MAX]; /* lower case, no trailing dot; "" is the root */
	uint16_t qtype, qclass;
	/* The question as the client wrote it (name as sent, case kept): echoed
	 * back in the answer and sent upstream. */
	uint8_t wire[DNS_NAME_MAX + 4];
	size_t wire_len;
};

struct dns_query {
	uint16_t id, flags;
	struct dns_question q;
	bool edns;            /* an OPT record came with it */
	uint16_t udp_size;    /* what the client accepts over UDP: 512, or its EDNS size (≤ 65535) */
};

struct dns_rr {
	char name[DNS_NAME_TEXT_MAX];
	uint16_t type, rclass;
	uint32_t ttl;
	/* A/AAAA: the address; CNAME: the target in `target`. */
	struct netaddr addr;
	char target[DNS_NAME_TEXT_MAX];
};

struct dns_answer {
	uint16_t id, flags;
	struct dns_question q;
	struct dns_rr an[DNSMSG_MAX_RR]; /* A, AAAA and CNAME records of class IN only */
	size_t n_an;
	size_t n_other;                   /* other answer records (skipped) */
};

/* The fixed header alone (id, flags), enough to answer FORMERR to a
 * message that fails later. -EBADMSG when shorter than a header. */
int dnsmsg_header(const uint8_t *msg, size_t len, uint16_t *id, uint16_t *flags);

/* A query: QR clear, exactly one question, nothing in the answer and
 * authority sections, at most one additional record (an OPT). -EBADMSG
 * for anything malformed, -EPROTO for a well-formed message that is not a
 * query (QR set). */
int dnsmsg_parse_query(const uint8_t *msg, size_t len, struct dns_query *out);

/* An upstream answer: QR set, exactly one question, the answer section's
 * A/AAAA/CNAME records (class IN) decoded, the other sections skipped
 * (checked for bounds only). -EBADMSG malformed, -E2BIG more than
 * DNSMSG_MAX_RR answer records. */
int dnsmsg_parse_answer(const uint8_t *msg, size_t len, struct dns_answer *out);

/* Our upstream query for q: id, RD, the question as the client sent it,
 * and an OPT record offering DNS_EDNS_UDP_SIZE. Its length, or -ENOSPC. */
int dnsmsg_build_query(uint8_t *buf, size_t cap, uint16_t id, const struct dns_question *q);

/* An answer to query q: rcode, and the records rrs[0..n) (A, AAAA and
 * CNAME; others are skipped) with their TTLs; an OPT record when the query
 * had one. When the whole does not fit in `limit` bytes (≤ cap), the
 * answer goes out with TC set and no records. Its length, or -ENOSPC when
 * not even the header and question fit. */
int dnsmsg_build_answer(uint8_t *buf, size_t cap, size_t limit, const struct dns_query *q, int rcode,
			const struct dns_rr *rrs, size_t n);

/* "A", "AAAA", "HTTPS", ... or "TYPE<n>" in buf. */
const char *dnsmsg_type_word(uint16_t type, char *buf, size_t size);
