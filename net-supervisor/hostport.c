#include "net-supervisor/hostport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

int netsup_parse_hostport(const char *s, struct sockaddr_storage *out)
{
	char host[64];
	const char *colon;
	memset(out, 0, sizeof(*out));
	if (s[0] == '[') {
		const char *rb = strchr(s, ']');
		if (!rb || rb[1] != ':' || (size_t)(rb - s - 1) >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, (size_t)(rb - s - 1));
		host[rb - s - 1] = '\0';
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || (size_t)(colon - s) >= sizeof(host))
			return -EINVAL;
		memcpy(host, s, (size_t)(colon - s));
		host[colon - s] = '\0';
	}
	char *end;
	unsigned long port = strtoul(colon + 1, &end, 10);
	if (!colon[1] || *end || port > 65535)
		return -EINVAL;
	struct sockaddr_in *s4 = (struct sockaddr_in *)out;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		return 0;
	}
	return -EINVAL;
}
