/* The transparent front end: TCP flows that nftables redirected to us
 * (the workload never named a proxy), a sibling of the CONNECT/forward
 * front end (proxy.c) that shares its identity pipeline, decision, audit
 * lines and relay (conn.h).
 *
 * Per flow: accept → the original destination (SO_ORIGINAL_DST /
 * IP6T_SO_ORIGINAL_DST; a connection that was not redirected, i.e. made to
 * the listener itself, is reset) → peek at the first bytes (recv with
 * MSG_PEEK, so nothing is consumed; at most FLOWPEEK_MAX bytes and
 * --transparent-peek-ms; SO_RCVLOWAT makes the socket wake us only when
 * more bytes came) → the name (flowpeek.h), established only if the
 * workload's own DNS lookups (dnsrec.h) returned this original address for
 * it: name_source sni or http_host; a flow without a peeked name takes the
 * name the dns table has for the address (dns); otherwise none, and the
 * host is the address literal, which only cidr (and IP literal) endpoints
 * match → decide (a stream that is neither TLS nor HTTP is RAW: only
 * `protocol: tcp` endpoints admit it) → connect to the original address,
 * never a re-resolution of the name → relay. A denial is a TCP reset. */
#pragma once

#include <stdbool.h>
#include <sys/socket.h>

#include "net-supervisor/context.h"
#include "net-supervisor/flowpeek.h"

/* Listen on addr ("ADDR:PORT", "[v6]:PORT") in the current netns.
 * -errno with a message logged. */
int transparent_listen(struct netsup *ns, const char *addr, struct transparent_listener **out);
void transparent_listener_close(struct transparent_listener *l);

/* The name of a flow to orig (the original destination) and where it came
 * from, from what was peeked and the dns table (NULL: no resolver):
 * writes the host the decision sees into host (a name, or the address
 * literal), and an unconfirmed peeked name into peeked (or ""). Returns
 * "sni", "http_host", "dns" or "none". */
struct dnsrec;
const char *transparent_name(const struct flowpeek *fp, struct dnsrec *rec, const struct sockaddr *orig,
			     char *host, size_t host_size, char *peeked, size_t peeked_size);
