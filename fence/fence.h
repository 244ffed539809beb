/* The egress fences: nftables rules, one generator for every topology.
 *
 * FENCE_POD (table inet tether_fence, in the pod netns; `tether fence
 * install`, `net-supervisor --install-fence`): every outgoing packet (TCP,
 * UDP, ICMP, any protocol, IPv4 and IPv6) not owned by the proxy's uid is
 * rejected, except replies of established flows, IPv6 neighbour discovery,
 * loopback TCP to `ports` (the proxy) and UDP/TCP to `dns_ports` on
 * loopback, and the workload's loopback traffic to itself: a loopback flow
 * started by another uid is allowed and marked (ct mark FENCE_CT_WORKLOAD),
 * and a socket of the proxy's uid (a supervisor's own endpoint: admin,
 * metrics, a tcp control channel) never answers a marked flow: its SYN-ACK
 * is rewritten into a RST|ACK (the workload's connect is refused at once,
 * no handshake completes) and any other answer is dropped, so a TCP
 * endpoint is unreachable even when nobody declared it. A UDP datagram
 * still reaches an undeclared supervisor UDP socket (only its answer is
 * dropped): `supervisor_ports` (TCP and UDP) are refused outright.
 *
 * FENCE_VETH (table inet tether_fence_<iface>, in the netns that holds the
 * proxy's end of the workload's veth; the workload cannot touch it): input
 * from `iface` may reach TCP `ports` (and UDP/TCP `dns_ports`) on `addrs`
 * (any local address when none is given), replies of established flows and
 * IPv6 neighbour discovery; everything else from the workload (TCP, UDP,
 * ICMP, IPv4, IPv6) is refused with a TCP reset or an ICMP
 * admin-prohibited, and nothing is forwarded from or to `iface`. Each
 * refusal is counted (`nft list table` shows the counters).
 *
 * With transparent_port set, both also capture TCP (see the field).
 *
 * Installing replaces the table atomically (one nft transaction); removing
 * deletes it (absent is not an error). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FENCE_TABLE "tether_fence"
#define FENCE_MAX_PORTS 32
#define FENCE_MAX_ADDRS 8
/* ct mark of a loopback flow a non-proxy uid started (pod fence). */
#define FENCE_CT_WORKLOAD 0x74657468u

enum fence_kind {
	FENCE_POD = 0,
	FENCE_VETH,
};

struct fence_config {
	enum fence_kind kind;
	uid_t proxy_uid;                          /* pod: the supervisors' uid */
	uint16_t ports[FENCE_MAX_PORTS];          /* TCP ports the workload may reach (the proxy's) */
	size_t n_ports;
	uint16_t dns_ports[FENCE_MAX_PORTS];      /* UDP+TCP ports of a DNS service offered to the workload */
	size_t n_dns_ports;
	uint16_t supervisor_ports[FENCE_MAX_PORTS]; /* pod: loopback ports refused fast to the workload */
	size_t n_supervisor_ports;
	const char *iface;                        /* veth: the proxy's end of the workload's veth */
	const char *addrs[FENCE_MAX_ADDRS];       /* veth: the proxy's addresses on it (IPv4/IPv6) */
	size_t n_addrs;
	const char *netns;                        /* NULL: the current netns; else /run/netns/NAME */
	/* Transparent capture (0: none). Pod: every TCP flow a non-proxy uid
	 * starts to a non-loopback destination is redirected (nat output) to
	 * this port on loopback. Veth: every TCP flow from iface to an address
	 * that is not local is DNATed (nat prerouting) to this port on the
	 * proxy's first address of its family (no IPv6 address given: IPv6
	 * is not captured, only refused). The redirected flow (ct status
	 * dnat) is admitted; a direct connection to the port is not. */
	uint16_t transparent_port;
};

/* The table a config installs into ("tether_fence" or
 * "tether_fence_<iface>"); -EINVAL for an iface nft cannot name. */
int fence_table_name(enum fence_kind kind, const char *iface, char *out, size_t size);
/* The nft script install would run (malloc'd); NULL with errno EINVAL for
 * an invalid config (veth without iface, a bad address). */
char *fence_ruleset(const struct fence_config *cfg);
/* 0, or -errno with err set (nft's own message when it refused). */
int fence_install(const struct fence_config *cfg, char *err, size_t errsize);
/* kind FENCE_VETH needs iface (the table is per interface). */
int fence_remove(enum fence_kind kind, const char *iface, const char *netns, char *err, size_t errsize);
