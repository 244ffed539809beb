/* IP addresses and CIDR ranges: strict parsing, formatting, containment.
 * The network policy's cidr endpoints, its blocked ranges and the proxy's
 * resolved addresses all use these. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sockaddr;

/* An IP address. IPv4-mapped/compatible IPv6 forms are NOT folded here:
 * netaddr_unmap() does that where a check needs it. */
struct netaddr {
	int family;     /* AF_INET or AF_INET6 */
	uint8_t a[16];  /* network order; 4 bytes used for AF_INET */
};

/* Strict literal parse: dotted quad (no 127.1, no octal/hex) or an IPv6
 * literal (optionally in brackets). -EINVAL otherwise. */
int netaddr_parse(const char *s, struct netaddr *out);
int netaddr_from_sockaddr(const struct sockaddr *sa, struct netaddr *out);
/* ::ffff:a.b.c.d, ::a.b.c.d (deprecated compatible) and 64:ff9b::a.b.c.d
 * (NAT64) become the IPv4 a.b.c.d; anything else is copied. */
void netaddr_unmap(const struct netaddr *in, struct netaddr *out);
bool netaddr_equal(const struct netaddr *x, const struct netaddr *y);
/* Text form into buf (INET6_ADDRSTRLEN is enough). */
const char *netaddr_format(const struct netaddr *a, char *buf, size_t size);

struct netcidr {
	struct netaddr base; /* host bits zero */
	unsigned prefix;     /* 0..32 or 0..128 */
};
/* "198.51.100.0/24", "fd00::/8"; a bare address is a /32 or /128.
 * Host bits set is -EINVAL (a typo more often than intent). */
int netcidr_parse(const char *s, struct netcidr *out);
/* Compares unmapped forms: an IPv4 CIDR contains ::ffff:10.0.0.1. */
bool netcidr_contains(const struct netcidr *c, const struct netaddr *a);
