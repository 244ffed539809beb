/* tuple: see tuple.h. */
#include "proto/tuple.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static size_t addr_len(uint8_t family) { return family == AF_INET ? 4 : 16; }

bool proto_tuple_equal(const struct proto_tuple *a, const struct proto_tuple *b)
{
	if (a->proto != b->proto || a->family != b->family || a->sport != b->sport ||
	    a->dport != b->dport)
		return false;
	size_t n = addr_len(a->family);
	return memcmp(a->src, b->src, n) == 0 && memcmp(a->dst, b->dst, n) == 0;
}

void proto_tuple_format(const struct proto_tuple *t, char *buf, size_t size)
{
	char s[INET6_ADDRSTRLEN] = "?", d[INET6_ADDRSTRLEN] = "?";
	int fam = t->family == AF_INET ? AF_INET : AF_INET6;
	inet_ntop(fam, t->src, s, sizeof(s));
	inet_ntop(fam, t->dst, d, sizeof(d));
	const char *p = t->proto == IPPROTO_TCP ? "tcp" : t->proto == IPPROTO_UDP ? "udp" : "ip";
	if (fam == AF_INET6)
		snprintf(buf, size, "%s [%s]:%u -> [%s]:%u", p, s, t->sport, d, t->dport);
	else
		snprintf(buf, size, "%s %s:%u -> %s:%u", p, s, t->sport, d, t->dport);
}

int proto_tuple_from_strings(struct proto_tuple *t, int proto, const char *src, uint16_t sport,
			    const char *dst, uint16_t dport)
{
	memset(t, 0, sizeof(*t));
	t->proto = (uint8_t)proto;
	t->sport = sport;
	t->dport = dport;
	if (inet_pton(AF_INET, src, t->src) == 1 && inet_pton(AF_INET, dst, t->dst) == 1) {
		t->family = AF_INET;
		return 0;
	}
	memset(t->src, 0, 16);
	memset(t->dst, 0, 16);
	if (inet_pton(AF_INET6, src, t->src) == 1 && inet_pton(AF_INET6, dst, t->dst) == 1) {
		t->family = AF_INET6;
		return 0;
	}
	return -EINVAL;
}
