/* The egress fence: one nftables table (inet tether_fence) in a network
 * namespace that rejects every outgoing packet (TCP, UDP, ICMP, any
 * protocol, IPv4 and IPv6) not owned by the proxy's uid, except loopback
 * TCP to the proxy's (and control) ports, replies of established flows, and
 * IPv6 neighbour discovery. Installing replaces the table atomically (one
 * nft transaction); removing deletes it. Used by `tether fence` and
 * `net-supervisor --install-fence`. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FENCE_TABLE "tether_fence"
#define FENCE_MAX_PORTS 32

struct fence_config {
	uid_t proxy_uid;
	uint16_t ports[FENCE_MAX_PORTS]; /* loopback TCP ports anyone may reach */
	size_t n_ports;
	const char *netns;               /* NULL: the current netns; else /run/netns/NAME */
};

/* The nft script install would run (malloc'd). */
char *fence_ruleset(const struct fence_config *cfg);
/* 0, or -errno with err set (nft's own message when it refused). */
int fence_install(const struct fence_config *cfg, char *err, size_t errsize);
int fence_remove(const char *netns, char *err, size_t errsize);
