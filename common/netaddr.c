#include "common/netaddr.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/util.h"

int netaddr_parse(const char *s, struct netaddr *out)
{
	char buf[64];
	size_t n = strlen(s);
	memset(out, 0, sizeof(*out));
	if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
		if (n - 2 >= sizeof(buf))
			return -EINVAL;
		memcpy(buf, s + 1, n - 2);
		buf[n - 2] = '\0';
		if (inet_pton(AF_INET6, buf, out->a) != 1)
			return -EINVAL;
		out->family = AF_INET6;
		return 0;
	}
	/* inet_pton(AF_INET) accepts only the strict dotted quad. */
	if (inet_pton(AF_INET, s, out->a) == 1) {
		out->family = AF_INET;
		return 0;
	}
	if (strchr(s, ':') && inet_pton(AF_INET6, s, out->a) == 1) {
		out->family = AF_INET6;
		return 0;
	}
	return -EINVAL;
}

int netaddr_from_sockaddr(const struct sockaddr *sa, struct netaddr *out)
{
	memset(out, 0, sizeof(*out));
	if (sa->sa_family == AF_INET) {
		out->family = AF_INET;
		memcpy(out->a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		out->family = AF_INET6;
		memcpy(out->a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return 0;
	}
	return -EAFNOSUPPORT;
}

void netaddr_unmap(const struct netaddr *in, struct netaddr *out)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	static const uint8_t compat[12] = { 0 };
	static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
	*out = *in;
	if (in->family != AF_INET6)
		return;
	bool v4 = memcmp(in->a, mapped, 12) == 0 || memcmp(in->a, nat64, 12) == 0;
	/* ::a.b.c.d, but not :: and ::1 themselves (those stay IPv6). */
	if (!v4 && memcmp(in->a, compat, 12) == 0 &&
	    (in->a[12] | in->a[13] | in->a[14]) != 0)
		v4 = true;
	if (!v4)
		return;
	memset(out, 0, sizeof(*out));
	out->family = AF_INET;
	memcpy(out->a, in->a + 12, 4);
}

bool netaddr_equal(const struct netaddr *x, const struct netaddr *y)
{
	struct netaddr ux, uy;
	netaddr_unmap(x, &ux);
	netaddr_unmap(y, &uy);
	if (ux.family != uy.family)
		return false;
	return memcmp(ux.a, uy.a, ux.family == AF_INET ? 4 : 16) == 0;
}

const char *netaddr_format(const struct netaddr *a, char *buf, size_t size)
{
	if (!inet_ntop(a->family, a->a, buf, (socklen_t)size))
		strscpy(buf, "?", size);
	return buf;
}

static bool prefix_equal(const uint8_t *x, const uint8_t *y, unsigned bits)
{
	unsigned bytes = bits / 8, rem = bits % 8;
	if (memcmp(x, y, bytes) != 0)
		return false;
	if (rem == 0)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rem));
	return (x[bytes] & mask) == (y[bytes] & mask);
}

int netcidr_parse(const char *s, struct netcidr *out)
{
	char buf[80];
	if (strscpy(buf, s, sizeof(buf)) < 0)
		return -EINVAL;
	char *slash = strchr(buf, '/');
	unsigned long prefix = 0;
	if (slash) {
		*slash = '\0';
		const char *p = slash + 1;
		if (!*p || strlen(p) > 3)
			return -EINVAL;
		for (const char *q = p; *q; q++)
			if (!isdigit((unsigned char)*q))
				return -EINVAL;
		prefix = strtoul(p, NULL, 10);
	}
	if (netaddr_parse(buf, &out->base) < 0 || buf[0] == '[')
		return -EINVAL;
	unsigned max = out->base.family == AF_INET ? 32 : 128;
	if (!slash)
		prefix = max;
	if (prefix > max)
		return -EINVAL;
	out->prefix = (unsigned)prefix;
	/* Host bits must be zero. */
	for (unsigned bit = out->prefix; bit < max; bit++)
		if (out->base.a[bit / 8] & (0x80 >> (bit % 8)))
			return -EINVAL;
	return 0;
}

bool netcidr_contains(const struct netcidr *c, const struct netaddr *a)
{
	struct netaddr ua;
	netaddr_unmap(a, &ua);
	struct netcidr uc = *c;
	/* An IPv6 CIDR spelled as ::ffff:10.0.0.0/104 means the IPv4 range. */
	if (c->base.family == AF_INET6 && c->prefix >= 96) {
		struct netaddr ub;
		netaddr_unmap(&c->base, &ub);
		if (ub.family == AF_INET) {
			uc.base = ub;
			uc.prefix = c->prefix - 96;
		}
	}
	if (uc.base.family != ua.family)
		return false;
	return prefix_equal(uc.base.a, ua.a, uc.prefix);
}
