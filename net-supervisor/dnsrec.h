/* dnsrec: what the workload's own DNS lookups returned — name → address,
 * per sandbox — for checking a name peeked from a flow (SNI, Host) against
 * the address the flow goes to.
 *
 * A fixed-size table (a hard bound on memory, whatever a workload looks
 * up): each (name, address) pair is one entry with an expiry; adding a
 * pair that is there refreshes it (and makes it the most recent); when the
 * table is full the least recently added or refreshed entry goes. Expired
 * entries are never answered. Names are compared as given: callers pass
 * them lower case without a trailing dot (dnsmsg.h's form). Addresses are
 * compared without port, IPv4-mapped IPv6 as IPv4.
 *
 * Thread-safe (a lock inside): the DNS server on the main loop adds,
 * every worker's transparent flows read (dnsrec_has, dnsrec_first_name).
 * The clock is the caller's (dnsrec_set_now), so tests need no sleeps. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct dnsrec;

/* max_entries ≥ 1 pairs. NULL with errno on failure. */
struct dnsrec *dnsrec_new(size_t max_entries);
void dnsrec_free(struct dnsrec *r);
/* The current time in ms (monotonic, any origin); entries expire by it. */
void dnsrec_set_now(struct dnsrec *r, uint64_t now_ms);

/* Record that `name` resolved to addr (AF_INET or AF_INET6) for ttl_s
 * seconds. 0, -EINVAL (bad name or family). */
int dnsrec_add(struct dnsrec *r, const char *name, const struct sockaddr *addr, uint32_t ttl_s);
/* Did `name` resolve to addr, and is that still within its TTL? */
bool dnsrec_has(const struct dnsrec *r, const char *name, const struct sockaddr *addr);
/* The live names that resolved to addr, most recent first: up to max
 * pointers into the table (valid until the next dnsrec_add or
 * dnsrec_free); returns how many. */
size_t dnsrec_names(const struct dnsrec *r, const struct sockaddr *addr, const char **out, size_t max);
/* The most recent live name that resolved to addr, copied into buf (size
 * bytes, NUL included): the form for threads other than the one adding
 * (dnsrec_names' pointers are valid only until the next dnsrec_add). */
bool dnsrec_first_name(const struct dnsrec *r, const struct sockaddr *addr, char *buf, size_t size);
/* Live entries (for metrics and tests). */
size_t dnsrec_count(const struct dnsrec *r);
