/* dns: the workload's resolver. The only DNS the workload can reach: the
 * launcher points its resolv.conf here and the fence admits UDP/TCP 53 to
 * these listeners only.
 *
 * Each query (UDP, or TCP with the 2-byte length prefix) is attributed to
 * the process that owns the client socket through the daemon's identity
 * strategy (the UDP socket by its 4-tuple, a TCP connection as any proxy
 * flow), decided, audited (event "dns", staged: the answer leaves once its
 * line is written, or per --audit-failure) and answered:
 *
 *   no identity               REFUSED   deny <identity reason> (audit mode: forwarded)
 *   not ready                 REFUSED   deny not_ready / clock_skew
 *   malformed                 FORMERR   deny dns_malformed
 *   no rule of the binary could allow the name (netpolicy_name_may_allow)
 *                             NXDOMAIN  deny dns_no_rule
 *   A, AAAA, CNAME            forwarded upstream; A/AAAA records in the
 *                             blocked ranges removed (the rest, possibly
 *                             nothing, answered NOERROR), records off the
 *                             question's CNAME chain dropped   allow allowed
 *   HTTPS, SVCB               NOERROR, no records (clients fall back to
 *                             A/AAAA; no address hints that skip the filter)
 *   anything else (TXT, MX, PTR, SRV, ANY, ...)  REFUSED  deny dns_type_refused
 *   upstream timeout, malformed answer (a truncated UDP answer is asked
 *   for again over TCP)       SERVFAIL  deny dns_upstream_failed
 *
 * Upstream queries are ours, not the client's bytes: a random id, a new
 * socket (a random source port) per query, connected to the upstream so
 * nothing else is read, the question checked in the answer. At most
 * dns_max_outstanding queries are in flight; past it, UDP queries are
 * dropped (counted, a log line per 10 s) and TCP ones wait.
 *
 * Every forwarded address is recorded in a dnsrec table (dns_records()). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net-supervisor/context.h"
#include "net-supervisor/dnsrec.h"

struct dns_server;

struct dns_stats {
	uint64_t queries, answered, dropped_busy, upstream_timeouts, addrs_removed;
};

/* The server and its upstream (cfg->dns_upstream, or the first nameserver
 * of resolv_conf when NULL). No listener yet. -errno, logged. */
int dns_new(struct netsup *ns, const char *resolv_conf, struct dns_server **out);
/* A UDP and a TCP listener on addr ("ADDR:PORT", "[v6]:PORT"), created in
 * the caller's current netns. -errno, logged. */
int dns_listen(struct dns_server *s, const char *addr);
/* Close listeners, drop queries in flight; frees once the handles are closed. */
void dns_close(struct dns_server *s);
/* What the workload's lookups returned (dnsrec.h), its clock set to the
 * loop's now: ask right away, on the loop. NULL when s is (no resolver). */
struct dnsrec *dns_records(struct dns_server *s);
void dns_get_stats(const struct dns_server *s, struct dns_stats *out);

/* The first "nameserver" of a resolv.conf text as ADDR:53 into out.
 * -ENOENT when there is none. */
int dns_upstream_from_resolv(const char *text, char *out, size_t size);
