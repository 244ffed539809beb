/* libFuzzer: the workload resolver's DNS parser and builders
 * (net-supervisor/dnsmsg.c) on raw bytes, as a query from the workload and
 * as an answer from the upstream. Invariants checked: a parsed query's
 * upstream query and every answer we build parse back (as what they are),
 * stay within their limit, and echo the question; an answer's records,
 * rebuilt for a client, parse back to the same records. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net-supervisor/dnsmsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* exact-size copy: an overread is caught */
	uint8_t *msg = malloc(size ? size : 1);
	if (!msg)
		return 0;
	memcpy(msg, data, size);
	struct dns_query q;
	static uint8_t out[65536 + 2];
	int r = dnsmsg_parse_query(msg, size, &q);
	if (r == 0) {
		int n = dnsmsg_build_query(out, sizeof(out), 0x5555, &q.q);
		struct dns_query back;
		if (n < 0 || dnsmsg_parse_query(out, (size_t)n, &back) != 0 || strcmp(back.q.name, q.q.name) != 0)
			abort();
		size_t limit = q.edns ? q.udp_size : 512;
		for (int rcode = 0; rcode < 6; rcode += 3) {
			n = dnsmsg_build_answer(out, sizeof(out), limit, &q, rcode, NULL, 0);
			if (n < 0 || (size_t)n > limit || memcmp(out + DNS_HEADER_LEN, q.q.wire, q.q.wire_len) != 0)
				abort();
		}
	}
	struct dns_answer *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
	if (a && b && dnsmsg_parse_answer(msg, size, a) == 0) {
		struct dns_query fake = { .id = a->id, .q = a->q, .udp_size = 512 };
		int n = dnsmsg_build_answer(out, sizeof(out), sizeof(out), &fake, 0, a->an, a->n_an);
		if (n < 0 || dnsmsg_parse_answer(out, (size_t)n, b) != 0 || b->n_an != a->n_an)
			abort();
		for (size_t i = 0; i < a->n_an; i++)
			if (strcmp(a->an[i].name, b->an[i].name) || a->an[i].type != b->an[i].type ||
			    (a->an[i].type == DNS_TYPE_CNAME && strcmp(a->an[i].target, b->an[i].target)) ||
			    (a->an[i].type != DNS_TYPE_CNAME && memcmp(a->an[i].addr.a, b->an[i].addr.a, 16)))
				abort();
		/* a 512-byte client: within the limit, or truncated */
		n = dnsmsg_build_answer(out, sizeof(out), 512, &fake, 0, a->an, a->n_an);
		if (n > 512)
			abort();
	}
	free(a);
	free(b);
	free(msg);
	return 0;
}
