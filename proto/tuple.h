/* A flow tuple as one side of the delegation protocol sees it: the value
 * the signed contexts carry (context.h) and the wire converts
 * (procref_wire.h). Plain data and three helpers. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A flow as one side sees it. Addresses are network order; family is
 * AF_INET (first 4 bytes of src/dst used) or AF_INET6. */
struct proto_tuple {
	uint8_t proto; /* IPPROTO_TCP, IPPROTO_UDP */
	uint8_t family;
	uint8_t src[16];
	uint8_t dst[16];
	uint16_t sport, dport; /* host order */
};

bool proto_tuple_equal(const struct proto_tuple *a, const struct proto_tuple *b);
/* "tcp 192.0.2.1:1234 -> 198.51.100.2:443" into buf. */
void proto_tuple_format(const struct proto_tuple *t, char *buf, size_t size);
/* Fill from textual addresses (inet_pton); -EINVAL on mismatch/garbage. */
int proto_tuple_from_strings(struct proto_tuple *t, int proto, const char *src, uint16_t sport,
			    const char *dst, uint16_t dport);
